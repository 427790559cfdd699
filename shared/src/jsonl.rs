//! Checks that a delta is well-formed: complete lines, each holding one or
//! more JSON values (real pi files concatenate records on one line), or, for
//! an agent that writes text (Aider's markdown), any UTF-8 text.

/// What each line of a transcript holds, by the agent that wrote it
/// (`transcript::Format::lines`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    Json,
    /// UTF-8 text: nothing to check beyond complete lines.
    Text,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonlError {
    #[error("the delta is empty")]
    Empty,
    #[error("the delta does not end with a newline (partial last line)")]
    PartialLastLine,
    #[error("line {line} is not JSON: {reason}")]
    NotJson { line: u64, reason: String },
}

/// Returns the number of lines when `bytes` are complete lines, each one JSON
/// for `Lines::Json`, each UTF-8 for `Lines::Text`.
///
/// Empty lines are allowed (agents write none, but a blank line hides nothing).
pub fn check(bytes: &[u8], lines: Lines) -> Result<u64, JsonlError> {
    if bytes.is_empty() {
        return Err(JsonlError::Empty);
    }
    if !bytes.ends_with(b"\n") {
        return Err(JsonlError::PartialLastLine);
    }
    let mut n_lines = 0;
    for (idx, line) in bytes[..bytes.len() - 1].split(|&b| b == b'\n').enumerate() {
        n_lines += 1;
        let line_no = idx as u64 + 1;
        if let Err(e) = std::str::from_utf8(line) {
            return Err(JsonlError::NotJson {
                line: line_no,
                reason: format!("invalid UTF-8: {e}"),
            });
        }
        if lines == Lines::Text {
            continue;
        }
        for value in serde_json::Deserializer::from_slice(line).into_iter::<serde::de::IgnoredAny>()
        {
            if let Err(e) = value {
                return Err(JsonlError::NotJson {
                    line: line_no,
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(n_lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&[u8], Result<u64, &str>)] = &[
            (b"{}\n", Ok(1)),
            (b"{\"a\":1}\n[1,2]\n", Ok(2)),
            (b"{\"a\":1}{\"b\":2}\n", Ok(1)),
            (b"\n{}\n", Ok(2)),
            (b"", Err("empty")),
            (b"{}\n{\"a\"", Err("partial")),
            (b"{}\nnot json\n", Err("line 2")),
            (b"{\"a\":1}}\n", Err("line 1")),
            (b"{\"a\":\"\xff\"}\n", Err("line 1")),
        ];
        for (input, want) in cases {
            let got = check(input, Lines::Json);
            match (want, &got) {
                (Ok(n), Ok(m)) => assert_eq!(n, m, "{input:?}"),
                (Err(frag), Err(e)) => {
                    assert!(e.to_string().contains(frag), "{input:?}: {e} lacks {frag}")
                }
                _ => panic!("{input:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn text_lines_need_only_be_complete_utf8() {
        assert_eq!(check(b"#### hi  \n\nnot json\n", Lines::Text), Ok(3));
        assert_eq!(check(b"", Lines::Text), Err(JsonlError::Empty));
        assert_eq!(
            check(b"#### hi  \npartial", Lines::Text),
            Err(JsonlError::PartialLastLine)
        );
        assert!(check(b"ok\n\xff\n", Lines::Text).is_err());
        assert!(check(b"not json\n", Lines::Json).is_err());
    }
}
