//! Offline maintenance on a data directory: `reindex` rebuilds every derived
//! thing (run catalog, usage, jobs, search index) from the blob store alone, and
//! `doctor` reports drift between blobs, registry and index.

use std::collections::{BTreeMap, HashMap, HashSet};

use indicatif::{ProgressBar, ProgressStyle};
use kith_shared::chunk::{chunk_turns, ChunkConfig, CHUNKING_VERSION};
use kith_shared::hash::sha256_hex;
use kith_shared::ids::RunId;
use kith_shared::transcript;

use crate::error::Result;
use crate::indexer::cap::cap;
use crate::indexer::worker::{chain_chunks, index_batch};
use crate::privacy::Operator;
use crate::registry::{ancestry_of, ConversationUsage, Lane, NewRun};
use crate::run::Run;
use crate::state::AppState;
use crate::store::RunRecord;

#[derive(Debug, Default)]
pub(crate) struct ReindexReport {
    pub n_runs: u64,
    pub n_chunks: u64,
    /// Blobs that could not be used, with why.
    pub skipped: Vec<String>,
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// Rebuilds the run catalog and the search index from the blobs.
pub(crate) fn reindex(state: &AppState, operator: &Operator) -> Result<ReindexReport> {
    let store = state.store();
    let files = store.metadata_files(operator)?;
    let mut report = ReindexReport::default();
    let mut runs: Vec<(Run, String, Option<String>)> = Vec::new();
    let bar = progress(files.len() as u64, "reading");
    for path in &files {
        bar.inc(1);
        let Some(rel) = store.jsonl_for_metadata(path) else {
            continue;
        };
        let blob = match store.read_metadata(path) {
            Ok(m) => m,
            Err(e) => {
                report
                    .skipped
                    .push(format!("{}: unreadable metadata: {e}", path.display()));
                continue;
            }
        };
        let meta = blob.run;
        match store.read_jsonl(&rel) {
            Ok(bytes) if sha256_hex(&bytes) == meta.jsonl_sha256 => {
                runs.push((meta, rel, blob.idempotency_key))
            }
            Ok(_) => report
                .skipped
                .push(format!("{rel}: bytes do not match jsonl_sha256")),
            Err(e) => report.skipped.push(format!("{rel}: {e}")),
        }
    }
    bar.finish_and_clear();
    // Blobs stored before central recorded a run's conversation say it
    // through their chain of deltas.
    let conversations = {
        let metas: Vec<&Run> = runs.iter().map(|(m, ..)| m).collect();
        crate::conversation::conversations_of(&metas)
    };
    for (meta, ..) in &mut runs {
        meta.conversation = Some(conversations[&meta.id].to_string());
    }
    let parents: HashMap<&str, Option<&str>> = runs
        .iter()
        .map(|(m, ..)| (m.id.as_str(), m.parent_run_id.as_deref()))
        .collect();
    let ancestries: Vec<String> = runs
        .iter()
        .map(|(meta, ..)| ancestry_from(&parents, &meta.id))
        .collect();
    let usage = {
        let blobs: HashMap<&str, &str> = runs
            .iter()
            .map(|(m, rel, _)| (m.id.as_str(), rel.as_str()))
            .collect();
        let metas: Vec<&Run> = runs.iter().map(|(m, ..)| m).collect();
        crate::usage::rebuild(
            &metas,
            |run| Ok(store.read_jsonl(blobs.get(run.id.as_str()).copied().unwrap_or_default())?),
            state.prices(),
        )?
    };
    let rows: Vec<NewRun<'_>> = runs
        .iter()
        .zip(&ancestries)
        .map(|((run, rel, key), ancestry)| NewRun {
            run,
            ancestry,
            blob_path: rel,
            idempotency_key: key.as_deref(),
            lane: Lane::Bulk,
        })
        .collect();
    let usage: Vec<&ConversationUsage> = usage.values().collect();
    state.registry().replace_runs(&rows, &usage)?;
    // Runs chunked by another chunking are cut again: their vectors are of
    // other texts. With the same chunking the chunks come back with the
    // same ids and texts, and keep their vectors.
    if chunking_stamp(state) != Some(CHUNKING_VERSION) {
        state.index().drop_vectors()?;
    }
    state.index().clear()?;
    let bar = progress(runs.len() as u64, "indexing");
    loop {
        let n = index_batch(state)?;
        if n == 0 {
            break;
        }
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    report.n_runs = runs.len() as u64;
    report.n_chunks = state.index().n_chunks()?;
    stamp_chunking(state)?;
    Ok(report)
}

/// What `recover` found and mended at start.
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// Temp files of writes a crash cut short, removed.
    pub temps_removed: usize,
    /// Runs whose blob was written but not their registry row, now rows.
    pub adopted: Vec<String>,
}

/// Mends what a crash mid-ingest leaves (before serving): removes temp
/// files of cut-short writes, and adopts every blob whose registry row was
/// never written, with the `Idempotency-Key` its metadata kept, so the
/// client's retry is answered `already_indexed` with that run instead of
/// storing the delta twice. A blob that does not match its metadata is
/// left for `doctor` to name.
pub(crate) fn recover(state: &AppState, operator: &Operator) -> Result<Recovery> {
    let store = state.store();
    let mut recovery = Recovery::default();
    for temp in store.leftover_temps()? {
        std::fs::remove_file(&temp)?;
        recovery.temps_removed += 1;
    }
    let registered: HashSet<String> = state
        .registry()
        .all_blob_paths(operator)?
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    let mut orphans = Vec::new();
    for path in store.metadata_files(operator)? {
        let Some(rel) = store.jsonl_for_metadata(&path) else {
            continue;
        };
        if registered.contains(&rel) {
            continue;
        }
        let blob = match store.read_metadata(&path) {
            Ok(blob) => blob,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable metadata not adopted");
                continue;
            }
        };
        match store.read_jsonl(&rel) {
            Ok(bytes) if sha256_hex(&bytes) == blob.run.jsonl_sha256 => orphans.push((blob, rel)),
            _ => tracing::warn!(blob = %rel, "blob that does not match its metadata not adopted"),
        }
    }
    // Run ids start with their time: a parent before its children.
    orphans.sort_by(|a, b| a.0.run.id.cmp(&b.0.run.id));
    for (blob, rel) in orphans {
        let parent = match blob.run.parent_run_id.as_deref().map(RunId::parse) {
            Some(Ok(id)) => state.registry().run_by_id_any_owner(operator, &id)?,
            _ => None,
        };
        let ancestry = ancestry_of(parent.as_ref().map(|p| p.ancestry.as_str()), &blob.run.id);
        let adopted = state.registry().insert_run(&NewRun {
            run: &blob.run,
            ancestry: &ancestry,
            blob_path: &rel,
            idempotency_key: blob.idempotency_key.as_deref(),
            lane: Lane::Bulk,
        });
        match adopted {
            Ok(()) => recovery.adopted.push(blob.run.id),
            // Its key taken by a run stored since: `doctor` names the blob.
            Err(e) => tracing::warn!(blob = %rel, error = %e, "blob not adopted"),
        }
    }
    Ok(recovery)
}

