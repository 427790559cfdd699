//! Conversations: what people read. A run is one captured delta of one
//! transcript (the unit of capture and storage); a conversation is one agent
//! session as its transcript holds it: the runs of one source chain, in byte
//! order. A subagent's transcript is a conversation of its own whose first
//! run hangs under a run of its parent, so conversations form trees whose
//! root is the tree's `root_run_id`.
//!
//! This module is pure: the facts of a conversation are folded from its
//! runs' metadata (`Facts`), its turns from its runs' parsed bytes. What a
//! viewer sees is folded from the runs the registry let it read, so a
//! conversation never shows what a delta the viewer may not read said.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use kith_proto::{Conversation, ConversationTurn, InlineSubagent, ToolCall};
use kith_shared::transcript::{Role, Turn};

use crate::error::{Code, Error, Result};
use crate::run::Run;

/// A conversation's id: `c` and 32 hex digits derived from its first run's
/// id, so a reindex from the blobs finds the same id, and a short prefix is
/// unique (run ids begin with their time, so many share a prefix).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationId(String);

/// Length of a conversation id.
const ID_LEN: usize = 33;

impl ConversationId {
    /// The conversation whose first run is `head`.
    pub fn of_head(head: &str) -> Self {
        let digest = kith_shared::hash::sha256_hex(format!("conversation:{head}").as_bytes());
        Self(format!("c{}", &digest[..ID_LEN - 1]))
    }

