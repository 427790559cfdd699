//! Gemini CLI sessions (v0.39 and later,
//! `~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl`, subagents in
//! `chats/<parent session id>/<id>.jsonl`): a metadata line, then message
//! records appended as they happen. The file's bytes only grow, but what
//! they mean is folded: a message that changes is appended again in full
//! under the same id (the last copy wins), `{"$set":{...}}` merges metadata
//! and, when it holds `messages`, replaces the whole list, and
//! `{"$rewindTo":"<id>"}` drops that message and every one after it. Only the
//! messages live at the end of the bytes become turns, each with the text of
//! its last copy at the line of its first: an edited message stays in its
//! place, as Gemini CLI shows it.

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::{push_paragraph, str_at};
use super::{Records, Role};

#[derive(Default)]
pub(super) struct Gemini {
    /// The live messages in conversation order, each (its last copy) with
    /// the line it first appeared at.
    live: Vec<(Value, u64)>,
}

impl Gemini {
    fn put(&mut self, message: &Value, line: u64) {
        let id = str_at(message, "id");
        match id.and_then(|id| self.position(id)) {
            Some(i) => self.live[i].0 = message.clone(),
            None => self.live.push((message.clone(), line)),
        }
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.live
            .iter()
            .position(|(m, _)| str_at(m, "id") == Some(id))
    }
}

impl Records for Gemini {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        if let Some(set) = v.get("$set") {
            if let Some(messages) = set.get("messages").and_then(Value::as_array) {
                // A message the list held already keeps its place.
                let before = std::mem::take(&mut self.live);
                for m in messages {
                    let first = str_at(m, "id").and_then(|id| {
                        before
                            .iter()
                            .find(|(old, _)| str_at(old, "id") == Some(id))
                            .map(|(_, at)| *at)
                    });
                    self.put(m, first.unwrap_or(line));
                }
            }
            metadata(b, set);
            return true;
        }
        if let Some(target) = v.get("$rewindTo") {
            // A rewind to a message no longer there (already rewound past)
            // leaves the list as it is.
            if let Some(i) = target.as_str().and_then(|id| self.position(id)) {
                self.live.truncate(i);
            }
            return true;
        }
        if v.get("sessionId").is_some() {
            metadata(b, v);
            return true;
        }
        match str_at(v, "type") {
            Some(_) if v.get("id").is_some() => {
                self.put(v, line);
                true
            }
            _ => false,
        }
    }

    fn finish(self, b: &mut Builder) {
        for (m, line) in &self.live {
            message(b, m, *line);
        }
    }
}

/// The session facts of the metadata line or a `$set`.
fn metadata(b: &mut Builder, v: &Value) {
    fill(&mut b.facts.session_id, str_at(v, "sessionId"));
    b.time(str_at(v, "startTime"));
    b.time(str_at(v, "lastUpdated"));
}

fn message(b: &mut Builder, m: &Value, line: u64) {
    let ts = str_at(m, "timestamp");
    b.time(ts);
    let content = m.get("content").unwrap_or(&Value::Null);
    match str_at(m, "type") {
        Some("user") => {
            b.turn(Role::User, &parts_text(content), line, ts);
        }
        Some("gemini") => {
            fill(&mut b.facts.model, str_at(m, "model"));
            b.turn(Role::Assistant, &parts_text(content), line, ts);
            for call in m
                .get("toolCalls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                tool_call(b, call, line, ts);
            }
        }
        // `info`, `error`, `warning`: the CLI talking, not the model.
        _ => {}
    }
}

/// A message's `content`: a string, or Gemini API parts, of which only the
/// `text` ones are read (not inline data or function calls).
fn parts_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut out = String::new();
            for text in parts.iter().filter_map(|p| str_at(p, "text")) {
                push_paragraph(&mut out, text);
            }
            out
        }
        _ => String::new(),
    }
}

