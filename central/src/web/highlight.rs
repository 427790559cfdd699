//! Code highlighting without a script: a small hand-written lexer per
//! language family that wraps keywords, strings, comments and numbers (and a
//! diff's added and removed lines) in `<span class="hl-…">`, styled by the
//! stylesheet. Every byte of the code is escaped; an unknown language is
//! escaped plain text.
//!
//! The lexer never looks back and each step consumes at least one byte, so
//! it takes linear time on any input; a token starts and ends only at ASCII
//! bytes, so every slice it cuts is on a character boundary.

/// One fenced block as HTML: `<pre><code class="language-X">…</code></pre>`,
/// X being the first word of the fence's info string (none when it is empty
/// or has no plain characters).
pub(super) fn code_block(info: &str, code: &str) -> String {
    let lang = language(info);
    let class: String = lang
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '#' | '.'))
        .take(32)
        .collect();
    let mut out = String::with_capacity(code.len() + code.len() / 4 + 48);
    out.push_str("<pre><code");
    if !class.is_empty() {
        out.push_str(" class=\"language-");
        out.push_str(&class);
        out.push('"');
    }
    out.push('>');
    highlight_into(&mut out, lang, code);
    out.push_str("</code></pre>\n");
    out
}

/// Appends `s` with `&`, `<`, `>`, `"` and `'` escaped: safe in text and in a
/// double- or single-quoted attribute.
pub(super) fn escape_into(out: &mut String, s: &str) {
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        out.push_str(&s[from..i]);
        out.push_str(entity);
        from = i + 1;
    }
    out.push_str(&s[from..]);
}

/// The language a fence names: its info string's first word
/// (```` ```rust,ignore ```` and ```` ```{.python} ```` name rust and python).
fn language(info: &str) -> &str {
    info.trim_start_matches(|c: char| c.is_whitespace() || c == '{' || c == '.')
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '{' | '}'))
        .next()
        .unwrap_or("")
}

fn highlight_into(out: &mut String, lang: &str, code: &str) {
    match lang.to_ascii_lowercase().as_str() {
        "diff" | "patch" => diff(out, code),
        name => match spec(name) {
            Some(spec) => lex(out, spec, code),
            None => escape_into(out, code),
        },
    }
}

/// What the lexer needs to know of a language.
struct Spec {
    keywords: &'static [&'static str],
    /// Markers that comment out the rest of the line.
    line_comments: &'static [&'static str],
    /// `#` starts a comment only at the start of a word (`$#` in a shell
    /// script, `a#b` in YAML are not comments).
    hash_at_word_start: bool,
    block_comment: Option<(&'static str, &'static str)>,
    /// Longest opener first (`"""` before `"`).
    quotes: &'static [Quote],
    /// Rust: `'a'` is a character, `'a` a lifetime; `r#"…"#` is a raw string.
    rust: bool,
    /// C: `#include` at the start of a line is a keyword.
    preprocessor: bool,
}

/// A string's quote, the same at both ends.
struct Quote {
    open: &'static str,
    /// Whether a backslash escapes the next character.
    escapes: bool,
    /// Whether the string may run past the end of its line (an unclosed
    /// one-line string ends with its line).
    multiline: bool,
}

const fn q(open: &'static str, escapes: bool, multiline: bool) -> Quote {
    Quote {
        open,
        escapes,
        multiline,
    }
}

const DOUBLE: Quote = q("\"", true, false);
const SINGLE: Quote = q("'", true, false);

const RUST: Spec = Spec {
    keywords: &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
        "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait",
        "true", "type", "unsafe", "use", "where", "while",
    ],
    line_comments: &["//"],
    hash_at_word_start: false,
    block_comment: Some(("/*", "*/")),
    quotes: &[q("\"", true, true)],
    rust: true,
    preprocessor: false,
};

const PYTHON: Spec = Spec {
    keywords: &[
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "case", "class",
        "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
        "if", "import", "in", "is", "lambda", "match", "nonlocal", "not", "or", "pass", "raise",
        "return", "try", "while", "with", "yield",
    ],
    line_comments: &["#"],
    hash_at_word_start: false,
    block_comment: None,
    quotes: &[
        q("\"\"\"", true, true),
        q("'''", true, true),
        DOUBLE,
        SINGLE,
    ],
    rust: false,
    preprocessor: false,
};

