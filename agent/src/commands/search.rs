//! `kith search`: the question and its filters -> `POST /api/search` ->
//! the hits by conversation (`render::conversation`), every hit as ranked
//! (`--group none`, rendered here), or central's answer as JSON.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Result;
use kith_proto::{
    AgentRuntime, GroupBy, SearchFilters, SearchHit, SearchMode, SearchRequest, SearchResponse,
};
use time::OffsetDateTime;

use super::absolute;
use crate::client::Client;
use crate::render::conversation;
use crate::render::term::{age, one_line, Style};
use crate::when::{parse_since, WHEN_HINT};

/// `kith search`'s question, filters and output.
#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// What you remember, in your own words; a time in them ("yesterday",
    /// "last week", "on 7 March, 2024", "in June") ranks what happened then
    /// first.
    query: String,
    /// hybrid (words and meaning), keyword or semantic.
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: ModeArg,
    /// Only conversations active since then: 30m, 12h, 7d, 2w, today,
    /// yesterday, a date (2026-02-01) or an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Only before then: 30m, 12h, 7d, 2w (ago), today, yesterday, a date or
    /// an RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// claude-code, codex, pi, gemini, copilot, cursor, aider, opencode or other.
    #[arg(long)]
    runtime: Option<String>,
    /// A machine name.
    #[arg(long)]
    machine: Option<String>,
    /// Conversations whose tools touched this file (a path, or its last
    /// components), or a file under this folder (ending in /: src/auth/).
    #[arg(long)]
    file: Option<String>,
    /// Conversations that used this tool or skill (Bash, Edit, exec_command, ...).
    #[arg(long)]
    tool: Option<String>,
    /// Conversations that ran a shell command containing this.
    #[arg(long)]
    command: Option<String>,
    /// Conversations in this folder or below it (a path), or in a folder of
    /// this name (without a /: kith).
    #[arg(long)]
    project: Option<String>,
    /// Conversations with this tag (repeatable: every one); `kith tag list`
    /// shows yours.
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Conversations on this git branch.
    #[arg(long)]
    branch: Option<String>,
    /// Conversations of this family member (a handle).
    #[arg(long)]
    owner: Option<String>,
    /// How many conversations (or hits with --group none).
    #[arg(long, default_value_t = 10)]
    limit: u32,
    /// Skip this many first conversations (or hits), to page.
    #[arg(long, default_value_t = 0)]
    offset: u32,
    /// conversation: the best hits of each conversation; none: every hit as ranked.
    #[arg(long, value_enum, default_value = "conversation")]
    group: GroupArg,
    /// Favour recent runs: a hit's score halves every DAYS days.
    #[arg(long, value_name = "DAYS")]
    half_life: Option<f64>,
    /// 0 to 1: how much the hits should differ from one another.
    #[arg(long)]
    diversity: Option<f32>,
    /// Also what was captured before a transcript was rewritten or
    /// truncated (searched only when asked; `kith show` reads it either way).
    #[arg(long)]
    include_superseded: bool,
    /// Also what is below the relevance floor (few of your words, far in
    /// meaning), labelled weak; by default a search with nothing relevant
    /// says so instead.
    #[arg(long)]
    weak: bool,
    /// Central's whole answer as one JSON document, for scripts and agents.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum GroupArg {
    Conversation,
    None,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ModeArg {
    Hybrid,
    Keyword,
    Semantic,
}

