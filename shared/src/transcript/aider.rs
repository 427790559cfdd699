//! Aider's chat history (`.aider.chat.history.md` in the project folder),
//! markdown that aider only ever appends to (`InputOutput.append_chat_history`):
//!
//! - `# aider chat started at YYYY-MM-DD HH:MM:SS` starts a session. Aider
//!   writes no other time, so that one dates the session's turns; it is the
//!   machine's local time without an offset, read as UTC.
//! - `#### ` lines are what the person typed, one line each, every line
//!   ending in two spaces (a markdown line break).
//! - `> ` lines are aider's own output (files added, edits applied,
//!   commits, warnings, token counts), each message ending in two spaces;
//!   a message of several lines has `> ` on its first line only.
//! - Everything else is the model's reply, written whole after a blank line.
//!
//! Only these exact shapes count: a model's markdown holds headings and
//! quotes too, but not the session header's words with a time, and its
//! lines do not end in aider's two spaces, so inside a reply a `#### ` or
//! `> ` line without them stays the model's.
//!
//! One history file holds every session of its project, and it is one kith
//! conversation: a conversation is one transcript's chain of deltas, and
//! cutting a file's chain at session headers would need a chain per byte
//! range of one file. Each session's header stays in the turns' times.

use super::builder::{fill, Builder};
use super::{Role, Transcript};

const HEADER: &str = "# aider chat started at ";

/// What the lines being gathered into one turn are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    /// Aider's output; `open` while a message spans lines that do not start
    /// with `>` (only its last line ends in two spaces).
    Tool {
        open: bool,
    },
    Assistant,
}

/// One turn being gathered.
struct Block {
    kind: Kind,
    /// Its first and last non-blank lines, 1-based.
    first: u64,
    last: u64,
    /// Its lines without aider's markers, joined by newlines.
    text: String,
}

#[derive(Default)]
struct Reader {
    b: Builder,
    block: Option<Block>,
    /// The current session's start, canonical RFC 3339.
    session: Option<String>,
}

pub(super) fn read(bytes: &[u8]) -> Transcript {
    let mut r = Reader::default();
    let mut n_lines = 0;
    let mut n_skipped = 0;
    for line in super::lines(bytes) {
        n_lines += 1;
        match std::str::from_utf8(line) {
            Ok(line) => r.line(line.strip_suffix('\r').unwrap_or(line), n_lines),
            Err(_) => n_skipped += 1,
        }
    }
    r.flush();
    r.b.finish(n_lines, n_skipped)
}

impl Reader {
    fn line(&mut self, line: &str, n: u64) {
        if let Some(at) = session_start(line) {
            self.flush();
            self.b.time(Some(&at));
            self.session = Some(at);
            return;
        }
        let current = self.block.as_ref().map(|b| b.kind);
        let broken = line.ends_with("  ");
        if line.trim().is_empty() {
            // A blank line ends what aider wrote; the model's reply keeps it.
            match &mut self.block {
                Some(block) if block.kind == Kind::Assistant => block.text.push('\n'),
                _ => self.flush(),
            }
            return;
        }
        if let Some(said) = line
            .strip_prefix("####")
            .filter(|rest| broken && (rest.starts_with(' ') || rest.is_empty()))
        {
            self.push(Kind::User, said.trim(), n);
        } else if let Some(out) = line
            .strip_prefix('>')
            .filter(|_| broken || !matches!(current, Some(Kind::Assistant)))
        {
            self.push(Kind::Tool { open: !broken }, out.trim(), n);
        } else if let Some(Kind::Tool { open: true }) = current {
            self.push(Kind::Tool { open: !broken }, line.trim(), n);
        } else {
            self.push(Kind::Assistant, line.trim_end(), n);
        }
    }

    /// Adds a line to the current turn when it is of the same kind, else
    /// starts the next turn with it.
    fn push(&mut self, kind: Kind, text: &str, n: u64) {
        let same = |a: Kind| {
            matches!(
                (a, kind),
                (Kind::User, Kind::User)
                    | (Kind::Assistant, Kind::Assistant)
                    | (Kind::Tool { .. }, Kind::Tool { .. })
            )
        };
        match &mut self.block {
            Some(block) if same(block.kind) => {
                block.text.push('\n');
                block.text.push_str(text);
                block.last = n;
                block.kind = kind;
            }
            _ => {
                self.flush();
                self.block = Some(Block {
                    kind,
                    first: n,
                    last: n,
                    text: text.to_owned(),
                });
            }
        }
    }

