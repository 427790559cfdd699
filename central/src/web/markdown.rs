//! A turn's markdown as HTML that is safe to put in a page: pulldown-cmark
//! parses it (tables, strikethrough, task lists), one filter over its events
//! decides what may reach the page, and pulldown-cmark's writer escapes the
//! rest.
//!
//! What the filter guarantees, whatever the text:
//! - raw HTML, in a block or inline, is shown as its source, escaped;
//! - a link keeps its URL only if it is http, https, mailto or a `#anchor`
//!   on this page, and gets `rel="nofollow noopener noreferrer"`; any other
//!   link is its label as plain text;
//! - an image is never loaded (the page's CSP allows only its own images):
//!   it is a link to its URL, by the same rule, labelled with its alt text;
//! - a fenced code block is highlighted by [`super::highlight`];
//! - a table column's alignment is a class (`md-right`), not the inline
//!   style the CSP would refuse;
//! - nesting deeper than [`MAX_DEPTH`] is flattened, so a pathological text
//!   (ten thousand `>` or `-`) gives a page of bounded depth;
//! - a text whose tables could pad out to more than [`MAX_TABLE_CELLS`]
//!   cells is read without tables, so memory and output stay linear in
//!   the text (pulldown-cmark itself parses in linear time, without
//!   recursion: the tests feed it its known slow patterns on a test
//!   thread's stack).
//!
//! Rendering is CPU work linear in the text (some 5 MB a second, unoptimized):
//! a page renders a long conversation off the async executor.

use pulldown_cmark::{
    html, Alignment, CodeBlockKind, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd,
};

use super::highlight::{code_block, escape_into};

/// How deep lists, quotes and inline markup may nest; deeper ones are
/// flattened into their parent (a browser gives up near 512, a reader long
/// before).
const MAX_DEPTH: usize = 32;

const REL: &str = "nofollow noopener noreferrer";

/// `text` (markdown) as safe HTML.
pub(super) fn render(text: &str) -> String {
    let mut options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    if table_cells_bound(text) <= MAX_TABLE_CELLS {
        options |= Options::ENABLE_TABLES;
    }
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    html::push_html(&mut out, Safe::new(Parser::new_ext(text, options)));
    out
}

/// The most table cells a text may make before its tables are shown as the
/// text they are written in. pulldown-cmark pads every row to its table's
/// width, holding each cell in memory before the first event: a 3 KB table
/// of 512 columns and 512 one-cell rows is 262,144 cells (the most it pads
/// one table to), some 12 MB, and a text may hold many.
const MAX_TABLE_CELLS: usize = 100_000;

/// An upper bound on the cells the tables in `text` would have, padding
/// included: a table has as many columns as its delimiter row (`|---|:-:|`)
/// has cells, at most its `|`s and one, and its rows end at the first blank
/// line. Lines end at `\n`, `\r\n` or `\r`, as in CommonMark.
fn table_cells_bound(text: &str) -> usize {
    let mut cells = 0usize;
    // Columns of the tables that may still be growing rows: those whose
    // delimiter row is in this run of non-blank lines.
    let mut columns = 0usize;
    let lines = text
        .split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'));
    for line in lines {
        if line.bytes().all(|b| b == b' ' || b == b'\t') {
            columns = 0;
            continue;
        }
        cells = cells.saturating_add(columns);
        if is_delimiter_row(line) {
            let width = line.bytes().filter(|&b| b == b'|').count() + 1;
            // Its header row, and each row to come.
            cells = cells.saturating_add(width);
            columns = columns.saturating_add(width);
        }
    }
    cells
}

/// Whether `line` may be a table's delimiter row, in any container: only
/// dashes, colons, pipes, whitespace, and quote and list markers.
fn is_delimiter_row(line: &str) -> bool {
    line.contains('-')
        && line
            .bytes()
            .all(|b| b" \t\x0b\x0c|:->*+.)".contains(&b) || b.is_ascii_digit())
}