/// Where the data directory records the `CHUNKING_VERSION` its oldest
/// chunks were made with; an index without it was built by version 1.
fn chunking_path(state: &AppState) -> std::path::PathBuf {
    state.config().data_dir.join("chunking")
}

/// The chunking version the data directory records, if any.
fn chunking_stamp(state: &AppState) -> Option<u32> {
    std::fs::read_to_string(chunking_path(state))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
}

fn stamp_chunking(state: &AppState) -> Result<()> {
    Ok(std::fs::write(
        chunking_path(state),
        format!("{CHUNKING_VERSION}\n"),
    )?)
}

/// The chunking version of an index some of whose runs were chunked by an
/// older kith-central. They keep those chunks (the vectorizer embeds the
/// texts the index holds) and are found as before; `reindex` chunks them
/// again. An empty index is stamped with this version.
pub(crate) fn older_chunking(state: &AppState) -> Result<Option<u32>> {
    let built = chunking_stamp(state);
    if built == Some(CHUNKING_VERSION) {
        return Ok(None);
    }
    if state.index().n_chunks()? == 0 {
        stamp_chunking(state)?;
        return Ok(None);
    }
    Ok(Some(built.unwrap_or(1)))
}

/// `|root|...|parent|self|` by walking parent links (cycles cut).
fn ancestry_from(parents: &HashMap<&str, Option<&str>>, id: &str) -> String {
    let mut chain = vec![id];
    let mut at = id;
    while let Some(Some(parent)) = parents.get(at) {
        if chain.contains(parent) {
            break;
        }
        chain.push(parent);
        at = parent;
    }
    chain.reverse();
    format!("|{}|", chain.join("|"))
}

