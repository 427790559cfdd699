//! Trees as a viewer reads them: the Run tree (subtrees and the forest of
//! recent trees, built from the runs of one `root_run_id` that the viewer
//! may read) and the conversations those runs make (`conversation`). Pure
//! shaping lives in `shape_*` and `conversation`; the IO around it takes a
//! `&Viewer`, and every run it reads came through the registry's readable
//! predicate.

use std::collections::HashMap;
use std::sync::Arc;

use kith_proto::{
    Conversation, ConversationResponse, ConversationTurn, ConversationsResponse,
    DescendantsResponse, ForestResponse, RunMeta, Tree, TreeRun, TurnsResponse,
};
use kith_shared::ids::RunId;

use crate::conversation::{self, ConversationId, ConversationRuns};
use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::registry::{ConversationFilter, ForestFilter, Registry, StoredRun};
use crate::run::Run;
use crate::store::BlobStore;
use crate::turns_cache::TurnsCache;

/// Recent conversations matching `filter`, each tree's conversations
/// depth-first (subagents after their parent, `depth` > 0).
pub(crate) fn conversations(
    registry: &Registry,
    viewer: &Viewer,
    filter: &ConversationFilter,
) -> Result<ConversationsResponse> {
    let roots = registry.conversation_roots(viewer, filter)?;
    let handles = registry.handles()?;
    let mut out = Vec::new();
    for (root, _) in &roots {
        let runs = registry.tree_runs_lean(viewer, root)?;
        out.extend(tree_conversations(&runs, &handles));
    }
    let next_cursor = (roots.len() == filter.limit as usize)
        .then(|| roots.last().map(|(last, root)| format!("{last}~{root}")))
        .flatten();
    Ok(ConversationsResponse {
        conversations: out,
        next_cursor,
    })
}

/// Reads a cursor `conversations` gave.
pub(crate) fn parse_cursor(cursor: &str) -> Result<(String, String)> {
    cursor
        .split_once('~')
        .filter(|(last, root)| {
            kith_shared::timestamp::normalize(last).as_deref() == Some(*last)
                && RunId::parse(root).is_ok()
        })
        .map(|(last, root)| (last.to_owned(), root.to_owned()))
        .ok_or_else(|| Error::invalid(Code::InvalidCursor, "cursor is not one this API gave"))
}

/// One conversation, by any name `resolve_conversation` takes, with its
/// subagent conversations.
pub(crate) fn conversation(
    registry: &Registry,
    viewer: &Viewer,
    name: &str,
) -> Result<ConversationResponse> {
    let (id, runs) = readable_conversation(registry, viewer, name, "conversation")?;
    let root = &runs[0].run.root_run_id;
    let tree = registry.tree_runs_lean(viewer, root)?;
    let mut all = tree_conversations(&tree, &registry.handles()?);
    let at = all
        .iter()
        .position(|c| c.id == id.as_str())
        .ok_or_else(|| Error::Internal(format!("conversation {id} is not in its tree")))?;
    let depth = all[at].depth;
    let below = all[at + 1..].iter().take_while(|c| c.depth > depth).count();
    let mut subagents: Vec<Conversation> = all.drain(at + 1..at + 1 + below).collect();
    for s in &mut subagents {
        s.depth -= depth;
    }
    let mut conversation = all.swap_remove(at);
    conversation.depth = 0;
    Ok(ConversationResponse {
        conversation,
        subagents,
    })
}

/// Where a page of turns starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PageStart<'a> {
    Offset(u64),
    /// The page (of `limit` turns from the first) holding the turn of run
    /// `run` at `line` (a search hit's place); the first page when no turn
    /// is there.
    Holding {
        run: &'a str,
        line: u64,
    },
}

/// The turns of one conversation in byte order across its deltas, from
/// `start`, at most `limit`; a gap where bytes are missing or unreadable.
pub(crate) fn turns(
    registry: &Registry,
    store: &BlobStore,
    cache: &TurnsCache,
    viewer: &Viewer,
    name: &str,
    start: PageStart<'_>,
    limit: usize,
) -> Result<TurnsResponse> {
    let (id, runs) = readable_conversation(registry, viewer, name, "turns")?;
    let key: Vec<String> = runs.iter().map(|r| r.run.id.clone()).collect();
    let turns = match cache.get(&key) {
        Some(turns) => turns,
        None => {
            let turns = Arc::new(all_turns(store, &runs)?);
            cache.put(key, turns.clone());
            turns
        }
    };
    let total = turns.len() as u64;
    let offset = match start {
        PageStart::Offset(offset) => offset,
        PageStart::Holding { run, line } => turns
            .iter()
            .position(|t| t.run_id == run && t.line_start <= line && line <= t.line_end)
            .map_or(0, |i| (i - i % limit.max(1)) as u64),
    };
    let page: Vec<ConversationTurn> = turns
        .iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(limit)
        .cloned()
        .collect();
    let next = offset + page.len() as u64;
    Ok(TurnsResponse {
        conversation_id: id.to_string(),
        turns: page,
        total,
        next_offset: (next < total).then_some(next),
    })
}