pub(crate) fn run(args: SearchArgs, client: &Client) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let mut stdout = std::io::stdout().lock();
    let SearchArgs {
        query,
        weak,
        mode,
        since,
        until,
        runtime,
        machine,
        file,
        tool,
        command,
        project,
        tags,
        branch,
        owner,
        limit,
        offset,
        group,
        half_life,
        diversity,
        include_superseded,
        json,
    } = args;
    let when = |flag: &str, v: Option<String>| {
        v.map(|s| {
            parse_since(&s, now)
                .ok_or_else(|| crate::Error::Usage(format!("{flag} {s:?}: {WHEN_HINT}")))
        })
        .transpose()
    };
    let runtime = runtime
        .map(|r| {
            AgentRuntime::parse(&r).ok_or_else(|| {
                let known = AgentRuntime::ALL.map(AgentRuntime::as_str).join(", ");
                crate::Error::Usage(format!("--runtime {r:?}: use one of {known}"))
            })
        })
        .transpose()?;
    let req = SearchRequest {
        query,
        mode: match mode {
            ModeArg::Hybrid => SearchMode::Hybrid,
            ModeArg::Keyword => SearchMode::Keyword,
            ModeArg::Semantic => SearchMode::Semantic,
        },
        filters: SearchFilters {
            runtime,
            machine,
            since: when("--since", since)?,
            until: when("--until", until)?,
            cwd_prefix: project.map(|p| project_filter(&p)).transpose()?,
            tags,
            file,
            tool,
            command,
            branch,
            owner,
            include_superseded,
            ..SearchFilters::default()
        },
        limit: Some(limit),
        offset,
        recency_half_life_days: half_life,
        diversity,
        group: match group {
            GroupArg::Conversation => GroupBy::Conversation,
            GroupArg::None => GroupBy::None,
        },
    };
    let res: SearchResponse = client.json(client.post("/api/search").json(&req))?;
    let (since, until) = (&req.filters.since, &req.filters.until);
    if json {
        writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
    } else if res.hits.is_empty() && (since.is_some() || until.is_some()) {
        let from = since.as_deref().map(|t| format!(" since {t}"));
        let to = until.as_deref().map(|t| format!(" before {t}"));
        writeln!(
            stdout,
            "nothing you may read matches{}{}",
            from.unwrap_or_default(),
            to.unwrap_or_default()
        )?;
    } else if res.nothing_relevant && !weak {
        write!(stdout, "{}", nothing_relevant(&res))?;
    } else if req.group == GroupBy::Conversation {
        let me: Option<kith_proto::StatusResponse> = client.json(client.get("/api/status")).ok();
        let me = me.map(|s| s.user);
        let text = conversation::render_groups(&res, me.as_deref(), Style::detect(), now);
        write!(stdout, "{text}")?;
    } else {
        write!(stdout, "{}", render_search(&res, Style::detect(), now))?;
    }
    Ok(())
}

/// `--project`: a name (no `/`, not `.` or `..`) as given, else the
/// folder's absolute path.
fn project_filter(p: &str) -> Result<String> {
    if p.contains('/') || p == "." || p == ".." {
        absolute(std::path::Path::new(p))
    } else {
        Ok(p.to_owned())
    }
}

/// What a search with nothing above the relevance floor prints instead of
/// its nearest hits.
pub(crate) fn nothing_relevant(res: &SearchResponse) -> String {
    let mut out = String::new();
    if let Some(why) = &res.degraded {
        let _ = writeln!(out, "note: {why}");
    }
    let _ = writeln!(out, "nothing relevant");
    if !res.hits.is_empty() {
        let _ = writeln!(
            out,
            "({} weak match{} below the floor; --weak shows {})",
            res.hits.len(),
            if res.hits.len() == 1 { "" } else { "es" },
            if res.hits.len() == 1 { "it" } else { "them" }
        );
    }
    out
}