/// A URL a link may keep: http(s), mailto, or an anchor on this page,
/// with no whitespace or control character anywhere (browsers drop some of
/// them, so `java\tscript:` would run).
fn safe_url(link_type: LinkType, url: &str) -> Option<String> {
    let url = match link_type {
        LinkType::Email => format!("mailto:{url}"),
        _ => url.to_owned(),
    };
    if url.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let lower = url.get(..8).unwrap_or(&url).to_ascii_lowercase();
    let allowed = ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
        || url.starts_with('#');
    allowed.then_some(url)
}

/// What an open tag became, so its end does the same.
enum Frame {
    /// Written by pulldown-cmark's writer as it is.
    Kept,
    /// Left out, its content kept: too deep, or a link that may not be
    /// followed (or would nest in another).
    Dropped,
    /// A link or image written as our own `<a>`; for an image with no alt
    /// text, its URL is the label (`label_from`: events written when the
    /// `<a>` was).
    Anchor {
        image_url: Option<String>,
        label_from: usize,
    },
    /// A code block (or raw HTML block) gathered, written whole at its end.
    Code { info: String },
}

/// The filter: pulldown-cmark's events in, events pulldown-cmark's writer
/// may write safely out.
struct Safe<'a, I> {
    events: I,
    /// One frame per open tag.
    stack: Vec<Frame>,
    /// Open tags that are written (kept or anchors): the page's depth.
    depth: usize,
    /// Open `<a>`s (one at most: an `<a>` in an `<a>` is not HTML).
    anchors: usize,
    /// The code block being gathered.
    code: String,
    /// The open table's column alignments, its cells written here as
    /// `<th class="md-right">` (the writer would use a `style`).
    alignments: Vec<Alignment>,
    /// Whether the open table's cells are in its head row.
    in_head: bool,
    /// The next cell's column in the open row.
    column: usize,
    /// An event to write after the one just returned.
    pending: Option<Event<'a>>,
    /// Events written so far.
    n_written: usize,
}

