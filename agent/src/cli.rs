//! The `kith` command line: parse (clap), resolve the folders and settings,
//! dispatch, and exit with one rule: 0 success (a reader that closed the
//! pipe early included), 2 a command line at fault (clap's usage errors, an
//! argument kith cannot read, a request central refused as malformed: 400),
//! 1 any other failure (one-line reason on stderr). A command
//! given `--json` words that line as kith's error body instead, `{"error":
//! {"code": ..., "message": ...}}` (still on stderr: stdout holds only the
//! answer), with the same exit code.
//! `kith hook` always exits 0, even when its arguments do not parse. New
//! subcommands go in `Command`.

use std::ffi::OsString;
use std::io::Write as _;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::capture::{Capture, Captured};
use crate::client::{Budget, Client};
use crate::commands::FamilyCommand;
use crate::config::{Auth, PathOverrides, Paths, Secret};
use crate::install::Agent;
use crate::settings::{Flags, Settings};

#[derive(Debug, Parser)]
#[command(
    name = "kith",
    version,
    about = "kith: your coding agents' memory, across the family's machines"
)]
pub(crate) struct Cli {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(flatten)]
    settings: SettingArgs,
    #[command(subcommand)]
    command: Command,
}

/// Settings that `config.toml` also holds; a flag wins over both.
#[derive(Debug, Default, Args)]
struct SettingArgs {
    /// Central's URL [env: KITH_CENTRAL_URL; config.toml central_url; auth.json]
    #[arg(long, global = true, value_name = "URL")]
    central_url: Option<String>,
    /// Never capture transcripts whose path or working folder matches
    /// (repeatable; adds to KITH_EXCLUDE and config.toml's exclude)
    #[arg(long, global = true, value_name = "GLOB")]
    exclude: Vec<String>,
}