/// Search hits grouped by run, in the order of each run's best hit.
pub(crate) fn render_search(res: &SearchResponse, style: Style, now: OffsetDateTime) -> String {
    let mut out = String::new();
    if let Some(why) = &res.degraded {
        let _ = writeln!(out, "{}", style.dim(&format!("note: {why}")));
    }
    if res.hits.is_empty() {
        let _ = writeln!(out, "no matches");
        return out;
    }
    let mut groups: Vec<(&str, Vec<&SearchHit>)> = Vec::new();
    for hit in &res.hits {
        match groups.iter_mut().find(|(id, _)| *id == hit.run_id) {
            Some((_, hits)) => hits.push(hit),
            None => groups.push((&hit.run_id, vec![hit])),
        }
    }
    for (run_id, hits) in &groups {
        let first = hits[0];
        let title = first
            .intent
            .as_deref()
            .map(|i| one_line(i, 70))
            .unwrap_or_else(|| "(no prompt)".into());
        let _ = writeln!(
            out,
            "{} {}  {}",
            style.bold(&format!("[{}]", first.machine)),
            style.bold(&title),
            style.dim(&format!(
                "{} · {} · {run_id}{}",
                first.agent_runtime.as_str(),
                age(&first.started_at, now),
                if hits.iter().all(|h| h.weak) {
                    " · weak"
                } else {
                    ""
                }
            )),
        );
        for hit in hits {
            let _ = writeln!(
                out,
                "  {} {}",
                style.dim(&format!(
                    "L{}-{} {:>9}:",
                    hit.line_start, hit.line_end, hit.role
                )),
                style.highlight(&one_line(&hit.snippet, 200)),
            );
        }
        // Hits come in rank order, not line order: the range spans them all.
        let from = hits.iter().map(|h| h.line_start).min().unwrap_or(1);
        let to = hits.iter().map(|h| h.line_end).max().unwrap_or(from);
        let _ = writeln!(
            out,
            "  {}\n",
            style.dim(&format!("kith show {run_id} --lines {from}-{to}"))
        );
    }
    let _ = writeln!(
        out,
        "{}",
        style.dim(&format!(
            "{} hits in {:.0} ms ({})",
            res.hits.len(),
            res.timing.total_ms,
            res.backend
        ))
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::tests::{NOW, PLAIN};
    use crate::render::term::tests::assert_only_own_styling;
    use kith_proto::{RunLinks, SearchTiming};

    /// `--runtime`'s help names every agent (`AgentRuntime` is the one list).
    #[test]
    fn runtime_help_names_every_agent() {
        use clap::Args as _;
        let cmd = SearchArgs::augment_args(clap::Command::new("search"));
        let help = cmd
            .get_arguments()
            .find(|a| a.get_id() == "runtime")
            .and_then(|a| a.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        for runtime in AgentRuntime::ALL {
            assert!(help.contains(runtime.as_str()), "{runtime:?}: {help}");
        }
    }

    fn hit(run: &str, lines: (u64, u64), role: &str, snippet: &str) -> SearchHit {
        let (machine, runtime, started_at, intent) = match run {
            "run-a" => (
                "laptop",
                AgentRuntime::ClaudeCode,
                "2026-05-11T10:00:00Z",
                Some("fix the flaky\n  login test"),
            ),
            _ => ("desktop", AgentRuntime::Codex, "2026-05-08T12:00:00Z", None),
        };
        SearchHit {
            run_id: run.into(),
            chunk_id: format!("{run}:{}", lines.0),
            score: 1.0,
            role: role.into(),
            text: snippet.replace(['«', '»'], ""),
            snippet: snippet.into(),
            line_start: lines.0,
            line_end: lines.1,
            started_at: started_at.into(),
            intent: intent.map(Into::into),
            machine: machine.into(),
            agent_runtime: runtime,
            conversation_id: Some(format!("c{run}")),
            owner: "alice.test".into(),
            subagent: None,
            weak: false,
            coverage: 1.0,
            similarity: None,
            _links: RunLinks::for_run(run),
        }
    }

    fn response(hits: Vec<SearchHit>) -> SearchResponse {
        SearchResponse {
            hits,
            groups: Vec::new(),
            timing: SearchTiming {
                total_ms: 12.4,
                ..SearchTiming::default()
            },
            backend: "embedded".into(),
            embedder: "none".into(),
            degraded: None,
            nothing_relevant: false,
        }
    }

    #[test]
    fn search_groups_hits_by_run_with_badge_age_snippet_and_a_show_hint() {
        let res = response(vec![
            hit("run-a", (10, 12), "user", "why does «login» fail"),
            hit("run-b", (3, 3), "tool", "cargo test «login»"),
            hit(
                "run-a",
                (40, 45),
                "assistant",
                "the «login» mock\n   expires",
            ),
        ]);
        let want = "\
[laptop] fix the flaky login test  claude-code · 2h ago · run-a
  L10-12      user: why does «login» fail
  L40-45 assistant: the «login» mock expires
  kith show run-a --lines 10-45

[desktop] (no prompt)  codex · 3d ago · run-b
  L3-3      tool: cargo test «login»
  kith show run-b --lines 3-3

3 hits in 12 ms (embedded)
";
        assert_eq!(render_search(&res, PLAIN, NOW), want);
    }

    #[test]
    fn search_on_a_terminal_paints_badges_and_matches() {
        let res = response(vec![hit("run-b", (3, 3), "tool", "cargo «test»")]);
        let out = render_search(&res, Style { color: true }, NOW);
        assert!(out.starts_with("\x1b[1m[desktop]\x1b[0m "), "{out:?}");
        assert!(
            out.contains("cargo \x1b[1;33mtest\x1b[0m\n"),
            "matches bold yellow, markers gone: {out:?}"
        );
        assert!(!out.contains('«'), "{out:?}");
    }

    #[test]
    fn search_says_when_nothing_matched_or_the_mode_was_degraded() {
        let mut res = response(vec![]);
        assert_eq!(render_search(&res, PLAIN, NOW), "no matches\n");
        res.degraded = Some("embedder down; keyword only".into());
        assert_eq!(
            render_search(&res, PLAIN, NOW),
            "note: embedder down; keyword only\nno matches\n"
        );
    }

    /// Regression: the hint took its range from a group's first and last hit
    /// only, so a hit between them (in rank order) could fall outside it.
    #[test]
    fn show_hint_covers_every_hit_of_its_run() {
        let cases: &[(&[(u64, u64)], &str)] = &[
            (&[(7, 9)], "7-9"),
            (&[(10, 12), (40, 45), (20, 22)], "10-45"),
            (&[(20, 22), (1, 2), (15, 16)], "1-22"),
            (&[(30, 31), (5, 50), (28, 29)], "5-50"),
        ];
        for (ranges, want) in cases {
            let hits = ranges
                .iter()
                .map(|r| hit("run-a", *r, "user", "x"))
                .collect();
            let out = render_search(&response(hits), PLAIN, NOW);
            let hint = format!("kith show run-a --lines {want}\n");
            assert!(out.contains(&hint), "{ranges:?}: want {hint:?} in\n{out}");
        }
    }

    #[test]
    fn a_long_first_prompt_is_cut_to_one_line() {
        let mut h = hit("run-a", (1, 1), "user", "x");
        h.intent = Some(format!("{}\n\n{}", "word ".repeat(10), "y".repeat(100)));
        let out = render_search(&response(vec![h]), PLAIN, NOW);
        let title = out.lines().next().unwrap_or_default();
        let title = &title["[laptop] ".len()..title.find("  claude-code").unwrap_or(0)];
        assert_eq!(title.chars().count(), 70, "{title}");
        assert!(
            title.starts_with("word word") && title.ends_with("yy…"),
            "{title}"
        );
    }

    /// Regression: central's text reached the terminal raw, so a transcript
    /// holding `ESC ] 52` set the clipboard and `ESC [2J` cleared the screen.
    #[test]
    fn search_shows_control_characters_from_central_not_obeys_them() {
        let mut h = hit("run-a", (1, 2), "user", "set \x1b]52;c;aGk=\x07«clipboard»");
        h.machine = "lap\x1b[2Jtop".into();
        h.intent = Some("title \u{9b}31m".into());
        let out = render_search(&response(vec![h]), Style { color: true }, NOW);
        assert!(
            out.starts_with("\x1b[1m[lap\\u{1b}[2Jtop]\x1b[0m \x1b[1mtitle \\u{9b}31m\x1b[0m"),
            "{out:?}"
        );
        assert!(
            out.contains("set \\u{1b}]52;c;aGk=\\u{7}\x1b[1;33mclipboard\x1b[0m\n"),
            "{out:?}"
        );
        assert_only_own_styling(&out);
    }
}
