//! The `kith` command line: parse, dispatch, exit 0 / 1 (one-line reason on
//! stderr) / 2 (usage). `kith hook` always exits 0.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use crate::capture::Capture;
use crate::config::{Auth, Paths, Secret};
use crate::family::{FamilyCommand, Remote};
use crate::install::Agent;

#[derive(Debug, Parser)]
#[command(
    name = "kith",
    version,
    about = "kith: your coding agents' memory, across the family's machines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Store central's URL and this machine's token (from KITH_TOKEN or stdin).
    Login {
        #[arg(long)]
        central: String,
    },
    /// Capture after an agent turn (run by the agents' hooks; always exits 0).
    Hook {
        /// A pi session file to capture.
        #[arg(long)]
        pi: Option<PathBuf>,
        /// Codex `notify` passes its JSON payload as the last argument.
        payload: Option<String>,
    },
    /// Capture every transcript already on disk (resumable).
    Backfill,
    /// Keep capturing: poll the transcript folders and replay the outbox.
    Watch {
        /// Seconds between scans.
        #[arg(long, default_value_t = 2)]
        interval: u64,
    },
    /// What is captured per source, what is pending, and what is at risk.
    Status,
    /// Add kith's hook to an agent's configuration.
    Install { agent: Agent },
    /// Remove kith's hook from an agent's configuration.
    Uninstall { agent: Agent },
    #[command(flatten)]
    Family(FamilyCommand),
}

pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let paths = Paths::from_env();
    if let Command::Hook { pi, payload } = cli.command {
        crate::hook::run(&paths, pi, payload);
        return ExitCode::SUCCESS;
    }
    match dispatch(cli.command, &paths) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kith: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Command, paths: &Paths) -> Result<()> {
    let capture = Capture {
        paths: paths.clone(),
    };
    match command {
        Command::Hook { .. } => Ok(()),
        Command::Login { central } => login(paths, central),
        Command::Backfill => backfill(paths, &capture),
        Command::Watch { interval } => loop {
            for (runtime, file) in crate::discover::all(paths) {
                if let Err(e) = capture.capture(runtime, &file, subagent_parent(&file).as_deref()) {
                    eprintln!("kith: capture {}: {e:#}", file.display());
                }
            }
            if let Ok(auth) = Auth::load(paths) {
                if let Err(e) = capture.flush(&auth, Duration::from_secs(10)) {
                    eprintln!("kith: {e:#}");
                }
            }
            std::thread::sleep(Duration::from_secs(interval.max(1)));
        },
        Command::Status => {
            print!("{}", crate::status::render(paths));
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
                },
            )
        }
    }
}

fn install(paths: &Paths, agent: Agent, add: bool) -> Result<()> {
    let kith = std::env::current_exe().context("cannot tell where kith is installed")?;
    println!("{}", crate::install::install(paths, agent, &kith, add)?);
    Ok(())
}

/// For a Claude subagent file, its session's transcript.
pub fn subagent_parent(file: &std::path::Path) -> Option<PathBuf> {
    let dir = file.parent()?;
    if dir.file_name()? != "subagents" {
        return None;
    }
    let session = dir.parent()?;
    Some(session.with_extension("jsonl"))
}

fn login(paths: &Paths, central: String) -> Result<()> {
    let token = match std::env::var("KITH_TOKEN").ok().filter(|t| !t.is_empty()) {
        Some(t) => t,
        None => {
            if std::io::stdin().is_terminal() {
                eprint!("token for this machine: ");
            }
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim().to_owned()
        }
    };
    if token.is_empty() {
        bail!("no token given (set KITH_TOKEN or type it on stdin)");
    }
    let auth = Auth {
        central_url: central.trim_end_matches('/').to_owned(),
        token: Secret::new(token),
    };
    let res = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(format!("{}/api/status", auth.central_url))
        .bearer_auth(auth.token.expose())
        .send()
        .with_context(|| format!("cannot reach {}", auth.central_url))?;
    if !res.status().is_success() {
        bail!(
            "central at {} refused the token ({})",
            auth.central_url,
            res.status()
        );
    }
    let status: kith_proto::StatusResponse = res.json()?;
    auth.save(paths)?;
    println!(
        "logged in to {} as {} on machine {}",
        auth.central_url, status.user, status.machine
    );
    Ok(())
}

fn backfill(paths: &Paths, capture: &Capture) -> Result<()> {
    let files = crate::discover::all(paths);
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(files.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut bytes = 0;
    let mut errors = 0;
    for (runtime, file) in &files {
        match capture.capture(*runtime, file, subagent_parent(file).as_deref()) {
            Ok(n) => bytes += n,
            Err(e) => {
                errors += 1;
                bar.suspend(|| eprintln!("kith: {}: {e:#}", file.display()));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let auth = Auth::load(paths)?;
    let sent = capture.flush(&auth, Duration::from_secs(30));
    println!(
        "captured {} new bytes from {} transcripts",
        bytes,
        files.len()
    );
    match sent {
        Ok(n) => println!(
            "central accepted {n} deltas; {} waiting in the outbox",
            capture.pending().len()
        ),
        Err(e) => {
            println!("central did not take everything yet ({e:#}); `kith status` shows what waits")
        }
    }
    if errors > 0 {
        bail!("{errors} transcripts could not be captured");
    }
    Ok(())
}
