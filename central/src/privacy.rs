//! Who may read a run, decided in one place.
//!
//! **The rule.** A viewer reads every run it owns. Anyone else reads a run
//! through a live grant of the run's owner that covers it, unless the run is
//! quarantined. A run grant covers the granted run and its descendants
//! (their ancestry names it): those captured by the time it was given (a
//! snapshot), or whenever captured when it follows. A tag grant covers every
//! run of the owner that carries the tag, as the tags are now.
//!
//! The rule is data: [`Readability::rule`] writes it as a [`Rule`] from the
//! viewer and the grants it holds, and nothing else writes it. A
//! `Readability` is made only from a `Viewer` (`Viewer::readability`), which
//! only the registry makes. Each store renders the same `Rule`, atom by
//! atom, with no rule of its own: the registry to SQL
//! (`registry::runs`), the embedded index to a tantivy query
//! (`index::embedded`), the Meilisearch index to a filter
//! (`index::meili::filter`), and [`Rule::admits`] evaluates it in Rust (who
//! reads a given run, and the privacy tests' model).
//!
//! Usage is counted by the same rule ([`UsageReach`]): a member's report
//! counts their own runs; an admin's family report counts every member's
//! figures and tells of a run what names its work (conversation, project,
//! machine) only where [`Readability::rule`] admits it.
//!
//! Reads that must see every member's runs (reindex, doctor, the operator's
//! forget) take an [`Operator`] instead, which only the operator's commands
//! make (`cli`); the web and API layers never hold one.

use kith_shared::ids::UserId;

/// What a grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantScope {
    /// The run and its descendants.
    Run(String),
    /// Every run of the grantor with this tag.
    Tag(String),
}

impl GrantScope {
    /// `run:<id>` or `tag:<tag>`.
    pub fn parse(s: &str) -> Option<Self> {
        let (kind, value) = s.split_once(':')?;
        let ok = !value.is_empty() && value.len() <= 128 && !value.contains('|');
        match kind {
            "run" if ok => Some(Self::Run(value.to_owned())),
            "tag" if ok => Some(Self::Tag(value.to_owned())),
            _ => None,
        }
    }

    /// The `shares` table's `scope_kind` and `scope_value`.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            Self::Run(v) => ("run", v),
            Self::Tag(v) => ("tag", v),
        }
    }

    pub fn render(&self) -> String {
        let (k, v) = self.parts();
        format!("{k}:{v}")
    }
}

/// A live grant a viewer holds, as the rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The user id of the member who gave it: it covers only their runs.
    pub grantor: String,
    pub scope: GrantScope,
    /// A run grant that does not follow (a snapshot) covers the runs
    /// captured by this time, in kith's canonical form (so SQL compares it
    /// with `captured_at` as text); `None` covers them whenever captured.
    pub captured_until: Option<String>,
}

/// A canonical time in milliseconds since the epoch, as the indexes keep
/// capture times: a time that does not parse admits everything (the
/// registry re-checks every hit).
pub fn epoch_ms_or_max(at: &str) -> i64 {
    kith_shared::timestamp::parse(at).map_or(i64::MAX, kith_shared::timestamp::epoch_ms)
}

/// Over a `shares` row `s`: the grant is live (not revoked, not expired).
/// The registry loads a viewer's grants, and an owner's, with it.
pub const LIVE_GRANT: &str = "s.revoked_at IS NULL
    AND (s.expires_at IS NULL OR s.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))";

/// What one viewer may read: its own runs and what its live grants cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readability {
    viewer: UserId,
    grants: Vec<Grant>,
}

impl Readability {
    /// Only the registry makes one: for a `Viewer` (`Viewer::readability`),
    /// and for each grantee of a run's owner when it lists who reads the
    /// run (`registry::runs`). A test holds every other module to that.
    pub(crate) fn new(viewer: UserId, grants: Vec<Grant>) -> Self {
        Self { viewer, grants }
    }

