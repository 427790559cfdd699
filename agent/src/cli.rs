//! The `kith` command line: parse (clap), resolve the folders, dispatch, exit
//! 0 / 1 (one-line reason on stderr) / 2 (usage). `kith hook` always exits 0,
//! even when its arguments do not parse. New subcommands go in `Command`.

use std::ffi::OsString;
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
use crate::config::{Auth, PathOverrides, Paths, Secret};
use crate::family::{FamilyCommand, Remote};
use crate::install::Agent;

#[derive(Debug, Parser)]
#[command(
    name = "kith",
    version,
    about = "kith: your coding agents' memory, across the family's machines"
)]
pub struct Cli {
    #[command(flatten)]
    dirs: DirArgs,
    #[command(subcommand)]
    command: Command,
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
    /// Claude Code's folder [env: KITH_CLAUDE_DIR; default ~/.claude]
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
pub enum Command {
    /// Store central's URL and this machine's token (from KITH_TOKEN or a prompt).
    Login {
        /// Central's address, like https://kith.example.com
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
    /// What is captured per source, what is pending, and what is at risk.
    Status,
    /// Add kith's hook to an agent's configuration.
    Install { agent: Agent },
    /// Remove kith's hook from an agent's configuration.
    Uninstall { agent: Agent },
    #[command(flatten)]
    Family(FamilyCommand),
}

pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => match lenient_hook(&args) {
            // Whatever an agent passes, a hook must not exit 2.
            Some(cli)
                if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
            {
                cli
            }
            _ => e.exit(),
        },
    };
    let paths = Paths::resolve(PathOverrides {
        config_dir: cli.dirs.config_dir,
        state_dir: cli.dirs.state_dir,
        claude_dir: cli.dirs.claude_dir,
        codex_dir: cli.dirs.codex_dir,
        pi_dir: cli.dirs.pi_dir,
    });
    match run(cli.command, &paths) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`kith show ID | head`): nothing failed.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kith: {e:#}");
            ExitCode::FAILURE
        }
    }
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
            command: Command::Hook { pi, payload },
        }) => Cli {
            dirs,
            command: Command::Hook {
                pi,
                payload: payload.or(last),
            },
        },
        _ => Cli {
            dirs: DirArgs::default(),
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

fn run(command: Command, paths: &Paths) -> Result<()> {
    match command {
        // Never fails: errors go to the hook's log.
        Command::Hook { pi, payload } => {
            crate::hook::run(paths, pi, payload);
            Ok(())
        }
        Command::Login { central, ca_cert } => login(paths, &central, ca_cert.as_deref()),
        Command::Backfill => backfill(paths),
        Command::Watch => watch(paths),
        Command::Status => {
            print!("{}", crate::status::report(paths));
            Ok(())
        }
        Command::Install { agent } => install(paths, agent, true),
        Command::Uninstall { agent } => install(paths, agent, false),
        Command::Family(cmd) => {
            let auth = Auth::load(paths)?;
            crate::family::run(
                cmd,
                &Remote {
                    central_url: &auth.central_url,
                    token: auth.token.expose(),
                    certificates: crate::client::trusted_certificates(&auth)?,
                },
            )
        }
    }
}

fn install(paths: &Paths, agent: Agent, add: bool) -> Result<()> {
    let kith = std::env::current_exe().context("cannot tell where kith is installed")?;
    let kith = kith.canonicalize().unwrap_or(kith);
    println!("{}", crate::install::install(paths, agent, &kith, add)?);
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
        None => Auth::load(paths)
            .ok()
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
    println!(
        "logged in to {} as {} on machine {}",
        auth.central_url, status.user, status.machine
    );
    Ok(())
}

fn backfill(paths: &Paths) -> Result<()> {
    let sources = crate::discover::all(paths);
    let bar = progress(sources.len(), "capturing");
    let capture = Capture::new(paths, Duration::from_secs(10));
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
    println!(
        "captured {} new bytes from {} transcripts",
        total.bytes,
        sources.len()
    );
    let waiting = capture.outbox().len();
    let auth = match Auth::load(paths) {
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
        println!("another kith (kith watch?) is sending the outbox; it delivers these too");
    }
    println!(
        "central accepted {} deltas; {} waiting in the outbox",
        replayed.accepted,
        capture.outbox().len()
    );
    if replayed.rejected > 0 {
        println!(
            "central refused {} deltas; they are kept in {} and those files are captured again as new chains (see `kith status`)",
            replayed.rejected,
            paths.state_dir.join("rejected").display()
        );
    }
    if let Some(why) = replayed.stopped {
        if replayed.token_refused {
            bail!("{why}");
        }
        println!("central did not take everything yet ({why}); `kith status` shows what waits");
    }
    if failed > 0 {
        bail!("{failed} transcripts could not be captured");
    }
    Ok(())
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

fn watch(paths: &Paths) -> Result<()> {
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
        .collect();
    eprintln!("kith: watching {} (Ctrl-C to stop)", roots.join(", "));
    crate::watch::run(paths, crate::watch::Timing::default(), &stop, |line| {
        eprintln!("kith: {line}")
    })?;
    Ok(())
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