/// Every turn of a conversation's `runs` (in byte order), parsed from
/// their blobs; a gap where bytes are missing.
fn all_turns(store: &BlobStore, runs: &[StoredRun]) -> Result<Vec<ConversationTurn>> {
    let blobs = runs
        .iter()
        .map(|run| store.read_jsonl(&run.blob_path))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(Error::reading_blob)?;
    let deltas: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    // A conversation is one agent's transcript: its first run's runtime.
    let format = runs
        .first()
        .map_or(kith_shared::transcript::Format::Other, |r| r.run.format());
    let parsed = kith_shared::transcript::parse_chain(format, &deltas);
    let mut turns: Vec<ConversationTurn> = Vec::new();
    let mut end = 0;
    let mut before: Option<&crate::run::Run> = None;
    for (run, run_turns) in runs.iter().zip(parsed) {
        let meta = &run.run;
        // A resumed copy's bytes are the ones shown before it.
        if before.is_some_and(|b| conversation::continues_on_another_transcript(meta, b)) {
            end = meta.from_offset;
        }
        if meta.from_offset != end {
            turns.push(conversation::gap(&meta.id, end, meta.from_offset));
        }
        end = meta.to_offset;
        before = Some(meta);
        turns.extend(conversation::turns_of(meta, run_turns));
    }
    Ok(turns)
}

/// The runs of one conversation in byte order, for its exact bytes.
pub(crate) fn conversation_blobs(
    registry: &Registry,
    viewer: &Viewer,
    name: &str,
) -> Result<Vec<StoredRun>> {
    readable_conversation(registry, viewer, name, "jsonl").map(|(_, runs)| runs)
}

/// The conversation `name` names and its runs the viewer may read, in byte
/// order (404 when none is readable), its read audited for the owner.
fn readable_conversation(
    registry: &Registry,
    viewer: &Viewer,
    name: &str,
    what: &str,
) -> Result<(ConversationId, Vec<StoredRun>)> {
    let id = registry.resolve_conversation(viewer, name)?;
    let mut runs = registry.conversation_runs(viewer, &id)?;
    conversation::in_order(&mut runs, |r| &r.run);
    let first = runs.first().ok_or_else(Error::conversation_not_found)?;
    registry.audit_read(viewer, &first.run.user_id, &first.run.id, what)?;
    Ok((id, runs))
}

/// The conversations of one tree's readable runs, depth-first, folded.
fn tree_conversations(runs: &[StoredRun], handles: &HashMap<String, String>) -> Vec<Conversation> {
    let metas: Vec<&Run> = runs.iter().map(|r| &r.run).collect();
    let shaped = conversation::shape(&metas);
    let parents = conversation::parents(&shaped);
    shaped
        .iter()
        .filter_map(|(id, depth, runs)| {
            let owner = runs
                .first()
                .and_then(|r| handles.get(&r.user_id))
                .map_or("", String::as_str);
            conversation::fold(&ConversationRuns {
                id,
                owner,
                runs,
                parent_id: parents.get(id).cloned(),
                depth: *depth,
            })
        })
        .collect()
}

pub(crate) fn descendants(
    registry: &Registry,
    viewer: &Viewer,
    id: &RunId,
) -> Result<DescendantsResponse> {
    let run = registry.run(viewer, id)?.ok_or_else(Error::run_not_found)?;
    registry.audit_read(viewer, &run.run.user_id, &run.run.id, "descendants")?;
    let runs = registry.tree_runs(viewer, &run.run.root_run_id)?;
    Ok(DescendantsResponse {
        runs: shape_subtree(as_seen_by(viewer, runs), id.as_str()),
    })
}

