//! `kith resume`: continue one of your conversations on this machine with
//! its agent's own resume. The conversation's exact bytes come from
//! central; its working folder is mapped to one here (`folder`) and the
//! fields naming it rewritten (`rewrite`); the file goes where the agent
//! keeps its sessions (`place`), written whole and renamed into place.
//!
//! Before the file appears, central records that it begins with a copy of
//! the conversation (`POST /api/conversations/{id}/resume`) and the file's
//! capture cursor is put at the copy's end: what the agent adds afterwards
//! is captured as the same conversation's next turns, and the copy is
//! never sent. A file already there is never overwritten: the same copy
//! (or the copy continued since) is left as it is, a different file is
//! refused unless `--force`, which keeps it beside.
//!
//! A conversation another member shared is forked, not continued: what the
//! share lets the person read is written under a new session id, recorded
//! as a fork (`POST /api/conversations/{id}/fork`) and captured whole as
//! their own conversation, which names the one it came from.

mod folder;
mod place;
mod rewrite;

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use kith_proto::{
    AgentRuntime, Conversation, ConversationResponse, ForkOrigin, ForkRequest, ResumeRequest,
    ResumeResponse, StatusResponse,
};
use kith_shared::hash::sha256_hex;
use serde::Serialize;

use crate::client::{path_part, Client};
use crate::config::{Lock, Paths};
use crate::cursor::{Cursor, Cursors, Mark};
use crate::plan::TAIL_WINDOW;
use crate::settings::Settings;

/// How long to wait for a capture holding kith's state.
const LOCK_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// A conversation id, one of its run ids, or a unique prefix.
    id: String,
    /// The folder to continue in [default: the git checkout of the same
    /// project you are in, else where `[paths]` in config.toml maps it,
    /// else the same folder when it exists here]
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Say what would be written and the command; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replace a different file at the session's place, keeping it beside
    /// as `<name>.kith-replaced-<time>`.
    #[arg(long)]
    force: bool,
    /// What was written and the command, as one JSON document.
    #[arg(long)]
    json: bool,
}

/// One transcript to write: a conversation's copy and its place.
struct Copy {
    conversation: String,
    file: PathBuf,
    bytes: Vec<u8>,
    /// What is at the place now.
    found: Found,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Found {
    /// Nothing: the copy is written.
    Nothing,
    /// The same copy, or the copy and the turns added to it since: left.
    Copy,
    /// Another file: refused, or kept beside with `--force`.
    Other,
}

/// How the copy relates to the conversation.
#[derive(Debug, Clone, Copy)]
enum Kind<'a> {
    /// The person's own, continued under its session id.
    Resume,
    /// Another member's, shared: a new session of the person's own.
    Fork { from: &'a str },
}

#[derive(Serialize)]
struct Report<'a> {
    conversation_id: &'a str,
    agent: AgentRuntime,
    session_id: &'a str,
    /// The session the copy was forked from, for a conversation another
    /// member shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    forked_from_session: Option<&'a str>,
    folder_there: &'a str,
    cwd: &'a Path,
    files: Vec<FileReport<'a>>,
    command: &'a str,
    dry_run: bool,
}

#[derive(Serialize)]
struct FileReport<'a> {
    path: &'a Path,
    bytes: u64,
    found: Found,
}

