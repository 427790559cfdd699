//! Ingest's rules, as pure functions from what is stored to a decision
//! (the module doc of `ingest` lists them in order). `ingest` gathers the
//! facts each needs from the registry and the blob store, asks, and does
//! what the answer says; the tests below hold the rules to a table of
//! cases.

use std::collections::BTreeMap;

use kith_shared::hash::chain_next;
use kith_shared::timestamp;

use crate::error::{Code, Error, Result};
use crate::registry::{StoredRun, Tombstone};
use crate::run::Run;

/// What a delta says of itself, as the rules read it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent<'a> {
    pub from_offset: u64,
    pub to_offset: u64,
    pub sha256: &'a str,
    pub prev_sha256: Option<&'a str>,
    /// The delta lost forgotten lines at its start: it starts a
    /// conversation of its own, continuing nothing.
    pub stripped: bool,
}

impl Sent<'_> {
    /// The chain hash the agent computed for the delta it sent.
    fn agent_chain(&self) -> String {
        chain_next(self.prev_sha256, self.sha256)
    }
}

/// Rule 1: a reused `Idempotency-Key` or run id. `found` is the owner's run
/// the key or id names: the same bytes (or, for a delta stored without its
/// forgotten lines, the same chain hash) are that run again; other bytes
/// are a conflict.
pub(super) fn retry<'r>(
    sent: &Sent<'_>,
    found: &'r StoredRun,
    what: &str,
) -> Result<&'r StoredRun> {
    if found.run.jsonl_sha256 == sent.sha256 || found.run.chain_sha256 == sent.agent_chain() {
        Ok(found)
    } else {
        Err(Error::conflict(
            Code::RunConflict,
            format!("{what} was already used for other bytes"),
        ))
    }
}

/// What is stored where a delta goes in its source chain.
pub(super) struct Place<'a> {
    /// The runs whose byte range overlaps the delta's, or that start where
    /// it starts, in offset order.
    pub overlapping: &'a [StoredRun],
    /// The first of them starts where the delta starts and its stored bytes
    /// begin with the delta's (a retry of a delta that was cut shorter).
    pub first_holds_the_bytes: bool,
    /// The live run that ends where the delta starts.
    pub live: Option<&'a StoredRun>,
    /// The forgotten run that ends there (asked only without a live one).
    pub tombstone: Option<&'a Tombstone>,
    /// The copy of a conversation that ends there, written by `kith resume`
    /// (asked only without a live run or a tombstone).
    pub resumed: Option<Resumed<'a>>,
}

/// A delta's file begins with a copy of a conversation made on this
/// machine by `kith resume`, ending where the delta starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resumed<'a> {
    /// The conversation's last run when it was resumed; `None` when it was
    /// forgotten since: the delta then starts a conversation of its own.
    pub parent: Option<&'a StoredRun>,
    /// The chain hash the machine continues from.
    pub chain_sha256: &'a str,
}

/// Where a delta goes.
#[derive(Debug)]
pub(super) enum Placement<'a> {
    /// Rule 2: it was accepted already, as this run.
    Already(&'a StoredRun),
    /// Rules 3 and 4: it extends `previous` (the live run before it, if
    /// any) and the chain hash `chain_before` (the previous run's or a
    /// forgotten run's; `None` for a chain's first delta).
    Extends {
        previous: Option<&'a StoredRun>,
        chain_before: Option<String>,
    },
}

