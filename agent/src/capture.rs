//! Capture: turn the new complete lines of a transcript into a delta, redact
//! it, spool it to the outbox and advance the cursor; then replay the outbox
//! to central, oldest first, advancing `accepted_offset` on each receipt.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kith_proto::{AgentRuntime, ErrorBody, IngestRequest, IngestResponse};
use kith_shared::hash::{chain_next, sha256_hex};
use kith_shared::ids::RunId;
use serde::{Deserialize, Serialize};

use crate::config::{write_private, Auth, Paths};
use crate::cursor::{plan, Cursor, Observed, Plan, TAIL_WINDOW};
use crate::redact::redact;

/// One spooled delta.
#[derive(Debug, Serialize, Deserialize)]
pub struct Spooled {
    pub path: String,
    pub request: IngestRequest,
}

pub struct Capture {
    pub paths: Paths,
}

impl Capture {
    fn cursor_path(&self, file: &Path) -> PathBuf {
        self.paths.state_dir.join("cursors").join(format!(
            "{}.json",
            sha256_hex(file.to_string_lossy().as_bytes())
        ))
    }

    fn outbox(&self) -> PathBuf {
        self.paths.state_dir.join("outbox")
    }

    pub fn load_cursor(&self, file: &Path) -> Option<Cursor> {
        fs::read(self.cursor_path(file))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn save_cursor(&self, c: &Cursor) -> Result<()> {
        write_private(
            &self.cursor_path(Path::new(&c.path)),
            &serde_json::to_vec(c)?,
        )
    }

    /// Spools the file's new complete lines; returns the bytes spooled.
    pub fn capture(
        &self,
        runtime: AgentRuntime,
        file: &Path,
        parent_file: Option<&Path>,
    ) -> Result<u64> {
        let mut f = match File::open(file) {
            Ok(f) => f,
            // Deleted between discovery and read: nothing to capture.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", file.display())),
        };
        let meta = f.metadata()?;
        let mut cursor = self.load_cursor(file);
        let tail = match &cursor {
            Some(c) if meta.len() >= c.spooled_offset => Some(tail_hash(&mut f, c.spooled_offset)?),
            _ => None,
        };
        let now = Observed {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            tail_sha256: tail,
        };
        let from = match plan(cursor.as_ref(), &now) {
            Plan::Nothing => return Ok(0),
            Plan::Append { from } => from,
            Plan::Restart => {
                let epoch = cursor.as_ref().map_or(0, |c| c.epoch + 1);
                cursor = Some(fresh(file, &now, epoch));
                0
            }
        };
        let mut c = cursor.unwrap_or_else(|| fresh(file, &now, 0));
        f.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::with_capacity((meta.len() - from) as usize);
        (&mut f).take(meta.len() - from).read_to_end(&mut bytes)?;
        // Complete lines only: a partial last line waits for its newline.
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            return Ok(0);
        };
        bytes.truncate(end + 1);
        let to = from + bytes.len() as u64;
        let original_tail = {
            let keep = (bytes.len() as u64).min(TAIL_WINDOW) as usize;
            if keep as u64 == TAIL_WINDOW || from == 0 {
                sha256_hex(&bytes[bytes.len() - keep..])
            } else {
                tail_hash(&mut f, to)?
            }
        };
        let mut redactions = redact(&mut bytes);
        let (jsonl, n_invalid) = to_text(&bytes);
        if n_invalid > 0 {
            redactions.insert("invalid_utf8_bytes".into(), n_invalid);
        }
        let delta_sha = sha256_hex(jsonl.as_bytes());
        let chain = chain_next(c.spooled_chain.as_deref(), &delta_sha);
        let run_id = RunId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes()).to_string();
        let parent = c.last_run_id.clone().or_else(|| {
            parent_file
                .and_then(|p| self.load_cursor(p))
                .and_then(|p| p.last_run_id)
        });
        let request = IngestRequest {
            jsonl,
            agent_runtime: runtime,
            source_identity: c.source_identity(),
            from_offset: from,
            to_offset: to,
            run_id: Some(run_id.clone()),
            conversation_id: conversation_id(runtime, file),
            parent_run_id: parent,
            prev_sha256: c.spooled_chain.clone(),
            cwd: None,
            git_branch: None,
            agent_version: None,
            tags: vec![],
            started_at: None,
            redactions,
        };
        let spooled = Spooled {
            path: file.to_string_lossy().into_owned(),
            request,
        };
        let name = format!(
            "{:020}-{run_id}.json",
            time::OffsetDateTime::now_utc().unix_timestamp_nanos()
        );
        write_private(&self.outbox().join(name), &serde_json::to_vec(&spooled)?)
            .context("cannot write the outbox (disk full?); the cursor was not advanced")?;
        c.spooled_offset = to;
        c.spooled_chain = Some(chain);
        c.tail_sha256 = original_tail;
        c.last_run_id = Some(run_id);
        self.save_cursor(&c)?;
        Ok(to - from)
    }

    /// Outbox entries, oldest first.
    pub fn pending(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(self.outbox())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    }

    /// Replays the outbox to central. Stops at the first delta central cannot
    /// take now (down, slow, 5xx); returns how many were accepted.
    pub fn flush(&self, auth: &Auth, timeout: Duration) -> Result<usize> {
        let http = reqwest::blocking::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        let url = format!("{}/api/runs", auth.central_url.trim_end_matches('/'));
        let mut n = 0;
        for entry in self.pending() {
            let Ok(bytes) = fs::read(&entry) else {
                continue;
            };
            let Ok(spooled) = serde_json::from_slice::<Spooled>(&bytes) else {
                self.reject(&entry, "unreadable outbox entry")?;
                continue;
            };
            let key = spooled.request.run_id.clone().unwrap_or_default();
            let body = zstd::encode_all(serde_json::to_vec(&spooled.request)?.as_slice(), 3)?;
            let res = http
                .post(&url)
                .bearer_auth(auth.token.expose())
                .header("Idempotency-Key", key.as_str())
                .header("Content-Type", "application/json")
                .header("Content-Encoding", "zstd")
                .body(body)
                .send();
            let res = match res {
                Ok(r) => r,
                Err(e) => {
                    let why = format!("central unreachable: {}", without_url(&e));
                    self.note_error(Path::new(&spooled.path), &why);
                    bail!(why);
                }
            };
            let status = res.status();
            if status.is_success() {
                let receipt: IngestResponse = res.json().context("central sent a bad receipt")?;
                if let Some(mut c) = self.load_cursor(Path::new(&spooled.path)) {
                    if receipt.run_id == key || spooled.request.to_offset > c.accepted_offset {
                        c.accepted_offset = c.accepted_offset.max(spooled.request.to_offset);
                        c.last_error = None;
                        self.save_cursor(&c)?;
                    }
                }
                fs::remove_file(&entry)?;
                n += 1;
                continue;
            }
            let reason = res
                .json::<ErrorBody>()
                .map(|b| format!("{} ({})", b.error.message, b.error.code))
                .unwrap_or_else(|_| status.to_string());
            if status.as_u16() == 401 {
                bail!("central refused this machine's token: {reason}; run `kith login`");
            }
            if status.is_server_error() || status.as_u16() == 429 {
                self.note_error(Path::new(&spooled.path), &reason);
                bail!("central answered {status}: {reason}");
            }
            // 400/409/413: this delta will never be taken as it is. Keep it
            // aside and re-capture the file as a new chain.
            self.reject(&entry, &reason)?;
            if let Some(mut c) = self.load_cursor(Path::new(&spooled.path)) {
                c.epoch += 1;
                c.spooled_offset = 0;
                c.spooled_chain = None;
                c.tail_sha256 = String::new();
                c.accepted_offset = 0;
                c.last_run_id = None;
                c.last_error = Some(reason);
                self.save_cursor(&c)?;
            }
        }
        Ok(n)
    }

    fn reject(&self, entry: &Path, reason: &str) -> Result<()> {
        let dir = self.paths.state_dir.join("rejected");
        fs::create_dir_all(&dir)?;
        let name = entry.file_name().context("outbox entry without a name")?;
        fs::rename(entry, dir.join(name))?;
        write_private(&dir.join(name).with_extension("reason"), reason.as_bytes())
    }

    fn note_error(&self, file: &Path, why: &str) {
        if let Some(mut c) = self.load_cursor(file) {
            c.last_error = Some(why.to_owned());
            let _ = self.save_cursor(&c);
        }
    }
}