    /// Ends the current turn: adds it, with what aider's output says about
    /// the run.
    fn flush(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let role = match block.kind {
            Kind::User => {
                self.user_facts(&block.text);
                Role::User
            }
            Kind::Tool { .. } => {
                self.tool_facts(&block.text);
                Role::Tool
            }
            Kind::Assistant => Role::Assistant,
        };
        // Aider's prompts for the person (`(Y)es/(N)o`) and blank `>` lines
        // are kept as written: they are what the terminal showed.
        let ts = self.session.as_deref();
        self.b.block(role, &block.text, block.first, block.last, ts);
    }

    /// `/run cmd` and `!cmd` run a shell command; every `/command` is a tool
    /// the person used through aider.
    fn user_facts(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(command) = line.strip_prefix('!') {
                self.b.used("/run");
                self.b.command(command);
            } else if let Some(rest) = line.strip_prefix('/') {
                let (name, args) = rest.split_once(' ').unwrap_or((rest, ""));
                if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                {
                    continue;
                }
                self.b.used(&format!("/{name}"));
                if name == "run" || name == "test" {
                    self.b.command(args);
                }
            }
        }
    }

    fn tool_facts(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(file) = line.strip_prefix("Applied edit to ") {
                self.b.file(file);
                self.b.used("edit");
            } else if let Some(file) = line
                .strip_prefix("Added ")
                .and_then(|l| l.strip_suffix(" to the chat"))
            {
                self.b.file(file);
            } else if let Some(version) = line.strip_prefix("Aider v") {
                fill(&mut self.b.facts.agent_version, Some(version));
            } else if let Some(model) = line
                .strip_prefix("Main model: ")
                .or_else(|| line.strip_prefix("Model: "))
            {
                let name = model.split(" with ").next().unwrap_or(model);
                self.b.header_model(Some(name));
            }
        }
    }
}

