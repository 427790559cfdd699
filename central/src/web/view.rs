//! What the templates show: one struct per page, and the plain values it
//! needs, made from the API's own types (askama escapes every value).

use askama::Template;
use kith_proto::{Conversation, ConversationTurn, InlineSubagent, SearchGroup, Share, ToolCall};

use crate::registry::{MachineRow, UserRow};

/// The signed-in part of every page's header.
pub(super) struct Chrome {
    pub handle: String,
    pub csrf: String,
    pub is_admin: bool,
}

#[derive(Template)]
#[template(path = "error.html")]
pub(super) struct ErrorPage {
    pub chrome: Option<Chrome>,
    pub heading: String,
    pub message: String,
}

#[derive(Template)]
#[template(path = "signin.html")]
pub(super) struct SignInPage {
    pub chrome: Option<Chrome>,
    pub error: Option<String>,
    pub csrf: String,
    pub handle: String,
}

/// The page a `kith web` link opens: the handle it signs in, and a button.
#[derive(Template)]
#[template(path = "signin_link.html")]
pub(super) struct SignInLinkPage {
    pub chrome: Option<Chrome>,
    pub handle: String,
    pub token: String,
    pub csrf: String,
}

#[derive(Template)]
#[template(path = "search.html")]
pub(super) struct SearchPage {
    pub chrome: Option<Chrome>,
    pub q: String,
    /// (value, label, selected)
    pub modes: Vec<(&'static str, &'static str, bool)>,
    pub filters: Vec<Filter>,
    pub filters_open: bool,
    pub degraded: Option<String>,
    /// No hit clears the relevance floor (and the weak ones were not asked
    /// for): the page says so instead of listing them.
    pub nothing_relevant: bool,
    /// This search again, weak matches shown.
    pub weak_href: String,
    pub pages: Paging,
    pub groups: Vec<GroupView>,
}

/// One field of the search form, with the values it may take (offered as
/// a datalist).
pub(super) struct Filter {
    pub name: &'static str,
    pub label: &'static str,
    pub value: String,
    /// The input's type: `text` or `date`.
    pub kind: &'static str,
    pub values: Vec<String>,
}

/// Where a page of results sits: its first and last conversation (1-based)
/// and the links to the pages either side.
pub(super) struct Paging {
    pub first: usize,
    pub last: usize,
    pub prev: Option<String>,
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "list.html")]
pub(super) struct ListPage {
    pub chrome: Option<Chrome>,
    pub heading: &'static str,
    pub empty: &'static str,
    pub rows: Vec<ConversationView>,
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "conversation.html")]
pub(super) struct ConversationPage {
    pub chrome: Option<Chrome>,
    pub csrf: String,
    pub c: ConversationView,
    /// The viewer's own conversation: it may be shared from here.
    pub own: bool,
    /// The command that continues it on any of the owner's machines.
    pub resume: Option<String>,
    pub total: u64,
    pub turns: Vec<TurnView>,
    pub prev: Option<String>,
    pub next: Option<String>,
    pub subagents: Vec<ConversationView>,
    /// Subagents whose turns are inside this conversation's own (Copilot's).
    pub inline: Vec<InlineSubagentView>,
}

#[derive(Template)]
#[template(path = "shares.html")]
pub(super) struct SharesPage {
    pub chrome: Option<Chrome>,
    pub csrf: String,
    pub given: Vec<ShareView>,
    pub received: Vec<ShareView>,
}

