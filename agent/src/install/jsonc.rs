//! JSON with comments, as Gemini CLI reads its `settings.json` (it strips
//! `//` and `/* */` comments before parsing and keeps them when it saves):
//! `strip_comments` blanks them so serde_json reads the text, and
//! `splice_member` carries an edit of one top-level member back into the
//! commented text, so every comment outside that member stays as written.

use std::ops::Range;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// `text` with every comment's characters turned into spaces (its line
/// breaks kept), so it has the same length, lines and byte offsets: a parse
/// error's line and column, and a member's byte range, hold for both.
pub(crate) fn strip_comments(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum State {
        Code,
        Str,
        /// After a backslash in a string.
        Escape,
        Line,
        Block,
    }
    let mut out = String::with_capacity(text.len());
    let mut state = State::Code;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let comment = match state {
            State::Code => {
                match (c, chars.peek()) {
                    ('"', _) => state = State::Str,
                    ('/', Some('/')) => state = State::Line,
                    ('/', Some('*')) => {
                        // Taken with the slash, so `/*/` does not end it.
                        chars.next();
                        out.push(' ');
                        state = State::Block;
                    }
                    _ => {}
                }
                matches!(state, State::Line | State::Block)
            }
            State::Str => {
                match c {
                    '\\' => state = State::Escape,
                    '"' => state = State::Code,
                    _ => {}
                }
                false
            }
            State::Escape => {
                state = State::Str;
                false
            }
            State::Line => {
                if c == '\n' {
                    state = State::Code;
                }
                true
            }
            State::Block => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    out.push(' ');
                    state = State::Code;
                }
                true
            }
        };
        if comment && !matches!(c, '\n' | '\r') {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` (JSON with comments; `plain` is `strip_comments(text)`) with its
/// top-level member `key` as it is in `edited` (the same object, edited,
/// without comments): replaced, added before the closing brace, or removed
/// when `edited` has none. Everything else in `text`, comments included,
/// stays byte for byte. `None` when the member holds comments, which its
/// new text would lose.
pub(crate) fn splice_member(
    text: &str,
    plain: &str,
    key: &str,
    edited: &str,
) -> Result<Option<String>, serde_json::Error> {
    let new = Object::parse(edited)?
        .member(key)
        .map(|m| &edited[m.value.clone()]);
    if plain.trim().is_empty() {
        // Comments and nothing else: they stay, above the new object.
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(edited);
        return Ok(Some(out));
    }
    let old = Object::parse(plain)?;
    let at = old.members.iter().position(|m| m.key == key);
    if let Some(i) = at {
        let value = old.members[i].value.clone();
        if text[value.clone()] != plain[value] {
            return Ok(None);
        }
    }
    Ok(Some(match (at, new) {
        (Some(i), Some(new)) => {
            let value = old.members[i].value.clone();
            [&text[..value.start], new, &text[value.end..]].concat()
        }
        (None, Some(new)) => insert(text, &old, key, new)?,
        (Some(i), None) => remove(text, plain, &old, i),
        (None, None) => text.to_owned(),
    }))
}

/// `text` with `"key": value` as the object's last member, on a line of its
/// own before the closing brace.
fn insert(text: &str, old: &Object, key: &str, value: &str) -> Result<String, serde_json::Error> {
    let member = format!("  {}: {value}", serde_json::to_string(key)?);
    let close = old.close;
    let line = text[..close].rfind('\n').map_or(0, |i| i + 1);
    let (at, piece) = if text[line..close].trim().is_empty() {
        (line, format!("{member}\n"))
    } else {
        (close, format!("\n{member}\n"))
    };
    // The comma goes right after the last value, before any comment on its
    // line, so that comment stays with its member.
    let comma = old.members.last().map_or(at, |m| m.value.end);
    let mut out = String::with_capacity(text.len() + piece.len() + 1);
    out.push_str(&text[..comma]);
    if !old.members.is_empty() {
        out.push(',');
    }
    out.push_str(&text[comma..at]);
    out.push_str(&piece);
    out.push_str(&text[at..]);
    Ok(out)
}

/// `text` without member `i` and one comma beside it; the line it was on
/// goes too when nothing else (a comment) is left on it.
fn remove(text: &str, plain: &str, old: &Object, i: usize) -> String {
    let member = &old.members[i];
    let mut cut = member.key_start..member.value.end;
    let comma = match (
        i.checked_sub(1).map(|p| &old.members[p]),
        old.members.get(i + 1),
    ) {
        (Some(prev), _) => plain[prev.value.end..member.key_start]
            .find(',')
            .map(|j| prev.value.end + j),
        (None, Some(next)) => plain[member.value.end..next.key_start]
            .find(',')
            .map(|j| member.value.end + j),
        (None, None) => None,
    };
    let line_start = text[..cut.start].rfind('\n').map_or(0, |j| j + 1);
    let line_end = text[cut.end..]
        .find('\n')
        .map_or(text.len(), |j| cut.end + j + 1);
    let left_on_line = text[line_start..line_end]
        .char_indices()
        .map(|(j, c)| (line_start + j, c))
        .filter(|(j, _)| !cut.contains(j) && Some(*j) != comma)
        .all(|(_, c)| c.is_ascii_whitespace());
    if left_on_line {
        cut = line_start..line_end;
    }
    let mut out = String::with_capacity(text.len());
    for (j, c) in text.char_indices() {
        if !cut.contains(&j) && Some(j) != comma {
            out.push(c);
        }
    }
    out
}

/// A JSON object's members and where each is in its text.
struct Object {
    members: Vec<Member>,
    /// The closing brace.
    close: usize,
}

struct Member {
    key: String,
    /// The key's opening quote.
    key_start: usize,
    value: Range<usize>,
}

impl Object {
    /// `text` must hold one JSON object and no comments.
    fn parse(text: &str) -> Result<Self, serde_json::Error> {
        use serde::de::Error as _;
        let Borrowed(raw) = serde_json::from_str(text)?;
        let mut members = Vec::with_capacity(raw.len());
        for (key, value) in raw {
            // The value is a slice of `text`: its offset is where it is.
            let start = value.get().as_ptr() as usize - text.as_ptr() as usize;
            let key_start = key_start(text, start)
                .ok_or_else(|| serde_json::Error::custom(format!("cannot find the key {key:?}")))?;
            members.push(Member {
                key,
                key_start,
                value: start..start + value.get().len(),
            });
        }
        let close = text.trim_end().len() - 1;
        Ok(Self { members, close })
    }

    fn member(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.key == key)
    }
}

/// Where the key before the value at `value_start` begins: its opening
/// quote (one not escaped by a backslash).
fn key_start(text: &str, value_start: usize) -> Option<usize> {
    let before = text[..value_start]
        .trim_end()
        .strip_suffix(':')?
        .trim_end()
        .strip_suffix('"')?
        .as_bytes();
    (0..before.len()).rev().find(|&i| {
        let backslashes = before[..i].iter().rev().take_while(|&&b| b == b'\\');
        before[i] == b'"' && backslashes.count() % 2 == 0
    })
}

/// An object's members in order, each value the slice of the text it was
/// read from.
struct Borrowed<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Borrowed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Borrowed<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Borrowed<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Borrowed(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_blanked_and_strings_are_not() {
        let cases = [
            ("{\"a\": 1}", "{\"a\": 1}"),
            ("{} // end", "{}       "),
            ("// top\n{}\n", "      \n{}\n"),
            ("// crlf\r\n{}", "       \r\n{}"),
            ("{/* a\n b */\"a\": 1}", "{    \n     \"a\": 1}"),
            ("{\"u\": \"http://x/*y*/\"}", "{\"u\": \"http://x/*y*/\"}"),
            // An escaped quote does not end the string; an escaped
            // backslash before the quote does.
            (r#"{"q": "a\"//b"}"#, r#"{"q": "a\"//b"}"#),
            (r#"{"q": "a\\"// c"#, r#"{"q": "a\\"    "#),
            ("/* a // b */{}", "            {}"),
            ("// a /* b\n{}", "         \n{}"),
            ("/*/ still a comment */{}", "                      {}"),
            ("/**/{}", "    {}"),
            // Characters of any width keep the byte length.
            ("{} // é €", "{}          "),
            // Unclosed, a comment runs to the end; the JSON parser then says
            // what is missing.
            ("{\"a\": /* 1}", "{\"a\":      "),
            // A lone slash is not a comment; the parser refuses it.
            ("{\"a\": 1 / 2}", "{\"a\": 1 / 2}"),
        ];
        for (text, want) in cases {
            let got = strip_comments(text);
            assert_eq!(got, want, "{text:?}");
            assert_eq!(got.len(), text.len(), "{text:?}");
        }
    }

    fn splice(text: &str, key: &str, edited: &str) -> Option<String> {
        let plain = strip_comments(text);
        splice_member(text, &plain, key, edited).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    const EDITED: &str = "{\n  \"a\": 1,\n  \"h\": {\n    \"x\": 2\n  }\n}\n";

    #[test]
    fn a_member_is_spliced_in_and_out_keeping_every_comment() {
        let cases: [(&str, &str, &str); 6] = [
            // Added after a commented last member: the comma before the
            // comment, the member on its own line.
            (
                "// mine\n{\n  \"a\": 1 // one\n}\n",
                EDITED,
                "// mine\n{\n  \"a\": 1, // one\n  \"h\": {\n    \"x\": 2\n  }\n}\n",
            ),
            // Added to a one-line object.
            (
                "{\"a\": 1 /* one */}",
                EDITED,
                "{\"a\": 1, /* one */\n  \"h\": {\n    \"x\": 2\n  }\n}",
            ),
            // Added to an object with no members.
            (
                "/* empty */ {}",
                "{\n  \"h\": 3\n}\n",
                "/* empty */ {\n  \"h\": 3\n}",
            ),
            // Replaced in place, the comments around it kept.
            (
                "{\n  // hooks:\n  \"h\": {\"x\": 1}, // old\n  \"a\": 1\n}\n",
                "{\n  \"h\": {\n    \"x\": 2\n  },\n  \"a\": 1\n}\n",
                "{\n  // hooks:\n  \"h\": {\n    \"x\": 2\n  }, // old\n  \"a\": 1\n}\n",
            ),
            // Removed when last: the comma before it and its line go.
            (
                "{\n  \"a\": 1, // one\n  \"h\": {\n    \"x\": 2\n  }\n}\n",
                "{\n  \"a\": 1\n}\n",
                "{\n  \"a\": 1 // one\n}\n",
            ),
            // Removed when first: the comma after it goes, its comment stays.
            (
                "{\n  \"h\": 3, /* kith */\n  \"a\": 1\n}\n",
                "{\n  \"a\": 1\n}\n",
                "{\n   /* kith */\n  \"a\": 1\n}\n",
            ),
        ];
        for (text, edited, want) in cases {
            let got = splice(text, "h", edited);
            assert_eq!(got.as_deref(), Some(want), "{text:?}");
            let plain = strip_comments(want);
            let parsed: serde_json::Value = serde_json::from_str(&plain)
                .unwrap_or_else(|e| panic!("{want:?} is not JSON with comments: {e}"));
            let edited: serde_json::Value =
                serde_json::from_str(edited).unwrap_or_else(|e| panic!("{edited:?}: {e}"));
            assert_eq!(parsed, edited, "the same values as the edit");
        }
    }

    #[test]
    fn adding_then_removing_a_member_gives_back_the_text() {
        let cases = [
            ("// mine\n{\n  \"a\": 1 // one\n}\n", None),
            (
                "{\n  /* settings */\n  \"a\": [1, 2],\n  \"b\": {\"c\": \"//\"}\n}",
                None,
            ),
            // On one line, the added member's line break stays behind.
            ("{\"a\": 1}", Some("{\"a\": 1\n}")),
        ];
        for (text, after) in cases {
            let plain = strip_comments(text);
            let base: serde_json::Value =
                serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{e}"));
            let mut with = base.clone();
            with["h"] = serde_json::json!({"x": 2});
            let added = splice(text, "h", &format!("{with:#}"));
            let added = added.unwrap_or_else(|| panic!("{text:?}: refused"));
            let removed = splice(&added, "h", &format!("{base:#}"));
            assert_eq!(removed.as_deref(), Some(after.unwrap_or(text)), "{added:?}");
        }
    }

    #[test]
    fn a_member_holding_comments_is_not_rewritten() {
        let text = "{\n  \"h\": {\n    // mine\n    \"x\": 1\n  }\n}\n";
        assert_eq!(splice(text, "h", "{\n  \"h\": 2\n}\n"), None);
        assert_eq!(splice(text, "h", "{}\n"), None, "nor removed");
        // Comments elsewhere do not stop it.
        let text = "{\n  \"h\": 1 // old\n}\n";
        assert_eq!(
            splice(text, "h", "{\n  \"h\": 2\n}\n").as_deref(),
            Some("{\n  \"h\": 2 // old\n}\n")
        );
    }

    #[test]
    fn a_file_of_comments_alone_keeps_them_above_the_object() {
        assert_eq!(
            splice("// empty for now", "h", "{\n  \"h\": 1\n}\n").as_deref(),
            Some("// empty for now\n{\n  \"h\": 1\n}\n")
        );
    }

    #[test]
    fn keys_are_found_whatever_their_escapes() {
        let text = r#"{"a\"": 1, "b\\": 2, "h": 3}"#;
        let object = Object::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let starts: Vec<&str> = object
            .members
            .iter()
            .map(|m| &text[m.key_start..m.value.end])
            .collect();
        assert_eq!(starts, [r#""a\"": 1"#, r#""b\\": 2"#, r#""h": 3"#]);
    }
}