/// Rules 2, 3 and 4.
pub(super) fn place<'a>(sent: &Sent<'_>, p: &Place<'a>) -> Result<Placement<'a>> {
    if let Some(first) = p.overlapping.first() {
        if first.run.from_offset == sent.from_offset
            && (first.run.jsonl_sha256 == sent.sha256 || p.first_holds_the_bytes)
        {
            return Ok(Placement::Already(first));
        }
        let resend_from = p
            .overlapping
            .last()
            .map_or(sent.from_offset, |r| r.run.to_offset);
        return Err(Error::conflict(
            Code::RangeOverlap,
            format!(
                "bytes {}..{} of this source overlap the accepted run {} ({}..{}); resend from offset {resend_from}",
                sent.from_offset,
                sent.to_offset,
                first.run.id,
                first.run.from_offset,
                first.run.to_offset,
            ),
        ));
    }
    if sent.stripped {
        return Ok(Placement::Extends {
            previous: None,
            chain_before: None,
        });
    }
    if sent.from_offset == 0 {
        if sent.prev_sha256.is_some() {
            return Err(Error::conflict(
                Code::ChainMismatch,
                "a delta starting at offset 0 has no prev_sha256",
            ));
        }
        return Ok(Placement::Extends {
            previous: None,
            chain_before: None,
        });
    }
    let (what, chain) = match (p.live, p.tombstone, p.resumed) {
        (Some(prev), _, _) => (&prev.run.id, &prev.run.chain_sha256),
        (None, Some(t), _) => (&t.run_id, &t.chain_sha256),
        (None, None, Some(resumed)) => {
            if sent.prev_sha256.is_some_and(|p| p != resumed.chain_sha256) {
                return Err(Error::conflict(
                    Code::ChainMismatch,
                    "prev_sha256 does not match the chain hash of the resumed copy",
                ));
            }
            return Ok(Placement::Extends {
                previous: resumed.parent,
                chain_before: Some(resumed.chain_sha256.to_owned()),
            });
        }
        (None, None, None) => {
            return Err(Error::conflict(
                Code::ChainGap,
                format!(
                    "no accepted delta of this source ends at offset {}",
                    sent.from_offset
                ),
            ))
        }
    };
    if sent.prev_sha256.is_some_and(|p| p != chain) {
        return Err(Error::conflict(
            Code::ChainMismatch,
            format!("prev_sha256 does not match the chain hash of run {what}"),
        ));
    }
    Ok(Placement::Extends {
        previous: p.live,
        chain_before: Some(chain.clone()),
    })
}

/// What the registry says of the parent a delta names.
pub(super) enum NamedParent<'a> {
    /// It names none.
    None,
    /// It names one that was forgotten (the previous delta, or the parent
    /// session): the delta hangs under nothing.
    Forgotten,
    /// The caller's own run it names, if there is one.
    Found(Option<&'a StoredRun>),
}

/// Rule 5: the parent is the run the delta names, which must be the
/// caller's, or else the previous delta of its source.
pub(super) fn parent<'a>(
    named: NamedParent<'a>,
    previous: Option<&'a StoredRun>,
    asked: &str,
) -> Result<Option<&'a StoredRun>> {
    match named {
        NamedParent::None => Ok(previous),
        NamedParent::Forgotten => Ok(None),
        NamedParent::Found(Some(run)) => Ok(Some(run)),
        NamedParent::Found(None) => Err(Error::invalid(
            Code::UnknownParent,
            format!("parent run {asked} is not one of yours"),
        )),
    }
}

/// Who sent a delta and what it carried beside its bytes.
pub(super) struct Origin<'a> {
    pub run_id: &'a str,
    pub user_id: &'a str,
    pub machine_id: &'a str,
    pub machine: &'a str,
    pub req: &'a kith_proto::IngestRequest,
    /// `started_at` as the request gave it, normalized.
    pub started_at: Option<String>,
}

