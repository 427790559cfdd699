//! The `kith-central` command line: raw flags are parsed by clap, resolved
//! into a `Config`, then dispatched. Admin commands work on the data
//! directory directly.

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use kith_shared::ids::{MachineId, UserId};

use crate::auth::Token;
use crate::config::SearchBackend;
use crate::config::{Config, Overrides, DEFAULT_CONFIG};
use crate::pds::{self, Password};
use crate::privacy::Operator;
use crate::registry::{Forgetter, Registry, UserRow};
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
    /// Search backend: embedded or meilisearch. Overrides KITH_SEARCH_BACKEND.
    #[arg(long, global = true, value_parser = crate::config::parse_backend)]
    search_backend: Option<SearchBackend>,
    /// Meilisearch URL. Overrides KITH_MEILI_URL.
    #[arg(long, global = true, value_name = "URL")]
    meili_url: Option<String>,
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
        /// Serve plain HTTP on an address other than loopback (refused
        /// otherwise: tokens would cross the network in the clear).
        #[arg(long)]
        insecure_http: bool,
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
    /// Copy what cannot be rebuilt (the registry, every blob and its record)
    /// into DEST as a new snapshot, while `serve` may run. Blobs are kept by
    /// their sha256, so a second backup to DEST copies only new ones; the
    /// index is not copied (`reindex` rebuilds it).
    Backup {
        /// The backup folder (made if absent; not inside the data directory).
        dest: PathBuf,
        /// Then keep only the newest N snapshots: older ones are removed,
        /// and the blobs no kept snapshot holds.
        #[arg(long, value_name = "N")]
        keep: Option<std::num::NonZeroUsize>,
    },
    /// Check a backup's every snapshot (DEST), or without DEST the data
    /// directory, for damage: every file hashed against what names it, the
    /// registry checked by SQLite and against its files. Exits 1 on damage,
    /// naming each damaged file.
    Verify {
        /// The backup folder; absent, the data directory is checked.
        dest: Option<PathBuf>,
    },
    /// Restore a snapshot of the backup in DEST (the newest, or --snapshot)
    /// into an empty or absent --data-dir, then rebuild its index. Runs
    /// forgotten in any snapshot stay forgotten.
    Restore {
        /// The backup folder.
        dest: PathBuf,
        /// The snapshot's name (a folder under DEST/snapshots).
        #[arg(long, value_name = "NAME")]
        snapshot: Option<String>,
    },
    /// Forget a conversation and the subagents under it, whoever owns it:
    /// deleted from the index, the blobs and the registry, its bytes never
    /// taken again (stop `serve` first).
    Forget {
        /// A whole conversation id or run id.
        id: String,
    },
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
    /// Make a member an admin (who may see the family's health, register
    /// and revoke machines); --off takes it back.
    Admin {
        handle: String,
        #[arg(long)]
        off: bool,
    },
}

