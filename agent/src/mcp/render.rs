//! What `kith mcp`'s tools print: compact plain text for an agent's
//! context, every passage with the citation `read` follows back, each
//! answer cut to the caller's token budget. Pure.

use std::fmt::Write as _;

use kith_proto::{Conversation, ConversationTurn, ConversationsResponse, SearchResponse};
use kith_shared::tokens;

use crate::conversation::ShowOptions;
use crate::family::one_line;

/// `kith://<conversation>/<run>#L<start>-L<end>`: a run's lines within a
/// conversation, as search hits and context passages cite them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    pub conversation: String,
    pub run: String,
    pub lines: (u64, u64),
}

impl Citation {
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.trim().strip_prefix("kith://")?;
        let (path, lines) = rest.split_once("#L")?;
        let (conversation, run) = path.split_once('/')?;
        let (start, end) = lines.split_once("-L")?;
        let lines = (start.parse().ok()?, end.parse().ok()?);
        let id = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
        (id(conversation) && id(run) && lines.0 <= lines.1).then(|| Self {
            conversation: conversation.to_owned(),
            run: run.to_owned(),
            lines,
        })
    }
}

impl std::fmt::Display for Citation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = self.lines;
        write!(f, "kith://{}/{}#L{a}-L{b}", self.conversation, self.run)
    }
}

/// `text` within `max_tokens`, cut at a line and saying so.
pub fn bounded(text: &str, max_tokens: u32) -> String {
    if tokens::approx(text) <= max_tokens {
        return text.to_owned();
    }
    let note = format!("[cut to max_tokens={max_tokens}: ask for less, or a larger max_tokens]");
    let room = max_tokens.saturating_sub(tokens::approx(&note) + 1);
    let head = tokens::prefix(text, room);
    let head = head.rfind('\n').map_or(head, |i| &head[..=i]);
    format!("{head}{note}")
}

/// Search hits by conversation: a heading per conversation, then each hit
/// as its citation and snippet.
pub fn search(res: &SearchResponse) -> String {
    let mut out = String::new();
    if let Some(why) = &res.degraded {
        let _ = writeln!(out, "note: {why}");
    }
    if res.groups.is_empty() {
        out.push_str("no matches\n");
        return out;
    }
    for g in &res.groups {
        let _ = writeln!(
            out,
            "## {} ({}, {}, {}, {}{})",
            title(g.title.as_deref()),
            g.owner,
            g.machine,
            g.agent_runtime.as_str(),
            day(&g.last_activity_at),
            g.cwd
                .as_deref()
                .map(|c| format!(", {c}"))
                .unwrap_or_default()
        );
        for hit in &g.hits {
            let cite = Citation {
                conversation: hit
                    .conversation_id
                    .clone()
                    .unwrap_or_else(|| g.conversation_id.clone()),
                run: hit.run_id.clone(),
                lines: (hit.line_start, hit.line_end),
            };
            let _ = writeln!(out, "{cite} {}: {}", hit.role, one_line(&hit.snippet, 300));
        }
        out.push('\n');
    }
    out
}

/// Conversations, newest first: id, title, who, when, files touched.
pub fn recent(res: &ConversationsResponse) -> String {
    let mut out = String::new();
    if res.conversations.is_empty() {
        out.push_str("no conversations\n");
        return out;
    }
    for c in &res.conversations {
        let _ = writeln!(
            out,
            "{} {} ({}, {}, {}, {} turns)",
            c.id,
            title(c.title.as_deref()),
            c.owner,
            c.machine,
            day(&c.last_activity_at),
            c.turn_count
        );
        if !c.files_touched.is_empty() {
            let shown: Vec<&str> = c.files_touched.iter().take(8).map(String::as_str).collect();
            let more = c.files_touched.len() - shown.len();
            let more = if more > 0 {
                format!(" (+{more})")
            } else {
                String::new()
            };
            let _ = writeln!(out, "  files: {}{more}", shown.join(", "));
        }
    }
    out
}

/// One conversation's heading and the turns asked for.
pub fn read(c: &Conversation, turns: &[ConversationTurn], tools: bool) -> String {
    let mut out = format!(
        "# {} ({}, {}, {}, {}{})\n",
        title(c.title.as_deref()),
        c.owner,
        c.machine,
        c.agent_runtime.as_str(),
        day(&c.started_at),
        c.cwd
            .as_deref()
            .map(|d| format!(", {d}"))
            .unwrap_or_default()
    );
    if turns.is_empty() {
        out.push_str("no turns in that range\n");
        return out;
    }
    out.push_str(&crate::conversation::render_turns(
        turns,
        &c.inline_subagents,
        ShowOptions { tools },
    ));
    out
}

fn title(t: Option<&str>) -> String {
    t.map(|t| one_line(t, 100))
        .unwrap_or_else(|| "(no prompt)".into())
}

fn day(ts: &str) -> &str {
    ts.get(..10).unwrap_or(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_round_trip_and_refuse_what_is_not_one() {
        let s = "kith://c0123abcd/019a2b3c4d#L12-L20";
        let c = Citation::parse(s);
        assert_eq!(
            c,
            Some(Citation {
                conversation: "c0123abcd".into(),
                run: "019a2b3c4d".into(),
                lines: (12, 20),
            })
        );
        assert_eq!(c.map(|c| c.to_string()).as_deref(), Some(s));
        for bad in [
            "c0123abcd",
            "kith://c0123abcd#L1-L2",
            "kith://c01/r02#L9-L2",
            "kith://c01/r02#L1",
            "kith://c01/../r02#L1-L2",
            "http://c01/r02#L1-L2",
        ] {
            assert_eq!(Citation::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn bounded_text_is_cut_at_a_line_within_the_budget_and_says_so() {
        let text: String = (0..200)
            .map(|i| format!("line {i} of the answer\n"))
            .collect();
        assert_eq!(bounded(&text, 100_000), text);
        for max in [30, 100, 1000] {
            let cut = bounded(&text, max);
            assert!(
                tokens::approx(&cut) <= max,
                "{max}: {}",
                tokens::approx(&cut)
            );
            assert!(cut.ends_with("a larger max_tokens]"), "{cut}");
            let kept = cut.rsplit_once('[').map_or("", |(k, _)| k);
            assert!(text.starts_with(kept) && (kept.is_empty() || kept.ends_with('\n')));
        }
    }
}