/// The new run: the facts the parser read, with what a session says once
/// (its id, place, branch, model, agent version) inherited from the
/// previous delta of its transcript when this one does not say it.
pub(super) fn new_run(
    origin: &Origin<'_>,
    parsed: kith_shared::transcript::Transcript,
    sha256: &str,
    chain_sha256: String,
    parent: Option<&StoredRun>,
    previous: Option<&StoredRun>,
) -> Run {
    let req = origin.req;
    let inherited = |own: Option<String>, of: fn(&Run) -> &Option<String>| {
        own.or_else(|| previous.and_then(|p| of(&p.run).clone()))
    };
    let started_at = origin
        .started_at
        .clone()
        .or_else(|| parsed.started_at.as_deref().and_then(timestamp::normalize))
        .unwrap_or_else(timestamp::now);
    let mut run = Run {
        id: origin.run_id.to_owned(),
        user_id: origin.user_id.to_owned(),
        machine_id: origin.machine_id.to_owned(),
        machine: origin.machine.to_owned(),
        agent_runtime: req.agent_runtime,
        agent_version: inherited(req.agent_version.clone().or(parsed.agent_version), |m| {
            &m.agent_version
        }),
        model: inherited(parsed.model, |m| &m.model),
        conversation_id: inherited(req.conversation_id.clone().or(parsed.session_id), |m| {
            &m.conversation_id
        }),
        parent_run_id: parent.map(|p| p.run.id.clone()),
        root_run_id: parent.map_or_else(|| origin.run_id.to_owned(), |p| p.run.root_run_id.clone()),
        cwd: inherited(req.cwd.clone().or(parsed.cwd), |m| &m.cwd),
        git_branch: inherited(req.git_branch.clone().or(parsed.git_branch), |m| {
            &m.git_branch
        }),
        intent: parsed.intent,
        tags: req.tags.clone(),
        ended_at: parsed.ended_at.as_deref().and_then(timestamp::normalize),
        started_at,
        turn_count: parsed.turns.len() as u64,
        tool_call_count: parsed.tool_call_count,
        files_touched: parsed.files_touched,
        tools_used: parsed.tools_used,
        commands: parsed.commands,
        title: parsed.title,
        conversation: None,
        subagent_spans: parsed.subagents,
        jsonl_bytes: req.jsonl.len() as u64,
        jsonl_sha256: sha256.to_owned(),
        chain_sha256,
        source_identity: req.source_identity.clone(),
        from_offset: req.from_offset,
        to_offset: req.to_offset,
        redactions: req
            .redactions
            .clone()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        forked_from: None,
    };
    run.conversation =
        Some(crate::conversation::conversation_of(&run, previous.map(|p| &p.run)).to_string());
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: &str, from: u64, to: u64, sha: &str, chain: &str) -> StoredRun {
        let mut run = Run::for_tests(id, "ualice");
        run.from_offset = from;
        run.to_offset = to;
        run.jsonl_sha256 = sha.to_owned();
        run.chain_sha256 = chain.to_owned();
        StoredRun {
            run,
            readable_by: vec!["ualice".into()],
            indexed_at: None,
            embedded_at: None,
            ancestry: format!("|{id}|"),
            blob_path: String::new(),
            idempotency_key: None,
            quarantined: false,
            captured_ms: 0,
        }
    }

    fn sent(from: u64, to: u64, sha: &'static str, prev: Option<&'static str>) -> Sent<'static> {
        Sent {
            from_offset: from,
            to_offset: to,
            sha256: sha,
            prev_sha256: prev,
            stripped: false,
        }
    }

    /// Where a delta goes, from what is stored: one row per rule and edge.
    #[test]
    fn a_delta_is_placed_by_the_rules() {
        let r1 = stored("r1", 0, 10, "s1", "c1");
        let r2 = stored("r2", 10, 20, "s2", "c2");
        let tomb = Tombstone {
            run_id: "rf".into(),
            chain_sha256: "cf".into(),
        };
        let runs = [r1.clone(), r2.clone()];
        let extends = |previous: Option<&'static str>, chain: Option<&str>| {
            (previous, chain.map(str::to_owned))
        };
        /// Why a delta is not placed: stored already as a run, or refused.
        #[derive(Debug, PartialEq)]
        enum Not {
            Already(String),
            Refused(Code),
        }
        type Want = std::result::Result<(Option<&'static str>, Option<String>), Not>;
        let cases: Vec<(&str, Sent<'static>, Place<'_>, Want)> = vec![
            (
                "a chain's first delta",
                sent(0, 10, "s1", None),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Ok(extends(None, None)),
            ),
            (
                "a first delta naming a chain before it",
                sent(0, 10, "s1", Some("c0")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Refused(Code::ChainMismatch)),
            ),
            (
                "the next delta",
                sent(10, 20, "s2", Some("c1")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: Some(&r1),
                    tombstone: None,
                    resumed: None,
                },
                Ok(extends(Some("r1"), Some("c1"))),
            ),
            (
                "the next delta without prev_sha256",
                sent(10, 20, "s2", None),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: Some(&r1),
                    tombstone: None,
                    resumed: None,
                },
                Ok(extends(Some("r1"), Some("c1"))),
            ),
            (
                "a delta naming another chain",
                sent(10, 20, "s2", Some("other")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: Some(&r1),
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Refused(Code::ChainMismatch)),
            ),
            (
                "a gap",
                sent(30, 40, "s4", None),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Refused(Code::ChainGap)),
            ),
            (
                "after a forgotten run: its tombstone's chain",
                sent(10, 20, "s2", Some("cf")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: Some(&tomb),
                    resumed: None,
                },
                Ok(extends(None, Some("cf"))),
            ),
            (
                "after a resumed copy: the conversation's last run and the copy's chain",
                sent(30, 40, "s4", Some("cr")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: Some(Resumed {
                        parent: Some(&r2),
                        chain_sha256: "cr",
                    }),
                },
                Ok(extends(Some("r2"), Some("cr"))),
            ),
            (
                "after a resumed copy of a conversation forgotten since",
                sent(30, 40, "s4", None),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: Some(Resumed {
                        parent: None,
                        chain_sha256: "cr",
                    }),
                },
                Ok(extends(None, Some("cr"))),
            ),
            (
                "after a resumed copy, naming another chain",
                sent(30, 40, "s4", Some("other")),
                Place {
                    overlapping: &[],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: Some(Resumed {
                        parent: Some(&r2),
                        chain_sha256: "cr",
                    }),
                },
                Err(Not::Refused(Code::ChainMismatch)),
            ),
            (
                "the same delta again",
                sent(0, 10, "s1", None),
                Place {
                    overlapping: &runs[..1],
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Already("r1".into())),
            ),
            (
                "a shorter retry of a stored delta",
                sent(0, 5, "s1-short", None),
                Place {
                    overlapping: &runs[..1],
                    first_holds_the_bytes: true,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Already("r1".into())),
            ),
            (
                "other bytes over stored ones",
                sent(5, 15, "sx", None),
                Place {
                    overlapping: &runs,
                    first_holds_the_bytes: false,
                    live: None,
                    tombstone: None,
                    resumed: None,
                },
                Err(Not::Refused(Code::RangeOverlap)),
            ),
        ];
        for (what, sent, place_at, want) in cases {
            let got = match place(&sent, &place_at) {
                Ok(Placement::Already(run)) => Err(Not::Already(run.run.id.clone())),
                Ok(Placement::Extends {
                    previous,
                    chain_before,
                }) => Ok((previous.map(|p| p.run.id.clone()), chain_before)),
                Err(Error::Conflict { code, .. }) => Err(Not::Refused(code)),
                Err(e) => panic!("{what}: {e}"),
            };
            let want = want.map(|(p, c)| (p.map(str::to_owned), c));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_delta_stripped_of_forgotten_lines_extends_nothing() {
        let r1 = stored("r1", 0, 10, "s1", "c1");
        let stripped = Sent {
            stripped: true,
            ..sent(10, 20, "s2", Some("c1"))
        };
        let placed = place(
            &stripped,
            &Place {
                overlapping: &[],
                first_holds_the_bytes: false,
                live: Some(&r1),
                tombstone: None,
                resumed: None,
            },
        );
        assert!(matches!(
            placed,
            Ok(Placement::Extends {
                previous: None,
                chain_before: None
            })
        ));
    }

    #[test]
    fn a_reused_key_or_id_is_the_same_run_only_for_the_same_bytes() {
        let r1 = stored("r1", 0, 10, "s1", &chain_next(None, "s1"));
        assert!(retry(&sent(0, 10, "s1", None), &r1, "this run_id").is_ok());
        // Stored without its forgotten lines: other bytes, the same chain.
        let mut cut = r1.clone();
        cut.run.jsonl_sha256 = "s1-without-forgotten".into();
        assert!(retry(&sent(0, 10, "s1", None), &cut, "this run_id").is_ok());
        let other = retry(&sent(0, 10, "s9", None), &r1, "this Idempotency-Key");
        assert!(
            matches!(&other, Err(Error::Conflict { code: Code::RunConflict, message })
                if message.contains("Idempotency-Key")),
            "{other:?}"
        );
    }

    #[test]
    fn the_parent_is_the_named_run_or_the_previous_delta() {
        let prev = stored("rp", 0, 10, "s", "c");
        let named = stored("rn", 0, 10, "s", "c");
        let id = |r: Result<Option<&StoredRun>>| r.map(|p| p.map(|p| p.run.id.clone()));
        assert_eq!(
            id(parent(NamedParent::None, Some(&prev), "")).ok(),
            Some(Some("rp".into()))
        );
        assert_eq!(id(parent(NamedParent::None, None, "")).ok(), Some(None));
        assert_eq!(
            id(parent(NamedParent::Found(Some(&named)), Some(&prev), "rn")).ok(),
            Some(Some("rn".into()))
        );
        assert_eq!(
            id(parent(NamedParent::Forgotten, Some(&prev), "rn")).ok(),
            Some(None)
        );
        assert!(matches!(
            parent(NamedParent::Found(None), Some(&prev), "rx"),
            Err(Error::Invalid {
                code: Code::UnknownParent,
                ..
            })
        ));
    }

    #[test]
    fn a_later_delta_inherits_what_its_session_said_once() {
        let mut first = stored("r1", 0, 10, "s1", "c1");
        first.run.cwd = Some("/home/alice/proj".into());
        first.run.model = Some("opus".into());
        first.run.conversation_id = Some("session-1".into());
        first.run.conversation = Some("c00000000000000000000000000000001".into());
        let req: kith_proto::IngestRequest = serde_json::from_value(serde_json::json!({
            "agent_runtime": "claude-code", "source_identity": "s#1:2:3",
            "from_offset": 10, "to_offset": 20, "jsonl": "{}\n",
            "git_branch": "main"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let origin = Origin {
            run_id: "r2",
            user_id: "ualice",
            machine_id: "m1",
            machine: "laptop",
            req: &req,
            started_at: Some("2026-05-11T08:00:00.000Z".into()),
        };
        let run = new_run(
            &origin,
            kith_shared::transcript::Transcript::default(),
            "s2",
            "c2".into(),
            Some(&first),
            Some(&first),
        );
        assert_eq!(run.cwd.as_deref(), Some("/home/alice/proj"));
        assert_eq!(run.model.as_deref(), Some("opus"));
        assert_eq!(run.conversation_id.as_deref(), Some("session-1"));
        // What the delta says itself wins.
        assert_eq!(run.git_branch.as_deref(), Some("main"));
        assert_eq!(run.parent_run_id.as_deref(), Some("r1"));
        assert_eq!(run.root_run_id, "r1");
        // The previous delta's conversation.
        assert_eq!(run.conversation, first.run.conversation);
        let alone = new_run(
            &origin,
            kith_shared::transcript::Transcript::default(),
            "s2",
            "c2".into(),
            None,
            None,
        );
        assert_eq!(alone.cwd, None);
        assert_eq!(alone.root_run_id, "r2");
        assert_ne!(alone.conversation, first.run.conversation);
    }
}
