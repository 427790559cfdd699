//! Where each agent keeps a session, so that its own resume finds one kith
//! writes there, and the command that continues it. Measured against the
//! agents themselves (Claude Code 2.1, Codex 0.171, pi's session manager).

use std::path::{Path, PathBuf};

use kith_proto::AgentRuntime;

use crate::config::Paths;

/// Where a conversation goes on this machine and how it is continued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) file: PathBuf,
    /// Where its subagents' transcripts go (Claude Code).
    pub(crate) subagents: Option<PathBuf>,
    /// The command that continues it, run in the working folder.
    pub(crate) command: String,
}

/// The agents whose sessions `kith resume` can write, and why the others
/// cannot be.
pub(crate) fn unsupported(runtime: AgentRuntime) -> Option<&'static str> {
    Some(match runtime {
        AgentRuntime::ClaudeCode | AgentRuntime::Codex | AgentRuntime::Pi => return None,
        AgentRuntime::Gemini => {
            "Gemini CLI rebuilds a resumed session into a second file and deletes sessions it \
             considers old at start-up; kith does not write Gemini CLI sessions yet"
        }
        AgentRuntime::OpenCode => {
            "OpenCode keeps its sessions in a SQLite database, not in files kith can write; \
             `kith show --raw` gives the captured rows"
        }
        AgentRuntime::Aider => {
            "Aider has no sessions to resume: it reads the project's .aider.chat.history.md \
             when started with --restore-chat-history; `kith show --raw` gives the captured text"
        }
        AgentRuntime::Copilot => {
            "Copilot CLI's session state is more than its event log; kith does not write it"
        }
        AgentRuntime::Cursor => "Cursor keeps its chats in its own store; kith does not write it",
        _ => "this agent has no session kith can write",
    })
}