/// Every folder can be moved; flags win over the `KITH_*` variables.
#[derive(Debug, Default, Args)]
struct DirArgs {
    /// config.toml and auth.json [env: KITH_CONFIG_DIR; default ~/.config/kith]
    #[arg(long, global = true, value_name = "DIR")]
    config_dir: Option<PathBuf>,
    /// Cursors and the outbox [env: KITH_STATE_DIR; default ~/.local/state/kith]
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Claude Code's folder [env: KITH_CLAUDE_DIR, CLAUDE_CONFIG_DIR; default ~/.claude]
    #[arg(long, global = true, value_name = "DIR")]
    claude_dir: Option<PathBuf>,
    /// Codex's folder [env: KITH_CODEX_DIR, CODEX_HOME; default ~/.codex]
    #[arg(long, global = true, value_name = "DIR")]
    codex_dir: Option<PathBuf>,
    /// pi's agent folder [env: KITH_PI_DIR; default ~/.pi/agent]
    #[arg(long, global = true, value_name = "DIR")]
    pi_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Store central's URL and this machine's token (from KITH_TOKEN or a prompt).
    Login {
        /// Central's URL, like https://kith.example.com.
        #[arg(long, value_name = "URL")]
        central: String,
        /// Trust this CA's PEM certificate(s) for central (stored with the
        /// login; the system's trust store and SSL_CERT_FILE are trusted too)
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
    },
    /// Capture after an agent turn (run by the agents' hooks; always exits 0).
    Hook {
        /// A pi session file to capture.
        #[arg(long, value_name = "FILE")]
        pi: Option<PathBuf>,
        /// Codex `notify` passes its JSON payload as the last argument.
        payload: Option<String>,
    },
    /// Capture every transcript already on disk and send it (resumable).
    Backfill,
    /// Keep capturing as the agents write, until interrupted.
    Watch,
    /// Central, login and backlog on the first line; then what is captured
    /// per source, what is pending, what is excluded and what is at risk.
    Status {
        /// One JSON document, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// The effective configuration: every setting with where it came from.
    Config {
        /// One JSON document, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// A completion script for your shell, e.g. `kith completions bash > ~/.local/share/bash-completion/completions/kith`.
    Completions {
        /// bash, zsh or fish.
        shell: Shell,
    },
    /// Add kith's hook to an agent's configuration.
    Install {
        /// claude-code, codex, pi, gemini, cursor or copilot.
        agent: Agent,
        /// Also register `kith mcp` as an MCP server (claude-code: user
        /// scope in .claude.json; codex: [mcp_servers.kith] in config.toml).
        #[arg(long)]
        mcp: bool,
        /// claude-code: start each session with a short list of recent
        /// work in its folder (a SessionStart hook running `kith context --hook`).
        #[arg(long)]
        recall_on_start: bool,
    },
    /// Remove kith's hook from an agent's configuration.
    Uninstall {
        /// claude-code, codex, pi, gemini, cursor or copilot.
        agent: Agent,
        /// Remove only the `kith mcp` server entry, keeping the hook.
        #[arg(long)]
        mcp: bool,
    },
    /// Set this machine up: kith on PATH, every present agent's hook, and a
    /// user service running `kith watch` (idempotent).
    Setup(SetupArgs),
    /// Forget one of your conversations and the subagents under it: central
    /// deletes them for good and never takes their bytes again.
    Forget {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// Do not ask (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Continue one of your conversations on this machine: writes it where
    /// its agent (Claude Code, Codex, pi) keeps sessions, in a folder here,
    /// and prints the command that resumes it. What the agent adds is
    /// captured as the same conversation.
    Resume(crate::resume::ResumeArgs),
    /// A Model Context Protocol server on stdin/stdout: the agents' own
    /// access to what this machine's owner may read (run by the agent).
    Mcp,
    #[command(flatten)]
    Family(FamilyCommand),
}

#[derive(Debug, Args)]
pub(crate) struct SetupArgs {
    /// Where kith goes [default: $PREFIX/bin when PREFIX is set, else where
    /// this kith is when that is on PATH, else ~/.local/bin]
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// No `kith watch` service.
    #[arg(long)]
    no_service: bool,
    /// Write the service's file but neither enable nor start it.
    #[arg(long, conflicts_with = "no_service")]
    no_enable: bool,
    /// Undo what `kith setup` did here: its service, hooks, PATH line and binary.
    #[arg(long, conflicts_with_all = ["bin_dir", "no_service", "no_enable", "no_backfill"])]
    uninstall: bool,
    /// Leave the transcripts already on disk for a later `kith backfill`
    /// (by default setup captures them once logged in).
    #[arg(long)]
    no_backfill: bool,
}

/// The shells `kith completions` writes for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Command {
    /// Whether the command was asked for JSON (its errors are JSON too).
    fn json(&self) -> bool {
        match self {
            Self::Status { json } | Self::Config { json } => *json,
            Self::Family(f) => f.json(),
            _ => false,
        }
    }
}

/// The commands that only ask central: the capture-only flags (which
/// folders to read, what to exclude) are left out of their help.
const ASKING: [&str; 9] = [
    "search", "tree", "share", "audit", "tag", "web", "show", "context", "forget",
];

/// `Cli`'s command, with the capture-only flags hidden from the asking
/// commands' help: each gets a hidden copy of them, which clap takes in
/// place of the global one (the value still reaches `Cli`).
fn command() -> clap::Command {
    let cmd = Cli::command();
    let capture_only: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && a.get_id() != "config_dir" && a.get_id() != "state_dir")
        .filter(|a| a.get_id() != "central_url")
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    ASKING.iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, |sub| sub.args(capture_only.iter().cloned()))
    })
}

fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(e) => match lenient_hook(&args) {
            // Whatever an agent passes, a hook must not exit 2.
            Some(cli)
                if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
            {
                cli
            }
            _ if e.use_stderr() && args.iter().any(|a| a == "--json") => {
                let message = e.kind().as_str().unwrap_or("invalid arguments");
                eprintln!("{}", error_json("usage", message));
                return ExitCode::from(2);
            }
            _ => e.exit(),
        },
    };
    let paths = Paths::resolve(overrides(&cli.dirs));
    let flags = Flags {
        central_url: cli.settings.central_url,
        exclude: cli.settings.exclude,
    };
    let json = cli.command.json();
    match run(cli.command, &paths, &cli.dirs, &flags) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`kith show ID | head`): nothing failed.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if json => {
            eprintln!("{}", error_json(error_code(&e), &format!("{e:#}")));
            exit_code(&e)
        }
        Err(e) => {
            // It may quote central's text (a name, a title, an error body).
            eprintln!(
                "kith: {}",
                crate::render::term::printable(&format!("{e:#}"))
            );
            exit_code(&e)
        }
    }
}