impl<'a, I: Iterator<Item = Event<'a>>> Safe<'a, I> {
    fn new(events: I) -> Self {
        Self {
            events,
            stack: Vec::new(),
            depth: 0,
            anchors: 0,
            code: String::new(),
            alignments: Vec::new(),
            in_head: false,
            column: 0,
            pending: None,
            n_written: 0,
        }
    }

    /// What one parsed event becomes (none: it is left out or gathered).
    fn step(&mut self, event: Event<'a>) -> Option<Event<'a>> {
        if matches!(self.stack.last(), Some(Frame::Code { .. })) {
            match event {
                Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) | Event::Code(t) => {
                    self.code.push_str(&t);
                    return None;
                }
                Event::End(_) => {}
                _ => return None,
            }
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(end) => self.end(end),
            // Raw HTML is shown as its source.
            Event::Html(t) | Event::InlineHtml(t) => Some(Event::Text(t)),
            // Not enabled; written as the text they came from, if ever.
            Event::InlineMath(t) | Event::DisplayMath(t) | Event::FootnoteReference(t) => {
                Some(Event::Text(t))
            }
            e @ (Event::Text(_)
            | Event::Code(_)
            | Event::SoftBreak
            | Event::HardBreak
            | Event::Rule
            | Event::TaskListMarker(_)) => Some(e),
        }
    }

    fn start(&mut self, tag: Tag<'a>) -> Option<Event<'a>> {
        match tag {
            Tag::CodeBlock(kind) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.into_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code.clear();
                self.stack.push(Frame::Code { info });
                None
            }
            Tag::HtmlBlock => {
                self.code.clear();
                self.stack.push(Frame::Code {
                    info: String::new(),
                });
                None
            }
            Tag::Link {
                link_type,
                dest_url,
                title,
                ..
            } => self.anchor(link_type, &dest_url, &title, false),
            Tag::Image {
                link_type,
                dest_url,
                title,
                ..
            } => self.anchor(link_type, &dest_url, &title, true),
            // Blocks whose content is inline (or, for a table, rows of
            // cells): they add a bounded depth and stay even when deep.
            Tag::Table(alignments) => {
                self.alignments = alignments;
                self.keep(Tag::Table(Vec::new()))
            }
            Tag::TableHead => {
                self.in_head = true;
                self.column = 0;
                self.keep(Tag::TableHead)
            }
            Tag::TableRow => {
                self.in_head = false;
                self.column = 0;
                self.keep(Tag::TableRow)
            }
            Tag::TableCell => {
                let class = match self.alignments.get(self.column) {
                    Some(Alignment::Left) => " class=\"md-left\"",
                    Some(Alignment::Center) => " class=\"md-center\"",
                    Some(Alignment::Right) => " class=\"md-right\"",
                    Some(Alignment::None) | None => "",
                };
                self.column += 1;
                let cell = if self.in_head { "th" } else { "td" };
                // The writer closes it (as `th` in the head, `td` after).
                self.keep(Tag::TableCell);
                Some(Event::InlineHtml(CowStr::from(format!("<{cell}{class}>"))))
            }
            tag @ (Tag::Paragraph | Tag::Heading { .. }) => self.keep(tag),
            // Flattened items are kept apart by a space.
            Tag::Item if self.depth >= MAX_DEPTH => {
                self.stack.push(Frame::Dropped);
                Some(Event::SoftBreak)
            }
            _ if self.depth >= MAX_DEPTH => {
                self.stack.push(Frame::Dropped);
                None
            }
            tag => self.keep(tag),
        }
    }

    fn keep(&mut self, tag: Tag<'a>) -> Option<Event<'a>> {
        self.stack.push(Frame::Kept);
        self.depth += 1;
        Some(Event::Start(tag))
    }

    /// A link or image: our own `<a>`, or its label alone.
    fn anchor(
        &mut self,
        link_type: LinkType,
        url: &str,
        title: &str,
        image: bool,
    ) -> Option<Event<'a>> {
        let url = safe_url(link_type, url);
        let Some(url) = url.filter(|_| self.anchors == 0 && self.depth < MAX_DEPTH) else {
            self.stack.push(Frame::Dropped);
            return None;
        };
        let mut a = String::with_capacity(url.len() + title.len() + 64);
        a.push_str("<a href=\"");
        escape_into(&mut a, &url);
        if !title.is_empty() {
            a.push_str("\" title=\"");
            escape_into(&mut a, title);
        }
        if image {
            a.push_str("\" class=\"md-image");
        }
        a.push_str("\" rel=\"");
        a.push_str(REL);
        a.push_str("\">");
        self.stack.push(Frame::Anchor {
            image_url: image.then_some(url),
            // This event is the next written.
            label_from: self.n_written + 1,
        });
        self.depth += 1;
        self.anchors += 1;
        Some(Event::InlineHtml(CowStr::from(a)))
    }

    fn end(&mut self, end: TagEnd) -> Option<Event<'a>> {
        match self.stack.pop()? {
            Frame::Kept => {
                self.depth -= 1;
                Some(Event::End(end))
            }
            Frame::Dropped => None,
            Frame::Anchor {
                image_url,
                label_from,
            } => {
                self.depth -= 1;
                self.anchors -= 1;
                let close = Event::InlineHtml(CowStr::Borrowed("</a>"));
                match image_url {
                    Some(url) if self.n_written == label_from => {
                        self.pending = Some(close);
                        Some(Event::Text(CowStr::from(url)))
                    }
                    _ => Some(close),
                }
            }
            Frame::Code { info } => {
                let html = code_block(&info, &self.code);
                self.code = String::new();
                Some(Event::Html(CowStr::from(html)))
            }
        }
    }
}

