//! Moving a transcript to another working folder: every `"cwd"` field whose
//! folder is the conversation's (or under it) names the local one instead;
//! every other byte stays the captured byte.

/// `bytes` with each `"cwd": "<folder>"` field whose folder is `from` or
/// inside it moved under `to`. A `"cwd"` inside a string (escaped quotes)
/// is text, not a field, and is left alone.
pub(crate) fn move_folder(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    const KEY: &[u8] = b"\"cwd\"";
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], KEY).map(|i| at + i) {
        let after_key = found + KEY.len();
        let is_field = found
            .checked_sub(1)
            .map(|i| bytes[i])
            .is_some_and(|b| matches!(b, b'{' | b',' | b' ' | b'\t'));
        match is_field.then(|| field_value(bytes, after_key)).flatten() {
            Some((start, end)) => {
                let moved = serde_json::from_slice::<String>(&bytes[start..end])
                    .ok()
                    .and_then(|folder| moved(&folder, from, to));
                out.extend_from_slice(&bytes[at..start]);
                match moved {
                    Some(folder) => out.extend_from_slice(
                        serde_json::to_string(&folder)
                            .unwrap_or_default()
                            .as_bytes(),
                    ),
                    None => out.extend_from_slice(&bytes[start..end]),
                }
                at = end;
            }
            None => {
                out.extend_from_slice(&bytes[at..after_key]);
                at = after_key;
            }
        }
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// `bytes` with every JSON string that is exactly the session id `from`
/// (its `sessionId`, `id` and file references) made `to`: a fork is a
/// session of its own.
pub(crate) fn new_session(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let (from, to) = (format!("\"{from}\""), format!("\"{to}\""));
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], from.as_bytes()).map(|i| at + i) {
        out.extend_from_slice(&bytes[at..found]);
        out.extend_from_slice(to.as_bytes());
        at = found + from.len();
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// `folder` under `to` when it is `from` or inside it.
fn moved(folder: &str, from: &str, to: &str) -> Option<String> {
    let from = from.trim_end_matches('/');
    let rest = folder.strip_prefix(from)?;
    (rest.is_empty() || rest.starts_with('/'))
        .then(|| format!("{}{rest}", to.trim_end_matches('/')))
}

/// The span of the JSON string after a key (`: "..."`), quotes included.
fn field_value(bytes: &[u8], mut i: usize) -> Option<(usize, usize)> {
    let skip_space = |i: &mut usize| {
        while bytes.get(*i).is_some_and(|b| b.is_ascii_whitespace()) {
            *i += 1;
        }
    };
    skip_space(&mut i);
    if bytes.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    skip_space(&mut i);
    if bytes.get(i) != Some(&b'"') {
        return None;
    }
    let start = i;
    i += 1;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return Some((start, i + 1)),
            b'\n' => return None,
            _ => i += 1,
        }
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_folder_moves_and_nothing_else() {
        let line = br#"{"parentUuid":null,"cwd":"/Users/me/src/tally","message":{"content":"see \"cwd\":\"/Users/me/src/tally\" and /Users/me/src/tally/x"}}
{"cwd": "/Users/me/src/tally/crates/x","type":"user"}
{"cwd":"/Users/me/src/tallyho","type":"user"}
{"type":"session_meta","payload":{"id":"1","cwd":"/Users/me/src/tally"}}
"#;
        let moved = move_folder(line, "/Users/me/src/tally", "/home/me/work/tally");
        let want = br#"{"parentUuid":null,"cwd":"/home/me/work/tally","message":{"content":"see \"cwd\":\"/Users/me/src/tally\" and /Users/me/src/tally/x"}}
{"cwd": "/home/me/work/tally/crates/x","type":"user"}
{"cwd":"/Users/me/src/tallyho","type":"user"}
{"type":"session_meta","payload":{"id":"1","cwd":"/home/me/work/tally"}}
"#;
        assert_eq!(
            String::from_utf8_lossy(&moved),
            String::from_utf8_lossy(want)
        );
    }

    #[test]
    fn a_fork_is_a_session_of_its_own() {
        let lines = br#"{"sessionId":"s-1","uuid":"s-12","text":"s-1 said \"s-1\""}
{"type":"session_meta","payload":{"id":"s-1"}}
"#;
        let forked = new_session(lines, "s-1", "n-2");
        let want = br#"{"sessionId":"n-2","uuid":"s-12","text":"s-1 said \"s-1\""}
{"type":"session_meta","payload":{"id":"n-2"}}
"#;
        assert_eq!(
            String::from_utf8_lossy(&forked),
            String::from_utf8_lossy(want)
        );
    }

    #[test]
    fn escaped_and_broken_values_survive() {
        let line = br#"{"cwd":"C:\\Users\\me \"q\"","x":1}"#;
        assert_eq!(move_folder(line, "/a", "/b"), line);
        let moved = move_folder(br#"{"cwd":"/a/\u00e9"}"#, "/a", "/b c");
        assert_eq!(moved, "{\"cwd\":\"/b c/é\"}".as_bytes());
        for cut in [
            &br#"{"cwd":"/a"#[..],
            br#"{"cwd":"#,
            br#"{"cwd""#,
            b"\"cwd\"",
            b"",
        ] {
            assert_eq!(move_folder(cut, "/a", "/b"), cut);
        }
        let same = move_folder(br#"{"cwd":"/a"}"#, "/a", "/a");
        assert_eq!(same, br#"{"cwd":"/a"}"#);
    }
}
