//! The family CLI: `kith search`, `kith tree`, `kith show`, `kith share`,
//! `kith tag`, `kith audit`, `kith context`. Central does the work; this
//! module asks it and renders the answer for a person (grouped, relative
//! times, highlighted snippets) or for a script (`--json`).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kith_proto::{
    AgentRuntime, ConversationResponse, ConversationTurn, ConversationsResponse, ForestResponse,
    GroupBy, RunMeta, SearchFilters, SearchHit, SearchMode, SearchRequest, SearchResponse,
    TagsRequest, TagsResponse, TurnsResponse,
};
use time::OffsetDateTime;

use crate::client::{path_part, Client};
use crate::render::conversation;
use crate::render::term::{age, one_line, printable, Style};
use crate::when::{parse_expires, parse_since, WHEN_HINT};

/// `kith search | tree | show`.
#[derive(Debug, clap::Subcommand)]
pub enum FamilyCommand {
    /// Search everything you may read, from any machine.
    Search(Box<SearchArgs>),
    /// Recent conversations, their subagents under them.
    Tree {
        /// Only this conversation and its subagents (a conversation id, one
        /// of its run ids, or a unique prefix).
        #[arg(conflicts_with_all = ["since", "cursor", "deltas"])]
        id: Option<String>,
        /// Only conversations active since then: 30m, 12h, 7d, 2w or RFC 3339.
        #[arg(long)]
        since: Option<String>,
        /// How many conversations.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// The next page: what the previous page printed after "more:".
        #[arg(long)]
        cursor: Option<String>,
        /// Every captured delta as its own node (the storage view).
        #[arg(long)]
        deltas: bool,
        /// One JSON document, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Share runs with another family member (private by default).
    #[command(subcommand)]
    Share(ShareCommand),
    /// Who read your runs, newest first.
    Audit {
        /// One JSON document ({"entries": [...]}).
        #[arg(long)]
        json: bool,
    },
    /// Put tags on one of your conversations, or take them off; `kith share
    /// tag` shares every run with a tag.
    #[command(subcommand)]
    Tag(TagCommand),
    /// Open the web page, signed in: asks central for a one-time link
    /// (valid 5 minutes) and opens it in your browser, where a button
    /// signs you in.
    Web {
        /// Print the link instead of opening it.
        #[arg(long)]
        print: bool,
    },
    /// A whole conversation, named by any of its run ids, its id, or a
    /// unique prefix of either.
    Show {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// The exact bytes of the conversation's transcript, as captured.
        #[arg(long)]
        raw: bool,
        /// Tool calls with their output, not one line each.
        #[arg(long)]
        tools: bool,
        /// Only these lines of one run's JSONL, like 12-20 (ID is a run id).
        #[arg(long)]
        lines: Option<String>,
        /// The conversation, its subagents and its turns as one JSON document.
        #[arg(long, conflicts_with_all = ["raw", "lines"])]
        json: bool,
        /// Only the turns of one subagent inside the conversation's own
        /// transcript (Copilot CLI): its name or id, as `kith tree` shows.
        #[arg(long, conflicts_with_all = ["raw", "lines"])]
        subagent: Option<String>,
    },
    /// The passages of past conversations most useful for a task, each
    /// with its citation, fitted to a token budget.
    Context {
        /// The task, in your own words.
        #[arg(required_unless_present = "hook")]
        task: Option<String>,
        /// Most tokens the pack may hold (characters / 4), 1 to 32000.
        #[arg(long, default_value_t = 4000)]
        budget: u32,
        /// Only conversations in this folder or below it (e.g. `.`).
        #[arg(long)]
        project: Option<PathBuf>,
        /// Central's answer (the pack and its passages) as one JSON document.
        #[arg(long)]
        json: bool,
        /// As Claude Code's SessionStart hook: recent work in the session's
        /// folder (at most 800 tokens); always exits 0.
        #[arg(long, conflicts_with_all = ["task", "json"])]
        hook: bool,
    },
}

/// `kith search`'s question, filters and output.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// What you remember, in your own words; a time in them ("yesterday",
    /// "last week", "on 7 March, 2024", "in June") ranks what happened then
    /// first.
    query: String,
    /// hybrid (words and meaning), keyword or semantic.
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: ModeArg,
    /// Only conversations active since then: 30m, 12h, 7d, 2w or an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Only before then: 30m, 12h, 7d, 2w (ago) or an RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// claude-code, codex, pi, gemini, copilot, cursor, aider, opencode or other.
    #[arg(long)]
    runtime: Option<String>,
    /// A machine name.
    #[arg(long)]
    machine: Option<String>,
    /// Conversations whose tools touched this file (a path, or its last components).
    #[arg(long)]
    file: Option<String>,
    /// Conversations that used this tool or skill (Bash, Edit, exec_command, ...).
    #[arg(long)]
    tool: Option<String>,
    /// Conversations that ran a shell command containing this.
    #[arg(long)]
    command: Option<String>,
    /// Conversations in this folder or below it.
    #[arg(long)]
    project: Option<PathBuf>,
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
    /// Central's whole answer as one JSON document, for scripts and agents.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum ShareCommand {
    /// Let another family member read a conversation and its subagents, as
    /// it is now (later turns too with --follow).
    Conversation {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// Their handle, e.g. bob.example.com.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
        /// Also the turns captured after this grant.
        #[arg(long)]
        follow: bool,
    },
    /// Let another family member read a run and everything under it, as it
    /// is now (later deltas too with --follow).
    Run {
        /// A run id.
        run: String,
        /// Their handle, e.g. bob.example.com.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
        /// Also the deltas captured after this grant.
        #[arg(long)]
        follow: bool,
    },
    /// Let another family member read every run with this tag.
    Tag {
        /// The tag (see `kith tag`).
        tag: String,
        /// Their handle.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
    },
    /// Grants you gave and received, with their state.
    List {
        /// One JSON document ({"given": [...], "received": [...]}).
        #[arg(long)]
        json: bool,
    },
    /// Take a grant back; it stops working at once.
    Revoke {
        /// The grant's id, as `kith share list` shows it.
        id: String,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum TagCommand {
    /// Tag every run of one of your conversations.
    Add {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// Tags: 1-100 bytes each, without '|' or ':'.
        #[arg(required = true)]
        tags: Vec<String>,
    },
    /// Take tags off every run of one of your conversations.
    Remove {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// The tags to take off.
        #[arg(required = true)]
        tags: Vec<String>,
    },
}

impl FamilyCommand {
    /// Whether the command was asked for JSON.
    pub fn json(&self) -> bool {
        match self {
            Self::Search(args) => args.json,
            Self::Tree { json, .. }
            | Self::Show { json, .. }
            | Self::Context { json, .. }
            | Self::Audit { json } => *json,
            Self::Share(ShareCommand::List { json }) => *json,
            Self::Share(_) | Self::Tag(_) | Self::Web { .. } => false,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GroupArg {
    Conversation,
    None,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    Hybrid,
    Keyword,
    Semantic,
}

pub fn run(cmd: FamilyCommand, client: &Client) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let mut stdout = std::io::stdout().lock();
    match cmd {
        FamilyCommand::Search(args) => {
            let SearchArgs {
                query,
                mode,
                since,
                until,
                runtime,
                machine,
                file,
                tool,
                command,
                project,
                branch,
                owner,
                limit,
                offset,
                group,
                half_life,
                diversity,
                include_superseded,
                json,
            } = *args;
            let when = |flag: &str, v: Option<String>| {
                v.map(|s| {
                    parse_since(&s, now).with_context(|| format!("{flag} {s:?}: {WHEN_HINT}"))
                })
                .transpose()
            };
            let runtime = runtime
                .map(|r| {
                    AgentRuntime::parse(&r).with_context(|| {
                        let known = AgentRuntime::ALL.map(AgentRuntime::as_str).join(", ");
                        format!("--runtime {r:?}: use one of {known}")
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
                    cwd_prefix: project.map(|p| absolute(&p)).transpose()?,
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
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
            } else if req.group == GroupBy::Conversation {
                let me: Option<kith_proto::StatusResponse> =
                    client.json(client.get("/api/status")).ok();
                let me = me.map(|s| s.user);
                let text = conversation::render_groups(&res, me.as_deref(), Style::detect(), now);
                write!(stdout, "{text}")?;
            } else {
                write!(stdout, "{}", render_search(&res, Style::detect(), now))?;
            }
        }
        FamilyCommand::Tree {
            id: Some(id), json, ..
        } => {
            let found: ConversationResponse =
                client.json(client.get(&format!("/api/conversations/{}", path_part(&id))))?;
            // The listing's shape, so a script reads one kind of document.
            let res = ConversationsResponse {
                conversations: std::iter::once(found.conversation)
                    .chain(found.subagents)
                    .collect(),
                next_cursor: None,
            };
            print_tree(&mut stdout, &res, json, now)?;
        }
        FamilyCommand::Tree {
            id: None,
            since,
            limit,
            cursor,
            deltas,
            json,
        } => {
            let mut query = vec![("limit", limit.to_string())];
            if let Some(s) = since {
                query.push((
                    "since",
                    parse_since(&s, now).with_context(|| format!("--since {s:?}: {WHEN_HINT}"))?,
                ));
            }
            if deltas {
                let forest: ForestResponse =
                    client.json(client.get("/api/runs/forest").query(&query))?;
                if json {
                    writeln!(stdout, "{}", serde_json::to_string(&forest)?)?;
                } else {
                    write!(stdout, "{}", render_tree(&forest, Style::detect(), now))?;
                }
                return Ok(());
            }
            if let Some(c) = cursor {
                query.push(("cursor", c));
            }
            let res: ConversationsResponse =
                client.json(client.get("/api/conversations").query(&query))?;
            print_tree(&mut stdout, &res, json, now)?;
        }
        FamilyCommand::Share(cmd) => {
            let grant = |scope: String,
                         with: String,
                         expires: Option<String>,
                         follow: bool|
             -> Result<()> {
                let expires_at = expires
                    .map(|e| {
                        parse_expires(&e, now)
                            .with_context(|| format!("--expires {e:?}: {WHEN_HINT}"))
                    })
                    .transpose()?;
                let req = kith_proto::ShareRequest {
                    scope,
                    with,
                    expires_at,
                    follow,
                };
                let share: kith_proto::Share =
                    client.json(client.post("/api/shares").json(&req))?;
                let reach = if share.follow {
                    "and what comes after"
                } else {
                    "as it is now"
                };
                let said = format!(
                    "shared {} with {} {reach} (grant {})",
                    share.scope, share.grantee, share.id
                );
                println!("{}", printable(&said));
                Ok(())
            };
            match cmd {
                ShareCommand::Conversation {
                    id,
                    with,
                    expires,
                    follow,
                } => grant(format!("conversation:{id}"), with, expires, follow)?,
                ShareCommand::Run {
                    run,
                    with,
                    expires,
                    follow,
                } => grant(format!("run:{run}"), with, expires, follow)?,
                ShareCommand::Tag { tag, with, expires } => {
                    grant(format!("tag:{tag}"), with, expires, true)?
                }
                ShareCommand::Revoke { id } => {
                    client.send(client.delete(&format!("/api/shares/{}", path_part(&id))))?;
                    writeln!(stdout, "revoked grant {id}")?;
                }
                ShareCommand::List { json } => {
                    let res: kith_proto::SharesResponse = client.json(client.get("/api/shares"))?;
                    if json {
                        writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
                    } else {
                        write!(stdout, "{}", render_shares(&res))?;
                    }
                }
            }
        }
        FamilyCommand::Web { print } => {
            let link: kith_proto::SignInLink = client.json(client.post("/api/web/link"))?;
            let url = client.link(&link.path);
            if print || open_in_browser(&url).is_err() {
                writeln!(stdout, "{url}")?;
                writeln!(stdout, "works once, until {}", link.expires_at)?;
            }
        }
        FamilyCommand::Context {
            task,
            budget,
            project,
            json,
            ..
        } => {
            let req = kith_proto::ContextRequest {
                task: task.unwrap_or_default(),
                budget_tokens: Some(budget),
                filters: SearchFilters {
                    cwd_prefix: project.map(|p| absolute(&p)).transpose()?,
                    ..SearchFilters::default()
                },
            };
            let res: kith_proto::ContextResponse =
                client.json(client.post("/api/context").json(&req))?;
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
            } else {
                write!(stdout, "{}", printable(&crate::render::plain::pack(&res)))?;
            }
        }
        FamilyCommand::Audit { json } => {
            let res: kith_proto::AuditResponse = client.json(client.get("/api/audit"))?;
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
                return Ok(());
            }
            if res.entries.is_empty() {
                writeln!(stdout, "nobody else has read your runs")?;
            }
            for e in res.entries {
                let line = format!("{}  {:<24} {:<10} {}", e.at, e.reader, e.what, e.run_id);
                writeln!(stdout, "{}", printable(&line))?;
            }
        }
        FamilyCommand::Tag(cmd) => {
            let (id, req) = match cmd {
                TagCommand::Add { id, tags } => (
                    id,
                    TagsRequest {
                        add: tags,
                        remove: Vec::new(),
                    },
                ),
                TagCommand::Remove { id, tags } => (
                    id,
                    TagsRequest {
                        add: Vec::new(),
                        remove: tags,
                    },
                ),
            };
            let path = format!("/api/conversations/{}/tags", path_part(&id));
            let res: TagsResponse = client.json(client.post(&path).json(&req))?;
            let tags = if res.tags.is_empty() {
                "no tags".to_owned()
            } else {
                format!("tags {}", res.tags.join(", "))
            };
            writeln!(
                stdout,
                "conversation {} ({} runs) has {tags}",
                res.conversation_id, res.n_runs
            )?;
        }
        FamilyCommand::Show {
            id,
            raw,
            lines: Some(lines),
            ..
        } => {
            let (from, to) = parse_lines(&lines)?;
            let bytes = client.bytes(client.get(&format!("/api/runs/{}/jsonl", path_part(&id))))?;
            if raw {
                for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
                    let n = i as u64 + 1;
                    if n >= from && n <= to {
                        stdout.write_all(line)?;
                    }
                }
                return Ok(());
            }
            let meta: RunMeta =
                client.json(client.get(&format!("/api/runs/{}", path_part(&id))))?;
            write!(
                stdout,
                "{}",
                render_run(&meta, &bytes, from, to, Style::detect(), now)
            )?;
        }
        FamilyCommand::Show { id, raw: true, .. } => {
            let path = format!("/api/conversations/{}/jsonl", path_part(&id));
            std::io::copy(&mut client.body(client.get(&path))?, &mut stdout)?;
        }
        FamilyCommand::Show {
            id,
            tools,
            json,
            subagent,
            ..
        } => {
            let mut found: ConversationResponse =
                client.json(client.get(&format!("/api/conversations/{}", path_part(&id))))?;
            let main_id = found.conversation.id.clone();
            let mut turns = all_turns(client, &main_id)?;
            if let Some(name) = subagent {
                let agent = conversation::find_inline(&found.conversation, &name)?;
                turns.retain(|t| t.subagent.as_deref() == Some(agent.as_str()));
                found.subagents.clear();
            }
            if json {
                let doc = serde_json::json!({
                    "conversation": found.conversation,
                    "subagents": found.subagents,
                    "turns": turns,
                });
                writeln!(stdout, "{doc}")?;
                return Ok(());
            }
            let mut subs = Vec::new();
            for sub in &found.subagents {
                let parent_run = match sub.run_ids.first() {
                    Some(run) => {
                        client
                            .json::<RunMeta>(client.get(&format!("/api/runs/{run}")))?
                            .parent_run_id
                    }
                    None => None,
                };
                subs.push((sub, all_turns(client, &sub.id)?, parent_run));
            }
            let reads: Vec<conversation::Read<'_>> = subs
                .iter()
                .map(|(c, turns, parent)| conversation::Read {
                    conversation: c,
                    turns,
                    parent_run: parent.as_deref(),
                })
                .collect();
            let text = conversation::render_show(
                &conversation::Read {
                    conversation: &found.conversation,
                    turns: &turns,
                    parent_run: None,
                },
                &reads,
                conversation::ShowOptions { tools },
                Style::detect(),
                now,
            );
            drop(stdout);
            page(&text)?;
            return Ok(());
        }
    }
    Ok(())
}

/// Every turn of one conversation, page by page.
fn all_turns(client: &Client, id: &str) -> Result<Vec<ConversationTurn>> {
    let mut turns = Vec::new();
    let mut offset = 0;
    loop {
        let page: TurnsResponse = client.json(
            client
                .get(&format!("/api/conversations/{}/turns", path_part(id)))
                .query(&[("offset", offset.to_string()), ("limit", "1000".to_owned())]),
        )?;
        turns.extend(page.turns);
        match page.next_offset {
            Some(next) if next > offset => offset = next,
            _ => return Ok(turns),
        }
    }
}

/// `--project` as central compares it: an absolute path.
fn absolute(path: &std::path::Path) -> Result<String> {
    let path =
        std::path::absolute(path).with_context(|| format!("--project {}", path.display()))?;
    Ok(path.to_string_lossy().into_owned())
}

/// Long text through the pager when stdout is a terminal (`$PAGER`, else
/// `less -R`, as git does); straight to stdout otherwise.
fn page(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if !stdout.is_terminal() {
        stdout.write_all(text.as_bytes())?;
        return Ok(());
    }
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less -R".to_owned());
    let mut words = pager.split_whitespace();
    let child = words.next().map(|program| {
        std::process::Command::new(program)
            .args(words)
            .env(
                "LESS",
                std::env::var("LESS").unwrap_or_else(|_| "FRX".to_owned()),
            )
            .stdin(std::process::Stdio::piped())
            .spawn()
    });
    match child {
        Some(Ok(mut child)) => {
            if let Some(mut input) = child.stdin.take() {
                // The person may quit the pager before the end: not an error.
                let _ = input.write_all(text.as_bytes());
            }
            child.wait()?;
        }
        _ => stdout.write_all(text.as_bytes())?,
    }
    Ok(())
}

/// Opens `url` in the desktop's browser (`xdg-open`, or `open` on macOS).
/// The link holds a token, which must not show in a process list: the
/// opener gets a private file (0600, removed when kith exits, once the
/// browser had time to read it) that redirects to it.
fn open_in_browser(url: &str) -> Result<()> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let page = tempfile::Builder::new()
        .prefix("kith-web-")
        .suffix(".html")
        .tempfile()?;
    let html = format!(
        "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url={}\">",
        url.replace('&', "&amp;").replace('"', "&quot;")
    );
    std::fs::write(page.path(), html)?;
    let status = std::process::Command::new(opener)
        .arg(page.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {opener}"))?;
    if !status.success() {
        bail!("{opener} failed");
    }
    // The browser reads the file after the opener returns.
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}

/// Grants in aligned columns: direction, scope, who, state, until, id.
pub fn render_shares(res: &kith_proto::SharesResponse) -> String {
    let mut rows = vec![[
        "".to_owned(),
        "SCOPE".to_owned(),
        "WHO".to_owned(),
        "STATE".to_owned(),
        "UNTIL".to_owned(),
        "GRANT".to_owned(),
    ]];
    for (dir, list) in [("gave", &res.given), ("received", &res.received)] {
        for g in list {
            let who = if dir == "gave" {
                &g.grantee
            } else {
                &g.grantor
            };
            let state = if g.follow && g.state == "active" {
                "active, follows".to_owned()
            } else {
                g.state.clone()
            };
            rows.push([
                dir.to_owned(),
                printable(&g.scope).into_owned(),
                printable(who).into_owned(),
                state,
                g.expires_at.clone().unwrap_or_else(|| "-".to_owned()),
                g.id.clone(),
            ]);
        }
    }
    if rows.len() == 1 {
        return "no grants given or received\n".to_owned();
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// `A-B` (1-based, inclusive) or a single line `A`.
fn parse_lines(s: &str) -> Result<(u64, u64)> {
    let parse = |v: &str| v.trim().parse::<u64>().ok().filter(|n| *n >= 1);
    let range = match s.split_once('-') {
        Some((a, b)) => parse(a).zip(parse(b)).filter(|(a, b)| a <= b),
        None => parse(s).map(|a| (a, a)),
    };
    range.with_context(|| format!("--lines {s:?}: use A-B with 1 <= A <= B"))
}

/// A run's turns, readable: a header, then each turn with its line range.
pub fn render_run(
    meta: &RunMeta,
    bytes: &[u8],
    from: u64,
    to: u64,
    style: Style,
    now: OffsetDateTime,
) -> String {
    let format = kith_shared::transcript::Format::of_runtime(meta.agent_runtime.as_str());
    let parsed = kith_shared::transcript::parse(format, bytes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {} {}",
        style.bold(&format!("[{}]", meta.machine)),
        meta.agent_runtime.as_str(),
        style.dim(&format!(
            "{} · {} · {} turns · {}",
            meta.model.as_deref().unwrap_or("model?"),
            age(&meta.started_at, now),
            meta.turn_count,
            meta.cwd.as_deref().unwrap_or("")
        ))
    );
    for turn in parsed
        .turns
        .iter()
        .filter(|t| t.line_end >= from && t.line_start <= to)
    {
        let _ = writeln!(
            out,
            "\n{} {}",
            style.bold(turn.role.as_str()),
            style.dim(&format!("L{}-{}", turn.line_start, turn.line_end))
        );
        let _ = writeln!(out, "{}", printable(turn.text.trim_end()));
    }
    out
}

/// Search hits grouped by run, in the order of each run's best hit.
pub fn render_search(res: &SearchResponse, style: Style, now: OffsetDateTime) -> String {
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
                "{} · {} · {run_id}",
                first.agent_runtime.as_str(),
                age(&first.started_at, now)
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

/// The forest as indented trees: machine badge, runtime, turns, age, first prompt.
pub fn render_tree(forest: &ForestResponse, style: Style, now: OffsetDateTime) -> String {
    let mut out = String::new();
    if forest.trees.is_empty() {
        let _ = writeln!(out, "no runs yet");
    }
    for tree in &forest.trees {
        for t in &tree.runs {
            let r: &RunMeta = &t.run;
            let indent = "  ".repeat(t.depth as usize);
            let branch = if t.depth == 0 { "●" } else { "└" };
            let title = r
                .intent
                .as_deref()
                .map(|i| format!("  {}", one_line(i, 60)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{indent}{branch} {} {} {}{title}",
                style.bold(&format!("[{}]", r.machine)),
                r.agent_runtime.as_str(),
                style.dim(&format!(
                    "{} turns · {} · {}",
                    r.turn_count,
                    age(&r.started_at, now),
                    r.id
                )),
            );
        }
        out.push('\n');
    }
    out
}

/// `kith tree`'s conversations: the JSON document, or the tree as text.
fn print_tree(
    out: &mut impl std::io::Write,
    res: &ConversationsResponse,
    json: bool,
    now: OffsetDateTime,
) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(res)?)?;
    } else {
        write!(
            out,
            "{}",
            conversation::render_tree(res, Style::detect(), now)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::term::tests::assert_only_own_styling;
    use kith_proto::{RunLinks, SearchTiming, Tree, TreeRun};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-05-11 12:00:00 UTC);
    const PLAIN: Style = Style { color: false };

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

    /// The same regression for `kith show --lines`: the turns of a
    /// transcript, and the run's facts.
    #[test]
    fn show_shows_control_characters_from_central_not_obeys_them() {
        let mut run = meta(
            "r1",
            "lap\x07top",
            AgentRuntime::ClaudeCode,
            "2026-05-11T11:00:00Z",
        );
        run.cwd = Some("/home/\x1b[2J".into());
        let bytes = format!(
            "{}\n",
            serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:00:00Z",
                "message": {"role": "user", "content": "one\r\ntwo \u{1b}]52;c;aGk=\u{7}"}})
        );
        let out = render_run(&run, bytes.as_bytes(), 1, 1, Style { color: true }, NOW);
        assert!(out.contains("[lap\\u{7}top]"), "{out:?}");
        assert!(out.contains("/home/\\u{1b}[2J"), "{out:?}");
        assert!(
            out.ends_with("\none\ntwo \\u{1b}]52;c;aGk=\\u{7}\n"),
            "{out:?}"
        );
        assert_only_own_styling(&out);
    }

    fn meta(id: &str, machine: &str, runtime: AgentRuntime, started_at: &str) -> RunMeta {
        RunMeta {
            id: id.into(),
            user_id: "alice.test".into(),
            machine_id: "m".into(),
            machine: machine.into(),
            agent_runtime: runtime,
            agent_version: None,
            model: None,
            conversation_id: None,
            parent_run_id: None,
            root_run_id: id.into(),
            cwd: None,
            git_branch: None,
            intent: None,
            tags: vec![],
            readable_by: vec![],
            started_at: started_at.into(),
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

    #[test]
    fn tree_indents_each_run_under_its_parent() {
        let run = |depth, id, machine, runtime, turns, intent: Option<&str>| {
            let mut run = meta(id, machine, runtime, "2026-05-11T11:55:00Z");
            run.turn_count = turns;
            run.intent = intent.map(Into::into);
            TreeRun { depth, run }
        };
        let forest = ForestResponse {
            trees: vec![
                Tree {
                    root_run_id: "r1".into(),
                    last_activity_at: "2026-05-11T11:55:00Z".into(),
                    runs: vec![
                        run(
                            0,
                            "r1",
                            "laptop",
                            AgentRuntime::ClaudeCode,
                            12,
                            Some("deploy\nthe cluster"),
                        ),
                        run(1, "r2", "laptop", AgentRuntime::ClaudeCode, 3, None),
                        run(
                            2,
                            "r3",
                            "laptop",
                            AgentRuntime::ClaudeCode,
                            1,
                            Some("check pods"),
                        ),
                        run(1, "r4", "laptop", AgentRuntime::ClaudeCode, 2, None),
                    ],
                },
                Tree {
                    root_run_id: "p1".into(),
                    last_activity_at: "2026-05-11T11:55:00Z".into(),
                    runs: vec![run(
                        0,
                        "p1",
                        "desktop",
                        AgentRuntime::Pi,
                        5,
                        Some("tidy notes"),
                    )],
                },
            ],
        };
        let want = "\
● [laptop] claude-code 12 turns · 5m ago · r1  deploy the cluster
  └ [laptop] claude-code 3 turns · 5m ago · r2
    └ [laptop] claude-code 1 turns · 5m ago · r3  check pods
  └ [laptop] claude-code 2 turns · 5m ago · r4

● [desktop] pi 5 turns · 5m ago · p1  tidy notes

";
        assert_eq!(render_tree(&forest, PLAIN, NOW), want);
        assert_eq!(
            render_tree(&ForestResponse { trees: vec![] }, PLAIN, NOW),
            "no runs yet\n"
        );
    }

    /// A Claude Code transcript: a question, a two-line answer, a follow-up.
    fn claude_lines() -> Vec<u8> {
        let line = |v: serde_json::Value| format!("{v}\n");
        [
            line(
                serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:00:00Z",
                "message": {"role": "user", "content": "why is the build red?"}}),
            ),
            line(
                serde_json::json!({"type": "assistant", "timestamp": "2026-05-11T11:00:05Z",
                "message": {"id": "m1", "role": "assistant", "model": "claude-x",
                    "content": [{"type": "text", "text": "A test times out."}]}}),
            ),
            line(
                serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:01:00Z",
                "message": {"role": "user", "content": "fix it  \n"}}),
            ),
        ]
        .concat()
        .into_bytes()
    }

    #[test]
    fn show_renders_the_turns_in_the_asked_lines() {
        let mut run = meta(
            "r1",
            "laptop",
            AgentRuntime::ClaudeCode,
            "2026-05-11T11:00:00Z",
        );
        run.model = Some("claude-x".into());
        run.turn_count = 3;
        run.cwd = Some("/home/alice/proj".into());
        let bytes = claude_lines();
        let header = "[laptop] claude-code claude-x · 1h ago · 3 turns · /home/alice/proj\n";
        let cases: &[((u64, u64), &str)] = &[
            (
                (1, u64::MAX),
                "\nuser L1-1\nwhy is the build red?\n\nassistant L2-2\nA test times out.\n\nuser L3-3\nfix it\n",
            ),
            ((2, 2), "\nassistant L2-2\nA test times out.\n"),
            ((3, 9), "\nuser L3-3\nfix it\n"),
            ((4, 9), ""),
        ];
        for ((from, to), turns) in cases {
            let out = render_run(&run, &bytes, *from, *to, PLAIN, NOW);
            assert_eq!(out, format!("{header}{turns}"), "--lines {from}-{to}");
        }
        run.model = None;
        run.cwd = None;
        let out = render_run(&run, b"", 1, u64::MAX, PLAIN, NOW);
        assert_eq!(out, "[laptop] claude-code model? · 1h ago · 3 turns · \n");
    }

    #[test]
    fn lines_take_a_range_or_one_line_and_refuse_the_rest() {
        let cases: &[(&str, Option<(u64, u64)>)] = &[
            ("12-20", Some((12, 20))),
            ("7", Some((7, 7))),
            ("3-3", Some((3, 3))),
            (" 4 - 5 ", Some((4, 5))),
            ("1-18446744073709551615", Some((1, u64::MAX))),
            ("0", None),
            ("0-5", None),
            ("20-12", None),
            ("", None),
            ("-", None),
            ("-5", None),
            ("5-", None),
            ("1-2-3", None),
            ("a-b", None),
            ("twelve", None),
            ("18446744073709551616", None),
            ("1-99999999999999999999", None),
        ];
        for (input, want) in cases {
            match (parse_lines(input), want) {
                (Ok(got), Some(want)) => assert_eq!(got, *want, "{input:?}"),
                (Err(e), None) => assert!(
                    e.to_string().contains("use A-B with 1 <= A <= B"),
                    "{input:?}: {e}"
                ),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