impl<'a, I: Iterator<Item = Event<'a>>> Iterator for Safe<'a, I> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let event = match self.pending.take() {
            Some(event) => event,
            None => loop {
                let event = self.events.next()?;
                if let Some(event) = self.step(event) {
                    break event;
                }
            },
        };
        self.n_written += 1;
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case: markdown, fragments its HTML must contain, fragments it
    /// must not.
    #[test]
    fn markdown_renders_and_nothing_unsafe_gets_through() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("**bold** and *it* ~~gone~~", &["<strong>bold</strong>", "<em>it</em>", "<del>gone</del>"], &[]),
            (
                "<script>alert(1)</script>",
                &["&lt;script&gt;alert(1)&lt;/script&gt;"],
                &["<script"],
            ),
            (
                "a <script>alert(1)</script> b <img src=x onerror=alert(1)>",
                &["a &lt;script&gt;alert(1)&lt;/script&gt; b &lt;img src=x onerror=alert(1)&gt;"],
                &["<script", "<img"],
            ),
            (
                "<div onclick=\"x()\">\n*hi*\n</div>",
                &["<pre><code>&lt;div onclick=&quot;x()&quot;&gt;"],
                &["<div"],
            ),
            ("[x](javascript:alert(1))", &["<p>x</p>"], &["href", "javascript"]),
            ("[x](JaVaScRiPt:alert(1))", &["<p>x</p>"], &["href"]),
            ("[x](&#106;avascript:alert(1))", &["<p>x</p>"], &["href"]),
            ("[x](java\tscript:alert(1))", &[], &["href"]),
            ("[x](<java\tscript:alert(1)>)", &[], &["href"]),
            ("[x](<https://a.example/ b>)", &["<p>x</p>"], &["href"]),
            ("[x](\u{1}https://a.example/)", &[], &["href"]),
            ("[x](data:text/html;base64,PHNjcmlwdD4=)", &["<p>x</p>"], &["href"]),
            ("[x](vbscript:msgbox)", &["<p>x</p>"], &["href"]),
            ("[x](file:///etc/passwd)", &["<p>x</p>"], &["href"]),
            ("[x](//evil.example/)", &["<p>x</p>"], &["href"]),
            ("[x](/c/other)", &["<p>x</p>"], &["href"]),
            ("<javascript:alert(1)>", &["javascript:alert(1)"], &["href"]),
            ("[x][r]\n\n[r]: javascript:alert(1)", &["<p>x</p>"], &["href"]),
            (
                "[x](https://a.example/?q=1&r=\"2\" \"t'\")",
                &["<a href=\"https://a.example/?q=1&amp;r=&quot;2&quot;\" title=\"t&#39;\" rel=\"nofollow noopener noreferrer\">x</a>"],
                &[],
            ),
            (
                "[x](HTTP://a.example/)",
                &["<a href=\"HTTP://a.example/\" rel=\"nofollow noopener noreferrer\">x</a>"],
                &[],
            ),
            (
                "<https://a.example/>",
                &["<a href=\"https://a.example/\" rel=\"nofollow noopener noreferrer\">https://a.example/</a>"],
                &[],
            ),
            (
                "<me@a.example>",
                &["<a href=\"mailto:me@a.example\" rel=\"nofollow noopener noreferrer\">me@a.example</a>"],
                &[],
            ),
            (
                "[up](#top)",
                &["<a href=\"#top\" rel=\"nofollow noopener noreferrer\">up</a>"],
                &[],
            ),
            (
                "![a cat](https://a.example/cat.png)",
                &["<a href=\"https://a.example/cat.png\" class=\"md-image\" rel=\"nofollow noopener noreferrer\">a cat</a>"],
                &["<img"],
            ),
            (
                "![](https://a.example/cat.png)",
                &["class=\"md-image\" rel=\"nofollow noopener noreferrer\">https://a.example/cat.png</a>"],
                &["<img"],
            ),
            ("![a cat](javascript:alert(1))", &["<p>a cat</p>"], &["<img", "href"]),
            ("![a cat](data:image/png;base64,AAAA)", &["<p>a cat</p>"], &["<img", "href"]),
            (
                "[![badge](https://a.example/b.svg)](https://a.example/)",
                &["<a href=\"https://a.example/\" rel=\"nofollow noopener noreferrer\">badge</a>"],
                &["<img", "b.svg"],
            ),
            (
                "```rust\nfn main() { let s = \"<hi>\"; }\n```",
                &[
                    "<pre><code class=\"language-rust\"><span class=\"hl-kw\">fn</span> main",
                    "<span class=\"hl-str\">&quot;&lt;hi&gt;&quot;</span>",
                ],
                &["<hi>"],
            ),
            ("```\n<b>x</b>\n```", &["<pre><code>&lt;b&gt;x&lt;/b&gt;\n</code></pre>"], &["<b>"]),
            ("    indented <b>", &["<pre><code>indented &lt;b&gt;</code></pre>"], &["<b>"]),
            ("`<b>` code", &["<code>&lt;b&gt;</code>"], &["<b>"]),
            (
                "| a | b |\n|---|---|\n| 1 | <i>2</i> |",
                &["<table>", "<th>a</th>", "<td>1</td>", "<td>&lt;i&gt;2&lt;/i&gt;</td>"],
                &["<i>"],
            ),
            (
                "| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |\n| 4 |",
                &[
                    "<thead><tr><th class=\"md-left\">a</th><th class=\"md-center\">b</th><th class=\"md-right\">c</th></tr></thead>",
                    "<tr><td class=\"md-left\">1</td><td class=\"md-center\">2</td><td class=\"md-right\">3</td></tr>",
                    "<tr><td class=\"md-left\">4</td><td class=\"md-center\"></td><td class=\"md-right\"></td></tr>",
                ],
                &["style"],
            ),
            (
                "- [x] done\n- [ ] todo",
                &["<li><input disabled=\"\" type=\"checkbox\" checked=\"\"/>\ndone</li>"],
                &[],
            ),
            ("> quoted\n\n# Title", &["<blockquote>\n<p>quoted</p>\n</blockquote>", "<h1>Title</h1>"], &[]),
        ];
        for (md, wants, unwanted) in cases {
            let html = render(md);
            for want in *wants {
                assert!(html.contains(want), "{md:?}: {want:?} not in {html:?}");
            }
            for bad in *unwanted {
                assert!(!html.contains(bad), "{md:?}: {bad:?} in {html:?}");
            }
        }
    }

    /// Each case: a URL, and whether a link keeps it.
    #[test]
    fn only_web_mail_and_anchor_urls_are_kept() {
        let cases = [
            ("https://a.example/x", true),
            ("http://a.example/x", true),
            ("HTTPS://a.example/x", true),
            ("mailto:me@a.example", true),
            ("#section-2", true),
            ("javascript:alert(1)", false),
            (" javascript:alert(1)", false),
            ("java\tscript:alert(1)", false),
            ("java\nscript:alert(1)", false),
            ("javascript\u{0}:alert(1)", false),
            ("\u{feff}https://a.example/", false),
            ("https://a.example/\u{2028}", false),
            ("data:text/html,x", false),
            ("vbscript:x", false),
            ("file:///etc/passwd", false),
            ("//evil.example/", false),
            ("/c/abc", false),
            ("https:evil", false),
            ("", false),
            ("ht", false),
            ("é", false),
        ];
        for (url, kept) in cases {
            assert_eq!(safe_url(LinkType::Inline, url).is_some(), kept, "{url:?}");
        }
    }

    /// Every tag the renderer opens, it closes, in order.
    #[test]
    fn output_is_well_formed() {
        let texts = [
            "[![a](https://a.example/i.png)](https://a.example/)",
            "[a **b [c](https://a.example/) d** e](https://b.example/)",
            "![a ![b](https://x.example/) c](https://y.example/)",
            "> - a\n>   > b\n>   > - c `d`\n\n| x |\n|---|\n| [l](#a) |",
            "*a **b ~~c~~** d*\n\n```py\n'''x\n```\n\n<details>\n\n*y*\n\n</details>",
        ];
        for text in texts {
            let html = render(text);
            assert_balanced(&html);
        }
    }

    /// Pathological texts: deep nesting of every kind and the parser's
    /// known slow patterns. Each must finish, stay balanced, bounded in
    /// depth and linear in size.
    #[test]
    fn huge_and_deep_texts_are_bounded() {
        let deep = 10_000;
        let mut texts = vec![
            "> ".repeat(deep) + "x",
            "- ".repeat(deep) + "x",
            "1. ".repeat(deep) + "x",
            "> - ".repeat(deep) + "x",
            "*a ".repeat(deep) + &"* ".repeat(deep),
            "[".repeat(deep) + &"](https://a.example/)".repeat(deep),
            "![".repeat(deep) + &"](https://a.example/)".repeat(deep),
            "[ (](".repeat(deep),
            "a***".repeat(deep),
            "[*_a".repeat(deep),
            "``\\".repeat(deep),
            "<>".repeat(deep),
            (0..1_000)
                .map(|i| format!("{}- x\n", "  ".repeat(i)))
                .collect(),
            "|a".repeat(deep) + "\n" + &"|-".repeat(deep) + "\n" + &"|b\n".repeat(100),
            // Tables padded to 262,144 cells each: with tables on, some
            // 2.4 MB of HTML (and 12 MB held) per 3 KB of text.
            ("|a".repeat(512) + "\n" + &"|-".repeat(512) + "\n" + &"b\n".repeat(512) + "\n")
                .repeat(100),
            ("|a".repeat(512) + "\r" + &"|-".repeat(512) + "\r" + &"b\r".repeat(512) + "\r")
                .repeat(100),
        ];
        let line = "Some **words** with `code`, a [link](https://a.example/) and <b>tags</b>.\n\n";
        let mut big = line.repeat(5_000_000 / line.len());
        big.push_str("```rust\n");
        big.push_str(&"fn main() { \"s\" } // c\n".repeat(10_000));
        texts.push(big);
        for text in &texts {
            let html = render(text);
            assert!(
                html.len() <= 30 * text.len() + 1_000,
                "{} bytes out of {}",
                html.len(),
                text.len()
            );
            let depth = assert_balanced(&html);
            assert!(depth <= MAX_DEPTH + 8, "depth {depth}: {}", head(text));
        }
    }

    /// Each case: a text, and the bound on its table cells.
    #[test]
    fn table_cells_are_bounded_before_parsing() {
        let wide = "|a".repeat(512) + "\n" + &"|-".repeat(512) + "\n" + &"b\n".repeat(512);
        let cases = [
            ("no table here\n\n- a list\n", 0),
            (
                "| a | b |\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 |\n\nafter\nmore",
                4 * 3,
            ),
            ("a | b\n--|--\n1 | 2", 2 * 2),
            ("> | a |\n> |---|\n> | 1 |", 3 * 2),
            ("| a |\r\n|---|\r\n| 1 |\r| 2 |", 3 * 3),
            (wide.as_str(), 513 * 513),
        ];
        for (text, bound) in cases {
            assert_eq!(table_cells_bound(text), bound, "{}", head(text));
        }
        // A bound it is: the cells rendered are never more.
        for (text, bound) in cases {
            let html = render(text);
            let cells = ["<td>", "<td ", "<th>", "<th "]
                .iter()
                .map(|tag| html.matches(tag).count())
                .sum::<usize>();
            assert!(cells <= bound, "{}: {cells} cells", head(text));
        }
        assert!(!render(&wide).contains("<table>"));
    }

    /// A text's start, for a failure's message.
    fn head(text: &str) -> String {
        format!("{:?}", text.chars().take(40).collect::<String>())
    }

    /// Checks every tag opened is closed in order; the deepest nesting.
    fn assert_balanced(html: &str) -> usize {
        const VOID: [&str; 3] = ["br", "hr", "input"];
        let mut open: Vec<&str> = Vec::new();
        let mut deepest = 0;
        let mut rest = html;
        while let Some(at) = rest.find('<') {
            let tag = &rest[at + 1..];
            let end = tag.find('>').expect("a tag is closed by >");
            let tag = &tag[..end];
            rest = &rest[at + 1 + end..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "in {html:.300}");
            } else {
                let name = tag.split([' ', '/']).next().unwrap_or("");
                assert!(
                    name.bytes().all(|b| b.is_ascii_alphanumeric()) && !name.is_empty(),
                    "odd tag {tag:?}"
                );
                if !VOID.contains(&name) {
                    open.push(name);
                    deepest = deepest.max(open.len());
                }
            }
        }
        assert!(open.is_empty(), "left open: {open:?}");
        deepest
    }
}