fn overrides(dirs: &DirArgs) -> PathOverrides {
    PathOverrides {
        config_dir: dirs.config_dir.clone(),
        state_dir: dirs.state_dir.clone(),
        claude_dir: dirs.claude_dir.clone(),
        codex_dir: dirs.codex_dir.clone(),
        pi_dir: dirs.pi_dir.clone(),
    }
}

/// kith's error body, as central answers it.
fn error_json(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": code, "message": message}})
}

/// A stable code for `--json` errors: central's own when central refused,
/// else the agent's.
fn error_code(e: &anyhow::Error) -> &str {
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<crate::Error>() {
            return e.code();
        }
    }
    "error"
}

/// 2 when the command line was at fault (`Error::is_usage`), else 1.
fn exit_code(e: &anyhow::Error) -> ExitCode {
    let usage = e
        .chain()
        .filter_map(|cause| cause.downcast_ref::<crate::Error>())
        .any(crate::Error::is_usage);
    ExitCode::from(if usage { 2 } else { 1 })
}

fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A `kith hook` call clap refused (a flag this version does not know), as
/// far as it can be made out: the folders and `--pi` given before the first
/// argument clap could not take, and the last argument after `hook` as a
/// Codex `notify` payload. `None` when the subcommand is not `hook`.
fn lenient_hook(args: &[OsString]) -> Option<Cli> {
    let at = subcommand_at(args)?;
    if args[at] != "hook" {
        return None;
    }
    let last = args[at + 1..]
        .last()
        .and_then(|a| a.to_str())
        // Codex's notify payload is a JSON object; anything else (the value
        // of a flag this version does not know) leaves stdin to be read.
        .filter(|a| a.trim_start().starts_with('{'))
        .map(str::to_owned);
    let parsed = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()
        .and_then(|m| Cli::from_arg_matches(&m).ok());
    Some(match parsed {
        Some(Cli {
            dirs,
            settings,
            command: Command::Hook { pi, payload },
        }) => Cli {
            dirs,
            settings,
            command: Command::Hook {
                pi,
                payload: payload.or(last),
            },
        },
        _ => Cli {
            dirs: DirArgs::default(),
            settings: SettingArgs::default(),
            command: Command::Hook {
                pi: None,
                payload: last,
            },
        },
    })
}

/// Where the subcommand is: the first argument that is neither a flag nor
/// the value of a flag given before it (`--state-dir DIR`).
fn subcommand_at(args: &[OsString]) -> Option<usize> {
    let valued: Vec<String> = Cli::command()
        .get_arguments()
        .filter(|a| a.get_action().takes_values())
        .filter_map(|a| a.get_long())
        .map(|long| format!("--{long}"))
        .collect();
    let mut at = 1;
    while let Some(arg) = args.get(at) {
        let arg = arg.to_string_lossy();
        if !arg.starts_with('-') {
            return Some(at);
        }
        at += if valued.iter().any(|v| *v == arg) {
            2
        } else {
            1
        };
    }
    None
}

