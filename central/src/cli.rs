//! The `kith-central` command line: raw flags are parsed by clap, resolved
//! into a `Config`, then dispatched. Admin commands work on the data
//! directory directly.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use kith_shared::ids::{MachineId, UserId};

use crate::auth::Token;
use crate::config::{Config, Overrides, DEFAULT_CONFIG};
use crate::registry::UserRow;
use crate::state::{open_registry, AppState};

#[derive(Debug, Parser)]
#[command(
    name = "kith-central",
    version,
    about = "kith central: the family's transcript store and search"
)]
struct Cli {
    /// Configuration file (TOML; see `kith-central default-config`).
    #[arg(long, env = "KITH_CENTRAL_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Data directory (blobs, registry, index). Overrides the config file and KITH_DATA_DIR.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP(S) service.
    Serve {
        /// Address to listen on, like 127.0.0.1:7878. Overrides KITH_LISTEN.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Print the commented example configuration (which is also the default).
    DefaultConfig,
    /// Manage family members.
    #[command(subcommand)]
    User(UserCommand),
    /// Register, revoke and list machines.
    #[command(subcommand)]
    Machine(MachineCommand),
    /// Rebuild the run catalog and the search index from the blob store (stop `serve` first).
    Reindex,
    /// Report drift between the blob store, the registry and the index.
    Doctor,
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Add a user.
    Add {
        #[arg(long)]
        handle: String,
        /// The user's PDS (resolves the handle to a DID).
        #[arg(long)]
        pds: Option<String>,
        #[arg(long)]
        admin: bool,
    },
    /// List users.
    List,
}

#[derive(Debug, Subcommand)]
enum MachineCommand {
    /// Register a machine and print its token once (last line of stdout).
    Register {
        #[arg(long)]
        user: String,
        #[arg(long)]
        name: String,
        /// Generate a local token instead of an AT Protocol app password;
        /// creates the user if needed.
        #[arg(long)]
        local: bool,
    },
    /// Revoke a machine's token; its next request gets 401. Data is kept.
    Revoke {
        #[arg(long)]
        user: String,
        #[arg(long)]
        name: String,
    },
    /// List machines.
    List,
}

/// Parses the command line and runs it; the process exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kith-central: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KITH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let listen = match &cli.command {
        Command::Serve { listen } => *listen,
        _ => None,
    };
    let flags = Overrides {
        data_dir: cli.data_dir.clone(),
        listen,
    };
    let config = Config::load(cli.config.as_deref(), |k| std::env::var(k).ok(), &flags)?;
    match cli.command {
        Command::Serve { .. } => {
            init_tracing();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(config.listen)
                    .await
                    .with_context(|| format!("cannot listen on {}", config.listen))?;
                crate::serve(config, listener, shutdown_signal()).await?;
                Ok(())
            })
        }
        Command::DefaultConfig => {
            print!("{DEFAULT_CONFIG}");
            Ok(())
        }
        Command::User(cmd) => user(&config, cmd),
        Command::Machine(cmd) => machine(&config, cmd),
        Command::Reindex => {
            // The index is derived: one that cannot be opened is rebuilt
            // from scratch.
            let state = match AppState::open(config.clone()) {
                Ok(s) => s,
                Err(
                    e @ crate::error::Error::Unavailable {
                        code: "index_unavailable",
                        ..
                    },
                ) => {
                    eprintln!("{e}; removing it");
                    std::fs::remove_dir_all(config.data_dir.join("index"))?;
                    AppState::open(config)?
                }
                Err(e) => return Err(e.into()),
            };
            let report = crate::maintenance::reindex(&state)?;
            for s in &report.skipped {
                eprintln!("skipped {s}");
            }
            println!(
                "reindexed {} runs into {} chunks",
                report.n_runs, report.n_chunks
            );
            Ok(())
        }
        Command::Doctor => {
            let state = AppState::open(config)?;
            let report = crate::maintenance::doctor(&state)?;
            if report.is_empty() {
                println!("no drift: blobs, registry and index agree");
                return Ok(());
            }
            for (kind, items) in &report {
                println!("{kind}: {}", items.len());
                for item in items.iter().take(20) {
                    println!("  {item}");
                }
            }
            bail!("drift found; `kith-central reindex` rebuilds derived state from the blobs")
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn new_user(handle: &str, pds: Option<String>, admin: bool) -> UserRow {
    UserRow {
        id: UserId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes()),
        handle: handle.to_owned(),
        did: None,
        pds_url: pds,
        is_admin: admin,
        created_at: kith_shared::timestamp::now(),
    }
}

fn user(config: &Config, cmd: UserCommand) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)?;
    let registry = open_registry(&config.data_dir)?;
    match cmd {
        UserCommand::Add { handle, pds, admin } => {
            if pds.is_some() {
                bail!("resolving handles on a PDS is not built yet; add the user without --pds");
            }
            let row = new_user(&handle, pds, admin);
            registry.add_user(&row)?;
            println!("added user {handle} ({})", row.id);
        }
        UserCommand::List => {
            for u in registry.list_users()? {
                let admin = if u.is_admin { " admin" } else { "" };
                println!(
                    "{}\t{}\t{}{admin}",
                    u.handle,
                    u.id,
                    u.did.as_deref().unwrap_or("-")
                );
            }
        }
    }
    Ok(())
}

fn machine(config: &Config, cmd: MachineCommand) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)?;
    let registry = open_registry(&config.data_dir)?;
    match cmd {
        MachineCommand::Register { user, name, local } => {
            if !local {
                bail!("registering with an AT Protocol app password is not built yet; use --local");
            }
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                bail!("machine name must be 1-64 printable characters");
            }
            let user_row = match registry.user_by_handle(&user)? {
                Some(u) => u,
                None => {
                    let row = new_user(&user, None, false);
                    registry.add_user(&row)?;
                    row
                }
            };
            let token = new_local_token()?;
            registry.add_machine(
                &MachineId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes()),
                &user_row.id,
                &name,
                None,
                &token.sha256(),
                &kith_shared::timestamp::now(),
            )?;
            eprintln!("registered machine {name} for {user}; the token below is shown once:");
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", token.expose())?;
        }
        MachineCommand::Revoke { user, name } => {
            let user_row = registry
                .user_by_handle(&user)?
                .with_context(|| format!("no user {user}"))?;
            if !registry.revoke_machine(&user_row.id, &name, &kith_shared::timestamp::now())? {
                bail!("{user} has no live machine named {name:?}");
            }
            println!("revoked {name} of {user}; its token no longer works");
        }
        MachineCommand::List => {
            for m in registry.list_machines()? {
                let state = match &m.revoked_at {
                    Some(at) => format!("revoked {at}"),
                    None => format!("last seen {}", m.last_seen_at.as_deref().unwrap_or("never")),
                };
                println!("{}\t{}\t{}\t{state}", m.handle, m.name, m.id);
            }
        }
    }
    Ok(())
}

/// 256 random bits, hex, with a recognisable prefix (secret scanners and
/// kith's own redaction can spot it).
fn new_local_token() -> anyhow::Result<Token> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(Token::new(format!("kith_{}", hex::encode(bytes))))
}