    pub fn parse(s: &str) -> Result<Self> {
        if is_prefix(s) && s.len() == ID_LEN {
            Ok(Self(s.to_owned()))
        } else {
            Err(Error::invalid(
                Code::InvalidId,
                "a conversation id is 'c' and 32 hex digits",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `s` can start a conversation id: `c` and lowercase hex digits.
pub(crate) fn is_prefix(s: &str) -> bool {
    s.len() <= ID_LEN
        && s.strip_prefix('c').is_some_and(|hex| {
            hex.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// What a name given by a person can be: a whole run id, or a prefix of a
/// conversation id or of a run id (at least 4 characters).
pub(crate) const MIN_PREFIX: usize = 4;

/// The conversation of a run, computed from the runs before it: a delta
/// that continues a delta of the same source belongs to its conversation;
/// any other run starts one.
pub(crate) fn conversation_of(run: &Run, previous_of_source: Option<&Run>) -> ConversationId {
    previous_of_source
        .and_then(|p| p.conversation.as_deref())
        .map_or_else(
            || ConversationId::of_head(&run.id),
            |c| ConversationId(c.to_owned()),
        )
}

/// The conversation of every run of `runs`, for runs stored before kith
/// recorded it: walk up `parent_run_id` while the parent is a delta of the
/// same source.
pub(crate) fn conversations_of(runs: &[&Run]) -> HashMap<String, ConversationId> {
    let by_id: HashMap<&str, &Run> = runs.iter().map(|r| (r.id.as_str(), *r)).collect();
    runs.iter()
        .map(|run| {
            if let Some(c) = &run.conversation {
                return (run.id.clone(), ConversationId(c.clone()));
            }
            let mut head = *run;
            // A chain is acyclic (a parent is stored before its child); the
            // bound only guards against a corrupt catalog.
            for _ in 0..runs.len() {
                match head.parent_run_id.as_deref().and_then(|p| by_id.get(p)) {
                    Some(parent) if parent.source_identity == head.source_identity => {
                        head = parent;
                    }
                    _ => break,
                }
            }
            (run.id.clone(), ConversationId::of_head(&head.id))
        })
        .collect()
}

/// One conversation's runs that a viewer may read, in byte order, and who
/// wrote them.
pub(crate) struct ConversationRuns<'a> {
    pub id: &'a ConversationId,
    /// The owner's handle.
    pub owner: &'a str,
    pub runs: &'a [&'a Run],
    /// The conversation this one's first run hangs under, if readable.
    pub parent_id: Option<ConversationId>,
    pub depth: u32,
}

/// The facts of a conversation, folded from its readable runs: the first
/// run names its title, session and place; counts add up; lists merge.
pub(crate) fn fold(c: &ConversationRuns<'_>) -> Option<Conversation> {
    let first = c.runs.first()?;
    let mut files = BTreeSet::new();
    let mut tools = BTreeSet::new();
    let mut tags = BTreeSet::new();
    let mut commands: Vec<String> = Vec::new();
    let mut started_at = first.started_at.clone();
    let mut last_activity_at = first.started_at.clone();
    for run in c.runs {
        files.extend(run.files_touched.iter().cloned());
        tools.extend(run.tools_used.iter().cloned());
        tags.extend(run.tags.iter().cloned());
        for command in &run.commands {
            if !commands.contains(command) {
                commands.push(command.clone());
            }
        }
        started_at = started_at.min(run.started_at.clone());
        let last = run.ended_at.as_ref().unwrap_or(&run.started_at);
        last_activity_at = last_activity_at.max(last.clone());
    }
    let first_some = |f: fn(&Run) -> Option<&String>| c.runs.iter().find_map(|r| f(r)).cloned();
    Some(Conversation {
        id: c.id.to_string(),
        title: first_some(|r| r.title.as_ref()),
        owner: c.owner.to_owned(),
        machine: first.machine.clone(),
        machines: machines(c.runs),
        forked_from: first.forked_from.clone(),
        agent_runtime: first.agent_runtime,
        session_id: first_some(|r| r.conversation_id.as_ref()),
        cwd: first_some(|r| r.cwd.as_ref()),
        git_branch: first_some(|r| r.git_branch.as_ref()),
        model: first_some(|r| r.model.as_ref()),
        started_at,
        last_activity_at,
        turn_count: c.runs.iter().map(|r| r.turn_count).sum(),
        delta_count: c.runs.len() as u64,
        parent_id: c.parent_id.as_ref().map(ToString::to_string),
        depth: c.depth,
        files_touched: files.into_iter().collect(),
        tools_used: tools.into_iter().collect(),
        commands,
        tags: tags.into_iter().collect(),
        run_ids: c.runs.iter().map(|r| r.id.clone()).collect(),
        inline_subagents: inline_subagents(c.runs),
    })
}

/// The inline subagents of a conversation's runs, each folded over its
/// spans (one a delta it ran in): the first name and description, turns
/// added up, the widest time span. In order of first appearance.
fn inline_subagents(runs: &[&Run]) -> Vec<InlineSubagent> {
    let mut out: Vec<InlineSubagent> = Vec::new();
    for span in runs.iter().flat_map(|r| &r.subagent_spans) {
        let at = match out.iter().position(|s| s.id == span.id) {
            Some(at) => at,
            None => {
                out.push(InlineSubagent {
                    id: span.id.clone(),
                    name: None,
                    description: None,
                    turn_count: 0,
                    started_at: None,
                    ended_at: None,
                });
                out.len() - 1
            }
        };
        let s = &mut out[at];
        s.name = s.name.take().or_else(|| span.name.clone());
        s.description = s.description.take().or_else(|| span.description.clone());
        s.turn_count += span.turn_count;
        s.started_at = match (s.started_at.take(), &span.started_at) {
            (Some(a), Some(b)) => Some(a.min(b.clone())),
            (a, b) => a.or_else(|| b.clone()),
        };
        s.ended_at = match (s.ended_at.take(), &span.ended_at) {
            (Some(a), Some(b)) => Some(a.max(b.clone())),
            (a, b) => a.or_else(|| b.clone()),
        };
    }
    out
}

/// Orders one conversation's runs as its bytes follow each other: each
/// transcript in byte order, the transcripts in the order they began. A
/// conversation resumed on another machine (`kith resume`) has two: the
/// one it began in, and the other machine's copy, whose first captured
/// delta starts after the copy and hangs under the first one's last run.
pub(crate) fn in_order<T>(runs: &mut [T], run: impl Fn(&T) -> &Run) {
    let mut began: HashMap<&str, &str> = HashMap::new();
    for r in runs.iter().map(&run) {
        let at = began.entry(&r.source_identity).or_insert(&r.started_at);
        if r.started_at.as_str() < *at {
            *at = &r.started_at;
        }
    }
    let key: HashMap<String, String> = began
        .into_iter()
        .map(|(source, at)| (source.to_owned(), at.to_owned()))
        .collect();
    runs.sort_by(|a, b| {
        let (a, b) = (run(a), run(b));
        (&key[&a.source_identity], &a.source_identity, a.from_offset).cmp(&(
            &key[&b.source_identity],
            &b.source_identity,
            b.from_offset,
        ))
    });
}

/// Whether `run` starts a resumed copy's capture: another transcript than
/// the run before it, continuing it (it hangs under that run) after bytes
/// it never sent.
pub(crate) fn continues_on_another_transcript(run: &Run, before: &Run) -> bool {
    run.source_identity != before.source_identity
        && run.from_offset > 0
        && run.parent_run_id.as_deref() == Some(before.id.as_str())
}

/// The machines a conversation's runs (in order) were written on, each
/// time it moved to another.
fn machines(runs: &[&Run]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for run in runs {
        if out.last() != Some(&run.machine) {
            out.push(run.machine.clone());
        }
    }
    out
}

/// The runs of one tree, grouped into conversations and ordered depth-first
/// (a conversation, then each conversation its runs spawned, by start). A
/// conversation whose parent is not among `runs` starts at depth 0. `runs`
/// must be sorted by `started_at`.
pub(crate) fn shape<'a>(runs: &[&'a Run]) -> Vec<(ConversationId, u32, Vec<&'a Run>)> {
    let mut order: Vec<ConversationId> = Vec::new();
    let mut members: HashMap<ConversationId, Vec<&'a Run>> = HashMap::new();
    let of_run = conversations_of(runs);
    for run in runs {
        let c = of_run[&run.id].clone();
        let list = members.entry(c.clone()).or_default();
        if list.is_empty() {
            order.push(c);
        }
        list.push(run);
    }
    for list in members.values_mut() {
        in_order(list, |r| r);
    }
    // A conversation's parent: the conversation of the run its first run
    // hangs under, when that is another readable conversation.
    let parent: HashMap<&ConversationId, ConversationId> = order
        .iter()
        .filter_map(|c| {
            let head = members[c].first()?;
            let p = of_run.get(head.parent_run_id.as_deref()?)?;
            (p != c).then(|| (c, p.clone()))
        })
        .collect();
    let mut children: HashMap<Option<&ConversationId>, Vec<&ConversationId>> = HashMap::new();
    for c in &order {
        children.entry(parent.get(c)).or_default().push(c);
    }
    let mut out = Vec::with_capacity(order.len());
    let mut stack: Vec<(&ConversationId, u32)> = children
        .get(&None)
        .into_iter()
        .flatten()
        .rev()
        .map(|c| (*c, 0))
        .collect();
    let mut seen = std::collections::HashSet::new();
    while let Some((c, depth)) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        out.push((c.clone(), depth, members[c].clone()));
        if let Some(kids) = children.get(&Some(c)) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    out
}

/// The parent conversation of each conversation `shape` returned.
pub(crate) fn parents(
    shaped: &[(ConversationId, u32, Vec<&Run>)],
) -> HashMap<ConversationId, ConversationId> {
    let mut stack: Vec<(&ConversationId, u32)> = Vec::new();
    let mut out = HashMap::new();
    for (c, depth, _) in shaped {
        while stack.last().is_some_and(|(_, d)| *d >= *depth) {
            stack.pop();
        }
        if let Some((p, _)) = stack.last() {
            out.insert(c.clone(), (*p).clone());
        }
        stack.push((c, *depth));
    }
    out
}

/// One delta's turns as the API shows them: a tool turn's first line is
/// its call, the lines after it the result.
pub(crate) fn turns_of(run: &Run, turns: Vec<Turn>) -> Vec<ConversationTurn> {
    turns
        .into_iter()
        .map(|t| {
            let tool = (t.role == Role::Tool).then(|| {
                let (call, output) = t.text.split_once('\n').unwrap_or((&t.text, ""));
                let name = t.tool_names.first().cloned().unwrap_or_default();
                let input = call
                    .strip_prefix(&format!("{name}: "))
                    .unwrap_or(call)
                    .to_owned();
                ToolCall {
                    name,
                    input,
                    output: output.to_owned(),
                    diff: t.diff.clone(),
                }
            });
            ConversationTurn {
                run_id: run.id.clone(),
                line_start: t.line_start,
                line_end: t.line_end,
                role: t.role.as_str().to_owned(),
                text: t.text,
                timestamp: t.timestamp,
                tool,
                subagent: t.subagent,
                machine: Some(run.machine.clone()),
            }
        })
        .collect()
}

/// The marker before a delta that does not start where the last one shown
/// ended: bytes `from..to` of the transcript were not captured, or the
/// viewer may not read them.
pub(crate) fn gap(next_run_id: &str, from: u64, to: u64) -> ConversationTurn {
    ConversationTurn {
        run_id: next_run_id.to_owned(),
        line_start: 0,
        line_end: 0,
        role: "gap".to_owned(),
        text: format!("bytes {from}..{to} of the transcript are not shown here"),
        timestamp: None,
        tool: None,
        subagent: None,
        machine: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::AgentRuntime;

    fn run(id: &str, parent: Option<&str>, source: &str, from: u64, started: &str) -> Run {
        Run {
            id: id.into(),
            user_id: "u1".into(),
            machine_id: "m1".into(),
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
            agent_version: None,
            model: None,
            conversation_id: Some("session".into()),
            parent_run_id: parent.map(Into::into),
            root_run_id: "r1".into(),
            cwd: None,
            git_branch: None,
            intent: None,
            tags: vec![],
            started_at: started.into(),
            ended_at: None,
            turn_count: 2,
            tool_call_count: 0,
            files_touched: vec![format!("/src/{id}.rs")],
            tools_used: vec![],
            commands: vec![],
            title: (from == 0).then(|| format!("title of {source}")),
            conversation: None,
            subagent_spans: vec![],
            forked_from: None,
            jsonl_bytes: 10,
            jsonl_sha256: String::new(),
            chain_sha256: String::new(),
            source_identity: source.into(),
            from_offset: from,
            to_offset: from + 10,
            redactions: Default::default(),
        }
    }

    #[test]
    fn ids_are_derived_and_checked() {
        let a = ConversationId::of_head("r1");
        assert_eq!(a, ConversationId::of_head("r1"));
        assert_ne!(a, ConversationId::of_head("r2"));
        assert_eq!(a.as_str().len(), ID_LEN);
        assert!(ConversationId::parse(a.as_str()).is_ok());
        for bad in ["", "c", "r1", "cZZ", "c../../etc", &format!("{a}0")] {
            assert!(ConversationId::parse(bad).is_err(), "{bad}");
        }
        assert!(is_prefix("c0f") && !is_prefix("r0f") && !is_prefix("c0F"));
    }

    /// A session of four hook turns with two subagents: one conversation
    /// with two children, not a staircase of five levels.
    #[test]
    fn deltas_are_one_conversation_and_subagents_its_children() {
        let runs = [
            run("r1", None, "main", 0, "2026-01-01T00:00:01Z"),
            run("r2", Some("r1"), "main", 10, "2026-01-01T00:00:02Z"),
            run("s1", Some("r2"), "sub-a", 0, "2026-01-01T00:00:03Z"),
            run("r3", Some("r2"), "main", 20, "2026-01-01T00:00:04Z"),
            run("s2", Some("r3"), "sub-b", 0, "2026-01-01T00:00:05Z"),
            run("s3", Some("s2"), "sub-b", 10, "2026-01-01T00:00:06Z"),
            run("r4", Some("r3"), "main", 30, "2026-01-01T00:00:07Z"),
        ];
        let refs: Vec<&Run> = runs.iter().collect();
        let shaped = shape(&refs);
        let view: Vec<(u32, Vec<&str>)> = shaped
            .iter()
            .map(|(_, d, rs)| (*d, rs.iter().map(|r| r.id.as_str()).collect()))
            .collect();
        assert_eq!(
            view,
            [
                (0, vec!["r1", "r2", "r3", "r4"]),
                (1, vec!["s1"]),
                (1, vec!["s2", "s3"]),
            ]
        );
        let main = &shaped[0].0;
        assert_eq!(*main, ConversationId::of_head("r1"));
        let parents = parents(&shaped);
        assert_eq!(parents.get(&shaped[1].0), Some(main));
        assert_eq!(parents.get(&shaped[2].0), Some(main));
        assert_eq!(parents.get(main), None);

        let folded = fold(&ConversationRuns {
            id: main,
            owner: "alice",
            runs: &shaped[0].2,
            parent_id: None,
            depth: 0,
        });
        let folded = folded.as_ref();
        assert_eq!(folded.map(|c| c.delta_count), Some(4));
        assert_eq!(folded.map(|c| c.turn_count), Some(8));
        assert_eq!(
            folded.and_then(|c| c.title.as_deref()),
            Some("title of main")
        );
        assert_eq!(
            folded.map(|c| c.last_activity_at.as_str()),
            Some("2026-01-01T00:00:07Z")
        );
        assert!(folded
            .is_some_and(|c| c.files_touched.len() == 4
                && !c.files_touched.contains(&"/src/s1.rs".to_owned())));
    }

    /// An inline subagent that runs across two deltas is one node: named
    /// by the delta that saw it start, its turns added up, its time span
    /// the widest; a delta the viewer may not read adds nothing.
    #[test]
    fn an_inline_subagent_folds_over_the_deltas_it_ran_in() {
        let span = |id: &str, name: Option<&str>, turns: u64, from: &str, to: &str| {
            kith_proto::SubagentSpan {
                id: id.into(),
                name: name.map(Into::into),
                description: name.map(|_| "look around".into()),
                line_start: 1,
                line_end: 2,
                started_at: Some(from.into()),
                ended_at: Some(to.into()),
                turn_count: turns,
            }
        };
        let mut r1 = run("r1", None, "main", 0, "2026-01-01T00:00:01Z");
        r1.subagent_spans = vec![span("a1", Some("explore"), 2, "T02", "T05")];
        let mut r2 = run("r2", Some("r1"), "main", 10, "2026-01-01T00:00:06Z");
        r2.subagent_spans = vec![
            span("a1", None, 3, "T06", "T08"),
            span("a2", Some("task"), 1, "T07", "T07"),
        ];
        let id = ConversationId::of_head("r1");
        let folded = |runs: &[&Run]| {
            fold(&ConversationRuns {
                id: &id,
                owner: "alice",
                runs,
                parent_id: None,
                depth: 0,
            })
            .map(|c| c.inline_subagents)
            .unwrap_or_default()
        };
        let both = folded(&[&r1, &r2]);
        let seen: Vec<_> = both
            .iter()
            .map(|s| {
                (
                    s.id.as_str(),
                    s.name.as_deref(),
                    s.description.as_deref(),
                    s.turn_count,
                    s.started_at.as_deref(),
                    s.ended_at.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "a1",
                    Some("explore"),
                    Some("look around"),
                    5,
                    Some("T02"),
                    Some("T08")
                ),
                (
                    "a2",
                    Some("task"),
                    Some("look around"),
                    1,
                    Some("T07"),
                    Some("T07")
                ),
            ]
        );
        let first_only = folded(&[&r1]);
        assert_eq!(first_only.len(), 1);
        assert_eq!(first_only[0].turn_count, 2);
        assert!(folded(&[&run("r9", None, "other", 0, "T")]).is_empty());
    }

    /// A subagent shared without its parent stands alone for that viewer.
    #[test]
    fn a_subagent_without_its_parent_is_a_conversation_of_its_own() {
        let runs = [run("s1", Some("r2"), "sub-a", 0, "2026-01-01T00:00:03Z")];
        let refs: Vec<&Run> = runs.iter().collect();
        let shaped = shape(&refs);
        assert_eq!(shaped.len(), 1);
        assert_eq!(shaped[0].1, 0);
    }
}
