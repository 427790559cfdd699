//! Finding transcripts on disk: Claude Code (`projects/**.jsonl`, including
//! `<session>/subagents/`), Codex (`sessions/YYYY/MM/DD/rollout-*.jsonl`) and
//! pi (`sessions/**.jsonl`).

use std::path::{Path, PathBuf};

use kith_proto::AgentRuntime;

use crate::config::Paths;

/// Every transcript under the three roots, parents before subagents.
pub fn all(paths: &Paths) -> Vec<(AgentRuntime, PathBuf)> {
    let mut out = Vec::new();
    for (runtime, root) in [
        (AgentRuntime::ClaudeCode, paths.claude_dir.join("projects")),
        (AgentRuntime::Codex, paths.codex_dir.join("sessions")),
        (AgentRuntime::Pi, paths.pi_dir.join("sessions")),
    ] {
        let mut files = Vec::new();
        walk(&root, &mut files);
        files.sort_by_key(|p| (p.to_string_lossy().contains("/subagents/"), p.clone()));
        out.extend(files.into_iter().map(|p| (runtime, p)));
    }
    out
}

/// Which agent wrote the file at `path`, from where it lives.
pub fn runtime_of(paths: &Paths, path: &Path) -> AgentRuntime {
    if path.starts_with(&paths.codex_dir)
        || path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("rollout-"))
    {
        AgentRuntime::Codex
    } else if path.starts_with(&paths.pi_dir) || path.to_string_lossy().contains("/.pi/") {
        AgentRuntime::Pi
    } else {
        AgentRuntime::ClaudeCode
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_file() && path.extension().is_some_and(|e| e == "jsonl") => {
                out.push(path)
            }
            _ => {}
        }
    }
}
