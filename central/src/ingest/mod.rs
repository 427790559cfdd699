//! Accepting one delta: validate it, decide (dedupe, conflict, lineage), write
//! the blob, record the run with its durable indexing job and its usage to
//! count (`crate::usage::settle`), answer 202.
//!
//! The decision rules, in order:
//! 1. a reused `Idempotency-Key` or `run_id` with the same bytes is
//!    `already_indexed`; with other bytes it is 409;
//! 2. a delta of the same source that starts at the same offset and whose
//!    bytes equal, or are a prefix of, the accepted bytes is `already_indexed`;
//! 3. any other overlap with an accepted range of the source is 409;
//! 4. a delta that does not start at 0 must continue an accepted delta that
//!    ends exactly where it starts (or the copy of a conversation `kith
//!    resume` wrote there, `registry::Resume`: it continues that
//!    conversation), and `prev_sha256` (if sent) must be that delta's chain
//!    hash; otherwise 409;
//! 5. the parent is `parent_run_id` (which must be the caller's run) or else
//!    the previous delta of the source; the root is the parent's root.
//!
//! A client's `run_id` names a run among the caller's own (`own_run_id`):
//! run ids are global, and honouring a client's id as it is would make a
//! taken one answer differently from a free one, telling anyone who knows
//! another member's run id whether that run still exists.
//!
//! Lines of a forgotten conversation (`forget`) are not taken again: a
//! delta of forgotten lines only is `forgotten` (nothing stored), one that
//! starts with them keeps only the lines after, and bytes that continue a
//! forgotten chain start a conversation of their own; the receipt's chain
//! hash is always the one the agent computed, so its cursor moves on.

mod decide;

use kith_proto::{IngestRequest, IngestResponse, IngestStatus, RunLinks};
use kith_shared::chunk::{chunk_turns, Chunk, ChunkConfig};
use kith_shared::hash::{chain_next, sha256_hex};
use kith_shared::ids::{RunId, UserId};
use kith_shared::transcript;
use kith_shared::{jsonl, timestamp};

use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::registry::{ancestry_of, Lane, NewRun, StoredRun};
use crate::run::Run;
use crate::state::AppState;
use crate::store::{BlobStore, RunRecord};

const MAX_SOURCE_IDENTITY: usize = 1024;
const MAX_FIELD_LEN: usize = 4096;
/// The most kinds of redaction a delta may count (the agent knows 23).
const MAX_REDACTION_KINDS: usize = 64;

/// A delta that passed every check that needs no stored state.
struct Delta {
    req: IngestRequest,
    run_id: Option<RunId>,
    parent_run_id: Option<RunId>,
    idempotency_key: Option<String>,
    sha256: String,
    /// Metadata parsed from the bytes.
    parsed: transcript::Transcript,
    /// What the index will hold of the bytes (handed to the indexer, so
    /// the delta is parsed once).
    chunks: Vec<Chunk>,
    started_at: Option<String>,
    /// The chain hash the agent computed over bytes of which central keeps
    /// only those after a forgotten range (`without_forgotten`).
    agent_chain: Option<String>,
}

pub async fn ingest(
    state: &AppState,
    viewer: &Viewer,
    req: IngestRequest,
    idempotency_key: Option<String>,
) -> Result<IngestResponse> {
    // From its first byte read, so that usage counted in the background
    // does not take the registry's writer while the delta is checked.
    let storing = state.usage_turns().storing();
    let delta = tokio::task::spawn_blocking(move || validate(req, idempotency_key)).await??;
    let (response, fresh) = {
        // One decision at a time: two deltas of one source must not both pass
        // the overlap check before either is recorded.
        let gate = state.ingest_gate().await;
        let state = state.clone();
        let viewer = viewer.clone();
        tokio::task::spawn_blocking(move || {
            let (_gate, _storing) = (gate, storing);
            decide_and_store(&state, &viewer, delta)
        })
        .await??
    };
    if fresh {
        state.metrics().ingested(response.jsonl_bytes);
        state.indexer().wake();
    }
    Ok(response)
}