fn run(command: Command, paths: &Paths, dirs: &DirArgs, flags: &Flags) -> Result<()> {
    let settings = || Settings::load(paths, flags);
    match command {
        // Never fails: errors go to the hook's log.
        Command::Hook { pi, payload } => {
            crate::hook::run(paths, flags, pi, payload);
            Ok(())
        }
        Command::Login { central, ca_cert } => {
            login(paths, &central, ca_cert.as_deref())?;
            // The URL in effect may not be the one just stored.
            if let Some(url) = settings()?.central_url {
                if url.value.trim_end_matches('/') != central.trim().trim_end_matches('/') {
                    eprintln!(
                        "kith: note: {} ({}) is used over this login's URL",
                        url.value, url.origin
                    );
                }
            }
            Ok(())
        }
        Command::Backfill => backfill(paths, &settings()?),
        Command::Watch => watch(paths, &settings()?, settings),
        Command::Status { json } => {
            let settings = settings()?;
            let report = crate::status::report(paths, &settings);
            if json {
                writeln!(std::io::stdout(), "{}", report.to_json())?;
            } else {
                write!(std::io::stdout(), "{report}")?;
            }
            Ok(())
        }
        Command::Config { json } => {
            let (_, origins) = Paths::resolve_traced(overrides(dirs));
            let shown = crate::effective::Effective {
                paths,
                origins: &origins,
                settings: &settings()?,
                token: token_origin(paths)?,
            };
            if json {
                writeln!(std::io::stdout(), "{}", shown.to_json())?;
            } else {
                write!(std::io::stdout(), "{shown}")?;
            }
            Ok(())
        }
        Command::Completions { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut Cli::command(), "kith", &mut std::io::stdout());
            Ok(())
        }
        Command::Setup(args) => setup(paths, args, flags),
        Command::Forget { id, yes } => {
            let auth = settings()?.auth(paths)?;
            crate::commands::forget::run(&Client::new(&auth)?, &id, yes)
        }
        Command::Install {
            agent,
            mcp,
            recall_on_start,
        } => {
            if recall_on_start && agent != Agent::ClaudeCode {
                bail!("--recall-on-start is for claude-code (a SessionStart hook)");
            }
            if mcp
                && matches!(
                    agent,
                    Agent::Pi | Agent::Gemini | Agent::Cursor | Agent::Copilot
                )
            {
                bail!(crate::install::mcp::MCP_AGENTS);
            }
            let kith = installed_kith()?;
            writeln!(
                std::io::stdout(),
                "{}",
                crate::install::install(paths, agent, &kith, true)?
            )?;
            if mcp {
                writeln!(
                    std::io::stdout(),
                    "{}",
                    crate::install::mcp::install(paths, agent, &kith, true)?
                )?;
            }
            if recall_on_start {
                writeln!(
                    std::io::stdout(),
                    "{}",
                    crate::install::install_recall(paths, &kith, true)?
                )?;
            }
            Ok(())
        }
        Command::Uninstall { agent, mcp } => {
            let kith = installed_kith()?;
            let outcome = if mcp {
                crate::install::mcp::install(paths, agent, &kith, false)?
            } else {
                crate::install::install(paths, agent, &kith, false)?
            };
            writeln!(std::io::stdout(), "{outcome}")?;
            Ok(())
        }
        Command::Resume(args) => {
            let settings = settings()?;
            let client = Client::new(&settings.auth(paths)?)?;
            crate::resume::run(args, paths, &settings, &client)
        }
        Command::Mcp => crate::mcp::run(paths, &settings()?),
        // A SessionStart hook prints what it can and never fails the session.
        Command::Family(FamilyCommand::Context(args)) if args.hook => {
            let auth = settings().and_then(|s| s.auth(paths));
            if let Ok(auth) = auth {
                write!(
                    std::io::stdout(),
                    "{}",
                    crate::commands::context::session_start(&auth)
                )?;
            }
            Ok(())
        }
        Command::Family(cmd) => {
            let auth = settings()?.auth(paths)?;
            crate::commands::run(cmd, &Client::new(&auth)?)
        }
    }
}

/// Where the token comes from (never the token itself).
fn token_origin(paths: &Paths) -> Result<Option<crate::config::Origin>> {
    use crate::config::Origin;
    if std::env::var("KITH_TOKEN").is_ok_and(|t| !t.is_empty()) {
        return Ok(Some(Origin::Env("KITH_TOKEN")));
    }
    Ok(Auth::read(paths)?.map(|_| Origin::File(paths.auth_file())))
}