#[derive(Debug, Subcommand)]
enum MachineCommand {
    /// Register a machine and print its token once (last line of stdout).
    ///
    /// Without --local the token is a new app password on the user's PDS,
    /// created with the user's main password from KITH_PDS_PASSWORD or a
    /// prompt (one line of stdin when stdin is not a terminal).
    Register {
        #[arg(long)]
        user: String,
        #[arg(long)]
        name: String,
        /// Generate a local token instead of an AT Protocol app password;
        /// creates the user if needed.
        #[arg(long)]
        local: bool,
        /// Write `{"central_url", "token"}` to this file (mode 0600) instead
        /// of printing the token; an existing file is kept as PATH.bak.
        #[arg(long, value_name = "PATH")]
        auth_json: Option<PathBuf>,
        /// The central URL to put in --auth-json.
        #[arg(long, value_name = "URL", requires = "auth_json")]
        central_url: Option<String>,
    },
    /// Revoke a machine's token; its next request gets 401. Data is kept.
    ///
    /// For a PDS machine this also revokes its app password on the PDS
    /// (main password as for register); kith stops accepting the token
    /// first, even when the PDS cannot be reached.
    Revoke {
        #[arg(long)]
        user: String,
        #[arg(long)]
        name: String,
        /// Also hide this machine's runs captured at or after this RFC 3339
        /// time from everyone but their owner (a stolen laptop).
        #[arg(long)]
        quarantine_since: Option<String>,
    },
    /// Release a machine's quarantined runs: others see them again.
    Release {
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
    let wanted = std::env::var("KITH_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_new(&wanted)
        .ok()
        .filter(|_| !wanted.is_empty())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    // ONNX Runtime and its loader narrate every session they set up at info;
    // only their warnings belong in kith's log, unless KITH_LOG asks for them.
    if !wanted.split(',').any(|d| d.trim().starts_with("ort")) {
        if let Ok(ort) = "ort=warn".parse() {
            filter = filter.add_directive(ort);
        }
    }
    // Colour codes only for a person at a terminal, not in a supervisor's
    // or a test's captured log.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let (listen, insecure_http) = match &cli.command {
        Command::Serve {
            listen,
            insecure_http,
        } => (*listen, *insecure_http),
        _ => (None, false),
    };
    let flags = Overrides {
        data_dir: cli.data_dir.clone(),
        listen,
        search_backend: cli.search_backend,
        meili_url: cli.meili_url.clone(),
        insecure_http,
    };
    let config = Config::load(cli.config.as_deref(), |k| std::env::var(k).ok(), &flags)?;
    match cli.command {
        Command::DefaultConfig => {}
        // These neither make a data directory nor start a registry: each
        // says what it misses.
        Command::Serve { .. }
        | Command::Backup { .. }
        | Command::Verify { .. }
        | Command::Restore { .. } => own_data_dir(&config.data_dir)?,
        _ => {
            if !config.data_dir.exists() {
                eprintln!(
                    "kith-central: {} does not exist: starting a new registry there (a server's \
                     data is where its KITH_DATA_DIR or --data-dir says: /var/lib/kith for \
                     deploy/install-central.sh)",
                    config.data_dir.display()
                );
            }
            own_data_dir(&config.data_dir)?;
        }
    }
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
            // from scratch, one an older kith-central built is built anew
            // around its vectors.
            let state = match AppState::open(config.clone()) {
                Ok(s) => match s.index().outdated() {
                    None => s,
                    // A server backend's documents are all put anew below.
                    Some(why) if config.search.backend != SearchBackend::Embedded => {
                        eprintln!("{why}; building it anew");
                        s
                    }
                    Some(why) => {
                        // Fails, as any reindex, while a server writes to it.
                        s.index().clear()?;
                        drop(s);
                        eprintln!("{why}; building it anew");
                        crate::index::embedded::remove_keeping_vectors(&config.index_dir())?;
                        AppState::open(config)?
                    }
                },
                Err(
                    e @ crate::error::Error::Unavailable {
                        code: crate::error::Code::IndexUnavailable,
                        ..
                    },
                ) => {
                    eprintln!("{e}; removing it");
                    std::fs::remove_dir_all(config.index_dir())?;
                    AppState::open(config)?
                }
                Err(e) => return Err(e.into()),
            };
            let report = crate::maintenance::reindex(&state, &Operator::for_operator_commands())?;
            for s in &report.skipped {
                eprintln!("skipped {s}");
            }
            println!(
                "reindexed {} runs into {} chunks",
                report.n_runs, report.n_chunks
            );
            Ok(())
        }
        Command::Backup { dest, keep } => {
            // Serving comes first: the copy and its hashing yield the cores.
            let _ = rustix::process::nice(19);
            let operator = Operator::for_operator_commands();
            let taken = if config.data_dir.join("registry.sqlite").is_file() {
                let registry = open_registry(&config.data_dir)?;
                crate::backup::take_noted(&registry, &config.data_dir, &dest, keep, &operator)?
            } else {
                crate::backup::take(&config.data_dir, &dest, keep, &operator)?
            };
            println!("{taken}");
            if !taken.damage.is_empty() {
                for (path, what) in &taken.damage {
                    eprintln!("damaged: {path}: {what}");
                }
                bail!(
                    "the snapshot holds all but {} damaged files of {}; `kith-central verify` \
                     checks the data directory",
                    taken.damage.len(),
                    config.data_dir.display()
                );
            }
            Ok(())
        }
        Command::Verify { dest } => {
            let operator = Operator::for_operator_commands();
            let (checked, what) = match &dest {
                Some(dest) => (crate::backup::verify_backup(dest, &operator)?, dest),
                None => (
                    crate::backup::verify_data_dir(&config.data_dir, &operator)?,
                    &config.data_dir,
                ),
            };
            print!("{checked}");
            if !checked.damage.is_empty() {
                bail!(
                    "{} is damaged: {} problems (listed above)",
                    what.display(),
                    checked.damage.len()
                );
            }
            println!("no damage in {}", what.display());
            Ok(())
        }
        Command::Restore { dest, snapshot } => {
            let restored = crate::backup::restore(
                &dest,
                snapshot.as_deref(),
                config,
                &Operator::for_operator_commands(),
            )?;
            println!("{restored}");
            Ok(())
        }
        Command::Forget { id } => {
            let state = AppState::open(config)?;
            let operator = Operator::for_operator_commands();
            let res = crate::forget::forget(&state, Forgetter::Admin(&operator), &id)?;
            println!(
                "forgot conversation {} ({} conversations, {} runs)",
                res.conversation, res.n_conversations, res.n_runs
            );
            for line in &res.backups_not_cleared {
                eprintln!("backup folder {line}");
            }
            Ok(())
        }
        Command::Doctor => {
            let state = AppState::open(config)?;
            let report = crate::maintenance::doctor(&state, &Operator::for_operator_commands())?;
            let backups = crate::backup::health(
                state.config().backup.as_ref(),
                &state.registry().backups()?,
                time::OffsetDateTime::now_utc(),
            );
            println!("backups: {backups}");
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

/// Refuses a data directory another user owns: files this process writes
/// there would be its user's, which the service's user may not write (an
/// admin's `sudo kith-central user add` beside a service running as
/// `kith`).
fn own_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "{} belongs to another user (uid {}): run kith-central as that user, as in \
             `sudo -u kith kith-central --data-dir {} ...`, so that the server can still write \
             what this command writes",
            dir.display(),
            meta.uid(),
            dir.display()
        );
    }
    Ok(())
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
    crate::private::create_dir_all(&config.data_dir)?;
    let registry = open_registry(&config.data_dir)?;
    match cmd {
        UserCommand::Add { handle, pds, admin } => {
            if let Some(user) = registry.user_by_handle(&handle)? {
                let hint = if admin && !user.is_admin {
                    format!("; `kith-central user admin {handle}` makes them an admin")
                } else {
                    String::new()
                };
                bail!("user {handle} already exists{hint}");
            }
            let mut row = new_user(&handle, None, admin);
            if let Some(pds_url) = pds {
                let pds_url = pds_url.trim_end_matches('/').to_owned();
                let did = block_on(pds::resolve_handle(&pds_url, &handle))??;
                row.did = Some(did);
                row.pds_url = Some(pds_url);
            }
            registry.add_user(&row)?;
            match (&row.did, &row.pds_url) {
                (Some(did), Some(pds_url)) => {
                    println!("added user {handle} ({}) as {did} on {pds_url}", row.id)
                }
                _ => println!("added user {handle} ({})", row.id),
            }
        }
        UserCommand::Admin { handle, off } => {
            let user = registry
                .user_by_handle(&handle)?
                .with_context(|| format!("no member {handle} (`kith-central user list`)"))?;
            let was = user.is_admin;
            registry.set_admin(&user.id, !off)?;
            println!(
                "{handle} {} an admin",
                match (was, !off) {
                    (true, true) => "was already",
                    (false, false) => "was not",
                    (false, true) => "is now",
                    (true, false) => "is no longer",
                }
            );
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
    crate::private::create_dir_all(&config.data_dir)?;
    let registry = open_registry(&config.data_dir)?;
    match cmd {
        MachineCommand::Register {
            user,
            name,
            local,
            auth_json,
            central_url,
        } => {
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                bail!("machine name must be 1-64 printable characters");
            }
            let out = match auth_json {
                Some(path) => TokenOut::File(AuthJson::prepare(path, central_url)?),
                None => TokenOut::Stdout,
            };
            if !local {
                return register_with_pds(&registry, &user, &name, out);
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
            if let Err(e) = out.hand_over(&token, &name, &user) {
                registry.revoke_machine(&user_row.id, &name, &kith_shared::timestamp::now())?;
                return Err(e.context(format!("machine {name} was revoked again")));
            }
        }
        MachineCommand::Release { user, name } => {
            let (_, machine_id) = machine_of(&registry, &user, &name)?;
            let n = registry.quarantine(&machine_id, "0000", false)?;
            println!("released {n} runs of {name} of {user}");
        }
        MachineCommand::Revoke {
            user,
            name,
            quarantine_since,
        } => {
            if let Some(since) = &quarantine_since {
                let since = kith_shared::timestamp::normalize(since).with_context(|| {
                    format!("--quarantine-since {since:?} is not an RFC 3339 time")
                })?;
                let (_, machine_id) = machine_of(&registry, &user, &name)?;
                let n = registry.quarantine(&machine_id, &since, true)?;
                println!("quarantined {n} runs of {name} captured since {since}");
            }
            let user_row = registry
                .user_by_handle(&user)?
                .with_context(|| format!("no user {user}"))?;
            let auth = registry.machine_auth(&user_row.id, &name)?;
            // kith stops accepting the token first: nothing the PDS does (or
            // fails to do) below can keep it working.
            let newly =
                registry.revoke_machine(&user_row.id, &name, &kith_shared::timestamp::now())?;
            let app_password = auth.and_then(|a| a.app_password_name);
            match (newly, app_password) {
                (false, None) => bail!("{user} has no live machine named {name:?}"),
                (true, None) => println!("revoked {name} of {user}; its token no longer works"),
                (newly, Some(app_password)) => {
                    if newly {
                        println!("revoked {name} of {user}; its token no longer works");
                    } else {
                        eprintln!("{name} of {user} was already revoked; revoking its app password on the PDS again");
                    }
                    let pds_url = user_row
                        .pds_url
                        .as_deref()
                        .context("the user has no PDS URL; revoke the app password in the PDS account settings")?;
                    revoke_on_pds(pds_url, &user, &app_password).with_context(|| {
                        format!(
                            "kith no longer accepts the token, but revoking app password \
                             {app_password:?} on the PDS failed (run this command again to retry)"
                        )
                    })?;
                    println!("revoked app password {app_password:?} on {pds_url}");
                }
            }
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

/// A user's machine by name: (user id, machine id).
fn machine_of(
    registry: &crate::registry::Registry,
    user: &str,
    name: &str,
) -> anyhow::Result<(UserId, String)> {
    let user_row = registry
        .user_by_handle(user)?
        .with_context(|| format!("no user {user}"))?;
    let machine = registry
        .machine_id(&user_row.id, name)?
        .with_context(|| format!("{user} has no machine named {name:?}"))?;
    Ok((user_row.id, machine))
}

/// 256 random bits, hex, with a recognisable prefix (secret scanners and
/// kith's own redaction can spot it).
fn new_local_token() -> anyhow::Result<Token> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(Token::new(format!("kith_{}", hex::encode(bytes))))
}

/// Registers a machine whose token is a new app password on the user's PDS.
/// Nothing is left half-done: the name is checked before the PDS is asked,
/// and an app password central could not store (or hand over) is revoked on
/// the PDS again.
fn register_with_pds(
    registry: &Registry,
    user: &str,
    name: &str,
    out: TokenOut,
) -> anyhow::Result<()> {
    let user_row = registry.user_by_handle(user)?.with_context(|| {
        format!("no user {user}; add it with `kith-central user add --handle {user} --pds URL`, or register with --local")
    })?;
    let pds_url = user_row.pds_url.clone().with_context(|| {
        format!("user {user} has no PDS (added without --pds); register with --local")
    })?;
    if registry.machine_auth(&user_row.id, name)?.is_some() {
        bail!("{user} already has a machine named {name:?}; revoke it or pick another name");
    }
    let password = main_password(user)?;
    let app_name = format!("kith-{name}-{}", base36(unix_secs()));
    let rt = runtime()?;
    let app = rt.block_on(pds::create_app_password(
        &pds_url, user, &password, &app_name,
    ))?;
    let undo = |why: anyhow::Error| -> anyhow::Error {
        match rt.block_on(pds::revoke_app_password(
            &pds_url, user, &password, &app.name,
        )) {
            Ok(()) => why.context(format!(
                "undone: app password {:?} revoked on the PDS again",
                app.name
            )),
            Err(e) => why.context(format!(
                "app password {:?} is still on the PDS ({e}); revoke it in the account settings",
                app.name
            )),
        }
    };
    let did = match rt.block_on(pds::check_app_password(&pds_url, user, &app.secret)) {
        Ok(did) => did,
        Err(e) => {
            return Err(undo(
                anyhow::Error::new(e).context("the new app password does not log in"),
            ))
        }
    };
    if let Some(known) = user_row.did.as_deref().filter(|known| *known != did) {
        return Err(undo(anyhow::anyhow!(
            "{user} now logs in as {did}, not {known} as when the user was added"
        )));
    }
    let token = Token::new(app.secret.expose().to_owned());
    let machine_id = MachineId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes());
    if let Err(e) = registry.add_machine(
        &machine_id,
        &user_row.id,
        name,
        Some(&app.name),
        &token.sha256(),
        &kith_shared::timestamp::now(),
    ) {
        return Err(undo(e.into()));
    }
    if let Err(e) = out.hand_over(&token, name, user) {
        registry.revoke_machine(&user_row.id, name, &kith_shared::timestamp::now())?;
        return Err(undo(e.context(format!("machine {name} was revoked again"))));
    }
    Ok(())
}

fn revoke_on_pds(pds_url: &str, user: &str, app_password: &str) -> anyhow::Result<()> {
    let password = main_password(user)?;
    runtime()?.block_on(pds::revoke_app_password(
        pds_url,
        user,
        &password,
        app_password,
    ))?;
    Ok(())
}

/// The user's main PDS password: `KITH_PDS_PASSWORD`, else a prompt on the
/// terminal, else one line of stdin. Never a command-line argument.
fn main_password(user: &str) -> anyhow::Result<Password> {
    if let Some(p) = std::env::var("KITH_PDS_PASSWORD")
        .ok()
        .filter(|p| !p.is_empty())
    {
        return Ok(Password::new(p));
    }
    let stdin = std::io::stdin();
    let p = if stdin.is_terminal() {
        rpassword::prompt_password(format!("main PDS password of {user}: "))
            .context("cannot read the password from the terminal")?
    } else {
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .context("cannot read the password from stdin")?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    };
    if p.is_empty() {
        bail!("no main PDS password: set KITH_PDS_PASSWORD, or give it at the prompt or on stdin");
    }
    Ok(Password::new(p))
}

/// A small runtime for the admin commands' PDS calls.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    Ok(runtime()?.block_on(f))
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Where a new machine's token goes: printed once, or into an auth.json.
enum TokenOut {
    Stdout,
    File(AuthJson),
}

impl TokenOut {
    fn hand_over(self, token: &Token, name: &str, user: &str) -> anyhow::Result<()> {
        match self {
            TokenOut::Stdout => {
                let mut out = std::io::stdout().lock();
                // Piped (a script keeping it), the token is not "below".
                if out.is_terminal() {
                    eprintln!(
                        "registered machine {name} for {user}; the token below is shown once:"
                    );
                } else {
                    eprintln!("registered machine {name} for {user}; its token went to standard output, shown once");
                }
                writeln!(out, "{}", token.expose())?;
                out.flush()?;
            }
            TokenOut::File(file) => {
                let path = file.write(token)?;
                println!(
                    "registered machine {name} for {user}; its token is in {}",
                    path.display()
                );
            }
        }
        Ok(())
    }
}

/// An auth.json being written: the temporary file is created (mode 0600)
/// before anything is registered, so an unwritable path fails first.
struct AuthJson {
    path: PathBuf,
    tmp: PathBuf,
    file: std::fs::File,
    central_url: Option<String>,
}

impl AuthJson {
    fn prepare(path: PathBuf, central_url: Option<String>) -> anyhow::Result<Self> {
        let tmp = with_suffix(&path, ".tmp");
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let file = opts
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        #[cfg(unix)]
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        Ok(Self {
            path,
            tmp,
            file,
            central_url,
        })
    }

    fn write(mut self, token: &Token) -> anyhow::Result<PathBuf> {
        let body = serde_json::json!({
            "central_url": self.central_url,
            "token": token.expose(),
        });
        let written = serde_json::to_writer_pretty(&mut self.file, &body)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(self.file.write_all(b"\n")?))
            .and_then(|()| Ok(self.file.sync_all()?));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e.context(format!("cannot write {}", self.tmp.display())));
        }
        if self.path.exists() {
            let bak = with_suffix(&self.path, ".bak");
            std::fs::rename(&self.path, &bak).with_context(|| {
                format!("cannot keep {} as {}", self.path.display(), bak.display())
            })?;
        }
        std::fs::rename(&self.tmp, &self.path)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(self.path.clone())
    }
}

impl Drop for AuthJson {
    fn drop(&mut self) {
        // Unused (registration failed) or already renamed: no temp file stays.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
