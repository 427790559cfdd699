//! Cursor agent transcripts
//! (`~/.cursor/projects/<slug>/agent-transcripts/<id>.jsonl`, a subagent's
//! under `<id>/subagents/`): one `{role, message: {content: [...]}}` per
//! line, appended, with no ids and no timestamps (the run's time is when
//! kith captured it). Tool calls are `tool_use` blocks without results; the
//! person's words are wrapped in `<user_query>`.

use serde_json::Value;

use super::builder::Builder;
use super::text::{blocks_text, str_at, tag};
use super::{Records, Role};

pub(super) struct Cursor;

impl Records for Cursor {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let content = v.pointer("/message/content").unwrap_or(&Value::Null);
        let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
        match str_at(v, "role") {
            Some("user") => {
                let text = blocks_text(blocks);
                let said = tag(&text, "user_query").unwrap_or(&text);
                b.turn(Role::User, said, line, None);
            }
            Some("assistant") => {
                // Cursor writes its hidden reasoning as `[REDACTED]`.
                let text = blocks_text(blocks).replace("[REDACTED]", "");
                b.turn(Role::Assistant, &text, line, None);
                for block in blocks
                    .iter()
                    .filter(|x| str_at(x, "type") == Some("tool_use"))
                {
                    tool_use(b, block, line);
                }
            }
            _ => return false,
        }
        true
    }
}

fn tool_use(b: &mut Builder, block: &Value, line: u64) {
    let name = str_at(block, "name").unwrap_or("tool");
    let input = block.get("input").unwrap_or(&Value::Null);
    let shell = matches!(name, "Shell" | "Bash" | "run_terminal_cmd");
    let keys = ["path", "file_path", "target_file"];
    b.tool_use(None, name, input, &keys, shell, line, None);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, third_party};
    use super::super::Format;

    #[test]
    fn the_query_is_unwrapped_and_redacted_thinking_left_out() {
        let bytes = super::super::super::fixtures::read(
            "cursor/home-sam-src-tally/agent-transcripts/5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73.jsonl",
        );
        let t = check(
            Format::Cursor,
            &String::from_utf8(bytes).unwrap_or_default(),
            "user 1-1: Add a --since flag to tally report
             assistant 2-2: Adding the flag to the report command.
             tool 2-2 [Read]: Read: /home/sam/src/tally/src/cli.rs
             tool 3-3 [Task]: Task: Find date parsing helpers Which helpers parse dates in
             tool 4-4 [StrReplace]: StrReplace: /home/sam/src/tally/src/cli.rs Report {⏎    #[ar
             tool 4-4 [Shell]: Shell: cargo build Check it compiles
             assistant 5-5: tally report --since 2026-01-01 now limits the report to ent",
        );
        assert!(!t.turns.iter().any(|x| x.text.contains("REDACTED")));
        assert_eq!(t.commands, ["cargo build"]);
        assert_eq!(t.files_touched, ["/home/sam/src/tally/src/cli.rs"]);
        assert_eq!(
            t.title.as_deref(),
            Some("Add a --since flag to tally report")
        );
        assert_eq!((t.started_at, t.session_id), (None, None));
        // A published session, when the third-party set is beside the
        // repository: every line reads.
        if let Some(t) = third_party("cursor/git-ai-project__git-ai__cursor-session-simple.jsonl") {
            assert_eq!(t.n_skipped_lines, 0);
            assert!(t.tools_used.iter().any(|n| n == "WebSearch"));
            assert!(t
                .intent
                .as_deref()
                .is_some_and(|i| i.starts_with("Generate a file")));
        }
    }
}
