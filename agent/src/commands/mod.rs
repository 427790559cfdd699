//! The commands that ask central and show its answer: for a person
//! (grouped, relative times, highlighted snippets; `render`) or, with
//! `--json`, for a script. One file each, with its flags and its `run`:
//! `kith search`, `tree`, `show`, `share`, `tag`, `audit`, `web`, `context`
//! (also the SessionStart hook), `usage`, `export` and `forget`. Central does the
//! work; every request goes through `client`.

mod audit;
pub(crate) mod context;
mod export;
pub(crate) mod forget;
mod search;
mod share;
mod show;
mod tag;
mod tree;
pub(crate) mod usage;
mod web;

use anyhow::{Context, Result};

use crate::client::Client;

/// The commands `kith` flattens among its own (`forget` is `cli`'s: it
/// comes before `mcp` in the help).
#[derive(Debug, clap::Subcommand)]
pub(crate) enum FamilyCommand {
    /// Search everything you may read, from any machine.
    Search(Box<search::SearchArgs>),
    /// Recent conversations, their subagents under them.
    Tree(tree::TreeArgs),
    /// Share runs with another family member (private by default).
    #[command(subcommand)]
    Share(share::ShareCommand),
    /// Who read your runs, newest first.
    Audit(audit::AuditArgs),
    /// Put tags on one of your conversations, or take them off; `kith share
    /// tag` shares every run with a tag.
    #[command(subcommand)]
    Tag(tag::TagCommand),
    /// Open the web page, signed in: asks central for a one-time link
    /// (valid 5 minutes) and opens it in your browser, where a button
    /// signs you in.
    Web(web::WebArgs),
    /// A whole conversation, named by any of its run ids, its id, or a
    /// unique prefix of either.
    Show(show::ShowArgs),
    /// The passages of past conversations most useful for a task, each
    /// with its citation, fitted to a token budget.
    Context(context::ContextArgs),
    /// What your agents spent: tokens and dollars by day, week, month or
    /// session (only your own usage).
    Usage(usage::UsageArgs),
    /// Your conversations (or the ones named) as a tar archive: each one's
    /// exact JSONL bytes with kith's metadata and a manifest.
    Export(export::ExportArgs),
}

impl FamilyCommand {
    /// Whether the command was asked for JSON.
    pub(crate) fn json(&self) -> bool {
        match self {
            Self::Search(args) => args.json,
            Self::Tree(args) => args.json,
            Self::Show(args) => args.json,
            Self::Context(args) => args.json,
            Self::Audit(args) => args.json,
            Self::Usage(args) => args.json,
            Self::Share(share::ShareCommand::List { json }) => *json,
            Self::Share(_) | Self::Tag(_) | Self::Web(_) | Self::Export(_) => false,
        }
    }
}

pub(crate) fn run(cmd: FamilyCommand, client: &Client) -> Result<()> {
    match cmd {
        FamilyCommand::Search(args) => search::run(*args, client),
        FamilyCommand::Tree(args) => tree::run(args, client),
        FamilyCommand::Share(cmd) => share::run(cmd, client),
        FamilyCommand::Audit(args) => audit::run(args, client),
        FamilyCommand::Tag(cmd) => tag::run(cmd, client),
        FamilyCommand::Web(args) => web::run(args, client),
        FamilyCommand::Show(args) => show::run(args, client),
        FamilyCommand::Context(args) => context::run(args, client),
        FamilyCommand::Export(args) => export::run(args, client),
        FamilyCommand::Usage(args) => usage::run(args, client),
    }
}

/// `--project` as central compares it: an absolute path.
fn absolute(path: &std::path::Path) -> Result<String> {
    let path =
        std::path::absolute(path).with_context(|| format!("--project {}", path.display()))?;
    Ok(path.to_string_lossy().into_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use kith_proto::{AgentRuntime, RunLinks, RunMeta};
    use time::macros::datetime;
    use time::OffsetDateTime;

    use crate::render::term::Style;

    /// The time the commands' tests render at.
    pub(crate) const NOW: OffsetDateTime = datetime!(2026-05-11 12:00:00 UTC);
    /// A terminal without colour: what a test compares text with.
    pub(crate) const PLAIN: Style = Style { color: false };

    /// A run of `runtime` on `machine`, with nothing else known of it.
    pub(crate) fn meta(
        id: &str,
        machine: &str,
        runtime: AgentRuntime,
        started_at: &str,
    ) -> RunMeta {
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
}
