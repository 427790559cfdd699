//! Meilisearch filter expressions for a search: the viewer's readability
//! clause first, always, then the request's filters. Pure string building,
//! so the escaping that keeps a hostile value from changing the expression
//! is tested without a server.

use super::schema::key;
use crate::index::{normalize_prefix, Filters};
use crate::privacy::{self, Readability, Rule};

/// A value as a Meilisearch filter string literal: double-quoted, with `\`
/// and `"` escaped. Meilisearch's parser unescapes `\"` inside the quotes and
/// then `\\`, so every value, whatever it holds, stays one literal.
pub(super) fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn eq(attribute: &str, value: &str) -> String {
    format!("{attribute} = {}", quote(value))
}

/// `attribute` is exactly `value`, as a user's string (a tag, a machine, a
/// path), through its `schema::key` in `keyed`: Meilisearch compares
/// strings loosely (`schema::key`). A document put by an older kith-central
/// has no keys and is compared loosely, as then, until `reindex`.
fn exactly(keyed: &str, attribute: &str, value: &str) -> String {
    format!(
        "({keyed} = {} OR ({keyed} NOT EXISTS AND {}))",
        quote(&key(value)),
        eq(attribute, value)
    )
}

/// What the viewer may read, as the index knows it: `privacy::Rule`
/// written as a Meilisearch filter. The registry re-checks every hit
/// afterwards. A document put by an older kith-central has no capture time:
/// as before, it counts until `reindex`.
pub(super) fn readable_by(readability: &Readability) -> String {
    render(&readability.rule())
}

fn render(rule: &Rule) -> String {
    let join = |rules: &[Rule], op: &str| {
        let parts: Vec<String> = rules.iter().map(render).collect();
        format!("({})", parts.join(op))
    };
    match rule {
        Rule::Any(rules) => join(rules, " OR "),
        Rule::All(rules) => join(rules, " AND "),
        Rule::Owner(user) => eq("owner", user),
        Rule::InSubtree(run) => eq("ancestry", run),
        Rule::Tagged(tag) => exactly("tag_keys", "tags", tag),
        // `NOT x = true`, not `x = false`: a document put before the field
        // existed has none.
        Rule::NotQuarantined => "NOT quarantined = true".to_owned(),
        Rule::CapturedBy(at) => format!(
            "(captured_ms <= {} OR captured_ms NOT EXISTS)",
            privacy::epoch_ms_or_max(at)
        ),
    }
}

/// The whole filter of a search: readability AND every requested filter
/// AND `extra` (backend-internal conditions such as the vector model).
pub(super) fn search_filter(viewer: &Readability, filters: &Filters, extra: &[String]) -> String {
    let mut all = vec![readable_by(viewer)];
    if let Some(rt) = filters.runtime {
        all.push(eq("runtime", rt.as_str()));
    }
    if let Some(m) = &filters.machine {
        all.push(exactly("machine_key", "machine", m));
    }
    if let Some(c) = &filters.conversation_id {
        all.push(eq("conversation_id", c));
    }
    if let Some(r) = &filters.root_run_id {
        all.push(eq("root_run_id", r));
    }
    if let Some(roots) = &filters.roots {
        let list: Vec<String> = roots.iter().map(|r| quote(r)).collect();
        all.push(format!("root_run_id IN [{}]", list.join(", ")));
    }
    for t in &filters.tags {
        all.push(exactly("tag_keys", "tags", t));
    }
    if let Some(p) = &filters.cwd_prefix {
        // `cwd_prefixes` holds every ancestor of the run's cwd, so a prefix
        // matches whole path components only (`/home/a` not `/home/ab`).
        all.push(exactly("cwd_keys", "cwd_prefixes", &normalize_prefix(p)));
    }
    if let Some(since) = filters.since_ms {
        all.push(format!("started_ms >= {since}"));
    }
    if let Some(until) = filters.until_ms {
        all.push(format!("started_ms < {until}"));
    }
    if !filters.include_superseded {
        // `NOT x = true`, not `x = false`: chunks indexed before the field
        // existed have none, and are not superseded.
        all.push("NOT superseded = true".to_owned());
    }
    all.extend(extra.iter().cloned());
    all.join(" AND ")
}

/// The chunks of these runs (to delete them before their replacement).
pub(super) fn runs_filter(run_ids: &[String]) -> String {
    let quoted: Vec<String> = run_ids.iter().map(|id| quote(id)).collect();
    format!("run_id IN [{}]", quoted.join(", "))
}

