//! Whether a registry's runs chain without holes, as far as the registry
//! can tell. A run that starts past byte 0 of its source continues the run
//! of the same member and source that ends where it starts, and its chain
//! hash extends that run's (`chain_next`); or it follows a forgotten run
//! ending there (a tombstone). A member who forgot anything may have a
//! delta that starts after forgotten lines, where nothing ends (ingest
//! keeps only the lines after them): such a start is not judged a hole.

use std::collections::{HashMap, HashSet};

use kith_shared::hash::chain_next;

use crate::registry::{CatalogRun, TombstoneRow};

/// A run whose place in its chain the registry contradicts, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Break {
    pub run: String,
    pub what: String,
}

/// Every run of `runs` that does not continue its chain.
pub(crate) fn breaks(runs: &[CatalogRun], tombstones: &[TombstoneRow]) -> Vec<Break> {
    let mut ending: HashMap<(&str, &str, u64), Vec<&CatalogRun>> = HashMap::new();
    for run in runs {
        ending
            .entry((&run.user_id, &run.source_identity, run.to_offset))
            .or_default()
            .push(run);
    }
    let forgotten_ends: HashSet<(&str, &str, u64)> = tombstones
        .iter()
        .map(|t| (t.user_id.as_str(), t.source_identity.as_str(), t.to_offset))
        .collect();
    let forgetters: HashSet<&str> = tombstones.iter().map(|t| t.user_id.as_str()).collect();
    let mut out = Vec::new();
    for run in runs.iter().filter(|r| r.from_offset > 0) {
        let at = (
            run.user_id.as_str(),
            run.source_identity.as_str(),
            run.from_offset,
        );
        match ending.get(&at) {
            Some(before) => {
                let extends = before.iter().any(|p| {
                    chain_next(Some(&p.chain_sha256), &run.jsonl_sha256) == run.chain_sha256
                });
                if !extends {
                    let ids: Vec<&str> = before.iter().map(|p| p.id.as_str()).collect();
                    out.push(Break {
                        run: run.id.clone(),
                        what: format!(
                            "its chain_sha256 does not extend that of {}, which ends where it starts",
                            ids.join(" or ")
                        ),
                    });
                }
            }
            None if forgotten_ends.contains(&at) || forgetters.contains(at.0) => {}
            None => out.push(Break {
                run: run.id.clone(),
                what: format!(
                    "starts at byte {} of its source, where no run ends (a hole in its chain)",
                    run.from_offset
                ),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_shared::hash::sha256_hex;

    /// A run of `user`'s source `s` over `from..to`, with the bytes `text`
    /// and the chain hash `chain`.
    fn run(id: &str, user: &str, from: u64, to: u64, text: &str, chain: &str) -> CatalogRun {
        CatalogRun {
            id: id.into(),
            user_id: user.into(),
            source_identity: "s".into(),
            from_offset: from,
            to_offset: to,
            jsonl_sha256: sha256_hex(text.as_bytes()),
            chain_sha256: chain.into(),
            blob_path: format!("runs/{user}/2026-05/{id}.jsonl"),
        }
    }

    fn tombstone(id: &str, user: &str, to: u64, chain: &str) -> TombstoneRow {
        TombstoneRow {
            run_id: id.into(),
            user_id: user.into(),
            source_identity: "s".into(),
            to_offset: to,
            chain_sha256: chain.into(),
        }
    }

    /// The runs `breaks` names among `runs` after `tombstones`.
    fn check(what: &str, runs: &[CatalogRun], tombstones: &[TombstoneRow], want: &[&str]) {
        let got: Vec<String> = breaks(runs, tombstones)
            .into_iter()
            .map(|b| b.run)
            .collect();
        assert_eq!(got, want, "{what}");
    }

    #[test]
    fn runs_chain_or_their_break_is_named() {
        let c1 = chain_next(None, &sha256_hex(b"a"));
        let c2 = chain_next(Some(&c1), &sha256_hex(b"b"));
        let first = run("r1", "u1", 0, 1, "a", &c1);
        let second = run("r2", "u1", 1, 2, "b", &c2);
        check("a chain of two", &[first.clone(), second.clone()], &[], &[]);
        check(
            "a run at byte 0 alone",
            std::slice::from_ref(&first),
            &[],
            &[],
        );
        check(
            "the first run lost",
            std::slice::from_ref(&second),
            &[],
            &["r2"],
        );
        check(
            "a chain hash that extends nothing",
            &[first.clone(), run("r2", "u1", 1, 2, "b", &c1)],
            &[],
            &["r2"],
        );
        check(
            "another member's run ending there is not its chain",
            &[run("r1", "u2", 0, 1, "a", &c1), second.clone()],
            &[],
            &["r2"],
        );
        check(
            "after a forgotten run",
            std::slice::from_ref(&second),
            &[tombstone("r1", "u1", 1, &c1)],
            &[],
        );
        check(
            "after forgotten lines, where nothing ends",
            &[run("r3", "u1", 7, 8, "c", "agent's chain")],
            &[tombstone("r1", "u1", 1, &c1)],
            &[],
        );
        check(
            "another member's forgetting excuses no hole",
            std::slice::from_ref(&second),
            &[tombstone("r1", "u2", 1, &c1)],
            &["r2"],
        );
        let hole = breaks(&[second], &[]);
        assert!(hole[0].what.contains("byte 1"), "{hole:?}");
    }
}