const JS: Spec = Spec {
    keywords: &[
        "abstract",
        "any",
        "as",
        "async",
        "await",
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "debugger",
        "declare",
        "default",
        "delete",
        "do",
        "else",
        "enum",
        "export",
        "extends",
        "false",
        "finally",
        "for",
        "from",
        "function",
        "if",
        "implements",
        "import",
        "in",
        "instanceof",
        "interface",
        "keyof",
        "let",
        "namespace",
        "never",
        "new",
        "null",
        "of",
        "private",
        "protected",
        "public",
        "readonly",
        "return",
        "static",
        "super",
        "switch",
        "this",
        "throw",
        "true",
        "try",
        "type",
        "typeof",
        "undefined",
        "unknown",
        "var",
        "void",
        "while",
        "with",
        "yield",
    ],
    line_comments: &["//"],
    hash_at_word_start: false,
    block_comment: Some(("/*", "*/")),
    quotes: &[DOUBLE, SINGLE, q("`", true, true)],
    rust: false,
    preprocessor: false,
};

const GO: Spec = Spec {
    keywords: &[
        "break",
        "case",
        "chan",
        "const",
        "continue",
        "default",
        "defer",
        "else",
        "fallthrough",
        "false",
        "for",
        "func",
        "go",
        "goto",
        "if",
        "import",
        "interface",
        "iota",
        "map",
        "nil",
        "package",
        "range",
        "return",
        "select",
        "struct",
        "switch",
        "true",
        "type",
        "var",
    ],
    line_comments: &["//"],
    hash_at_word_start: false,
    block_comment: Some(("/*", "*/")),
    quotes: &[DOUBLE, SINGLE, q("`", false, true)],
    rust: false,
    preprocessor: false,
};

const SHELL: Spec = Spec {
    keywords: &[
        "case", "declare", "do", "done", "elif", "else", "esac", "exit", "export", "fi", "for",
        "function", "if", "in", "local", "readonly", "return", "select", "source", "then", "until",
        "while",
    ],
    line_comments: &["#"],
    hash_at_word_start: true,
    block_comment: None,
    quotes: &[q("\"", true, true), q("'", false, true)],
    rust: false,
    preprocessor: false,
};

const JSON: Spec = Spec {
    keywords: &["false", "null", "true"],
    line_comments: &[],
    hash_at_word_start: false,
    block_comment: None,
    quotes: &[DOUBLE],
    rust: false,
    preprocessor: false,
};

const TOML: Spec = Spec {
    keywords: &["false", "true"],
    line_comments: &["#"],
    hash_at_word_start: false,
    block_comment: None,
    quotes: &[
        q("\"\"\"", true, true),
        q("'''", false, true),
        DOUBLE,
        q("'", false, false),
    ],
    rust: false,
    preprocessor: false,
};

const YAML: Spec = Spec {
    keywords: &["false", "no", "null", "off", "on", "true", "yes"],
    line_comments: &["#"],
    hash_at_word_start: true,
    block_comment: None,
    quotes: &[DOUBLE, q("'", false, false)],
    rust: false,
    preprocessor: false,
};

/// C, C++ and Java in one: a word that is a keyword in one of them is
/// rarely a name in another.
const C_FAMILY: Spec = Spec {
    keywords: &[
        "abstract",
        "auto",
        "bool",
        "boolean",
        "break",
        "byte",
        "case",
        "catch",
        "char",
        "class",
        "const",
        "constexpr",
        "continue",
        "default",
        "delete",
        "do",
        "double",
        "else",
        "enum",
        "explicit",
        "extends",
        "extern",
        "false",
        "final",
        "finally",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "implements",
        "import",
        "inline",
        "instanceof",
        "int",
        "interface",
        "long",
        "namespace",
        "new",
        "noexcept",
        "null",
        "nullptr",
        "operator",
        "override",
        "package",
        "private",
        "protected",
        "public",
        "record",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "super",
        "switch",
        "synchronized",
        "template",
        "this",
        "throw",
        "throws",
        "true",
        "try",
        "typedef",
        "typename",
        "union",
        "unsigned",
        "using",
        "var",
        "virtual",
        "void",
        "volatile",
        "while",
        "NULL",
    ],
    line_comments: &["//"],
    hash_at_word_start: false,
    block_comment: Some(("/*", "*/")),
    quotes: &[DOUBLE, SINGLE],
    rust: false,
    preprocessor: true,
};