pub(crate) fn run(
    args: ResumeArgs,
    paths: &Paths,
    settings: &Settings,
    client: &Client,
) -> Result<()> {
    let answer: ConversationResponse =
        client.json(client.get(&format!("/api/conversations/{}", path_part(&args.id))))?;
    let c = &answer.conversation;
    if let Some(why) = place::unsupported(c.agent_runtime) {
        bail!("cannot resume {} here: {why}", c.id);
    }
    let original = c
        .session_id
        .as_deref()
        .filter(|s| safe_name(s))
        .ok_or_else(|| anyhow!("{} has no session id its agent could resume", c.id))?;
    let me: StatusResponse = client.json(client.get("/api/status"))?;
    let new_session = uuid::Uuid::now_v7().to_string();
    let (kind, session) = if c.owner == me.user {
        (Kind::Resume, original)
    } else {
        (Kind::Fork { from: original }, new_session.as_str())
    };
    let there = c
        .cwd
        .as_deref()
        .ok_or_else(|| anyhow!("{} names no working folder to continue in", c.id))?;
    let current = std::env::current_dir().context("the current folder")?;
    let mapping = folder::choose(there, args.cwd.as_deref(), &current, &settings.path_map)
        .map_err(|e| anyhow!(e))?;
    let place = place::place(paths, c.agent_runtime, session, &mapping.cwd, &c.started_at);
    let here = mapping.here.to_string_lossy();
    let copy_of = |conversation: &Conversation| -> Result<Vec<u8>> {
        let bytes = client.bytes(client.get(&format!(
            "/api/conversations/{}/jsonl",
            path_part(&conversation.id)
        )))?;
        let moved = rewrite::move_folder(&bytes, &mapping.there, &here);
        Ok(match kind {
            Kind::Resume => moved,
            Kind::Fork { from } => rewrite::new_session(&moved, from, session),
        })
    };

    let mut copies = vec![Copy {
        conversation: c.id.clone(),
        bytes: copy_of(c)?,
        file: place.file.clone(),
        found: Found::Nothing,
    }];
    if let Some(dir) = &place.subagents {
        for sub in &answer.subagents {
            let bytes = copy_of(sub)?;
            // Claude Code names a subagent's file by the id on its lines.
            let Some(agent) = first_field(&bytes, "agentId").filter(|a| safe_name(a)) else {
                continue;
            };
            copies.push(Copy {
                conversation: sub.id.clone(),
                file: dir.join(format!("agent-{agent}.jsonl")),
                bytes,
                found: Found::Nothing,
            });
        }
    }
    for copy in &mut copies {
        copy.found = found(&copy.file, &copy.bytes)?;
    }
    let others: Vec<String> = copies
        .iter()
        .filter(|c| c.found == Found::Other)
        .map(|c| c.file.display().to_string())
        .collect();
    if !others.is_empty() && !args.force && !args.dry_run {
        bail!(
            "a different file is already where this session goes: {}\n\
             Nothing was written. `--force` keeps it beside as <name>.kith-replaced-<time> and writes the conversation.",
            others.join(", ")
        );
    }
    if !args.dry_run {
        let _lock = Lock::state(&paths.state_dir, LOCK_WAIT)?;
        for copy in copies.iter().filter(|c| c.found != Found::Copy) {
            write_copy(
                paths,
                client,
                copy,
                c.agent_runtime,
                kind,
                session,
                &mapping.cwd,
            )
            .with_context(|| format!("writing {}", copy.file.display()))?;
        }
    }
    let report = Report {
        conversation_id: &c.id,
        agent: c.agent_runtime,
        session_id: session,
        forked_from_session: match kind {
            Kind::Fork { from } => Some(from),
            Kind::Resume => None,
        },
        folder_there: there,
        cwd: &mapping.cwd,
        files: copies
            .iter()
            .map(|c| FileReport {
                path: &c.file,
                bytes: c.bytes.len() as u64,
                found: c.found,
            })
            .collect(),
        command: &place.command,
        dry_run: args.dry_run,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    let title = c.title.as_deref().unwrap_or("(untitled)");
    let verb = match (kind, args.dry_run) {
        (Kind::Resume, false) => "Resumed",
        (Kind::Resume, true) => "Would resume",
        (Kind::Fork { .. }, false) => "Forked",
        (Kind::Fork { .. }, true) => "Would fork",
    };
    writeln!(
        out,
        "{verb} {} \"{title}\" ({}, {}'s {})",
        c.id,
        c.agent_runtime.as_str(),
        c.owner,
        c.machines.last().unwrap_or(&c.machine),
    )?;
    for f in &report.files {
        let what = match (f.found, args.dry_run) {
            (Found::Copy, _) => "already here",
            (Found::Nothing, false) => "written",
            (Found::Nothing, true) => "would be written",
            (Found::Other, false) => "written; the file that was there is kept beside it",
            (Found::Other, true) => "a different file is there: --force keeps it beside",
        };
        writeln!(out, "  {} ({} bytes, {what})", f.path.display(), f.bytes)?;
    }
    if mapping.cwd.to_string_lossy() != there {
        writeln!(
            out,
            "  working folder: {there} -> {} ({})",
            mapping.cwd.display(),
            mapping.how
        )?;
    }
    if let Kind::Fork { from } = kind {
        writeln!(
            out,
            "  a session of your own ({session}), forked from {}'s {from}: their later turns never reach it",
            c.owner
        )?;
    }
    writeln!(out, "Continue it:\n  {}", place.command)?;
    Ok(())
}

/// What is at `file`: nothing, this copy (continued or not), or another.
/// Only the copy's length is read of it.
fn found(file: &Path, copy: &[u8]) -> Result<Found> {
    use std::io::Read as _;
    let f = match fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let mut head = Vec::with_capacity(copy.len());
    f.take(copy.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", file.display()))?;
    Ok(if head == copy {
        Found::Copy
    } else {
        Found::Other
    })
}

/// Writes one copy: beside its place first, then (central having
/// recorded it, and its cursor set at its end) renamed into place, so the
/// agent and kith's capture only ever see the whole copy.
fn write_copy(
    paths: &Paths,
    client: &Client,
    copy: &Copy,
    runtime: AgentRuntime,
    kind: Kind<'_>,
    session: &str,
    cwd: &Path,
) -> Result<()> {
    let parent = copy.file.parent().context("a session file has a folder")?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)?;
    let dir = fs::canonicalize(parent)?;
    let name = copy.file.file_name().context("a session file has a name")?;
    let file = dir.join(name);
    let tmp = dir.join(format!(
        ".{}.kith-{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&copy.bytes)?;
        f.sync_all()?;
        let meta = f.metadata()?;
        let cursors = Cursors::new(&paths.state_dir);
        let epoch = cursors.load(&file)?.map_or(0, |c| c.epoch + 1);
        let mut cursor = Cursor::start(&file, runtime, (meta.dev(), meta.ino()), epoch);
        let conversation = path_part(&copy.conversation);
        match kind {
            // Captured whole, as the person's own, from its first byte.
            Kind::Fork { .. } => {
                let req = ForkRequest {
                    source_identity: cursor.source_identity(),
                };
                let _: ForkOrigin = client.json(
                    client
                        .post(&format!("/api/conversations/{conversation}/fork"))
                        .json(&req),
                )?;
            }
            // Captured from the copy's end.
            Kind::Resume => {
                let len = copy.bytes.len() as u64;
                let req = ResumeRequest {
                    source_identity: cursor.source_identity(),
                    at_offset: len,
                    prefix_sha256: sha256_hex(&copy.bytes),
                };
                let recorded: ResumeResponse = client.json(
                    client
                        .post(&format!("/api/conversations/{conversation}/resume"))
                        .json(&req),
                )?;
                let mark = Mark {
                    offset: len,
                    chain_sha256: Some(recorded.chain_sha256),
                    run_id: None,
                };
                cursor.size = len;
                cursor.spooled = mark.clone();
                cursor.accepted = mark;
                let tail = copy.bytes.len().saturating_sub(TAIL_WINDOW as usize);
                cursor.tail_sha256 = Some(sha256_hex(&copy.bytes[tail..]));
                cursor.conversation_id = Some(session.to_owned());
                cursor.cwd = Some(cwd.to_string_lossy().into_owned());
                cursors.save(&cursor)?;
            }
        }
        if file.exists() {
            let beside = dir.join(format!(
                "{}.kith-replaced-{}",
                name.to_string_lossy(),
                time::OffsetDateTime::now_utc().unix_timestamp()
            ));
            fs::rename(&file, &beside)?;
        }
        fs::rename(&tmp, &file)?;
        fs::File::open(&dir)?.sync_all()?;
        Ok(())
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// A session or agent id fit to be part of a file name.
fn safe_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The first string value of `field` on the first line that has one.
fn first_field(bytes: &[u8], field: &str) -> Option<String> {
    bytes.split(|&b| b == b'\n').find_map(|line| {
        let v: serde_json::Value = serde_json::from_slice(line).ok()?;
        v.get(field)?.as_str().map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_name_files() {
        for ok in ["3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90", "a6c41f0", "x_y.z"] {
            assert!(safe_name(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "../../etc/passwd",
            "a/b",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(!safe_name(bad), "{bad}");
        }
    }

    #[test]
    fn what_is_at_the_place_decides() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("s.jsonl");
        assert_eq!(found(&file, b"a\n")?, Found::Nothing);
        fs::write(&file, b"a\n")?;
        assert_eq!(found(&file, b"a\n")?, Found::Copy);
        fs::write(&file, b"a\nb\n")?;
        assert_eq!(found(&file, b"a\n")?, Found::Copy);
        fs::write(&file, b"z\n")?;
        assert_eq!(found(&file, b"a\n")?, Found::Other);
        Ok(())
    }
}