/// Only chunks whose vector came from `model` (another model's vectors are
/// never ranked against this model's query vector).
pub(super) fn vector_model_is(model: &str) -> String {
    eq("vector_model", model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::{Grant, GrantScope};
    use kith_proto::AgentRuntime;
    use kith_shared::ids::UserId;

    fn viewer(grants: Vec<Grant>) -> Readability {
        let alice = UserId::parse("ualice").unwrap_or_else(|e| panic!("{e}"));
        Readability::new(alice, grants)
    }

    /// The filter with every quoted literal replaced by `?`, honouring
    /// escapes as Meilisearch's parser does: two filters with the same
    /// skeleton have the same structure, whatever their values hold.
    fn skeleton(filter: &str) -> String {
        let mut out = String::new();
        let mut chars = filter.chars();
        while let Some(c) = chars.next() {
            if c != '"' {
                out.push(c);
                continue;
            }
            out.push('?');
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => break,
                    _ => {}
                }
            }
        }
        out
    }

    #[test]
    fn quoting_escapes_quotes_and_backslashes() {
        for (value, want) in [
            ("laptop", r#""laptop""#),
            (r#"a"b"#, r#""a\"b""#),
            (r"a\b", r#""a\\b""#),
            (r"ends\", r#""ends\\""#),
            (r#"\""#, r#""\\\"""#),
            ("", r#""""#),
            ("new\nline", "\"new\nline\""),
        ] {
            assert_eq!(quote(value), want, "{value:?}");
        }
    }

    #[test]
    fn readability_is_owner_or_a_grant_of_its_grantor() {
        let grants = vec![
            Grant {
                grantor: "ubob".into(),
                scope: GrantScope::Run("r1".into()),
                captured_until: None,
            },
            Grant {
                grantor: "ubob".into(),
                scope: GrantScope::Run("r7".into()),
                captured_until: Some("2023-11-14T22:13:20.000Z".into()),
            },
            Grant {
                grantor: "ucarol".into(),
                scope: GrantScope::Tag("family".into()),
                captured_until: None,
            },
        ];
        assert_eq!(readable_by(&viewer(vec![])), r#"owner = "ualice""#);
        assert_eq!(
            readable_by(&viewer(grants)),
            [
                r#"(owner = "ualice" OR (NOT quarantined = true"#,
                r#" AND ((owner = "ubob" AND ancestry = "r1")"#,
                r#" OR (owner = "ubob" AND ancestry = "r7""#,
                r#" AND (captured_ms <= 1700000000000 OR captured_ms NOT EXISTS))"#,
                r#" OR (owner = "ucarol" AND (tag_keys = "#,
                r#""d34a569ab7aaa54dacd715ae64953455d86b768846cd0085ef4e9e7471489b7b""#,
                r#" OR (tag_keys NOT EXISTS AND tags = "family"))))))"#,
            ]
            .concat()
        );
    }

    /// A user's string is compared by its key, and loosely only in a
    /// document put before keys existed.
    #[test]
    fn a_users_string_is_matched_by_its_key() {
        let k = key("Family");
        assert_eq!(k.len(), 64);
        assert_ne!(k, key("family"));
        assert_eq!(
            exactly("tag_keys", "tags", "Family"),
            format!(r#"(tag_keys = "{k}" OR (tag_keys NOT EXISTS AND tags = "Family"))"#)
        );
    }

    #[test]
    fn every_filter_is_anded_after_readability() {
        let filters = Filters {
            runtime: Some(AgentRuntime::Codex),
            machine: Some("laptop".into()),
            conversation_id: Some("c1".into()),
            root_run_id: Some("r0".into()),
            tags: vec!["a".into(), "b".into()],
            cwd_prefix: Some("/home/alice/".into()),
            since_ms: Some(1000),
            roots: None,
            until_ms: Some(2000),
            include_superseded: false,
        };
        assert_eq!(
            search_filter(&viewer(vec![]), &filters, &[vector_model_is("m@1")]),
            [
                r#"owner = "ualice" AND runtime = "codex" AND (machine_key = "#,
                r#""5eec0dc419aa8337bf725f026fda9c78c1cb1c642eeaff9d6e1112f37783e942""#,
                r#" OR (machine_key NOT EXISTS AND machine = "laptop"))"#,
                r#" AND conversation_id = "c1" AND root_run_id = "r0" AND (tag_keys = "#,
                r#""ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb""#,
                r#" OR (tag_keys NOT EXISTS AND tags = "a")) AND (tag_keys = "#,
                r#""3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d""#,
                r#" OR (tag_keys NOT EXISTS AND tags = "b")) AND (cwd_keys = "#,
                r#""612b6fc44e3094a36043870b929ac5fb00daf8513229001e92a639fb827cac26""#,
                r#" OR (cwd_keys NOT EXISTS AND cwd_prefixes = "/home/alice"))"#,
                " AND started_ms >= 1000 AND started_ms < 2000 AND NOT superseded = true",
                r#" AND vector_model = "m@1""#,
            ]
            .concat()
        );
        let everything = Filters {
            include_superseded: true,
            ..Filters::default()
        };
        assert_eq!(
            search_filter(&viewer(vec![]), &everything, &[]),
            r#"owner = "ualice""#
        );
    }

    #[test]
    fn hostile_values_cannot_change_the_expression() {
        let hostile = [
            r#"x" OR owner != "ualice"#,
            r#"x\" OR owner EXISTS OR tags = \"y"#,
            r"x\",
            ") OR (owner EXISTS",
            "x\" OR \"1\" = \"1",
        ];
        for value in hostile {
            let benign_grant = Grant {
                grantor: "ubob".into(),
                scope: GrantScope::Tag("t".into()),
                captured_until: None,
            };
            let hostile_grant = Grant {
                grantor: value.into(),
                scope: GrantScope::Tag(value.into()),
                captured_until: None,
            };
            let benign_filters = Filters {
                machine: Some("m".into()),
                tags: vec!["t".into()],
                cwd_prefix: Some("/p".into()),
                ..Filters::default()
            };
            let hostile_filters = Filters {
                machine: Some(value.into()),
                tags: vec![value.into()],
                cwd_prefix: Some(value.into()),
                ..Filters::default()
            };
            let benign = search_filter(&viewer(vec![benign_grant]), &benign_filters, &[]);
            let attacked = search_filter(&viewer(vec![hostile_grant]), &hostile_filters, &[]);
            assert_eq!(
                skeleton(&attacked),
                skeleton(&benign),
                "{value:?}: {attacked}"
            );
            assert_eq!(
                skeleton(&runs_filter(&[value.into()])),
                "run_id IN [?]",
                "{value:?}"
            );
        }
    }
}
