//! Chunking turns for the index: one chunk per turn, long turns split into
//! overlapping windows that fit the embedding model (about 256 word-pieces).

use crate::transcript::{Role, Turn};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    pub max_chars: usize,
    pub overlap_chars: usize,
    /// Up to this many characters of the previous turn lead each chunk, so a
    /// short answer carries the question it answers (and its line range
    /// covers both turns).
    pub context_chars: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_chars: 1200,
            overlap_chars: 200,
            context_chars: 300,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub chunk_idx: u32,
    pub role: Role,
    pub text: String,
    pub line_start: u64,
    pub line_end: u64,
    pub timestamp: Option<String>,
}

pub fn chunk_turns(turns: &[Turn], cfg: &ChunkConfig) -> Vec<Chunk> {
    let mut out = Vec::new();
    let max = cfg.max_chars.max(1);
    let step = max.saturating_sub(cfg.overlap_chars).max(1);
    let mut previous: Option<&Turn> = None;
    for turn in turns {
        let text = turn.text.trim();
        if text.is_empty() {
            continue;
        }
        let context = previous
            .map(|p| tail_chars(p.text.trim(), cfg.context_chars))
            .filter(|c| !c.is_empty());
        for (i, window) in windows(text, max, step).into_iter().enumerate() {
            let (text, line_start) = match (i, context, previous) {
                (0, Some(c), Some(p)) => {
                    (format!("{c}\n{window}"), p.line_start.min(turn.line_start))
                }
                _ => (window.to_owned(), turn.line_start),
            };
            out.push(Chunk {
                chunk_idx: out.len() as u32,
                role: turn.role,
                text,
                line_start,
                line_end: turn.line_end,
                timestamp: turn.timestamp.clone(),
            });
        }
        previous = Some(turn);
    }
    out
}

/// The last `max` characters of `s`, starting at a word when possible.
fn tail_chars(s: &str, max: usize) -> &str {
    let n = s.chars().count();
    if n <= max {
        return s;
    }
    let start = s.char_indices().nth(n - max).map_or(0, |(i, _)| i);
    let tail = &s[start..];
    match tail.find(char::is_whitespace) {
        Some(ws) if ws < tail.len() / 2 => tail[ws..].trim_start(),
        _ => tail,
    }
}

/// Windows of at most `max` chars starting every `step` chars, each end
/// moved back to whitespace when there is some in the last fifth.
fn windows(text: &str, max: usize, step: usize) -> Vec<&str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let n_chars = bounds.len() - 1;
    if n_chars <= max {
        return vec![text];
    }
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let mut end = (start + max).min(n_chars);
        if end < n_chars {
            let floor = end - max / 5;
            if let Some(ws) = (floor..end)
                .rev()
                .find(|&c| text[bounds[c]..].starts_with(char::is_whitespace))
            {
                if ws > start {
                    end = ws;
                }
            }
        }
        out.push(text[bounds[start]..bounds[end]].trim());
        if end >= n_chars {
            break;
        }
        start = (start + step).min(end).max(start + 1);
    }
    out.retain(|w| !w.is_empty());
    out
}