/// The binary the agents' hooks and MCP entries run: this one.
fn installed_kith() -> Result<PathBuf> {
    let kith = std::env::current_exe().context("cannot tell where kith is installed")?;
    Ok(kith.canonicalize().unwrap_or(kith))
}

fn setup(paths: &Paths, args: SetupArgs, flags: &Flags) -> Result<()> {
    // Setting up goes on when nobody reads what it says.
    let say = &mut |line: &str| {
        let _ = writeln!(std::io::stdout(), "{line}");
    };
    if args.uninstall {
        return Ok(crate::setup::uninstall(paths, say)?);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set")?;
    let bin_dir = args.bin_dir.unwrap_or_else(|| {
        match std::env::var_os("PREFIX").filter(|p| !p.is_empty()) {
            Some(prefix) => PathBuf::from(prefix).join("bin"),
            None => crate::setup::default_bin_dir(&home),
        }
    });
    let service = match (args.no_service, args.no_enable) {
        (true, _) => crate::setup::Service::Skip,
        (false, true) => crate::setup::Service::WriteOnly,
        (false, false) => crate::setup::Service::Enable,
    };
    let opts = crate::setup::Options {
        bin_dir: std::path::absolute(&bin_dir).unwrap_or(bin_dir),
        home,
        service,
    };
    crate::setup::setup(paths, &opts, say)?;
    if args.no_backfill {
        return Ok(());
    }
    // The transcripts already on disk, once there is a central to send to:
    // a backfill that fails leaves setup done, and says how to go on.
    let settings = Settings::load(paths, flags)?;
    if settings.auth(paths).is_err() {
        say("not logged in yet: `kith login --central URL`, then `kith backfill` captures the transcripts already on disk");
        return Ok(());
    }
    say("capturing the transcripts already on disk (`kith backfill`)");
    if let Err(e) = backfill(paths, &settings) {
        say(&format!(
            "warning: backfill: {e:#}; `kith status` shows what waits, `kith backfill` tries again"
        ));
    }
    Ok(())
}

/// The token never comes from argv: `KITH_TOKEN`, a hidden prompt on a
/// terminal, or the first line of stdin. A CA certificate given once stays
/// with the login to the same central until another is given.
fn login(paths: &Paths, central: &str, ca_cert: Option<&Path>) -> Result<()> {
    let central = central.trim().trim_end_matches('/');
    if !(central.starts_with("http://") || central.starts_with("https://")) {
        bail!("--central must be an http:// or https:// URL, like https://kith.example.com");
    }
    let ca_cert = match ca_cert {
        Some(file) => {
            let pem = std::fs::read(file)
                .with_context(|| format!("cannot read --ca-cert {}", file.display()))?;
            crate::client::parse_certificates(&pem)
                .map_err(|why| anyhow!("--ca-cert {}: {why}", file.display()))?;
            Some(String::from_utf8(pem).context("--ca-cert: not a PEM text file")?)
        }
        None => Auth::read(paths)
            .ok()
            .flatten()
            .filter(|old| old.central_url == central)
            .and_then(|old| old.ca_cert),
    };
    let token = match std::env::var("KITH_TOKEN").ok().filter(|t| !t.is_empty()) {
        Some(t) => t,
        None if std::io::stdin().is_terminal() => {
            rpassword::prompt_password("token for this machine: ")
                .context("cannot read the token")?
        }
        None => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("cannot read the token from stdin")?;
            line
        }
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        bail!("no token given (set KITH_TOKEN or type it when asked)");
    }
    let auth = Auth {
        central_url: central.to_owned(),
        token: Secret::new(token),
        ca_cert,
    };
    let status = Client::new(&auth)?.status(Duration::from_secs(10))?;
    auth.save(paths)?;
    writeln!(
        std::io::stdout(),
        "logged in to {} as {} on machine {}",
        auth.central_url,
        status.user,
        status.machine
    )?;
    Ok(())
}