/// The bytes as text, each byte that is not UTF-8 replaced by `?` (central
/// stores text; one byte for one byte keeps every offset right).
fn to_text(bytes: &[u8]) -> (String, u64) {
    let mut out = String::with_capacity(bytes.len());
    let mut n_invalid = 0;
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        n_invalid += chunk.invalid().len() as u64;
        out.extend(std::iter::repeat_n('?', chunk.invalid().len()));
    }
    (out, n_invalid)
}

fn fresh(file: &Path, now: &Observed, epoch: u64) -> Cursor {
    Cursor {
        path: file.to_string_lossy().into_owned(),
        dev: now.dev,
        ino: now.ino,
        epoch,
        spooled_offset: 0,
        spooled_chain: None,
        tail_sha256: String::new(),
        accepted_offset: 0,
        last_run_id: None,
        last_error: None,
    }
}

/// sha256 of the `TAIL_WINDOW` bytes (or fewer, at the start) before `offset`.
fn tail_hash(f: &mut File, offset: u64) -> Result<String> {
    let start = offset.saturating_sub(TAIL_WINDOW);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = vec![0; (offset - start) as usize];
    f.read_exact(&mut buf)?;
    Ok(sha256_hex(&buf))
}

/// The agent's own session / thread id, from the file name: Claude
/// `<session>.jsonl` (subagents: `<session>/subagents/agent-*.jsonl`),
/// Codex `rollout-<time>-<thread uuid>.jsonl`, pi `<time>_<uuid>.jsonl`.
pub fn conversation_id(runtime: AgentRuntime, file: &Path) -> Option<String> {
    let stem = file.file_stem()?.to_str()?;
    match runtime {
        AgentRuntime::ClaudeCode => {
            let parent = file.parent()?;
            if parent.file_name()? == "subagents" {
                parent.parent()?.file_name()?.to_str().map(str::to_owned)
            } else {
                Some(stem.to_owned())
            }
        }
        AgentRuntime::Codex => stem.get(stem.len().checked_sub(36)?..).map(str::to_owned),
        AgentRuntime::Pi => stem.rsplit_once('_').map(|(_, id)| id.to_owned()),
        AgentRuntime::Other => Some(stem.to_owned()),
    }
}

/// reqwest errors name the URL; keep only the reason.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(url.as_str(), "central");
    }
    s
}