fn validate(req: IngestRequest, idempotency_key: Option<String>) -> Result<Delta> {
    let bytes = req.jsonl.as_bytes();
    let format = crate::run::format_of(req.agent_runtime);
    jsonl::check(bytes, format.lines())
        .map_err(|e| Error::invalid(Code::InvalidJsonl, e.to_string()))?;
    let len = bytes.len() as u64;
    if req.to_offset.checked_sub(req.from_offset) != Some(len) {
        return Err(Error::invalid(
            Code::InvalidRange,
            format!(
                "to_offset - from_offset must equal the jsonl length ({len} bytes); got {}..{}",
                req.from_offset, req.to_offset
            ),
        ));
    }
    if req.source_identity.is_empty() || req.source_identity.len() > MAX_SOURCE_IDENTITY {
        return Err(Error::invalid(
            Code::InvalidSourceIdentity,
            format!("source_identity must be 1-{MAX_SOURCE_IDENTITY} bytes"),
        ));
    }
    if !kith_shared::tags::valid(&req.tags) {
        return Err(Error::invalid(Code::InvalidTags, kith_shared::tags::rule()));
    }
    for (name, value) in [
        ("conversation_id", &req.conversation_id),
        ("cwd", &req.cwd),
        ("git_branch", &req.git_branch),
        ("agent_version", &req.agent_version),
    ] {
        if value.as_ref().is_some_and(|v| v.len() > MAX_FIELD_LEN) {
            return Err(Error::invalid(
                Code::FieldTooLong,
                format!("{name} is longer than {MAX_FIELD_LEN} bytes"),
            ));
        }
    }
    // Kinds of secret masked, with counts: a few dozen short names.
    if req.redactions.len() > MAX_REDACTION_KINDS
        || req.redactions.keys().any(|k| k.is_empty() || k.len() > 64)
    {
        return Err(Error::invalid(
            Code::InvalidRedactions,
            format!("redactions must name at most {MAX_REDACTION_KINDS} kinds of 1-64 bytes"),
        ));
    }
    if let Some(key) = &idempotency_key {
        if key.is_empty() || key.len() > 256 {
            return Err(Error::invalid(
                Code::InvalidIdempotencyKey,
                "Idempotency-Key must be 1-256 bytes",
            ));
        }
    }
    let parse_id = |field: &str, v: &Option<String>| {
        v.as_deref()
            .map(RunId::parse)
            .transpose()
            .map_err(|e| Error::invalid(Code::InvalidId, format!("{field}: {e}")))
    };
    let run_id = parse_id("run_id", &req.run_id)?;
    let parent_run_id = parse_id("parent_run_id", &req.parent_run_id)?;
    let started_at = match &req.started_at {
        Some(s) => Some(timestamp::normalize(s).ok_or_else(|| {
            Error::invalid(
                Code::InvalidTimestamp,
                "started_at must be an RFC 3339 timestamp",
            )
        })?),
        None => None,
    };
    let sha256 = sha256_hex(bytes);
    let parsed = transcript::parse(format, bytes);
    let chunks = chunk_turns(&parsed.turns, &ChunkConfig::default());
    Ok(Delta {
        req,
        run_id,
        parent_run_id,
        idempotency_key,
        sha256,
        parsed,
        chunks,
        started_at,
        agent_chain: None,
    })
}

impl Delta {
    /// What the rules read of the delta.
    fn sent(&self) -> decide::Sent<'_> {
        decide::Sent {
            from_offset: self.req.from_offset,
            to_offset: self.req.to_offset,
            sha256: &self.sha256,
            prev_sha256: self.req.prev_sha256.as_deref(),
            stripped: self.agent_chain.is_some(),
        }
    }
}

/// The delta without its first bytes, up to `at`, which were forgotten: it
/// starts a conversation of its own there, and its receipt still carries
/// the chain hash the agent computed over all of it.
fn without_forgotten(d: Delta, at: u64) -> Result<Delta> {
    let keep = (at - d.req.from_offset) as usize;
    let rest = d
        .req
        .jsonl
        .get(keep..)
        .ok_or_else(|| Error::Internal("a forgotten line ends inside a character".into()))?
        .to_owned();
    let agent_chain = chain_next(d.req.prev_sha256.as_deref(), &d.sha256);
    let req = IngestRequest {
        jsonl: rest,
        from_offset: at,
        prev_sha256: None,
        run_id: None,
        parent_run_id: None,
        ..d.req
    };
    let mut stripped = validate(req, d.idempotency_key)?;
    stripped.agent_chain = Some(agent_chain);
    Ok(stripped)
}

