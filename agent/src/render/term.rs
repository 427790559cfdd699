//! Text from central on a person's terminal: its styling (bold, dim,
//! matches highlighted; off when stdout is not a terminal or `NO_COLOR` is
//! set), central's text made printable (a control character is shown, never
//! obeyed), cut to one line, and how old a time is. Every renderer of the
//! CLI, `kith mcp` and `kith status` builds on these; they import nothing of
//! kith's.

use std::borrow::Cow;
use std::io::IsTerminal;

use time::OffsetDateTime;

/// Terminal styling, off when stdout is not a terminal or NO_COLOR is set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) color: bool,
}

impl Style {
    pub(crate) fn detect() -> Self {
        Self {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// `s` (made printable: it may hold central's text) in the style of `code`.
    fn paint(self, code: &str, s: &str) -> String {
        let s = printable(s);
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.into_owned()
        }
    }

    pub(crate) fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }

    pub(crate) fn dim(self, s: &str) -> String {
        self.paint("2", s)
    }

    /// A line a diff adds: green.
    pub(crate) fn added(self, s: &str) -> String {
        self.paint("32", s)
    }

    /// A line a diff removes: red.
    pub(crate) fn removed(self, s: &str) -> String {
        self.paint("31", s)
    }

    /// Central marks matches with `«` `»`: bold-yellow on a terminal, kept
    /// as is otherwise (so piped output still shows them).
    pub(crate) fn highlight(self, snippet: &str) -> String {
        let snippet = printable(snippet);
        if !self.color {
            return snippet.into_owned();
        }
        snippet.replace('«', "\x1b[1;33m").replace('»', "\x1b[0m")
    }
}

/// Text from central as a terminal may show it. A control character (ESC,
/// BEL, CSI U+009B, ...), which a terminal would obey rather than show (a
/// transcript could clear the screen or set the clipboard), or a direction
/// override (text that reads as other text), is written out as an escape
/// like `\u{1b}`; `\n` and `\t` stay, and a `\r\n` line end
/// is `\n`.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    let obeyed = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || kith_shared::transcript::is_bidi_control(c)
    };
    if !s.chars().any(obeyed) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            c if obeyed(c) => out.extend(c.escape_debug()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `s` on one printable line of at most `max_chars`, cut with `…`.
pub(crate) fn one_line(s: &str, max_chars: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = printable(&flat);
    if flat.chars().count() > max_chars {
        let cut: String = flat.chars().take(max_chars.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat.into_owned()
    }
}

/// When `ts` was, as people read it: how long ago in the largest whole
/// unit within a week (`5s ago`, `3m ago`, `4h ago`, `2d ago`), its date
/// past that (`2026-04-01`), where "9mo ago" alone says too little.
pub(crate) fn age(ts: &str, now: OffsetDateTime) -> String {
    let Some(t) = kith_shared::timestamp::parse(ts) else {
        return "?".into();
    };
    let secs = (now - t).whole_seconds().max(0);
    let (n, unit) = match secs {
        s if s < 60 => (s, "s"),
        s if s < 3600 => (s / 60, "m"),
        s if s < 86_400 => (s / 3600, "h"),
        s if s < 7 * 86_400 => (s / 86_400, "d"),
        _ => return t.date().to_string(),
    };
    format!("{n}{unit} ago")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-05-11 12:00:00 UTC);

    /// `out` with kith's own styling taken out holds no control character
    /// but line ends: nothing from central is obeyed by the terminal.
    pub(crate) fn assert_only_own_styling(out: &str) {
        let plain = [
            "\x1b[1;33m",
            "\x1b[0m",
            "\x1b[1m",
            "\x1b[2m",
            "\x1b[32m",
            "\x1b[31m",
        ]
        .iter()
        .fold(out.to_owned(), |o, code| o.replace(code, ""));
        assert!(
            !plain.chars().any(|c| c.is_control() && c != '\n'),
            "{plain:?}"
        );
    }

    /// Regression: central's text reached the terminal raw, so a transcript
    /// holding `ESC ] 52` set the clipboard and `ESC [2J` cleared the screen.
    #[test]
    fn control_characters_from_central_are_shown_not_obeyed() {
        let cases = [
            ("plain text", "plain text"),
            ("two\nlines\tand a tab", "two\nlines\tand a tab"),
            ("crlf\r\nend", "crlf\nend"),
            (
                "clip\x1b]52;c;aGk=\x07board",
                "clip\\u{1b}]52;c;aGk=\\u{7}board",
            ),
            ("\x1b[2Jcleared", "\\u{1b}[2Jcleared"),
            ("csi\u{9b}31mred", "csi\\u{9b}31mred"),
            ("fix \u{202e}gnp.exe", "fix \\u{202e}gnp.exe"),
            ("a\u{2066}b\u{2069}", "a\\u{2066}b\\u{2069}"),
            (
                "cr\rbs\x08 del\x7f nul\0",
                "cr\\rbs\\u{8} del\\u{7f} nul\\0",
            ),
            ("«ünïcode» \"quoted\" \\ …", "«ünïcode» \"quoted\" \\ …"),
        ];
        for (input, want) in cases {
            assert_eq!(printable(input), want, "{input:?}");
        }
    }

    #[test]
    fn ages_use_the_largest_whole_unit_within_a_week_and_dates_past_it() {
        let cases = [
            ("2026-05-11T11:59:30Z", "30s ago"),
            ("2026-05-11T11:00:00Z", "1h ago"),
            ("2026-05-09T12:00:00Z", "2d ago"),
            ("2026-05-04T12:00:01Z", "6d ago"),
            ("2026-05-04T12:00:00Z", "2026-05-04"),
            ("2026-04-01T12:00:00Z", "2026-04-01"),
            ("2025-05-11T12:00:00Z", "2025-05-11"),
            ("2026-05-12T12:00:00Z", "0s ago"),
            ("garbage", "?"),
        ];
        for (ts, want) in cases {
            assert_eq!(age(ts, NOW), want, "{ts}");
        }
    }
}