/// The session header's time as RFC 3339, for exactly
/// `# aider chat started at YYYY-MM-DD HH:MM:SS`.
pub(crate) fn session_start(line: &str) -> Option<String> {
    let at = line.strip_prefix(HEADER)?.trim_end();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let (date, time) = at.split_once(' ')?;
    let date_ok = date.len() == 10 && date.split('-').map(digits).eq([true, true, true]);
    let time_ok = time.len() == 8 && time.split(':').map(digits).eq([true, true, true]);
    if !(date_ok && time_ok) {
        return None;
    }
    crate::timestamp::normalize(&format!("{date}T{time}Z"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, third_party};
    use super::super::Format;
    use super::*;

    #[test]
    fn sessions_prompts_output_and_replies() {
        let t = check(
            Format::Aider,
            concat!(
                "\n",
                "# aider chat started at 2026-03-02 09:15:00\n",
                "\n",
                "> Aider v0.86.2  \n",
                "> Main model: claude-sonnet-4-5 with diff edit format  \n",
                "\n",
                "#### /add src/lib.rs  \n",
                "> Added src/lib.rs to the chat  \n",
                "\n",
                "#### make parse return a Result  \n",
                "#### and keep the old name  \n",
                "\n",
                "# Plan\n",
                "\n",
                "Change the signature.\n",
                "> a quote the model wrote\n",
                "#### a heading the model wrote\n",
                "\n",
                "> Applied edit to src/lib.rs  \n",
                "> Commit 1a2b3c4 feat: parse returns a Result  \n",
                "\n",
                "#### !cargo test  \n",
                "> Running cargo test\n",
                "test result: ok  \n",
            ),
            "tool 4-5: Aider v0.86.2⏎Main model: claude-sonnet-4-5 with diff edit f
             user 7-7: /add src/lib.rs
             tool 8-8: Added src/lib.rs to the chat
             user 10-11: make parse return a Result⏎and keep the old name
             assistant 13-17: # Plan⏎⏎Change the signature.⏎> a quote the model wrote⏎####
             tool 19-20: Applied edit to src/lib.rs⏎Commit 1a2b3c4 feat: parse return
             user 22-22: !cargo test
             tool 23-24: Running cargo test⏎test result: ok",
        );
        assert_eq!(t.files_touched, ["src/lib.rs"]);
        assert_eq!(t.tools_used, ["/add", "/run", "edit"]);
        assert_eq!(t.commands, ["cargo test"]);
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(t.agent_version.as_deref(), Some("0.86.2"));
        assert_eq!(t.title.as_deref(), Some("make parse return a Result"));
        assert_eq!(t.started_at.as_deref(), Some("2026-03-02T09:15:00.000Z"));
        assert!(t
            .turns
            .iter()
            .all(|x| x.timestamp.as_deref() == Some("2026-03-02T09:15:00.000Z")));
        assert_eq!(t.n_skipped_lines, 0);
    }

    #[test]
    fn only_the_exact_header_starts_a_session() {
        let t = check(
            Format::Aider,
            concat!(
                "# aider chat started at 2026-03-02 09:15:00\n",
                "#### hi  \n",
                "\n",
                "# aider chat started at yesterday\n",
                " # aider chat started at 2026-03-03 10:00:00\n",
                "\n",
                "# aider chat started at 2026-03-04 11:30:05\n",
                "#### later  \n",
            ),
            "user 2-2: hi
             assistant 4-5: # aider chat started at yesterday⏎ # aider chat started at 2
             user 8-8: later",
        );
        let times: Vec<_> = t.turns.iter().map(|x| x.timestamp.as_deref()).collect();
        assert_eq!(
            times,
            [
                Some("2026-03-02T09:15:00.000Z"),
                Some("2026-03-02T09:15:00.000Z"),
                Some("2026-03-04T11:30:05.000Z")
            ]
        );
        assert_eq!(t.ended_at.as_deref(), Some("2026-03-04T11:30:05.000Z"));
    }

    #[test]
    fn a_delta_cut_from_the_middle_reads_alone() {
        // A later delta has no header: its turns carry no time.
        let t = check(
            Format::Aider,
            "Done.\n\n#### next  \n> Tokens: 2.1k sent, 80 received.  \n",
            "assistant 1-1: Done.
             user 3-3: next
             tool 4-4: Tokens: 2.1k sent, 80 received.",
        );
        assert_eq!((t.started_at, t.turns[0].timestamp.clone()), (None, None));
        let t = check(Format::Aider, "\u{ff}\n", "assistant 1-1: \u{ff}");
        assert_eq!(t.n_skipped_lines, 0);
        let t = super::read(b"#### ok  \n\xff\xfe\n");
        assert_eq!((t.n_lines, t.n_skipped_lines, t.turns.len()), (2, 1, 1));
    }

    #[test]
    fn the_repository_fixture_and_a_published_history() {
        let t = own("aider/tally/.aider.chat.history.md");
        assert_eq!(t.n_skipped_lines, 0);
        assert!(t.files_touched.iter().any(|f| f == "src/report.rs"));
        assert_eq!(t.commands, ["cargo test"]);
        // A published history, when the third-party set is beside the
        // repository: three sessions, the model's own `# ` headings read as
        // its reply, never as a session.
        if let Some(t) = third_party("aider/AlexShchuka__mozgoslav__.aider.chat.history.md") {
            assert_eq!(t.n_skipped_lines, 0);
            assert_eq!(t.started_at.as_deref(), Some("2026-04-22T22:40:12.000Z"));
            assert_eq!(t.ended_at.as_deref(), Some("2026-04-22T23:13:03.000Z"));
            assert_eq!(t.agent_version.as_deref(), Some("0.86.2"));
            assert!(t.turns.iter().any(|x| x.role == Role::Assistant
                && x.text.contains("\n# Анализ проблемы дублирования")));
            let users = t.turns.iter().filter(|x| x.role == Role::User).count();
            assert!(users >= 3, "{users}");
            assert!(!t
                .turns
                .iter()
                .any(|x| x.role == Role::User && x.text.contains("Анализ")));
        }
    }
}