/// Returns the answer and whether anything new was stored: gathers what
/// each rule needs (`decide`) and does what it says.
fn decide_and_store(state: &AppState, viewer: &Viewer, d: Delta) -> Result<(IngestResponse, bool)> {
    let registry = state.registry();
    let user = &viewer.user_id();
    // Only a machine's token ingests; a web session has no machine.
    let (Some(machine_id), Some(machine_name)) = (viewer.machine_id(), viewer.machine_name())
    else {
        return Err(Error::Unauthenticated);
    };
    // The token was checked when the request came; its body may have taken
    // long enough for the machine to be revoked since.
    if registry
        .machine_auth(user, machine_name)?
        .is_none_or(|m| m.revoked_at.is_some())
    {
        return Err(Error::Unauthenticated);
    }

    // Rule 1: a retry by key or id.
    if let Some(key) = &d.idempotency_key {
        if let Some(run) = registry.run_by_idempotency_key(viewer, key)? {
            let same = decide::retry(&d.sent(), &run, "this Idempotency-Key")?;
            return Ok((already(same), false));
        }
    }
    let run_id = d
        .run_id
        .as_ref()
        .map(|id| own_run_id(user, id))
        .transpose()?;
    if let Some(id) = &run_id {
        if let Some(run) = registry.owned_run(viewer, id)? {
            return Ok((
                already(decide::retry(&d.sent(), &run, "this run_id")?),
                false,
            ));
        }
    }

    // Lines the user forgot, sent again (a machine still holds the file),
    // lead a delta that starts its source or follows a forgotten run; one
    // that continues a live run holds them by chance (Aider's "#### yes")
    // and keeps them.
    let live = if d.req.from_offset > 0 {
        registry.source_run_ending_at(viewer, &d.req.source_identity, d.req.from_offset)?
    } else {
        None
    };
    // A copy of a conversation `kith resume` wrote on this machine, ending
    // where the delta starts: the delta continues that conversation.
    let resume = match &live {
        None if d.req.from_offset > 0 => {
            registry.resume_at(viewer, &d.req.source_identity, d.req.from_offset)?
        }
        _ => None,
    };
    let resumed_parent = match &resume {
        Some(r) => match RunId::parse(&r.parent_run_id) {
            Ok(id) => registry.owned_run(viewer, &id)?,
            Err(_) => None,
        },
        None => None,
    };
    let (n_forgotten, forgotten_run) = if live.is_some() || resume.is_some() {
        (0, None)
    } else {
        registry.forgotten_prefix(user.as_str(), d.req.jsonl.as_bytes())?
    };
    let d = if n_forgotten == d.req.jsonl.len() {
        return Ok((forgotten(&d, forgotten_run.unwrap_or_default()), false));
    } else if n_forgotten > 0 {
        let at = d.req.from_offset + n_forgotten as u64;
        without_forgotten(d, at)?
    } else {
        d
    };

    // Rules 2-4: where the delta goes in its chain.
    let req = &d.req;
    let overlapping = registry.source_runs_overlapping(
        viewer,
        &req.source_identity,
        req.from_offset,
        req.to_offset,
    )?;
    let first_holds_the_bytes = match overlapping.first() {
        Some(first) if first.run.from_offset == req.from_offset => state
            .store()
            .read_jsonl(&first.blob_path)?
            .starts_with(req.jsonl.as_bytes()),
        _ => false,
    };
    let tombstone = match &live {
        None if req.from_offset > 0 => {
            registry.tombstone_ending_at(user.as_str(), &req.source_identity, req.from_offset)?
        }
        _ => None,
    };
    let sent = d.sent();
    let placement = decide::place(
        &sent,
        &decide::Place {
            overlapping: &overlapping,
            first_holds_the_bytes,
            live: live.as_ref(),
            tombstone: tombstone.as_ref(),
            resumed: resume.as_ref().map(|r| decide::Resumed {
                parent: resumed_parent.as_ref(),
                chain_sha256: &r.chain_sha256,
            }),
        },
    )?;
    let (previous, chain_before) = match placement {
        decide::Placement::Already(run) => return Ok((already(run), false)),
        decide::Placement::Extends {
            previous,
            chain_before,
        } => (previous, chain_before),
    };

    // Rule 5: the parent named by the client's id for it, or by central's.
    let named_parent = match &d.parent_run_id {
        None => None,
        Some(id) => {
            let own = own_run_id(user, id)?;
            // The previous delta, or the parent session, was forgotten.
            Some(
                if registry.forgot(user.as_str(), own.as_str())?
                    || registry.forgot(user.as_str(), id.as_str())?
                {
                    None
                } else {
                    Some(match registry.owned_run(viewer, &own)? {
                        Some(run) => Some(run),
                        None => registry.owned_run(viewer, id)?,
                    })
                },
            )
        }
    };
    let named = match &named_parent {
        None => decide::NamedParent::None,
        Some(None) => decide::NamedParent::Forgotten,
        Some(Some(found)) => decide::NamedParent::Found(found.as_ref()),
    };
    let asked = d
        .parent_run_id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let parent = decide::parent(named, previous, &asked)?;

    let run_id = match run_id {
        Some(id) => id,
        None => state.new_run_id()?,
    };
    let chain_sha256 = d
        .agent_chain
        .clone()
        .unwrap_or_else(|| chain_next(chain_before.as_deref(), &d.sha256));
    let origin = decide::Origin {
        run_id: run_id.as_str(),
        user_id: user.as_str(),
        machine_id: machine_id.as_str(),
        machine: machine_name,
        req,
        started_at: d.started_at.clone(),
    };
    let mut run = decide::new_run(&origin, d.parsed, &d.sha256, chain_sha256, parent, previous);
    // A chain's first delta of a file `kith resume` wrote as a fork names
    // the conversation it came from.
    if run.from_offset == 0 {
        run.forked_from = registry.fork_of(viewer, &req.source_identity)?;
    }
    // A tag the conversation's earlier deltas lack (a `[[tag]]` rule added
    // since it began) tags them too: tags belong to the conversation.
    let new_tags: Vec<String> = match (previous, &run.conversation) {
        (Some(previous), Some(_)) => run
            .tags
            .iter()
            .filter(|t| !previous.run.tags.contains(t))
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    let conversation = run.conversation.clone();
    let stored = store(
        state,
        run,
        d.idempotency_key,
        parent,
        req.jsonl.as_bytes(),
        d.chunks,
    )?;
    if let (false, Some(conversation)) = (new_tags.is_empty(), conversation) {
        let add = kith_proto::TagsRequest {
            add: new_tags,
            remove: Vec::new(),
        };
        // The delta is stored: a failure here leaves the earlier deltas as
        // they were (`kith tag add` mends it), not the delta unacknowledged.
        if let Err(e) = crate::tagging::edit(state, viewer, &conversation, &add) {
            tracing::warn!(%conversation, error = %e, "tagging the conversation's earlier deltas failed");
        }
    }
    Ok(stored)
}

/// Writes a new run's blob and record, hands its chunks to the indexer,
/// and records it with its indexing job and its usage to count.
fn store(
    state: &AppState,
    run: Run,
    idempotency_key: Option<String>,
    parent: Option<&StoredRun>,
    jsonl: &[u8],
    chunks: Vec<Chunk>,
) -> Result<(IngestResponse, bool)> {
    let user = UserId::parse(&run.user_id).map_err(|e| Error::Internal(e.to_string()))?;
    let id = RunId::parse(&run.id).map_err(|e| Error::Internal(e.to_string()))?;
    let blob_path = BlobStore::jsonl_path(&user, timestamp::month(&run.started_at), &id);
    let record = RunRecord {
        run,
        idempotency_key,
    };
    state
        .store()
        .write_run(&blob_path, jsonl, &record.write()?)?;
    let RunRecord {
        run,
        idempotency_key,
    } = record;
    let ancestry = ancestry_of(parent.map(|p| p.ancestry.as_str()), &run.id);
    // Before the job exists, so the indexer never parses what ingest did.
    state.indexer().hand_over(&run.id, chunks);
    let inserted = state.registry().insert_run(&NewRun {
        run: &run,
        ancestry: &ancestry,
        blob_path: &blob_path,
        idempotency_key: idempotency_key.as_deref(),
        lane: Lane::Realtime,
    });
    if let Err(e) = inserted {
        state.indexer().take_chunks(&run.id);
        return Err(e);
    }
    tracing::info!(run_id = %run.id, user = %run.user_id, bytes = run.jsonl_bytes, "run accepted");
    Ok((response(&run, IngestStatus::Accepted), true))
}

/// The id central stores a client's run id `client` under: a hash of the
/// caller and the id, keeping a time-ordered id's leading 48-bit time (so
/// ids still sort and share prefixes by time). Every caller gets an id of
/// its own for any id it sends, taken by someone else or not, and a retry
/// or a later delta naming it as parent finds the same run.
pub fn own_run_id(user: &UserId, client: &RunId) -> Result<RunId> {
    let digest = sha256_hex(format!("{user}\0{client}").as_bytes());
    let time = client
        .as_str()
        .strip_prefix('r')
        .filter(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|hex| &hex[..12]);
    let id = match time {
        Some(time) => format!("r{time}{}", &digest[..20]),
        None => format!("r{}", &digest[..32]),
    };
    RunId::parse(&id).map_err(|e| Error::Internal(format!("derived run id: {e}")))
}

/// The answer to a delta whose lines were all forgotten (with `run_id`):
/// nothing stored, and the chain hash the agent expects, so its cursor
/// moves on.
fn forgotten(d: &Delta, run_id: String) -> IngestResponse {
    IngestResponse {
        _links: RunLinks::for_run(&run_id),
        run_id,
        status: IngestStatus::Forgotten,
        jsonl_bytes: d.req.jsonl.len() as u64,
        jsonl_sha256: d.sha256.clone(),
        chain_sha256: chain_next(d.req.prev_sha256.as_deref(), &d.sha256),
    }
}

fn already(run: &StoredRun) -> IngestResponse {
    response(&run.run, IngestStatus::AlreadyIndexed)
}

fn response(meta: &Run, status: IngestStatus) -> IngestResponse {
    IngestResponse {
        run_id: meta.id.clone(),
        status,
        jsonl_bytes: meta.jsonl_bytes,
        jsonl_sha256: meta.jsonl_sha256.clone(),
        chain_sha256: meta.chain_sha256.clone(),
        _links: RunLinks::for_run(&meta.id),
    }
}