fn spec(lang: &str) -> Option<&'static Spec> {
    Some(match lang {
        "rust" | "rs" => &RUST,
        "python" | "py" | "python3" => &PYTHON,
        "js" | "javascript" | "jsx" | "mjs" | "cjs" | "ts" | "typescript" | "tsx" => &JS,
        "go" | "golang" => &GO,
        "sh" | "bash" | "shell" | "zsh" | "console" | "shellsession" => &SHELL,
        "json" => &JSON,
        "toml" => &TOML,
        "yaml" | "yml" => &YAML,
        "c" | "h" | "cpp" | "c++" | "cc" | "cxx" | "hpp" | "java" => &C_FAMILY,
        _ => return None,
    })
}

/// A word's byte: ASCII letters, digits, `_`, and any byte of a non-ASCII
/// character (so a word never ends inside one).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn lex(out: &mut String, spec: &Spec, code: &str) {
    let bytes = code.as_bytes();
    let mut i = 0;
    // Start of the plain text not yet written.
    let mut plain = 0;
    while i < bytes.len() {
        let (class, end) = match token(spec, code, i) {
            Step::Token(class, end) => (class, end),
            Step::Plain(end) => {
                i = end;
                continue;
            }
        };
        escape_into(out, &code[plain..i]);
        span(out, class, &code[i..end]);
        i = end;
        plain = end;
    }
    escape_into(out, &code[plain..]);
}

enum Step {
    /// A token of this class ends at this byte.
    Token(&'static str, usize),
    /// Plain text up to this byte.
    Plain(usize),
}

/// What starts at byte `i` (an ASCII byte, or the first byte of a character).
fn token(spec: &Spec, code: &str, i: usize) -> Step {
    let bytes = code.as_bytes();
    let rest = &code[i..];
    let b = bytes[i];
    if let Some((open, close)) = spec.block_comment {
        if let Some(body) = rest.strip_prefix(open) {
            let end = body
                .find(close)
                .map_or(code.len(), |at| i + open.len() + at + close.len());
            return Step::Token("hl-com", end);
        }
    }
    for marker in spec.line_comments {
        let at_word_start = !spec.hash_at_word_start
            || *marker != "#"
            || i == 0
            || bytes[i - 1].is_ascii_whitespace();
        if rest.starts_with(marker) && at_word_start {
            return Step::Token("hl-com", line_end(code, i));
        }
    }
    if spec.preprocessor && b == b'#' && at_line_start(bytes, i) {
        let end = word_end(bytes, i + 1);
        if end > i + 1 {
            return Step::Token("hl-kw", end);
        }
    }
    if spec.rust && b == b'\'' {
        return match rust_char(code, i) {
            Some(end) => Step::Token("hl-str", end),
            // A lifetime's name is not a keyword (`'static`).
            None => Step::Plain(word_end(bytes, i + 1)),
        };
    }
    for quote in spec.quotes {
        if rest.starts_with(quote.open) {
            return Step::Token("hl-str", string_end(code, i, quote));
        }
    }
    if b.is_ascii_digit() {
        return Step::Token("hl-num", number_end(bytes, i));
    }
    if is_word(b) {
        let end = word_end(bytes, i);
        let word = &code[i..end];
        if spec.rust && matches!(word, "r" | "br" | "cr") {
            if let Some(end) = rust_raw_string(code, end) {
                return Step::Token("hl-str", end);
            }
        }
        if spec.keywords.contains(&word) {
            return Step::Token("hl-kw", end);
        }
        return Step::Plain(end);
    }
    Step::Plain(i + 1)
}

fn span(out: &mut String, class: &str, text: &str) {
    out.push_str("<span class=\"");
    out.push_str(class);
    out.push_str("\">");
    escape_into(out, text);
    out.push_str("</span>");
}

fn word_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| !is_word(b))
        .map_or(bytes.len(), |n| from + n)
}

