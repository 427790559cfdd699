//! What gets indexed: one chunk per turn, long turns cut into overlapping
//! windows that fit the embedding model (about 256 word-pieces), short
//! turns packed with the turns after them.

use crate::transcript::text::truncate_chars;
use crate::transcript::{Role, Turn};

/// A tool turn is cut to this many characters before chunking. Tool output
/// (file dumps, build logs, search results) is most of a transcript's bytes
/// but little of what anyone searches their history for; uncapped, it would
/// crowd the index and the embedding queue with chunks nobody recalls. The
/// call line and the head of the output stay searchable.
pub const MAX_TOOL_CHARS: usize = 8_000;

/// Which chunks a transcript gives: bump it whenever `chunk_turns` or
/// `ChunkConfig::default` changes them. Chunk ids are `<run>-<position>`,
/// and central chunks a run's blob again to embed it, so an index chunked
/// one way would get vectors of other texts; central does not serve such an
/// index (`reindex` rebuilds it). 1: each turn led by the previous turn's
/// tail; 2: short turns packed with the next.
pub const CHUNKING_VERSION: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Longest window of a turn, in characters: 1,200 characters of English
    /// or code are roughly the 256 word-pieces the embedded model reads.
    pub max_chars: usize,
    /// Characters a window shares with the one before, so that a phrase cut
    /// by a window boundary is still whole in one of them.
    pub overlap_chars: usize,
    /// A chunk shorter than this many characters is not indexed alone: it
    /// leads the next turn's first chunk, and the line range covers both.
    /// "yes, do it", "Thanks!" or a one-line question then travel with what
    /// they answer or ask, and no two chunks share a turn. On the LoCoMo dev
    /// set (chat turns, 133 characters at the median) 200 packs 1.9 turns
    /// per chunk and lifted hybrid Recall@10 from 0.800 to 0.826
    /// (BENCHMARKS.md).
    pub min_chars: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_chars: 1200,
            overlap_chars: 200,
            min_chars: 200,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the output, from 0, across all turns.
    pub chunk_idx: u32,
    /// The role of the turn the chunk ends in.
    pub role: Role,
    pub text: String,
    /// The lines of the turns in the chunk, first to last: every window of a
    /// turn points at the whole turn.
    pub line_start: u64,
    pub line_end: u64,
    /// The time of the chunk's first turn.
    pub timestamp: Option<String>,
}

/// Chunks for the index, in turn order. Empty or whitespace-only turns give
/// none; a turn longer than `max_chars` gives several windows; a chunk
/// shorter than `min_chars` is held and leads the next one (the last is
/// kept however short). A held chunk can push the next one past `max_chars`
/// by less than `min_chars`.
pub fn chunk_turns(turns: &[Turn], cfg: &ChunkConfig) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut held: Option<Chunk> = None;
    for turn in turns {
        let text = match turn.role {
            Role::Tool => truncate_chars(&turn.text, MAX_TOOL_CHARS),
            _ => &turn.text,
        };
        for window in windows(text.trim(), cfg) {
            let mut chunk = Chunk {
                chunk_idx: u32::try_from(out.len()).unwrap_or(u32::MAX),
                role: turn.role,
                text: window.to_owned(),
                line_start: turn.line_start,
                line_end: turn.line_end,
                timestamp: turn.timestamp.clone(),
            };
            if let Some(lead) = held.take() {
                chunk.text = format!("{}\n{}", lead.text, chunk.text);
                // Turns run in order of first line, but a streamed message
                // can end after the tool calls inside it.
                chunk.line_start = lead.line_start.min(chunk.line_start);
                chunk.line_end = lead.line_end.max(chunk.line_end);
                chunk.timestamp = lead.timestamp;
            }
            if chunk.text.chars().count() < cfg.min_chars {
                held = Some(chunk);
            } else {
                out.push(chunk);
            }
        }
    }
    out.extend(held);
    out
}