/// Claude Code's folder name for a working folder: every character other
/// than an ASCII letter or digit is `-`.
pub(crate) fn claude_project(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// pi's folder name for a working folder: `--` around the path without its
/// leading `/`, with `/`, `\` and `:` as `-`.
pub(crate) fn pi_project(cwd: &Path) -> String {
    let path = cwd.to_string_lossy();
    let inner: String = path
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    format!("--{inner}--")
}

/// Where the session `session_id` (begun at `started_at`, RFC 3339) of
/// `runtime` goes for the working folder `cwd`.
pub(crate) fn place(
    paths: &Paths,
    runtime: AgentRuntime,
    session_id: &str,
    cwd: &Path,
    started_at: &str,
) -> Place {
    let quoted_cwd = shell_quote(&cwd.to_string_lossy());
    match runtime {
        AgentRuntime::Codex => {
            // Codex finds a rollout anywhere under sessions/ by the id at
            // the end of its name; one already there keeps its place.
            let file =
                find_rollout(&paths.codex_dir.join("sessions"), session_id).unwrap_or_else(|| {
                    let (day, time) = day_and_time(started_at);
                    paths
                        .codex_dir
                        .join("sessions")
                        .join(day.replace('-', "/"))
                        .join(format!("rollout-{day}T{time}-{session_id}.jsonl"))
                });
            Place {
                file,
                subagents: None,
                command: format!("cd {quoted_cwd} && codex resume {session_id}"),
            }
        }
        AgentRuntime::Pi => {
            let dir = paths.pi_dir.join("sessions").join(pi_project(cwd));
            let file = find_named(&dir, |name| name.ends_with(&format!("_{session_id}.jsonl")))
                .unwrap_or_else(|| {
                    let (day, time) = day_and_time(started_at);
                    dir.join(format!("{day}T{time}-000Z_{session_id}.jsonl"))
                });
            let command = format!(
                "cd {quoted_cwd} && pi --session {}",
                shell_quote(&file.to_string_lossy())
            );
            Place {
                file,
                subagents: None,
                command,
            }
        }
        // Claude Code, and what `unsupported` turned away before.
        _ => {
            let dir = paths.claude_dir.join("projects").join(claude_project(cwd));
            Place {
                file: dir.join(format!("{session_id}.jsonl")),
                subagents: Some(dir.join(session_id).join("subagents")),
                command: format!("cd {quoted_cwd} && claude --resume {session_id}"),
            }
        }
    }
}

/// `2026-03-01` and `10-00-00` of an RFC 3339 time (the epoch's when it
/// is not one).
fn day_and_time(at: &str) -> (String, String) {
    let ok = at.len() >= 19 && at.is_char_boundary(19) && at.as_bytes()[10] == b'T';
    let at = if ok { at } else { "1970-01-01T00:00:00" };
    (at[..10].to_owned(), at[11..19].replace(':', "-"))
}

/// A Codex rollout of `id` under `sessions` (its date folders, at most
/// four levels down).
fn find_rollout(sessions: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("-{id}.jsonl");
    let mut dirs = vec![(sessions.to_owned(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => dirs.push((path, depth + 1)),
                Ok(t) if t.is_file() && name.starts_with("rollout-") && name.ends_with(&suffix) => {
                    return Some(path)
                }
                _ => {}
            }
        }
    }
    None
}

fn find_named(dir: &Path, matches: impl Fn(&str) -> bool) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| matches(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
}

/// `s` as one shell word.
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.:=+@%,".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Paths {
        Paths::under(Path::new("/h"))
    }

    #[test]
    fn each_agent_has_its_place_and_command() {
        let cwd = Path::new("/home/me/src/my proj.v2");
        let claude = place(
            &paths(),
            AgentRuntime::ClaudeCode,
            "s-1",
            cwd,
            "2026-03-01T10:00:00Z",
        );
        assert_eq!(
            claude.file,
            Path::new("/h/.claude/projects/-home-me-src-my-proj-v2/s-1.jsonl")
        );
        assert_eq!(
            claude.subagents.as_deref(),
            Some(Path::new(
                "/h/.claude/projects/-home-me-src-my-proj-v2/s-1/subagents"
            ))
        );
        assert_eq!(
            claude.command,
            "cd '/home/me/src/my proj.v2' && claude --resume s-1"
        );

        let codex = place(
            &paths(),
            AgentRuntime::Codex,
            "0199-ab",
            cwd,
            "2026-03-01T10:20:30.5Z",
        );
        assert_eq!(
            codex.file,
            Path::new("/h/.codex/sessions/2026/03/01/rollout-2026-03-01T10-20-30-0199-ab.jsonl")
        );
        assert!(codex.command.ends_with("codex resume 0199-ab"));

        let pi = place(
            &paths(),
            AgentRuntime::Pi,
            "u-1",
            Path::new("/w/a:b"),
            "bad time",
        );
        assert_eq!(
            pi.file,
            Path::new("/h/.pi/agent/sessions/--w-a-b--/1970-01-01T00-00-00-000Z_u-1.jsonl")
        );
        assert_eq!(
            pi.command,
            "cd /w/a:b && pi --session /h/.pi/agent/sessions/--w-a-b--/1970-01-01T00-00-00-000Z_u-1.jsonl"
        );
        for runtime in [
            AgentRuntime::ClaudeCode,
            AgentRuntime::Codex,
            AgentRuntime::Pi,
        ] {
            assert_eq!(unsupported(runtime), None);
        }
        for runtime in [
            AgentRuntime::Gemini,
            AgentRuntime::OpenCode,
            AgentRuntime::Aider,
        ] {
            assert!(unsupported(runtime).is_some());
        }
    }

    #[test]
    fn a_codex_rollout_already_here_keeps_its_place() -> std::io::Result<()> {
        let home = tempfile::tempdir()?;
        let paths = Paths::under(home.path());
        let dir = paths.codex_dir.join("sessions/2025/12/31");
        std::fs::create_dir_all(&dir)?;
        let there = dir.join("rollout-2025-12-31T23-59-59-0199-ab.jsonl");
        std::fs::write(&there, "{}\n")?;
        let codex = place(
            &paths,
            AgentRuntime::Codex,
            "0199-ab",
            Path::new("/w"),
            "2026-03-01T10:20:30Z",
        );
        assert_eq!(codex.file, there);
        Ok(())
    }

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("/a/b-c_d.e"), "/a/b-c_d.e");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
    }
}