/// One run's metadata as the viewer may see it (`as_seen_by`).
pub(crate) fn run_meta(registry: &Registry, viewer: &Viewer, run: StoredRun) -> Result<RunMeta> {
    if run.run.user_id == viewer.user_id().as_str() {
        return Ok(run.to_wire());
    }
    let id = run.run.id.clone();
    let tree = registry.tree_runs(viewer, &run.run.root_run_id)?;
    as_seen_by(viewer, tree)
        .into_iter()
        .find(|m| m.id == id)
        .ok_or_else(Error::run_not_found)
}

/// Runs of one tree, all readable by the viewer, as it may see them: of
/// another's run, only the owner and itself as readers (never the other
/// grantees), and no parent or root it may not read (the nearest readable
/// ancestor stands as root).
pub(crate) fn as_seen_by(viewer: &Viewer, runs: Vec<StoredRun>) -> Vec<RunMeta> {
    let shown: std::collections::HashSet<String> = runs.iter().map(|r| r.run.id.clone()).collect();
    runs.into_iter()
        .map(|run| {
            let mut meta = run.to_wire();
            if meta.user_id == viewer.user_id().as_str() {
                return meta;
            }
            meta.readable_by = vec![meta.user_id.clone(), viewer.user_id().to_string()];
            meta.parent_run_id = meta.parent_run_id.filter(|p| shown.contains(p));
            if !shown.contains(&meta.root_run_id) {
                meta.root_run_id = run
                    .ancestry
                    .split('|')
                    .find(|id| shown.contains(*id))
                    .unwrap_or(&meta.id)
                    .to_owned();
            }
            meta
        })
        .collect()
}

pub(crate) fn forest(
    registry: &Registry,
    viewer: &Viewer,
    filter: &ForestFilter,
) -> Result<ForestResponse> {
    let mut trees = Vec::new();
    for (root, last_activity_at) in registry.forest_roots(viewer, filter)? {
        let runs = shape_tree(as_seen_by(viewer, registry.tree_runs(viewer, &root)?));
        // The root the viewer may not read is not named.
        let root_run_id = match runs.first() {
            Some(top) if top.run.id != root => top.run.root_run_id.clone(),
            _ => root,
        };
        trees.push(Tree {
            root_run_id,
            last_activity_at,
            runs,
        });
    }
    Ok(ForestResponse { trees })
}

/// `top` and everything below it, ordered by `started_at` (then id), each
/// with its depth below `top`. `runs` must be sorted by `started_at`, id.
pub(crate) fn shape_subtree(runs: Vec<RunMeta>, top: &str) -> Vec<TreeRun> {
    let mut depth: HashMap<String, u32> = HashMap::from([(top.to_owned(), 0)]);
    // A child never starts before its parent is stored, but clocks differ
    // between machines: iterate until no new run joins the subtree.
    let mut changed = true;
    while changed {
        changed = false;
        for r in &runs {
            if depth.contains_key(&r.id) {
                continue;
            }
            if let Some(d) = r.parent_run_id.as_ref().and_then(|p| depth.get(p)).copied() {
                depth.insert(r.id.clone(), d + 1);
                changed = true;
            }
        }
    }
    runs.into_iter()
        .filter_map(|run| {
            depth
                .get(&run.id)
                .copied()
                .map(|depth| TreeRun { depth, run })
        })
        .collect()
}