    /// A readability for the index backends' unit tests, which have no
    /// registry.
    #[cfg(test)]
    pub fn for_tests(user: &str, grants: Vec<Grant>) -> Self {
        let id = UserId::parse(user).unwrap_or_else(|_| UserId::from_uuid_bytes([0; 16]));
        Self::new(id, grants)
    }

    pub fn viewer(&self) -> &UserId {
        &self.viewer
    }

    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The rule, for this viewer: see the module's doc.
    pub fn rule(&self) -> Rule {
        let covered: Vec<Rule> = self
            .grants
            .iter()
            .map(|g| {
                let mut all = vec![Rule::Owner(g.grantor.clone())];
                match &g.scope {
                    GrantScope::Run(id) => {
                        all.push(Rule::InSubtree(id.clone()));
                        if let Some(until) = &g.captured_until {
                            all.push(Rule::CapturedBy(until.clone()));
                        }
                    }
                    GrantScope::Tag(tag) => all.push(Rule::Tagged(tag.clone())),
                }
                Rule::All(all)
            })
            .collect();
        let owned = self.owned();
        if covered.is_empty() {
            return owned;
        }
        Rule::Any(vec![
            owned,
            Rule::All(vec![Rule::NotQuarantined, Rule::Any(covered)]),
        ])
    }

    /// The viewer's own runs: what it may forget or tag.
    pub fn owned(&self) -> Rule {
        Rule::Owner(self.viewer.to_string())
    }

    /// The members other than the viewer some of whose runs the rule may
    /// admit: the givers of the viewer's grants (a grant covers only its
    /// giver's runs). No run of any other member is the viewer's to read,
    /// whatever the run, so a family usage report may sum theirs without
    /// asking of each run.
    pub fn read_through_grants(&self) -> Vec<String> {
        let viewer = self.viewer.to_string();
        let mut givers: Vec<String> = self
            .grants
            .iter()
            .map(|g| g.grantor.clone())
            .filter(|g| *g != viewer)
            .collect();
        givers.sort_unstable();
        givers.dedup();
        givers
    }
}

/// Whose usage a report counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageReach {
    /// The viewer's own runs, all of each.
    Own,
    /// Every member's runs: their tokens, dollars, agent, model, time and
    /// member; their conversation, project and machine only where the
    /// viewer's rule admits the run (what someone spent is not what they
    /// worked on).
    Family,
}

/// Why a family report is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyUsageRefused {
    /// Only an admin sees members' usage.
    NotAdmin,
    /// Central's config keeps members' usage from admins too.
    Off,
}

impl UsageReach {
    /// The reach of a report asking for the family's usage (`family`) or
    /// the viewer's own, for a viewer who is an admin or not, with central
    /// letting admins see members' usage or not.
    pub fn decide(
        family: bool,
        is_admin: bool,
        admins_see_members: bool,
    ) -> Result<Self, FamilyUsageRefused> {
        match (family, is_admin, admins_see_members) {
            (false, _, _) => Ok(Self::Own),
            (true, false, _) => Err(FamilyUsageRefused::NotAdmin),
            (true, true, false) => Err(FamilyUsageRefused::Off),
            (true, true, true) => Ok(Self::Family),
        }
    }
}

impl Readability {
    /// The runs whose usage a report of `reach` counts: the viewer's own,
    /// or (`None`) every member's.
    pub fn usage_counted(&self, reach: UsageReach) -> Option<Rule> {
        match reach {
            UsageReach::Own => Some(self.owned()),
            UsageReach::Family => None,
        }
    }
}

/// The rule as data, over one run. A backend renders each variant and
/// nothing more; `Any` is never empty (`Readability::rule` leaves out what
/// would be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Any(Vec<Rule>),
    All(Vec<Rule>),
    /// The run's owner is this user id.
    Owner(String),
    /// The run's ancestry (root to itself) names this run id.
    InSubtree(String),
    /// The run carries this tag.
    Tagged(String),
    /// The run is not quarantined.
    NotQuarantined,
    /// The run was captured at or before this canonical time.
    CapturedBy(String),
}