/// One kind of drift and the runs (or files) that show it.
pub(crate) type DoctorReport = BTreeMap<&'static str, Vec<String>>;

/// Compares blobs, registry and index; an empty report means no drift.
pub(crate) fn doctor(state: &AppState, operator: &Operator) -> Result<DoctorReport> {
    let store = state.store();
    let mut report = DoctorReport::new();
    let mut blob_paths = HashSet::new();
    for path in store.metadata_files(operator)? {
        if let Some(rel) = store.jsonl_for_metadata(&path) {
            blob_paths.insert(rel);
        }
    }
    for temp in store.leftover_temps()? {
        report
            .entry("leftover_temp_file")
            .or_default()
            .push(temp.display().to_string());
    }
    let registered = state.registry().all_blob_paths(operator)?;
    let registered_paths: HashSet<&str> = registered.iter().map(|(_, p)| p.as_str()).collect();
    for path in &blob_paths {
        if !registered_paths.contains(path.as_str()) {
            report
                .entry("blob_not_in_registry")
                .or_default()
                .push(path.clone());
        }
    }
    if let Some(why) = state.index().outdated() {
        report
            .entry("index_outdated")
            .or_default()
            .push(format!("{why}; `kith-central reindex` builds it anew"));
    }
    for line in state.index().check_settings()? {
        report
            .entry("index_settings_differ")
            .or_default()
            .push(line);
    }
    // Runs chunked by an older kith-central need not have this one's chunk
    // counts: their drift is the chunking, reported once.
    let older = older_chunking(state)?;
    if let Some(v) = older {
        report.entry("index_chunking_older").or_default().push(format!(
            "runs chunked by chunking {v}, this kith-central's is {CHUNKING_VERSION}; `kith-central reindex` chunks them again"
        ));
    }
    let mut n_expected: u64 = 0;
    let bar = progress(registered.len() as u64, "checking");
    for (id, rel) in &registered {
        bar.inc(1);
        let bytes = match store.read_jsonl(rel) {
            Ok(b) => b,
            Err(_) => {
                report
                    .entry("registry_run_without_blob")
                    .or_default()
                    .push(id.clone());
                continue;
            }
        };
        let meta: Option<Run> = std::fs::read(store.absolute(rel).with_extension("metadata.json"))
            .ok()
            .and_then(|b| RunRecord::read(&b).ok())
            .map(|r| r.run);
        let Some(meta) = meta else {
            report
                .entry("run_without_metadata")
                .or_default()
                .push(id.clone());
            continue;
        };
        if sha256_hex(&bytes) != meta.jsonl_sha256 {
            report
                .entry("blob_sha256_mismatch")
                .or_default()
                .push(id.clone());
        }
        if older.is_some() {
            continue;
        }
        let format = meta.format();
        let expected = if format.folds() {
            // Indexed as its chain reads whole (`indexer::worker::chain_chunks`).
            chain_chunks(state, format, &meta)?
                .runs
                .into_iter()
                .find(|(run, _)| run.run.id == meta.id)
                .map_or(0, |(_, capped)| capped.chunks.len())
        } else {
            cap(chunk_turns(
                &transcript::parse(format, &bytes).turns,
                &ChunkConfig::default(),
            ))
            .chunks
            .len()
        } as u64;
        n_expected += expected;
        let actual = state.index().n_chunks_of_run(id)?;
        if expected != actual {
            report
                .entry("index_chunks_differ")
                .or_default()
                .push(format!("{id}: {actual} indexed, {expected} expected"));
        }
    }
    bar.finish_and_clear();
    // Chunks of runs the registry does not know (a run deleted from the
    // blobs, or left behind by a failed rebuild).
    let n_indexed = state.index().n_chunks()?;
    if older.is_none() && n_indexed > n_expected {
        report
            .entry("index_chunks_without_run")
            .or_default()
            .push(format!(
                "{n_indexed} chunks indexed, {n_expected} expected from the blobs"
            ));
    }
    for id in state.registry().unfinished_forgets()? {
        report.entry("forget_unfinished").or_default().push(format!(
            "{id}: forgotten but still stored; forget its conversation again"
        ));
    }
    let counts = state.registry().counts()?;
    if counts.pending_jobs > 0 {
        report
            .entry("pending_index_jobs")
            .or_default()
            .push(format!("{} runs wait for indexing", counts.pending_jobs));
    }
    Ok(report)
}