/// A whole tree in depth-first order, children by `started_at`. Runs whose
/// parent is not among `runs` (not readable by this viewer) start their own
/// branch at depth 0.
pub(crate) fn shape_tree(runs: Vec<RunMeta>) -> Vec<TreeRun> {
    let ids: std::collections::HashSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    let mut children: HashMap<Option<String>, Vec<usize>> = HashMap::new();
    for (i, r) in runs.iter().enumerate() {
        let parent = r
            .parent_run_id
            .clone()
            .filter(|p| ids.contains(p.as_str()) && *p != r.id);
        children.entry(parent).or_default().push(i);
    }
    let mut order = Vec::with_capacity(runs.len());
    let mut stack: Vec<(usize, u32)> = children
        .get(&None)
        .into_iter()
        .flatten()
        .rev()
        .map(|&i| (i, 0))
        .collect();
    let mut visited = vec![false; runs.len()];
    while let Some((i, depth)) = stack.pop() {
        if std::mem::replace(&mut visited[i], true) {
            continue;
        }
        order.push((i, depth));
        if let Some(kids) = children.get(&Some(runs[i].id.clone())) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    let mut slots: Vec<Option<RunMeta>> = runs.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(i, depth)| slots[i].take().map(|run| TreeRun { depth, run }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::{AgentRuntime, RunLinks};

    fn run(id: &str, parent: Option<&str>, started: &str) -> RunMeta {
        RunMeta {
            id: id.into(),
            user_id: "u".into(),
            machine_id: "m".into(),
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
            agent_version: None,
            model: None,
            conversation_id: None,
            parent_run_id: parent.map(Into::into),
            root_run_id: "a".into(),
            cwd: None,
            git_branch: None,
            intent: None,
            tags: vec![],
            readable_by: vec!["u".into()],
            started_at: started.into(),
            ended_at: None,
            turn_count: 0,
            tool_call_count: 0,
            files_touched: vec![],
            tools_used: vec![],
            commands: vec![],
            title: None,
            conversation: None,
            subagent_spans: vec![],
            jsonl_bytes: 0,
            jsonl_sha256: String::new(),
            chain_sha256: String::new(),
            source_identity: String::new(),
            from_offset: 0,
            to_offset: 0,
            redactions: Default::default(),
            indexed_at: None,
            embedded_at: None,
            _links: RunLinks::for_run(id),
        }
    }

    fn shape(tree: &[TreeRun]) -> Vec<(String, u32)> {
        tree.iter().map(|t| (t.run.id.clone(), t.depth)).collect()
    }

    /// a -> b -> c -> d (four levels), a -> e (a sibling branch started later
    /// than c), and x, unrelated to the subtree of b.
    fn runs() -> Vec<RunMeta> {
        vec![
            run("a", None, "1"),
            run("b", Some("a"), "2"),
            run("c", Some("b"), "3"),
            run("e", Some("a"), "4"),
            run("d", Some("c"), "5"),
        ]
    }

    #[test]
    fn tree_is_depth_first_with_children_by_start() {
        let want = [("a", 0), ("b", 1), ("c", 2), ("d", 3), ("e", 1)];
        let want: Vec<_> = want.iter().map(|(i, d)| (i.to_string(), *d)).collect();
        assert_eq!(shape(&shape_tree(runs())), want);
    }

    #[test]
    fn subtree_holds_only_descendants_by_start() {
        let want: Vec<_> = [("b", 0), ("c", 1), ("d", 2)]
            .iter()
            .map(|(i, d)| (i.to_string(), *d))
            .collect();
        assert_eq!(shape(&shape_subtree(runs(), "b")), want);
        assert_eq!(
            shape(&shape_subtree(runs(), "d")),
            vec![("d".to_string(), 0)]
        );
    }

    #[test]
    fn unreadable_parent_makes_a_branch_root() {
        let partial = vec![run("c", Some("b"), "3"), run("d", Some("c"), "5")];
        assert_eq!(
            shape(&shape_tree(partial)),
            vec![("c".to_string(), 0), ("d".to_string(), 1)]
        );
    }

    #[test]
    fn the_turns_cache_keeps_what_was_read_last_up_to_its_size() {
        let turns = |text_bytes: usize| {
            Arc::new(vec![ConversationTurn {
                run_id: "r1".into(),
                line_start: 1,
                line_end: 1,
                role: "user".into(),
                text: "x".repeat(text_bytes),
                timestamp: None,
                tool: None,
                subagent: None,
                machine: None,
            }])
        };
        let key = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cache = TurnsCache::default();
        cache.put(key(&["r1", "r2"]), turns(10));
        assert!(cache.get(&key(&["r1", "r2"])).is_some());
        // Another viewer's readable runs of the conversation: another entry.
        assert!(cache.get(&key(&["r1"])).is_none());
        // Past the size, the least recently read go first.
        cache.put(
            key(&["big"]),
            turns(crate::turns_cache::TURNS_CACHE_BYTES - 10),
        );
        assert!(
            cache.get(&key(&["r1", "r2"])).is_some(),
            "still within the size"
        );
        cache.put(key(&["more"]), turns(20));
        assert!(cache.get(&key(&["more"])).is_some());
        assert!(cache.get(&key(&["big"])).is_none(), "the least recent went");
        // A forgotten run's conversation leaves it; the others stay.
        cache.forget(&key(&["more"]));
        assert!(cache.get(&key(&["more"])).is_none());
        assert!(cache.get(&key(&["r1", "r2"])).is_some());
        // One conversation larger than the whole cache is not kept.
        cache.put(
            key(&["huge"]),
            turns(crate::turns_cache::TURNS_CACHE_BYTES + 1),
        );
        assert!(cache.get(&key(&["huge"])).is_none());
    }
}