/// The end of the line byte `i` is on (before its newline).
fn line_end(code: &str, i: usize) -> usize {
    code[i..].find('\n').map_or(code.len(), |n| i + n)
}

fn at_line_start(bytes: &[u8], i: usize) -> bool {
    bytes[..i]
        .iter()
        .rev()
        .take_while(|&&b| b != b'\n')
        .all(|b| *b == b' ' || *b == b'\t')
}

/// A number's digits, letters (`0x1f`, `1e9`, `10u8`), `_` and a `.` that
/// a digit follows (`1.5`, not `0..10`).
fn number_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < bytes.len() {
        let b = bytes[i];
        let decimal_point = b == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
        if !(b.is_ascii_alphanumeric() || b == b'_' || decimal_point) {
            break;
        }
        i += 1;
    }
    i
}

/// The end of the string opening at `i`: after its close, or at the end of
/// its line (of the code, if it may span lines) when it is not closed.
fn string_end(code: &str, i: usize, quote: &Quote) -> usize {
    let bytes = code.as_bytes();
    let close = quote.open.as_bytes();
    let mut j = i + quote.open.len();
    while j < bytes.len() {
        let b = bytes[j];
        if quote.escapes && b == b'\\' {
            j += 2;
        } else if bytes[j..].starts_with(close) {
            return j + close.len();
        } else if b == b'\n' && !quote.multiline {
            return j;
        } else {
            j += 1;
        }
    }
    // An escape's second byte may be the first of a longer character.
    bytes.len()
}

/// A Rust character literal at `i` (`'a'`, `'\n'`, `'\u{1F600}'`), or none
/// for a lifetime or label (`'a`, `'static`).
fn rust_char(code: &str, i: usize) -> Option<usize> {
    let rest = &code[i + 1..];
    if let Some(escaped) = rest.strip_prefix('\\') {
        // The longest escape is `\u{10FFFF}`: look no further.
        let close = escaped
            .char_indices()
            .skip(1)
            .take(9)
            .find(|&(_, c)| c == '\'' || c == '\n')?;
        return (close.1 == '\'').then_some(i + 2 + close.0 + 1);
    }
    let c = rest.chars().next()?;
    (c != '\'' && c != '\n' && rest[c.len_utf8()..].starts_with('\''))
        .then_some(i + 1 + c.len_utf8() + 1)
}

/// A raw string after its prefix (`r`, `br`, `cr`) ending at `from`:
/// `"…"` or `#"…"#` with any number of `#`; unclosed, it runs to the end.
fn rust_raw_string(code: &str, from: usize) -> Option<usize> {
    let rest = &code[from..];
    let hashes = rest.bytes().take_while(|&b| b == b'#').count();
    let body = rest[hashes..].strip_prefix('"')?;
    let body_start = from + hashes + 1;
    let mut closing = String::with_capacity(hashes + 1);
    closing.push('"');
    closing.extend(std::iter::repeat_n('#', hashes));
    Some(
        body.find(&closing)
            .map_or(code.len(), |n| body_start + n + closing.len()),
    )
}