#[derive(Template)]
#[template(path = "audit.html")]
pub(super) struct AuditPage {
    pub chrome: Option<Chrome>,
    /// (at, reader, what, the conversation's id or the run's, its title)
    pub rows: Vec<(String, String, String, String, String)>,
    /// The cursor of the older readings, when there are more.
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "machines.html")]
pub(super) struct MachinesPage {
    pub chrome: Option<Chrome>,
    pub csrf: String,
    pub heading: &'static str,
    /// Shown to an admin only.
    pub users: Vec<UserRow>,
    pub machines: Vec<MachineRow>,
    pub me: kith_shared::ids::UserId,
    /// The family's health, (what, how it stands), for an admin only.
    pub health: Vec<(&'static str, String)>,
}

/// What the usage page shows: the report the form asks for, as a table,
/// and the charts of its days by model.
#[derive(Template)]
#[template(path = "usage.html")]
pub(super) struct UsagePage {
    pub chrome: Option<Chrome>,
    /// The form's choices: (value, label, selected).
    pub reports: Vec<(&'static str, &'static str, bool)>,
    pub bys: Vec<(&'static str, &'static str, bool)>,
    pub agents: Vec<(&'static str, &'static str, bool)>,
    pub since: String,
    pub until: String,
    pub timezone: String,
    /// The column of the split's value, when the report is split.
    pub group_heading: Option<&'static str>,
    pub key_heading: &'static str,
    pub rows: Vec<UsageRowView>,
    pub totals: UsageRowView,
    pub charts: Vec<super::chart::Chart>,
    /// What the charts' bars are stacked by: `model`, or `member`.
    pub stacked_by: &'static str,
    /// The zone the report's days are cut in, as central names it.
    pub zone: String,
    pub price_table: String,
    /// Models central's config prices in place of the table.
    pub price_overrides: Vec<String>,
    pub unpriced: Vec<String>,
    pub n_refused: u64,
}

/// A usage row's figures as the table shows them.
pub(super) struct UsageRowView {
    pub key: String,
    pub group: String,
    pub input: String,
    pub output: String,
    pub cache_write: String,
    pub cache_read: String,
    pub cost: String,
    /// Its models no price was known for, comma-separated.
    pub unpriced: String,
}

impl UsageRowView {
    pub(super) fn new(key: String, group: Option<String>, t: &kith_proto::UsageTotals) -> Self {
        use super::chart::{dollars, thousands};
        Self {
            key,
            group: group.unwrap_or_else(|| "—".to_owned()),
            input: thousands(t.input_tokens),
            output: thousands(t.output_tokens),
            cache_write: thousands(t.cache_write_tokens),
            cache_read: thousands(t.cache_read_tokens),
            cost: dollars(t.cost_usd),
            unpriced: t.unpriced_models.join(", "),
        }
    }
}

/// One conversation in a list or a page header.
pub(super) struct ConversationView {
    pub id: String,
    pub title: String,
    pub owner: String,
    pub machine: String,
    pub agent: &'static str,
    pub model: Option<String>,
    pub project: Option<String>,
    pub branch: Option<String>,
    pub tags: Vec<String>,
    pub when: String,
    pub turns: u64,
    pub depth: u32,
    /// `bob.test's c1a2b3c4`: the conversation it was forked from.
    pub forked_from: Option<String>,
}

impl From<Conversation> for ConversationView {
    fn from(c: Conversation) -> Self {
        Self {
            machine: c.machines_shown(),
            title: c.title.unwrap_or_else(|| "(untitled)".to_owned()),
            when: when(&c.last_activity_at),
            id: c.id,
            owner: c.owner,
            agent: c.agent_runtime.as_str(),
            model: c.model,
            project: c.cwd,
            branch: c.git_branch,
            tags: c.tags,
            turns: c.turn_count,
            depth: c.depth,
            forked_from: c.forked_from.map(|f| {
                format!(
                    "{}'s {}",
                    f.owner,
                    f.conversation_id.get(..9).unwrap_or(&f.conversation_id)
                )
            }),
        }
    }
}

/// A subagent that ran inside its conversation's transcript.
pub(super) struct InlineSubagentView {
    pub name: String,
    pub description: Option<String>,
    pub turns: u64,
    pub when: Option<String>,
}

impl From<&InlineSubagent> for InlineSubagentView {
    fn from(s: &InlineSubagent) -> Self {
        Self {
            name: s.name.clone().unwrap_or_else(|| s.id.clone()),
            description: s.description.clone(),
            turns: s.turn_count,
            when: s.started_at.as_deref().map(when),
        }
    }
}

/// One conversation's hits.
pub(super) struct GroupView {
    pub conversation_id: String,
    pub title: String,
    pub owner: String,
    pub machine: String,
    pub agent: &'static str,
    pub model: Option<String>,
    pub project: Option<String>,
    pub branch: Option<String>,
    pub tags: Vec<String>,
    pub when: String,
    /// Below the relevance floor (every hit weak).
    pub weak: bool,
    pub hits: Vec<HitView>,
}

pub(super) struct HitView {
    pub role: String,
    /// The inline subagent whose turns hold the hit, by name.
    pub subagent: Option<String>,
    /// The hit on its conversation's page: the page holding its turn, at
    /// the turn's anchor.
    pub href: String,
    /// The snippet's pieces, each marked when it matched.
    pub snippet: Vec<(String, bool)>,
}

impl From<SearchGroup> for GroupView {
    fn from(g: SearchGroup) -> Self {
        let group = g.conversation_id.clone();
        Self {
            title: g.title.unwrap_or_else(|| "(untitled)".to_owned()),
            when: when(&g.last_activity_at),
            conversation_id: g.conversation_id,
            owner: g.owner,
            machine: g.machine,
            agent: g.agent_runtime.as_str(),
            model: g.model,
            project: g.cwd,
            branch: g.git_branch,
            tags: g.tags,
            weak: g.weak,
            hits: g
                .hits
                .into_iter()
                .map(|h| HitView {
                    subagent: h.subagent.map(|s| s.name.unwrap_or(s.id)),
                    href: format!(
                        "/c/{}?run={}&line={}#{}",
                        h.conversation_id.as_deref().unwrap_or(&group),
                        h.run_id,
                        h.line_start,
                        anchor(&h.run_id, h.line_start)
                    ),
                    snippet: highlights(&h.snippet),
                    role: h.role,
                })
                .collect(),
        }
    }
}

/// One turn of the reader.
pub(super) struct TurnView {
    pub anchor: String,
    /// Its place in the conversation, 1-based, counted across deltas.
    pub number: u64,
    /// `12` or `12-20`: the lines of its delta's JSONL.
    pub lines: String,
    pub role: String,
    pub text: String,
    /// The text as HTML: markdown, rendered safely (`markdown::render`).
    pub html: String,
    pub timestamp: Option<String>,
    pub tool: Option<ToolCall>,
    /// The tool call's change, a line each (empty when it changed no file).
    pub diff: Vec<DiffLine>,
    /// The inline subagent whose turn it is, by name.
    pub subagent: Option<String>,
    /// The machine the turn was written on.
    pub machine: Option<String>,
    /// Set on the first turn written on another machine than the turn
    /// before it (a conversation continued with `kith resume`).
    pub moved_to: Option<String>,
}

/// One line of a tool call's diff, with its class: `diff-add`, `diff-del`,
/// `diff-file` (a file's header), `diff-hunk` or `diff-same`.
pub(super) struct DiffLine {
    pub class: &'static str,
    pub text: String,
}

/// A unified diff's lines, each classed for the reader.
pub(super) fn diff_lines(diff: &str) -> Vec<DiffLine> {
    use kith_shared::transcript::DiffLineKind as Kind;
    diff.lines()
        .map(|line| DiffLine {
            class: match Kind::of(line) {
                Kind::File => "diff-file",
                Kind::Hunk => "diff-hunk",
                Kind::Added => "diff-add",
                Kind::Removed => "diff-del",
                Kind::Same => "diff-same",
            },
            text: line.to_owned(),
        })
        .collect()
}

impl TurnView {
    /// The `number`th turn of a conversation whose inline subagents are
    /// `inline`.
    pub(super) fn new(t: ConversationTurn, number: u64, inline: &[InlineSubagent]) -> Self {
        let subagent = t.subagent.as_deref().map(|id| {
            inline
                .iter()
                .find(|s| s.id == id)
                .and_then(|s| s.name.clone())
                .unwrap_or_else(|| id.to_owned())
        });
        Self {
            subagent,
            number,
            machine: t.machine.clone(),
            moved_to: None,
            anchor: anchor(&t.run_id, t.line_start),
            lines: if t.line_end > t.line_start {
                format!("{}-{}", t.line_start, t.line_end)
            } else {
                t.line_start.to_string()
            },
            // A tool turn shows its call, diff and output instead.
            html: if t.tool.is_none() {
                super::markdown::render(&t.text)
            } else {
                String::new()
            },
            text: t.text,
            role: t.role,
            timestamp: t.timestamp.as_deref().map(when),
            diff: t
                .tool
                .as_ref()
                .and_then(|tool| tool.diff.as_deref())
                .map(diff_lines)
                .unwrap_or_default(),
            tool: t.tool,
        }
    }
}

/// One grant, as the shares page lists it.
pub(super) struct ShareView {
    pub id: String,
    pub scope: String,
    /// Where the shared conversation or run reads (none for a tag).
    pub href: Option<String>,
    pub grantor: String,
    pub grantee: String,
    pub state: String,
    pub follow: bool,
    pub expires_at: Option<String>,
}

impl From<Share> for ShareView {
    fn from(s: Share) -> Self {
        let run = s.scope.strip_prefix("run:").map(str::to_owned);
        let scope = match (&run, s.scope.strip_prefix("tag:")) {
            (Some(_), _) => s
                .title
                .unwrap_or_else(|| "an untitled conversation".to_owned()),
            (None, Some(tag)) => format!("everything tagged {tag}"),
            (None, None) => s.scope.clone(),
        };
        Self {
            href: run.map(|run| format!("/c/{}", s.conversation_id.unwrap_or(run))),
            id: s.id,
            scope,
            grantor: s.grantor,
            grantee: s.grantee,
            state: s.state,
            follow: s.follow,
            expires_at: s.expires_at.as_deref().map(when),
        }
    }
}

/// The id of a turn on its conversation's page: its run and first line.
pub(super) fn anchor(run_id: &str, line: u64) -> String {
    format!("{run_id}-L{line}")
}

/// A timestamp to the minute, as people read it: `2026-05-01 10:00`.
pub(super) fn when(ts: &str) -> String {
    let minute = ts.get(..16).unwrap_or(ts);
    minute.replacen('T', " ", 1)
}

/// A search snippet cut at its `«` `»` match markers.
pub(super) fn highlights(snippet: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = snippet;
    while let Some(open) = rest.find('«') {
        let (before, after) = rest.split_at(open);
        let after = &after['«'.len_utf8()..];
        if !before.is_empty() {
            out.push((before.to_owned(), false));
        }
        match after.find('»') {
            Some(close) => {
                out.push((after[..close].to_owned(), true));
                rest = &after[close + '»'.len_utf8()..];
            }
            None => {
                rest = after;
                break;
            }
        }
    }
    if !rest.is_empty() {
        out.push((rest.to_owned(), false));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_cut_at_their_markers() {
        let cases: [(&str, &[(&str, bool)]); 4] = [
            ("plain", &[("plain", false)]),
            (
                "a «walrus» b",
                &[("a ", false), ("walrus", true), (" b", false)],
            ),
            ("«x»«y»", &[("x", true), ("y", true)]),
            (
                "open «never closed",
                &[("open ", false), ("never closed", false)],
            ),
        ];
        for (input, want) in cases {
            let got = highlights(input);
            let got: Vec<(&str, bool)> = got.iter().map(|(t, m)| (t.as_str(), *m)).collect();
            assert_eq!(got, want, "{input}");
        }
    }

    #[test]
    fn a_diffs_lines_are_classed_by_their_mark() {
        let lines = diff_lines("--- a/x.rs\n+++ b/x.rs\n@@ -1 +1 @@\n-old\n+new\n same\n--x");
        let got: Vec<(&str, &str)> = lines.iter().map(|l| (l.class, l.text.as_str())).collect();
        assert_eq!(
            got,
            [
                ("diff-file", "--- a/x.rs"),
                ("diff-file", "+++ b/x.rs"),
                ("diff-hunk", "@@ -1 +1 @@"),
                ("diff-del", "-old"),
                ("diff-add", "+new"),
                ("diff-same", " same"),
                ("diff-del", "--x"),
            ]
        );
    }

    #[test]
    fn an_inline_subagents_turn_is_named() {
        let turn = |subagent: Option<&str>| ConversationTurn {
            run_id: "r1".into(),
            line_start: 3,
            line_end: 4,
            role: "assistant".into(),
            text: "found it".into(),
            timestamp: None,
            tool: None,
            subagent: subagent.map(Into::into),
            machine: None,
        };
        let inline = [InlineSubagent {
            id: "toolu_1".into(),
            name: Some("explore".into()),
            description: None,
            turn_count: 1,
            started_at: None,
            ended_at: None,
        }];
        let named = |s| TurnView::new(turn(s), 1, &inline).subagent;
        assert_eq!(named(Some("toolu_1")).as_deref(), Some("explore"));
        assert_eq!(named(Some("toolu_2")).as_deref(), Some("toolu_2"));
        assert_eq!(named(None), None);
    }

    #[test]
    fn a_conversation_page_lists_its_inline_subagents_and_only_then_a_subagents_section() {
        let page = |inline: Vec<InlineSubagentView>| ConversationPage {
            chrome: None,
            csrf: String::new(),
            c: ConversationView {
                id: "c1".into(),
                title: "Fix the report".into(),
                owner: "alice.test".into(),
                machine: "laptop".into(),
                agent: "claude-code",
                model: None,
                project: None,
                branch: None,
                tags: Vec::new(),
                when: "2026-05-14 18:02".into(),
                turns: 9,
                depth: 0,
                forked_from: None,
            },
            own: true,
            resume: None,
            total: 0,
            turns: Vec::new(),
            prev: None,
            next: None,
            subagents: Vec::new(),
            inline,
        };
        let explore = InlineSubagentView::from(&InlineSubagent {
            id: "toolu_task_01".into(),
            name: Some("explore".into()),
            description: Some("Check other <ordinal> uses".into()),
            turn_count: 3,
            started_at: Some("2026-05-14T18:02:26.100Z".into()),
            ended_at: None,
        });
        let html = page(vec![explore]).render().unwrap_or_default();
        assert!(html.contains("<h2>Subagents</h2>"), "{html}");
        assert!(html.contains("explore"), "{html}");
        assert!(
            html.contains("Check other &#60;ordinal&#62; uses"),
            "{html}"
        );
        assert!(html.contains("3 turns in this conversation"), "{html}");
        assert!(html.contains("2026-05-14 18:02"), "{html}");
        assert!(!html.contains("toolu_task_01"), "named, not by id: {html}");

        let html = page(Vec::new()).render().unwrap_or_default();
        assert!(!html.contains("Subagents"), "{html}");
    }

    #[test]
    fn pages_escape_what_they_show() {
        let page = ErrorPage {
            chrome: None,
            heading: "<script>alert(1)</script>".into(),
            message: "a & b".into(),
        };
        let html = page.render().unwrap_or_default();
        assert!(html.contains("&#60;script&#62;alert(1)"), "{html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("a &#38; b"), "{html}");
    }
}