/// What the rule reads of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    pub owner: &'a str,
    /// `|root|...|parent|self|`.
    pub ancestry: &'a str,
    pub tags: &'a [String],
    pub quarantined: bool,
    /// Canonical.
    pub captured_at: &'a str,
}

impl Rule {
    /// Whether the rule admits `run`.
    pub fn admits(&self, run: &RunFacts<'_>) -> bool {
        match self {
            Self::Any(rules) => rules.iter().any(|r| r.admits(run)),
            Self::All(rules) => rules.iter().all(|r| r.admits(run)),
            Self::Owner(user) => run.owner == user,
            Self::InSubtree(id) => run.ancestry.contains(&format!("|{id}|")),
            Self::Tagged(tag) => run.tags.iter().any(|t| t == tag),
            Self::NotQuarantined => !run.quarantined,
            Self::CapturedBy(until) => run.captured_at <= until.as_str(),
        }
    }
}

/// The capability to read every member's runs: reindex, doctor, the
/// operator's forget, the recovery at start, the indexer's reads of the
/// chains it indexes. Only the operator's commands (`cli`), the service's
/// start (`serve`) and the indexer make one (a test below holds every other
/// module to that), so no handler or page can reach a read that takes it.
#[derive(Debug)]
pub struct Operator(());

impl Operator {
    /// For the operator's commands, the service's start and the indexer only.
    pub(crate) fn for_operator_commands() -> Self {
        Self(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str) -> UserId {
        UserId::parse(id).unwrap_or_else(|e| panic!("{e}"))
    }

    fn grant(grantor: &str, scope: GrantScope, until: Option<&str>) -> Grant {
        Grant {
            grantor: grantor.to_owned(),
            scope,
            captured_until: until.map(str::to_owned),
        }
    }

    fn run<'a>(owner: &'a str, ancestry: &'a str, tags: &'a [String], q: bool) -> RunFacts<'a> {
        RunFacts {
            owner,
            ancestry,
            tags,
            quarantined: q,
            captured_at: "2026-05-01T00:00:00.000Z",
        }
    }

    #[test]
    fn the_rule_reads_owned_runs_and_what_a_live_grant_covers_and_nothing_else() {
        let family = ["family".to_owned()];
        let none: [String; 0] = [];
        let bob = Readability::new(
            user("ubob"),
            vec![
                grant("ualice", GrantScope::Run("r1".into()), None),
                grant("ualice", GrantScope::Tag("family".into()), None),
                grant(
                    "ucarol",
                    GrantScope::Run("r9".into()),
                    Some("2026-04-01T00:00:00.000Z"),
                ),
            ],
        )
        .rule();
        let cases = [
            ("bob's own run", run("ubob", "|r5|", &none, false), true),
            (
                "bob's own, quarantined",
                run("ubob", "|r5|", &none, true),
                true,
            ),
            (
                "under alice's grant",
                run("ualice", "|r1|r2|", &none, false),
                true,
            ),
            (
                "alice's, tagged",
                run("ualice", "|r7|", &family, false),
                true,
            ),
            (
                "alice's, quarantined",
                run("ualice", "|r1|", &none, true),
                false,
            ),
            (
                "alice's, outside",
                run("ualice", "|r7|", &none, false),
                false,
            ),
            (
                "r1 id, another owner",
                run("ucarol", "|r1|", &none, false),
                false,
            ),
            (
                "tag of another owner",
                run("udave", "|r3|", &family, false),
                false,
            ),
            (
                "after carol's snapshot",
                run("ucarol", "|r9|", &none, false),
                false,
            ),
            (
                "a prefix of an id is no id",
                run("ualice", "|r10|", &none, false),
                false,
            ),
        ];
        for (what, facts, want) in cases {
            assert_eq!(bob.admits(&facts), want, "{what}");
        }
        let mut early = run("ucarol", "|r9|", &none, false);
        early.captured_at = "2026-03-01T00:00:00.000Z";
        assert!(bob.admits(&early), "before carol's snapshot");
    }

    #[test]
    fn only_an_admin_counts_the_familys_usage_and_only_when_central_lets_them() {
        use FamilyUsageRefused::*;
        let cases = [
            // (family, admin, admins see members) -> reach
            ((false, false, true), Ok(UsageReach::Own)),
            ((false, true, false), Ok(UsageReach::Own)),
            ((true, false, true), Err(NotAdmin)),
            ((true, false, false), Err(NotAdmin)),
            ((true, true, false), Err(Off)),
            ((true, true, true), Ok(UsageReach::Family)),
        ];
        for ((family, admin, on), want) in cases {
            assert_eq!(
                UsageReach::decide(family, admin, on),
                want,
                "{family} {admin} {on}"
            );
        }
        let bob = Readability::new(user("ubob"), vec![]);
        assert_eq!(
            bob.usage_counted(UsageReach::Own),
            Some(Rule::Owner("ubob".into()))
        );
        assert_eq!(bob.usage_counted(UsageReach::Family), None);
    }

    #[test]
    fn no_run_of_a_member_who_gave_no_grant_is_admitted() {
        let (alice, bob, carol) = (user("ualice"), user("ubob"), user("ucarol"));
        let grants = vec![
            grant(&bob.to_string(), GrantScope::Tag("x".into()), None),
            grant(&bob.to_string(), GrantScope::Run("r1".into()), None),
            grant(&alice.to_string(), GrantScope::Run("r2".into()), None),
        ];
        let alices = Readability::new(alice.clone(), grants);
        assert_eq!(alices.read_through_grants(), [bob.to_string()]);
        let rule = alices.rule();
        let tags = ["x".to_owned()];
        for quarantined in [false, true] {
            for (ancestry, tags) in [("|r1|", &tags[..]), ("|r2|", &[][..]), ("|r9|", &tags[..])] {
                let of = |owner: &str| rule.admits(&run(owner, ancestry, tags, quarantined));
                assert!(!of(&carol.to_string()), "carol gave alice nothing");
                assert!(of(&alice.to_string()), "alice's own");
            }
        }
        assert!(rule.admits(&run(&bob.to_string(), "|r1|", &[], false)));
        assert!(Readability::new(carol, Vec::new())
            .read_through_grants()
            .is_empty());
    }

    #[test]
    fn a_viewer_without_grants_reads_its_own_runs_only() {
        let alone = Readability::new(user("ubob"), vec![]).rule();
        assert_eq!(alone, Rule::Owner("ubob".into()));
    }

    /// Where each file of `src/` (its code before its unit tests) says
    /// `needle`, by path.
    fn files_saying(needle: &str) -> Vec<String> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src.clone()];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{e}")) {
                let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("privacy.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    // Unit tests may make anything: they hold no request.
                    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                    if code.contains(needle) {
                        let rel = path.strip_prefix(&src).unwrap_or(&path);
                        found.push(rel.display().to_string());
                    }
                }
            }
        }
        found.sort();
        found
    }

    /// The `Operator` capability is made where the module's doc says, and a
    /// `Readability` only by the registry (for a viewer, and for an owner's
    /// grantees when it lists a run's readers): nowhere else.
    #[test]
    fn only_the_registry_makes_a_readability_and_only_the_operator_paths_an_operator() {
        assert_eq!(
            files_saying(concat!("for_operator_", "commands()")),
            ["cli.rs", "indexer/worker.rs", "serve.rs"]
        );
        assert_eq!(
            files_saying(concat!("Readability::", "new(")),
            ["registry/runs.rs", "registry/viewer.rs"]
        );
    }
}