/// A unified diff, line by line: added and removed lines, file headers as
/// keywords, hunk headers as comments.
fn diff(out: &mut String, code: &str) {
    for line in code.split_inclusive('\n') {
        let (text, newline) = match line.strip_suffix('\n') {
            Some(text) => (text, "\n"),
            None => (line, ""),
        };
        let class = if ["+++", "---", "diff ", "index "]
            .iter()
            .any(|p| text.starts_with(p))
        {
            Some("hl-kw")
        } else if text.starts_with("@@") {
            Some("hl-com")
        } else if text.starts_with('+') {
            Some("hl-add")
        } else if text.starts_with('-') {
            Some("hl-del")
        } else {
            None
        };
        match class {
            Some(class) => span(out, class, text),
            None => escape_into(out, text),
        }
        out.push_str(newline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn highlight(lang: &str, code: &str) -> String {
        let mut out = String::new();
        highlight_into(&mut out, lang, code);
        out
    }

    /// Each case: language, code, fragments the HTML must contain.
    #[test]
    fn tokens_are_wrapped_in_their_classes() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "rust",
                "fn main() { let s = \"hi\"; } // done",
                &[
                    "<span class=\"hl-kw\">fn</span> main",
                    "<span class=\"hl-kw\">let</span>",
                    "<span class=\"hl-str\">&quot;hi&quot;</span>",
                    "<span class=\"hl-com\">// done</span>",
                ],
            ),
            (
                "rust",
                "fn f<'a>(x: &'a str) -> char { 'x' }",
                &[
                    "&lt;&#39;a&gt;",
                    "&amp;&#39;a str",
                    "<span class=\"hl-str\">&#39;x&#39;</span>",
                ],
            ),
            (
                "rust",
                "let r = r#\"a \"quoted\" b\"#; let n = 1.5e3;",
                &[
                    "<span class=\"hl-str\">r#&quot;a &quot;quoted&quot; b&quot;#</span>",
                    "<span class=\"hl-num\">1.5e3</span>",
                ],
            ),
            (
                "rust",
                "'\\n' '\\u{1F600}'",
                &["<span class=\"hl-str\">&#39;\\n&#39;</span>"],
            ),
            (
                "rust",
                "/* a\nb */ x",
                &["<span class=\"hl-com\">/* a\nb */</span> x"],
            ),
            (
                "python",
                "def f():\n    return \"\"\"doc\nmore\"\"\"  # note",
                &[
                    "<span class=\"hl-kw\">def</span>",
                    "<span class=\"hl-str\">&quot;&quot;&quot;doc\nmore&quot;&quot;&quot;</span>",
                    "<span class=\"hl-com\"># note</span>",
                ],
            ),
            (
                "ts",
                "const x: number = `a ${b}`; // c",
                &[
                    "<span class=\"hl-kw\">const</span>",
                    "<span class=\"hl-str\">`a ${b}`</span>",
                ],
            ),
            (
                "go",
                "func main() { return 0x1f }",
                &[
                    "<span class=\"hl-kw\">func</span>",
                    "<span class=\"hl-num\">0x1f</span>",
                ],
            ),
            (
                "bash",
                "echo $# 'a b' # c",
                &[
                    "echo $# ",
                    "<span class=\"hl-str\">&#39;a b&#39;</span>",
                    "<span class=\"hl-com\"># c</span>",
                ],
            ),
            (
                "json",
                "{\"a\": [1, true, null]}",
                &[
                    "<span class=\"hl-str\">&quot;a&quot;</span>",
                    "<span class=\"hl-num\">1</span>",
                    "<span class=\"hl-kw\">true</span>",
                ],
            ),
            (
                "toml",
                "[x]\nk = 'v' # c",
                &[
                    "<span class=\"hl-str\">&#39;v&#39;</span>",
                    "<span class=\"hl-com\"># c</span>",
                ],
            ),
            (
                "yaml",
                "a: yes # c\nb: a#b",
                &[
                    "<span class=\"hl-kw\">yes</span>",
                    "<span class=\"hl-com\"># c</span>",
                    "b: a#b",
                ],
            ),
            (
                "c",
                "#include <stdio.h>\nint main() { return 0; }",
                &[
                    "<span class=\"hl-kw\">#include</span> &lt;stdio.h&gt;",
                    "<span class=\"hl-kw\">int</span>",
                ],
            ),
            (
                "java",
                "public class A {}",
                &["<span class=\"hl-kw\">public</span> <span class=\"hl-kw\">class</span>"],
            ),
            (
                "diff",
                "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old <b>\n+new\n same",
                &[
                    "<span class=\"hl-kw\">--- a/x</span>",
                    "<span class=\"hl-com\">@@ -1 +1 @@</span>",
                    "<span class=\"hl-del\">-old &lt;b&gt;</span>\n",
                    "<span class=\"hl-add\">+new</span>\n same",
                ],
            ),
            (
                "klingon",
                "fn <x> & 'y'",
                &["fn &lt;x&gt; &amp; &#39;y&#39;"],
            ),
        ];
        for (lang, code, wants) in cases {
            let html = highlight(lang, code);
            for want in *wants {
                assert!(
                    html.contains(want),
                    "{lang} {code:?}: {want:?} not in {html:?}"
                );
            }
        }
    }

    /// Each case: language, code, text that must not be highlighted.
    #[test]
    fn lookalikes_are_left_plain() {
        let cases = [
            ("rust", "let format = fnord;", "fnord"),
            ("rust", "x.iter_mut()", "iter_mut"),
            ("rust", "fn f<'static>()", "&#39;static"),
            ("bash", "echo a#b", "a#b"),
            ("python", "x1 = y2", "x1"),
            ("klingon", "fn main", "fn"),
        ];
        for (lang, code, plain) in cases {
            let html = highlight(lang, code);
            assert!(html.contains(plain), "{lang} {code:?}: {html:?}");
            assert!(
                !html.contains(&format!(">{plain}<")),
                "{lang} {code:?}: {plain:?} highlighted in {html:?}"
            );
        }
    }

    /// Unclosed strings and comments, multi-byte characters everywhere,
    /// lone quotes and escapes at the very end: no panic, and the text
    /// comes back whole.
    #[test]
    fn any_text_comes_back_escaped_and_whole() {
        let texts = [
            "\"unterminated é",
            "'",
            "'é",
            "'é'",
            "'\\",
            "'\\é",
            "\"\\",
            "\"\\é\"",
            "/* never closed ✓",
            "r#\"raw never closed 🦀",
            "r#",
            "br\"",
            "#",
            "x = 1.",
            "日本語 fn 语言 'ü' \"ß\" `ø",
            "\"\"\"open",
            "é#c",
            "-\n+\n@@",
            "\u{1F600}\u{1F600}'\u{1F600}'",
        ];
        let langs = [
            "rust", "python", "js", "go", "sh", "json", "toml", "yaml", "c", "diff", "none",
        ];
        for lang in langs {
            for text in texts {
                let html = highlight(lang, text);
                let shown = strip_tags(&html);
                assert!(
                    !shown.contains(['"', '\'']),
                    "{lang} {text:?}: a quote left raw in {html:?}"
                );
                assert_eq!(unescape(&shown), text, "{lang} {text:?}: {html:?}");
            }
        }
    }

    #[test]
    fn a_code_blocks_language_is_its_class() {
        let cases = [
            (
                "rust",
                "<pre><code class=\"language-rust\"><span class=\"hl-kw\">fn</span></code></pre>\n",
            ),
            (
                "rust,ignore",
                "<pre><code class=\"language-rust\"><span class=\"hl-kw\">fn</span></code></pre>\n",
            ),
            ("", "<pre><code>fn</code></pre>\n"),
            (
                "\"><script>",
                "<pre><code class=\"language-script\">fn</code></pre>\n",
            ),
            ("<>", "<pre><code>fn</code></pre>\n"),
        ];
        for (info, want) in cases {
            assert_eq!(code_block(info, "fn"), want, "{info:?}");
        }
    }

    /// Regression: linear time on long runs of openers (each would scan to
    /// the end again if a lexer backtracked).
    #[test]
    fn long_runs_of_openers_take_linear_time() {
        for text in [
            "'".repeat(200_000),
            "/*\"".repeat(100_000),
            "r#".repeat(100_000),
            "\\'".repeat(100_000),
        ] {
            for lang in ["rust", "python", "sh", "c", "diff"] {
                let html = highlight(lang, &text);
                assert!(html.len() < text.len() * 40, "{lang}");
            }
        }
    }

    fn strip_tags(html: &str) -> String {
        let mut out = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' if in_tag => in_tag = false,
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out
    }

    /// The text escaped HTML shows (every `&` must start an entity).
    fn unescape(s: &str) -> String {
        let entities = ["&lt;", "&gt;", "&quot;", "&#39;", "&amp;"];
        for (at, _) in s.match_indices('&') {
            assert!(entities.iter().any(|e| s[at..].starts_with(e)), "{s:?}");
        }
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }
}