fn backfill(paths: &Paths, settings: &Settings) -> Result<()> {
    for (_, e) in crate::mirror::refresh_all(paths) {
        eprintln!("kith: {e}");
    }
    let sources = crate::discover::all(paths, &settings.aider_roots());
    let bar = progress(sources.len(), "capturing");
    let capture = Capture::new(paths, Duration::from_secs(10)).with_rules(settings.rules.clone());
    let mut total = Captured::default();
    let mut failed = 0;
    for source in &sources {
        match capture.file(source) {
            Ok(c) => total += c,
            Err(e) => {
                failed += 1;
                bar.suspend(|| eprintln!("kith: {}: {e}", source.path.display()));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    writeln!(
        std::io::stdout(),
        "captured {} new bytes from {} transcripts",
        total.bytes,
        sources.len()
    )?;
    let discarded = capture.discard_excluded()?;
    if discarded > 0 {
        writeln!(
            std::io::stdout(),
            "discarded {discarded} waiting deltas of transcripts now excluded"
        )?;
    }
    let waiting = capture.outbox().len();
    let auth = match settings.auth(paths) {
        Ok(auth) => auth,
        Err(e) => bail!("{e}; {waiting} deltas wait in the outbox"),
    };
    let bar = progress(waiting, "sending");
    let client = Client::new(&auth)?;
    let budget = Budget::new(Duration::from_secs(24 * 3600), Duration::from_secs(60));
    let replayed = crate::outbox::replay(&paths.state_dir, Duration::from_secs(10), |h, body| {
        bar.inc(1);
        client.deliver(h, body, budget.next())
    })?;
    bar.finish_and_clear();
    if replayed.busy {
        writeln!(
            std::io::stdout(),
            "another kith (kith watch?) is sending the outbox; it delivers these too"
        )?;
    }
    writeln!(
        std::io::stdout(),
        "central accepted {} deltas; {} waiting in the outbox",
        replayed.accepted,
        capture.outbox().len()
    )?;
    if replayed.rejected > 0 {
        writeln!(
            std::io::stdout(),
            "central refused {} deltas; they are kept in {} and those files are captured again as new chains (see `kith status`)",
            replayed.rejected,
            paths.state_dir.join("rejected").display()
        )?;
    }
    if let Some(why) = replayed.stopped {
        if replayed.token_refused {
            bail!("{why}");
        }
        writeln!(
            std::io::stdout(),
            "central did not take everything yet ({why}); `kith status` shows what waits"
        )?;
    }
    if let Some(note) = backlog(&client) {
        writeln!(std::io::stdout(), "{note}")?;
    }
    if failed > 0 {
        bail!("{failed} transcripts could not be captured");
    }
    Ok(())
}

/// What central still has to embed for this person, and, when someone
/// watches (a terminal), about how long that takes at the pace it goes:
/// keyword search finds everything at once, meaning as chunks are embedded.
fn backlog(client: &Client) -> Option<String> {
    let status =
        || -> Option<kith_proto::StatusResponse> { client.json(client.get("/api/status")).ok() };
    let first = status()?;
    let left = first
        .counts
        .chunks
        .saturating_sub(first.counts.chunks_embedded);
    if left == 0 || first.embedder == "none" {
        return None;
    }
    let mut note = format!(
        "central is embedding your history: {} of {} chunks done (search finds it by its words now, by meaning as it goes; `kith status` shows how far)",
        first.counts.chunks_embedded, first.counts.chunks
    );
    if std::io::stdout().is_terminal() {
        const SAMPLE: Duration = Duration::from_secs(3);
        std::thread::sleep(SAMPLE);
        let then = status()?;
        let done = then
            .counts
            .chunks_embedded
            .saturating_sub(first.counts.chunks_embedded);
        if done > 0 {
            let per_second = done as f64 / SAMPLE.as_secs_f64();
            let left = then
                .counts
                .chunks
                .saturating_sub(then.counts.chunks_embedded);
            note += &format!(
                "; about {} more at {per_second:.0} chunks/s",
                estimate(left as f64 / per_second)
            );
        }
    }
    Some(note)
}

/// `seconds` as people say it: "a minute", "12 minutes", "3 hours".
fn estimate(seconds: f64) -> String {
    let minutes = (seconds / 60.0).ceil() as u64;
    match minutes {
        0 | 1 => "a minute".to_owned(),
        m if m < 120 => format!("{m} minutes"),
        m => format!("{} hours", m.div_ceil(60)),
    }
}

/// A bar on stderr when it is a terminal, otherwise nothing.
fn progress(len: usize, what: &'static str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg:>10} {bar:40} {pos}/{len}") {
        bar.set_style(style);
    }
    bar.set_message(what);
    bar
}

fn watch(
    paths: &Paths,
    settings: &Settings,
    load: impl Fn() -> crate::error::Result<Settings>,
) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        // A second signal while stopping ends the process at once.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let roots: Vec<String> = crate::discover::roots(paths)
        .iter()
        .map(|(_, root)| root.display().to_string())
        .chain(
            settings
                .aider_roots()
                .iter()
                .map(|root| format!("{} (aider)", root.display())),
        )
        .collect();
    eprintln!("kith: watching {} (Ctrl-C to stop)", roots.join(", "));
    let mut timing = crate::watch::Timing::default();
    loop {
        let ended = crate::watch::run(paths, &load, timing, &stop, |line| {
            eprintln!("kith: {line}")
        })?;
        let crate::watch::Ended::Replaced(program) = ended else {
            return Ok(());
        };
        // A stop asked for meanwhile is kept, not handed to a new program.
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        // The same process goes on as the new program (a service manager
        // sees no restart), with the same arguments; if it cannot, this
        // one goes on watching as it is.
        use std::os::unix::process::CommandExt;
        eprintln!(
            "kith: {} was replaced (an upgrade); running the new one",
            program.display()
        );
        let err = std::process::Command::new(&program)
            .args(std::env::args_os().skip(1))
            .exec();
        eprintln!(
            "kith: could not run {}: {err}; watching on as before",
            program.display()
        );
        timing.follow_upgrades = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (state dir, --pi, payload) of the hook run for `args`, or `None` when
    /// clap's own error (exit 2) stands.
    type Hook = Option<(
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    )>;

    fn check(args: &str, want: Hook) {
        let args: Vec<OsString> = args.split(' ').map(OsString::from).collect();
        let got = lenient_hook(&args).map(|cli| match cli.command {
            Command::Hook { pi, payload } => (cli.dirs.state_dir, pi, payload),
            other => panic!("{args:?}: {other:?} is not a hook"),
        });
        let want = want.map(|(state, pi, payload)| {
            (
                state.map(PathBuf::from),
                pi.map(PathBuf::from),
                payload.map(str::to_owned),
            )
        });
        assert_eq!(got, want, "{args:?}");
    }

    #[test]
    fn a_backlog_estimate_reads_as_people_say_it() {
        assert_eq!(estimate(10.0), "a minute");
        assert_eq!(estimate(600.0), "10 minutes");
        assert_eq!(estimate(3.0 * 3600.0 + 1.0), "4 hours");
    }

    /// Every flag and argument of every subcommand says what it is for.
    #[test]
    fn every_flag_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (about)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kith", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn a_hook_with_arguments_clap_refuses_still_runs() {
        check("kith hook --bogus", Some((None, None, None)));
        check(
            "kith --state-dir /s hook --bogus",
            Some((Some("/s"), None, None)),
        );
        check(
            "kith --state-dir=/s hook --bogus",
            Some((Some("/s"), None, None)),
        );
        check(
            "kith --state-dir /s hook --pi /p.jsonl --bogus",
            Some((Some("/s"), Some("/p.jsonl"), None)),
        );
        check(
            "kith --state-dir /s hook --bogus {\"type\":\"x\"}",
            Some((Some("/s"), None, Some("{\"type\":\"x\"}"))),
        );
        check("kith --bogus hook", Some((None, None, None)));
        // Regression: the value of an unknown flag was taken for Codex's
        // payload, and the Stop payload on stdin went unread.
        check("kith hook --future x", Some((None, None, None)));
        // Not the hook: clap's usage error stands.
        check("kith --state-dir hook status --bogus", None);
        check("kith search hook --bogus", None);
        check("kith show hook --bogus", None);
        check("kith --bogus", None);
    }
}