/// Windows of at most `max_chars` characters over `text`, each ending before
/// whitespace when there is some in its second half, and starting
/// `overlap_chars` before the previous end (moved up to the next word start).
fn windows<'a>(text: &'a str, cfg: &ChunkConfig) -> Vec<&'a str> {
    let max = cfg.max_chars.max(1);
    // A string has no more chars than bytes.
    if text.len() <= max {
        return if text.is_empty() {
            Vec::new()
        } else {
            vec![text]
        };
    }
    // Capped at half a window so that every window moves on by at least half
    // its length: the cost stays linear whatever the configuration.
    let overlap = cfg.overlap_chars.min(max / 2);
    let mut out = Vec::new();
    // The current window's chars and the one after it (byte offset, char):
    // only a window's worth is ever held, however long the turn.
    let mut ahead: Vec<(usize, char)> = Vec::with_capacity(max + 1);
    let mut start = 0;
    loop {
        ahead.clear();
        ahead.extend(
            text[start..]
                .char_indices()
                .take(max + 1)
                .map(|(i, c)| (start + i, c)),
        );
        if ahead.len() <= max {
            out.push(text[start..].trim());
            break;
        }
        let is_space = |i: usize| ahead[i].1.is_whitespace();
        let end = (max / 2 + 1..=max)
            .rev()
            .find(|&i| is_space(i))
            .unwrap_or(max);
        out.push(text[start..ahead[end].0].trim());
        // `end > max / 2 >= overlap`, so the next window starts past this one's start.
        let mut next = end - overlap;
        if !is_space(next - 1) {
            if let Some(space) = (next..end).find(|&i| is_space(i)) {
                next = space + 1;
            }
        }
        start = ahead[next].0;
    }
    out.retain(|w| !w.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;
    use crate::transcript::parse;

    fn turn(role: Role, text: &str, lines: (u64, u64)) -> Turn {
        Turn {
            role,
            text: text.to_owned(),
            line_start: lines.0,
            line_end: lines.1,
            timestamp: Some(format!("t{}", lines.0)),
            tool_names: Vec::new(),
            subagent: None,
            diff: None,
        }
    }

    /// Chunks as `idx role start-end: text` lines.
    fn render(chunks: &[Chunk]) -> String {
        let mut out = String::new();
        for c in chunks {
            let ts = c.timestamp.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "{} {} {}-{} {ts}: {}",
                c.chunk_idx,
                c.role.as_str(),
                c.line_start,
                c.line_end,
                c.text
            );
        }
        out
    }

    fn check(turns: &[Turn], (max_chars, overlap_chars): (usize, usize), expect: &str) {
        let cfg = ChunkConfig {
            max_chars,
            overlap_chars,
            min_chars: 0,
        };
        let got = chunk_turns(turns, &cfg);
        let want: String = expect
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(render(&got), want);
        for c in &got {
            assert!(c.text.chars().count() <= max_chars.max(1), "{c:?}");
        }
    }

    #[test]
    fn short_turns_lead_the_turn_after_them() {
        use Role::*;
        let turns = [
            turn(User, "why is CI red?", (3, 3)),
            turn(Assistant, "", (4, 4)),
            turn(Assistant, "the linker ran out of memory", (5, 6)),
            turn(Tool, "free: 512 MB on the runner", (7, 8)),
            turn(User, "ok", (9, 9)),
            turn(
                Assistant,
                "alpha bravo charlie delta echo foxtrot golf",
                (10, 10),
            ),
            turn(User, "thanks", (11, 11)),
            turn(User, "bye", (12, 12)),
        ];
        let cfg = ChunkConfig {
            max_chars: 40,
            overlap_chars: 10,
            min_chars: 16,
        };
        // The question waits for the answer: one chunk from the question's
        // first line to the answer's last, in the answer's role, at the
        // question's time. "ok" leads the long turn's first window only, the
        // short last window waits for "thanks", and the last chunk stays
        // however short it is.
        let got: Vec<_> = chunk_turns(&turns, &cfg)
            .into_iter()
            .map(|c| {
                let at = (c.line_start, c.line_end);
                (
                    c.chunk_idx,
                    c.role,
                    at,
                    c.timestamp.unwrap_or_default(),
                    c.text,
                )
            })
            .collect();
        let want = [
            (
                Assistant,
                (3, 6),
                "t3",
                "why is CI red?\nthe linker ran out of memory",
            ),
            (Tool, (7, 8), "t7", "free: 512 MB on the runner"),
            (
                Assistant,
                (9, 10),
                "t9",
                "ok\nalpha bravo charlie delta echo foxtrot",
            ),
            (User, (10, 11), "t10", "foxtrot golf\nthanks"),
            (User, (12, 12), "t12", "bye"),
        ];
        let want: Vec<_> = (0..)
            .zip(want)
            .map(|(i, (role, at, ts, text))| (i, role, at, ts.to_owned(), text.to_owned()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn chunking_table() {
        use Role::*;
        let cases: Vec<(Vec<Turn>, (usize, usize), &str)> = vec![
            // A short turn is one chunk, as it is.
            (
                vec![turn(User, "fix the parser", (4, 4))],
                (1200, 200),
                "0 user 4-4 t4: fix the parser",
            ),
            // Empty and blank turns give nothing, and the index does not skip.
            (
                vec![
                    turn(User, "", (1, 1)),
                    turn(Assistant, " \n\t ", (2, 2)),
                    turn(Tool, "ls", (3, 5)),
                ],
                (1200, 200),
                "0 tool 3-5 t3: ls",
            ),
            // A long turn: windows end before a space, the next one starts a
            // word or so earlier, and every window keeps the turn's lines.
            (
                vec![
                    turn(Assistant, "aaaa bbbb cccc dddd eeee", (7, 9)),
                    turn(User, "next", (10, 10)),
                ],
                (10, 4),
                "0 assistant 7-9 t7: aaaa bbbb
                 1 assistant 7-9 t7: bbbb cccc
                 2 assistant 7-9 t7: cccc dddd
                 3 assistant 7-9 t7: dddd eeee
                 4 user 10-10 t10: next",
            ),
            // No whitespace: hard cuts, on char boundaries, with overlap.
            (
                vec![turn(User, "ééééééééé", (1, 1))],
                (4, 1),
                "0 user 1-1 t1: éééé
                 1 user 1-1 t1: éééé
                 2 user 1-1 t1: ééé",
            ),
            (
                vec![turn(User, "日本語のテキストです", (1, 1))],
                (4, 2),
                "0 user 1-1 t1: 日本語の
                 1 user 1-1 t1: 語のテキ
                 2 user 1-1 t1: テキスト
                 3 user 1-1 t1: ストです",
            ),
            // An overlap as large as the window is capped: still progress.
            (
                vec![turn(User, "abcdef", (1, 1))],
                (2, 9),
                "0 user 1-1 t1: ab
                 1 user 1-1 t1: bc
                 2 user 1-1 t1: cd
                 3 user 1-1 t1: de
                 4 user 1-1 t1: ef",
            ),
            // A zero-width window is read as one character.
            (
                vec![turn(Summary, "abc", (2, 3))],
                (0, 0),
                "0 summary 2-3 t2: a
                 1 summary 2-3 t2: b
                 2 summary 2-3 t2: c",
            ),
        ];
        for (turns, cfg, expect) in cases {
            check(&turns, cfg, expect);
        }
    }

    #[test]
    fn default_windows_overlap_and_cover_the_whole_turn() {
        let words: Vec<String> = (0..700).map(|i| format!("w{i:04}")).collect();
        let text = words.join(" ");
        let chunks = chunk_turns(&[turn(Role::User, &text, (1, 1))], &ChunkConfig::default());
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert!(c.text.chars().count() <= 1200);
            // Never a cut word: every window starts and ends on a whole word.
            assert!(c.text.split(' ').all(|w| w.len() == 5), "{}", c.text);
        }
        for pair in chunks.windows(2) {
            let last_word = pair[0].text.rsplit(' ').next().unwrap_or_default();
            assert!(
                pair[1].text.contains(last_word),
                "no overlap at {last_word}"
            );
        }
        let mut seen: Vec<&str> = chunks.iter().flat_map(|c| c.text.split(' ')).collect();
        seen.dedup();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), words.len(), "every word is in some chunk");
    }

    #[test]
    fn tool_output_is_capped_and_other_turns_are_not() {
        let big = "x ".repeat(20_000);
        let turns = [
            turn(Role::Tool, &big, (1, 2)),
            turn(Role::User, &big, (3, 3)),
        ];
        let chunks = chunk_turns(&turns, &ChunkConfig::default());
        let chars = |role: Role| -> usize {
            let texts: Vec<&Chunk> = chunks.iter().filter(|c| c.role == role).collect();
            texts.iter().map(|c| c.text.chars().count()).sum()
        };
        let tool = chars(Role::Tool);
        assert!(
            (MAX_TOOL_CHARS..MAX_TOOL_CHARS * 2).contains(&tool),
            "{tool}"
        );
        assert!(chars(Role::User) >= 39_000);
    }

    #[test]
    fn fixture_chunks_stay_inside_their_turns() {
        use crate::fixtures;
        let mut cases = vec![
            ("claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl", fixtures::read("claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl")),
            ("codex/2026/05/11/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl", fixtures::read("codex/2026/05/11/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl")),
            ("pi/--home-sam-src-notes-site--/2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl", fixtures::read("pi/--home-sam-src-notes-site--/2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl")),
        ];
        for name in [
            "claude-code/marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
            "codex/codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
            "pi/badlogic__pi-mono__compact.jsonl",
        ] {
            cases.extend(fixtures::third_party(name).map(|bytes| (name, bytes)));
        }
        for (name, bytes) in cases {
            let format =
                crate::transcript::tests::format_of(name.split('/').next().unwrap_or_default());
            let t = parse(format, &bytes);
            let windows_only = ChunkConfig {
                min_chars: 0,
                ..ChunkConfig::default()
            };
            let chunks = chunk_turns(&t.turns, &windows_only);
            assert!(chunks.len() >= t.turns.len(), "{name}");
            for (i, c) in chunks.iter().enumerate() {
                assert_eq!(c.chunk_idx as usize, i, "{name}");
                assert!(!c.text.trim().is_empty(), "{name}");
                assert!(c.text.chars().count() <= 1200, "{name}");
                let from = t.turns.iter().find(|x| {
                    (x.line_start, x.line_end) == (c.line_start, c.line_end)
                        && x.role == c.role
                        && x.text.contains(&c.text)
                });
                assert!(from.is_some(), "{name}: chunk {i} is not from a turn");
            }
            // Packed: fewer chunks, and every short turn whole in one whose
            // line range covers it.
            let packed = chunk_turns(&t.turns, &ChunkConfig::default());
            assert!(packed.len() < chunks.len(), "{name}: nothing packed");
            for turn in t.turns.iter().filter(|x| x.text.len() <= 1200) {
                let mut holders = packed.iter().filter(|c| {
                    c.line_start <= turn.line_start
                        && turn.line_end <= c.line_end
                        && c.text.contains(turn.text.trim())
                });
                assert!(holders.next().is_some(), "{name}: {turn:?}");
            }
        }
    }
}