/// A tool call and its result, both held by the assistant message.
fn tool_call(b: &mut Builder, call: &Value, line: u64, ts: Option<&str>) {
    let name = str_at(call, "name").unwrap_or("tool");
    let args = call.get("args").unwrap_or(&Value::Null);
    let id = str_at(call, "id");
    let keys = ["file_path", "absolute_path", "path"];
    b.tool_use(id, name, args, &keys, name == "run_shell_command", line, ts);
    let output = str_at(call, "resultDisplay")
        .map(str::to_owned)
        .unwrap_or_else(|| {
            call.get("result")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|r| r.pointer("/functionResponse/response/output"))
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        });
    b.result(id, Some(name), &output, line, ts);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, read_chain, third_party};
    use super::super::{parse, parse_chain, Format};

    const SESSION: &str = "gemini/tally/chats/session-2026-05-13T09-14-7c1e4a2b.jsonl";

    #[test]
    fn only_the_live_messages_are_turns_each_at_its_first_line() {
        let bytes =
            String::from_utf8(super::super::super::fixtures::read(SESSION)).unwrap_or_default();
        let t = check(
            Format::Gemini,
            &bytes,
            "user 2-2: Why does tally reject amounts with a thousands separator?
             tool 4-4 [read_file]: read_file: /home/sam/src/tally/src/parse.rs⏎Read 42 lines fr
             assistant 6-6: parse_amount strips the currency sign but never the comma, s
             user 11-11: Just strip the comma, and ask a subagent to find other calle
             tool 12-12 [codebase_investigator]: codebase_investigator: Find every caller of parse_amount⏎par
             tool 12-12 [replace]: replace: /home/sam/src/tally/src/parse.rs s.trim_start_match
             tool 12-12 [run_shell_command]: run_shell_command: cargo test parse_amount Run the parser te
             assistant 13-13: Done: amounts like 1,200 now parse; the importer and the CLI",
        );
        assert!(
            !t.turns.iter().any(|x| x.text.contains("zeppelin")),
            "rewound"
        );
        assert_eq!(
            t.session_id.as_deref(),
            Some("7c1e4a2b-5d3f-4e6a-9b80-2f4d6c8a1e35")
        );
        assert_eq!(t.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(t.commands, ["cargo test parse_amount"]);
        assert_eq!(t.files_touched, ["/home/sam/src/tally/src/parse.rs"]);
        assert_eq!(t.tool_call_count, 4);
        assert_eq!(t.started_at.as_deref(), Some("2026-05-13T09:14:02.511Z"));
        assert_eq!(t.ended_at.as_deref(), Some("2026-05-13T09:16:03.555Z"));
        assert_eq!((t.n_lines, t.n_skipped_lines), (14, 0));
    }

    #[test]
    fn set_with_messages_replaces_the_list_and_a_stale_rewind_changes_nothing() {
        let input = concat!(
            "{\"sessionId\":\"s1\",\"startTime\":\"2026-01-01T00:00:00Z\",\"kind\":\"main\"}\n",
            "{\"id\":\"a\",\"type\":\"user\",\"content\":\"first try\"}\n",
            "{\"id\":\"b\",\"type\":\"gemini\",\"content\":\"answer one\"}\n",
            "{\"$set\":{\"messages\":[{\"id\":\"c\",\"type\":\"user\",\"content\":[{\"text\":\"kept\"}]},{\"id\":\"d\",\"type\":\"gemini\",\"content\":\"kept too\"}]}}\n",
            "{\"$rewindTo\":\"a\"}\n",
            "{\"id\":\"d\",\"type\":\"gemini\",\"content\":\"kept, edited\"}\n",
            "{\"id\":\"e\",\"type\":\"info\",\"content\":\"Switched model\"}\n",
        );
        check(
            Format::Gemini,
            input,
            "user 4-4: kept
             assistant 4-4: kept, edited",
        );
        let rewound = format!("{input}{{\"$rewindTo\":\"c\"}}\n");
        check(Format::Gemini, &rewound, "");
    }

    /// A rewind in a later delta drops turns an earlier delta holds; a
    /// message appended again keeps its place with its new text.
    #[test]
    fn a_chain_of_deltas_folds_as_one_file() {
        let one = concat!(
            "{\"sessionId\":\"s1\",\"kind\":\"main\"}\n",
            "{\"id\":\"a\",\"type\":\"user\",\"content\":\"keep me\"}\n",
            "{\"id\":\"b\",\"type\":\"gemini\",\"content\":\"draft\"}\n",
            "{\"id\":\"c\",\"type\":\"user\",\"content\":\"rewound\"}\n",
        );
        let two = concat!(
            "{\"id\":\"b\",\"type\":\"gemini\",\"content\":\"final\"}\n",
            "{\"$rewindTo\":\"c\"}\n",
            "{\"id\":\"d\",\"type\":\"user\",\"content\":\"after\"}\n",
        );
        let read = read_chain(Format::Gemini, &[one, two]);
        assert_eq!(read, [vec!["2: keep me", "3: final"], vec!["3: after"]]);
        // Append-only formats read each delta alone, as ingest did.
        let pi = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"x\"}}\n";
        let alone = parse_chain(Format::Pi, &[pi.as_bytes(), pi.as_bytes()]);
        let once = parse(Format::Pi, pi.as_bytes()).turns;
        assert_eq!(alone, [once.clone(), once]);
    }

    /// Regression: an edited first message moved to the end, after the
    /// answers to it, and its old text stayed the title.
    #[test]
    fn an_edited_message_stays_in_its_first_place_and_names_the_title() {
        let one = concat!(
            "{\"sessionId\":\"s1\",\"kind\":\"main\"}\n",
            "{\"id\":\"a\",\"type\":\"user\",\"content\":\"fix the parsre\"}\n",
            "{\"id\":\"b\",\"type\":\"gemini\",\"content\":\"which parser?\"}\n",
            "{\"id\":\"c\",\"type\":\"user\",\"content\":\"the amount one\"}\n",
        );
        let two = "{\"id\":\"a\",\"type\":\"user\",\"content\":\"fix the amount parser\"}\n";
        let read = read_chain(Format::Gemini, &[one, two]);
        assert_eq!(
            read,
            [
                vec![
                    "2: fix the amount parser",
                    "3: which parser?",
                    "4: the amount one"
                ],
                vec![]
            ]
        );
        let whole = parse(Format::Gemini, format!("{one}{two}").as_bytes());
        assert_eq!(whole.title.as_deref(), Some("fix the amount parser"));
        assert_eq!(whole.turns.len(), 3, "live turns, not versions");
    }

    #[test]
    fn the_subagent_and_the_reference_session_read_whole() {
        let sub = own("gemini/tally/chats/7c1e4a2b-5d3f-4e6a-9b80-2f4d6c8a1e35/b41d09e6-2c7a-4f53-8e1b-6a9d3c5e7f20.jsonl");
        assert_eq!(sub.turns.len(), 3);
        assert_eq!(sub.model.as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(
            sub.intent.as_deref(),
            Some("Find every caller of parse_amount")
        );
        if let Some(t) = third_party("gemini/jazzyalex__agent-sessions__jsonl_v040.jsonl") {
            assert_eq!(t.session_id.as_deref(), Some("gemini_stage0_jsonl"));
            assert_eq!(t.commands, ["ls -F"]);
            assert_eq!(
                t.turns.last().map(|x| x.text.as_str()),
                Some("Hello! I listed the files.")
            );
        }
    }
}
