//! `kith setup`: everything a machine needs to capture, in one idempotent
//! step. It copies the running `kith` into a bin folder, puts that folder on
//! the login shell's PATH when it is not, installs kith's hook for every
//! agent whose folder exists, and writes (and enables) a user service that
//! runs `kith watch`: a systemd user unit on Linux, a launchd agent on
//! macOS. What it changed is recorded in `<state>/setup.json`, so that
//! `kith setup --uninstall` removes that and nothing the user had, besides
//! the hooks and MCP servers `kith install` added since that run the binary
//! it removes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::config::{write_file, write_through, Durability, Paths};
use crate::error::{Error, IoContext, Result};
use crate::install::Agent;

/// What to set up, from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Where `kith` goes.
    pub(crate) bin_dir: PathBuf,
    /// The user's home (profile files, the service's folder).
    pub(crate) home: PathBuf,
    pub(crate) service: Service,
}

/// How far the `kith watch` service step goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// No service at all (`--no-service`).
    Skip,
    /// The unit or plist is written, not enabled (`--no-enable`).
    WriteOnly,
    /// Written, enabled and started.
    Enable,
}

/// What `kith setup` changed, kept for `--uninstall`. Each run adds to it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// The binary setup copied (absent when `kith` already ran from there).
    pub(crate) binary: Option<PathBuf>,
    /// The profile file setup added the PATH line to.
    pub(crate) profile: Option<PathBuf>,
    /// The agents whose hook setup installed.
    pub(crate) hooks: Vec<String>,
    /// Files that did not exist before setup wrote them (agent configs, the
    /// profile): removed again when nothing else was added to them.
    pub(crate) created: Vec<PathBuf>,
    /// The service file setup wrote, and whether it enabled it.
    pub(crate) service: Option<ServiceFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServiceFile {
    pub(crate) file: PathBuf,
    pub(crate) enabled: bool,
}

const AGENTS: [(Agent, &str); 6] = [
    (Agent::ClaudeCode, "claude-code"),
    (Agent::Codex, "codex"),
    (Agent::Pi, "pi"),
    (Agent::Gemini, "gemini"),
    (Agent::Cursor, "cursor"),
    (Agent::Copilot, "copilot"),
];

/// What setup takes from the machine it runs on besides its options: found
/// by `setup`, given by the tests.
struct Host<'a> {
    /// The running kith, which setup installs.
    exe: PathBuf,
    /// Where a systemd user unit goes (`$XDG_CONFIG_HOME/systemd/user`).
    unit_dir: PathBuf,
    manager: &'a mut Manager<'a>,
}

/// Runs a service manager command (`systemctl`, `launchctl`); `Err` is what
/// it said, or why it could not run.
type Manager<'a> = dyn FnMut(&str, &[&str]) -> std::result::Result<(), String> + 'a;

/// Runs every step, printing a line for each through `say`.
///
/// An agent whose config kith will not edit (another program in Codex's
/// `notify`, a `kith.ts` or Copilot `kith.json` kith did not write, settings
/// that do not parse) gets no hook and a warning naming the file, why, and
/// what to do: that file is the user's to decide about, so the other steps
/// run and setup succeeds. Any other failure fails setup: an agent's after
/// every agent was tried and what was done is recorded, the others (the
/// binary, the profile, the service file) at once.
pub(crate) fn setup(paths: &Paths, opts: &Options, say: &mut dyn FnMut(&str)) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Refused(format!("cannot tell where this kith is: {e}")))?;
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| opts.home.join(".config"));
    let mut manager = run;
    let mut host = Host {
        exe: exe.canonicalize().unwrap_or(exe),
        unit_dir: config.join("systemd/user"),
        manager: &mut manager,
    };
    setup_on(paths, opts, &mut host, say)
}

fn setup_on(
    paths: &Paths,
    opts: &Options,
    host: &mut Host,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    let mut manifest = Manifest::load(paths)?;
    let mut failed: Option<Error> = None;
    let mut declined: Vec<&str> = Vec::new();

    let (kith, binary_changed) = copy_binary(&host.exe, &opts.bin_dir, &mut manifest, say)?;
    manifest.save(paths)?;
    on_path(opts, &mut manifest, say)?;
    manifest.save(paths)?;

    for (agent, name) in AGENTS {
        let dir = agent_dir(paths, agent);
        if !dir.is_dir() {
            say(&format!(
                "{name}: {} does not exist, no hook installed",
                dir.display()
            ));
            continue;
        }
        let existed = crate::install::config_file(paths, agent).exists();
        match crate::install::install(paths, agent, &kith, true) {
            Ok(outcome) => {
                if outcome.changed && !manifest.hooks.iter().any(|h| h == name) {
                    manifest.hooks.push(name.to_owned());
                }
                if outcome.changed && !existed {
                    manifest.created.push(outcome.file.clone());
                }
                say(&format!("{name}: {outcome}"));
            }
            Err(e @ (Error::Refused(_) | Error::Invalid { .. })) => {
                let fix = match e {
                    Error::Invalid { .. } => {
                        format!("; once it is fixed, `kith install {name}` adds the hook")
                    }
                    _ => String::new(),
                };
                say(&format!("warning: {name}: no hook installed: {e}{fix}"));
                declined.push(name);
            }
            Err(e) => {
                say(&format!("{name}: {e}"));
                failed.get_or_insert(e);
            }
        }
    }
    manifest.save(paths)?;

    if opts.service != Service::Skip {
        service(paths, opts, host, &kith, binary_changed, &mut manifest, say)?;
        manifest.save(paths)?;
    }
    if !declined.is_empty() {
        say(&format!(
            "warning: no hook for {} (see above); everything else is set up",
            declined.join(", ")
        ));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Undoes what `setup.json` records, newest step first. A hook it cannot
/// take out (its file no longer parses, or holds more than kith wrote) is
/// named and the rest still undone,
/// but the binary that hook runs stays, and so does the record of it, so
/// that `kith setup --uninstall` finishes once the file is mended.
pub(crate) fn uninstall(paths: &Paths, say: &mut dyn FnMut(&str)) -> Result<()> {
    let mut manager = run;
    uninstall_on(paths, &mut manager, say)
}

fn uninstall_on(paths: &Paths, manager: &mut Manager<'_>, say: &mut dyn FnMut(&str)) -> Result<()> {
    let mut manifest = Manifest::load(paths)?;
    if manifest == Manifest::default() {
        say("kith setup changed nothing here; nothing to undo");
        return Ok(());
    }
    if let Some(service) = &manifest.service {
        // Stopped whoever enabled it: setup, or the user after
        // `--no-enable` (or a failed enable), with the command setup gave
        // (which links the unit into `default.target.wants`).
        let enabled = service.enabled || enabled_by_user(&service.file);
        if enabled {
            disable(&service.file, manager, say);
        }
        remove(&service.file, say)?;
        if !cfg!(target_os = "macos") && enabled {
            // So the manager forgets the unit it no longer has a file for.
            let _ = manager("systemctl", &["--user", "daemon-reload"]);
        }
    }
    let kith = manifest
        .binary
        .clone()
        .unwrap_or_else(|| PathBuf::from("kith"));
    // Setup's hooks, and those `kith install` added since that run the
    // binary about to go (a hook left running a removed kith would fail
    // every turn of its agent): the file names it as a command, quoted,
    // alone or before its arguments.
    let runs_kith = |file: &Path| {
        let Some(binary) = &manifest.binary else {
            return false;
        };
        let binary = binary.to_string_lossy();
        fs::read_to_string(file).is_ok_and(|text| {
            text.contains(&format!("\"{binary}\"")) || text.contains(&format!("\"{binary} "))
        })
    };
    let mut hooks_left = Vec::new();
    for (agent, name) in AGENTS {
        let recorded = manifest.hooks.iter().any(|h| h == name);
        if !recorded && !runs_kith(&crate::install::config_file(paths, agent)) {
            continue;
        }
        let outcome = match crate::install::install(paths, agent, &kith, false) {
            Ok(outcome) => outcome,
            Err(e @ (Error::Refused(_) | Error::Invalid { .. })) => {
                say(&format!(
                    "warning: {name}: kith's hook could not be taken out: {e}"
                ));
                hooks_left.push(name.to_owned());
                continue;
            }
            Err(e) => return Err(e),
        };
        say(&format!("{name}: {outcome}"));
        // A file that held only kith's hook goes as it came.
        let emptied =
            fs::read_to_string(&outcome.file).is_ok_and(|t| matches!(t.trim(), "" | "{}"));
        if emptied && manifest.created.contains(&outcome.file) {
            remove(&outcome.file, say)?;
        }
    }
    // MCP servers `kith install --mcp` added that run it.
    for (agent, name) in AGENTS {
        let Some(file) = crate::install::mcp::config_file(paths, agent) else {
            continue;
        };
        if !runs_kith(&file) {
            continue;
        }
        match crate::install::mcp::install(paths, agent, &kith, false) {
            Ok(outcome) => say(&format!("{name}: {outcome}")),
            Err(e @ (Error::Refused(_) | Error::Invalid { .. })) => {
                say(&format!(
                    "warning: {name}: kith's MCP server could not be taken out: {e}"
                ));
                if !hooks_left.iter().any(|h| h == name) {
                    hooks_left.push(name.to_owned());
                }
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(profile) = &manifest.profile {
        let text = fs::read_to_string(profile).at("read", profile)?;
        let kept: String = text
            .split_inclusive('\n')
            .filter(|l| !l.contains(PATH_MARK))
            .collect();
        if kept != text {
            let mode = file_mode(profile)?;
            write_through(profile, kept.as_bytes(), mode, Durability::Durable)?;
            say(&format!(
                "removed kith's PATH line from {}",
                profile.display()
            ));
        }
        if kept.is_empty() && manifest.created.contains(profile) {
            remove(profile, say)?;
        }
    }
    if !hooks_left.is_empty() {
        manifest = Manifest {
            hooks: hooks_left,
            service: None,
            profile: None,
            ..manifest
        };
        manifest.save(paths)?;
        return Err(Error::Refused(format!(
            "kith's hook could not be taken out of the settings of {} (see above), so {kith} \
             stays; once that is settled, `{kith} setup --uninstall` takes out the rest",
            manifest.hooks.join(", "),
            kith = kith.display()
        )));
    }
    if let Some(binary) = &manifest.binary {
        remove(binary, say)?;
    }
    let record = Manifest::file(paths);
    fs::remove_file(&record).at("remove", &record)?;
    Ok(())
}

impl Manifest {
    fn file(paths: &Paths) -> PathBuf {
        paths.state_dir.join("setup.json")
    }

    fn load(paths: &Paths) -> Result<Self> {
        let path = Self::file(paths);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Invalid {
                what: "kith setup record",
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).at("read", &path),
        }
    }

    /// Written only when it changes, so a second run touches nothing.
    fn save(&self, paths: &Paths) -> Result<()> {
        if *self == Self::load(paths)? {
            return Ok(());
        }
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Invalid {
            what: "kith setup record",
            path: Self::file(paths),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        write_file(&Self::file(paths), &bytes, 0o600, Durability::Durable)
    }
}

fn agent_dir(paths: &Paths, agent: Agent) -> &Path {
    match agent {
        Agent::ClaudeCode => &paths.claude_dir,
        Agent::Codex => &paths.codex_dir,
        Agent::Pi => &paths.pi_dir,
        Agent::Gemini => &paths.gemini_dir,
        Agent::Cursor => &paths.cursor_dir,
        Agent::Copilot => &paths.copilot_dir,
    }
}

/// `<bin_dir>/kith`, a copy of `me` (the running binary) unless it is that
/// binary or already has its bytes; and whether it changed (so a running
/// `kith watch` is on an older binary).
fn copy_binary(
    me: &Path,
    bin_dir: &Path,
    manifest: &mut Manifest,
    say: &mut dyn FnMut(&str),
) -> Result<(PathBuf, bool)> {
    let target = bin_dir.join("kith");
    if target.canonicalize().is_ok_and(|t| t == me) {
        say(&format!("kith runs from {} already", target.display()));
        return Ok((target, false));
    }
    let bytes = fs::read(me).at("read", me)?;
    if fs::read(&target).is_ok_and(|old| old == bytes) {
        say(&format!("{} is this kith already", target.display()));
        return Ok((target, false));
    }
    write_file(&target, &bytes, 0o755, Durability::Durable)?;
    manifest.binary = Some(target.clone());
    say(&format!("installed kith as {}", target.display()));
    Ok((target, true))
}

fn path_has(dir: &Path) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d == dir))
}

/// Where `kith` goes when no folder is given: where it runs from when that
/// is on PATH already (a package's /usr/bin, `cargo install`'s
/// ~/.cargo/bin), else `~/.local/bin`.
pub(crate) fn default_bin_dir(home: &Path) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .filter(|dir| path_has(dir))
        .unwrap_or_else(|| home.join(".local/bin"))
}

/// Marks the line `kith setup` adds to a profile.
const PATH_MARK: &str = "# added by `kith setup`";

/// Makes a new login shell find `kith`: when the bin folder is neither on
/// PATH already nor named in the login profile, a PATH line is added to the
/// profile the user's login shell reads.
fn on_path(opts: &Options, manifest: &mut Manifest, say: &mut dyn FnMut(&str)) -> Result<()> {
    let dir = &opts.bin_dir;
    if path_has(dir) {
        return Ok(());
    }
    let profile = login_profile(&opts.home, &std::env::var("SHELL").unwrap_or_default());
    let text = match fs::read_to_string(&profile) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).at("read", &profile),
    };
    // Written as $HOME/... or as the full path (Debian's default ~/.profile
    // adds "$HOME/.local/bin" when it exists, so a new login shell has it).
    let home_relative = dir
        .strip_prefix(&opts.home)
        .ok()
        .map(|rest| format!("$HOME/{}", rest.display()));
    let named = text.contains(&*dir.to_string_lossy())
        || home_relative.as_deref().is_some_and(|h| text.contains(h));
    if named {
        return Ok(());
    }
    let quoted = dir.display().to_string().replace('\'', r"'\''");
    let mut new = text.clone();
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&format!("export PATH='{quoted}':\"$PATH\" {PATH_MARK}\n"));
    let mode = if text.is_empty() {
        0o644
    } else {
        file_mode(&profile)?
    };
    // A profile kept as a symlink (stow, home-manager) stays one.
    write_through(&profile, new.as_bytes(), mode, Durability::Durable)?;
    if text.is_empty() && !manifest.created.contains(&profile) {
        manifest.created.push(profile.clone());
    }
    manifest.profile = Some(profile.clone());
    say(&format!(
        "added {} to PATH in {} (new login shells find `kith`; this one: {}/kith)",
        dir.display(),
        profile.display(),
        dir.display()
    ));
    Ok(())
}

/// The file a login shell reads: `~/.zprofile` for zsh; for bash (and
/// others) `~/.bash_profile` or `~/.bash_login` when present (bash then
/// skips `~/.profile`), else `~/.profile`.
fn login_profile(home: &Path, shell: &str) -> PathBuf {
    if shell.ends_with("/zsh") {
        return home.join(".zprofile");
    }
    [".bash_profile", ".bash_login"]
        .iter()
        .map(|f| home.join(f))
        .find(|p| p.is_file())
        .unwrap_or_else(|| home.join(".profile"))
}

fn file_mode(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(fs::metadata(path).at("stat", path)?.permissions().mode() & 0o777)
}

/// The systemd user unit (deploy/kith-watch.service, as the Debian package
/// ships it) with `kith` at `kith`.
fn systemd_unit(kith: &Path) -> String {
    const SHIPPED: &str = include_str!("../../deploy/kith-watch.service");
    let exec = format!(
        "ExecStart=\"{}\" watch",
        kith.display()
            .to_string()
            .replace('\\', r"\\")
            .replace('"', "\\\"")
    );
    SHIPPED
        .lines()
        .map(|l| {
            if l.starts_with("ExecStart=") {
                exec.as_str()
            } else {
                l
            }
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

const LAUNCHD_LABEL: &str = "dev.kith.watch";

fn launchd_plist(kith: &Path, log: &Path) -> String {
    let esc = |p: &Path| {
        p.display()
            .to_string()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>{LAUNCHD_LABEL}</string>
  <key>ProgramArguments</key><array><string>{}</string><string>watch</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>StandardErrorPath</key><string>{}</string>
</dict>
</plist>
"#,
        esc(kith),
        esc(log)
    )
}

/// Writes the service file and, unless told not to, enables and starts it,
/// restarting it when its file or the binary it runs (`binary_changed`)
/// changed. When the service manager cannot be reached it says so and how
/// to run `kith watch` instead.
fn service(
    paths: &Paths,
    opts: &Options,
    host: &mut Host,
    kith: &Path,
    binary_changed: bool,
    manifest: &mut Manifest,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    let macos = cfg!(target_os = "macos");
    let (file, text) = if macos {
        let file = opts
            .home
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist"));
        (
            file,
            launchd_plist(kith, &paths.state_dir.join("watch.log")),
        )
    } else {
        (host.unit_dir.join("kith-watch.service"), systemd_unit(kith))
    };
    let same = fs::read_to_string(&file).is_ok_and(|old| old == text);
    if !same {
        // Through a link (a unit kept with the user's dotfiles), as the
        // profile is.
        write_through(&file, text.as_bytes(), 0o644, Durability::Durable)?;
        say(&format!("wrote {}", file.display()));
    }
    let was_enabled = manifest.service.as_ref().is_some_and(|s| s.enabled);
    let mut record = ServiceFile {
        file: file.clone(),
        enabled: was_enabled,
    };
    // Enabling is idempotent: an enabled, running service stays as it is,
    // and one the user stopped runs again.
    let by_hand = format!("{} watch", kith.display());
    if opts.service == Service::WriteOnly {
        say(&format!(
            "the service is written, not enabled (--no-enable); to run it: {}",
            enable_command(&file)
        ));
    } else {
        match enable(&file, !same || binary_changed, host.manager) {
            Ok(()) => {
                record.enabled = true;
                say(&format!(
                    "enabled and started `kith watch` ({}); it starts again at each login",
                    file.display()
                ));
            }
            Err(why) => say(&format!(
                "could not enable the service ({why}); once a service manager runs: {}, or run `{by_hand}` yourself",
                enable_command(&file)
            )),
        }
    }
    // A file that was there with these bytes before setup is not setup's.
    if !same || manifest.service.is_some() {
        manifest.service = Some(record);
    }
    Ok(())
}

fn enable_command(file: &Path) -> String {
    if cfg!(target_os = "macos") {
        format!("launchctl load -w '{}'", file.display())
    } else {
        "systemctl --user daemon-reload && systemctl --user enable --now kith-watch.service"
            .to_owned()
    }
}

/// Enables and starts the service through `manager`; `restart`: restarts
/// it, so it runs its new file or binary (launchd's agent is reloaded every
/// time).
fn enable(
    file: &Path,
    restart: bool,
    manager: &mut Manager<'_>,
) -> std::result::Result<(), String> {
    if cfg!(target_os = "macos") {
        let plist = file.to_string_lossy();
        // launchctl refuses to load a loaded agent: unload it first.
        let _ = manager("launchctl", &["unload", &plist]);
        manager("launchctl", &["load", "-w", &plist])
    } else {
        manager("systemctl", &["--user", "daemon-reload"])?;
        manager(
            "systemctl",
            &["--user", "enable", "--now", "kith-watch.service"],
        )?;
        if restart {
            manager("systemctl", &["--user", "restart", "kith-watch.service"])?;
        }
        Ok(())
    }
}

/// Whether the user enabled the service setup wrote: systemd links an
/// enabled unit into the `.wants` folder of its target, beside it.
fn enabled_by_user(unit: &Path) -> bool {
    let Some(dir) = unit.parent() else {
        return false;
    };
    cfg!(not(target_os = "macos"))
        && fs::read_link(dir.join("default.target.wants/kith-watch.service"))
            .is_ok_and(|target| dir.join(target) == unit)
}

fn disable(file: &Path, manager: &mut Manager<'_>, say: &mut dyn FnMut(&str)) {
    let done = if cfg!(target_os = "macos") {
        manager("launchctl", &["unload", "-w", &file.to_string_lossy()])
    } else {
        manager(
            "systemctl",
            &["--user", "disable", "--now", "kith-watch.service"],
        )
    };
    match done {
        Ok(()) => say("stopped and disabled the `kith watch` service"),
        Err(why) => say(&format!("could not disable the service ({why})")),
    }
}

/// Runs a service manager command; `Err` is what it said (or why it could
/// not run).
fn run(program: &str, args: &[&str]) -> std::result::Result<(), String> {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {program}: {e}")),
    }
}

fn remove(path: &Path, say: &mut dyn FnMut(&str)) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {
            say(&format!("removed {}", path.display()));
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).at("remove", path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine in a temp folder: agent folders under it, a home, a bin
    /// folder, and a "built" kith to install.
    struct Machine {
        tmp: tempfile::TempDir,
        paths: Paths,
        opts: Options,
        exe: PathBuf,
    }

    impl Machine {
        fn new(service: Service) -> anyhow::Result<Self> {
            let tmp = tempfile::tempdir()?;
            let paths = Paths::under(tmp.path());
            let opts = Options {
                bin_dir: tmp.path().join("bin"),
                home: tmp.path().join("home"),
                service,
            };
            fs::create_dir_all(&opts.home)?;
            let exe = tmp.path().join("build/kith");
            fs::create_dir_all(tmp.path().join("build"))?;
            fs::write(&exe, "kith v1")?;
            Ok(Self {
                tmp,
                paths,
                opts,
                exe,
            })
        }

        /// Runs setup; what it said and the service manager commands it ran.
        fn setup(&self) -> (Result<()>, Vec<String>, Vec<String>) {
            let mut said = Vec::new();
            let mut commands = Vec::new();
            let mut manager = |program: &str, args: &[&str]| {
                commands.push(format!("{program} {}", args.join(" ")));
                Ok(())
            };
            let mut host = Host {
                exe: self.exe.clone(),
                unit_dir: self.tmp.path().join("units"),
                manager: &mut manager,
            };
            let done = setup_on(&self.paths, &self.opts, &mut host, &mut |l: &str| {
                said.push(l.to_owned())
            });
            (done, said, commands)
        }

        /// Runs `setup --uninstall`; what it said and the service manager
        /// commands it ran.
        fn uninstall(&self) -> (Result<()>, Vec<String>, Vec<String>) {
            let mut said = Vec::new();
            let mut commands = Vec::new();
            let mut manager = |program: &str, args: &[&str]| {
                commands.push(format!("{program} {}", args.join(" ")));
                Ok(())
            };
            let done = uninstall_on(&self.paths, &mut manager, &mut |l: &str| {
                said.push(l.to_owned())
            });
            (done, said, commands)
        }
    }

    /// Regression: one agent config kith would not edit (here Codex's own
    /// `notify` program) failed `kith setup`, so the quickstart, under
    /// `set -e`, stopped before its backfill and its fallback `kith watch`.
    #[test]
    fn a_refused_hook_is_a_warning_and_the_rest_of_setup_still_happens() -> anyhow::Result<()> {
        let m = Machine::new(Service::WriteOnly)?;
        fs::create_dir_all(&m.paths.claude_dir)?;
        fs::create_dir_all(&m.paths.codex_dir)?;
        let codex = m.paths.codex_dir.join("config.toml");
        let theirs = "notify = [\"/usr/bin/notify-me\"]\n";
        fs::write(&codex, theirs)?;
        fs::create_dir_all(&m.paths.gemini_dir)?;
        let gemini = m.paths.gemini_dir.join("settings.json");
        fs::write(&gemini, "{ not json")?;

        let (done, said, _) = m.setup();
        assert!(done.is_ok(), "{done:?}\n{said:#?}");
        let warning = |name: &str| {
            said.iter()
                .find(|l| l.starts_with(&format!("warning: {name}:")))
                .cloned()
                .unwrap_or_default()
        };
        let codex_warning = warning("codex");
        for part in [
            codex.display().to_string().as_str(),
            "notify-me",
            "`kith install codex`",
        ] {
            assert!(codex_warning.contains(part), "{part}: {said:#?}");
        }
        let gemini_warning = warning("gemini");
        for part in [
            gemini.display().to_string().as_str(),
            "not valid",
            "`kith install gemini`",
        ] {
            assert!(gemini_warning.contains(part), "{part}: {said:#?}");
        }
        assert!(
            said.last()
                .is_some_and(|l| l.contains("no hook for codex, gemini")),
            "{said:#?}"
        );
        // The user's files are as they were; the other steps happened.
        assert_eq!(fs::read_to_string(&codex)?, theirs);
        assert_eq!(fs::read_to_string(&gemini)?, "{ not json");
        assert_eq!(fs::read(m.opts.bin_dir.join("kith"))?, b"kith v1");
        let claude = fs::read_to_string(m.paths.claude_dir.join("settings.json"))?;
        assert!(claude.contains("kith hook"), "{claude}");
        assert!(
            m.tmp.path().join("units/kith-watch.service").exists() || cfg!(target_os = "macos")
        );
        let manifest = Manifest::load(&m.paths)?;
        assert_eq!(
            manifest.hooks,
            ["claude-code"],
            "only the hook it installed"
        );

        // `kith install codex` alone still fails: that is what was asked.
        let alone = crate::install::install(&m.paths, Agent::Codex, Path::new("/k/kith"), true);
        assert!(matches!(alone, Err(Error::Refused(_))), "{alone:?}");
        Ok(())
    }

    #[test]
    fn an_agent_config_kith_cannot_read_or_a_bin_folder_it_cannot_make_fails_setup(
    ) -> anyhow::Result<()> {
        let m = Machine::new(Service::Skip)?;
        // A folder where Codex's config file should be: not the user's
        // choice to respect but an error.
        fs::create_dir_all(m.paths.codex_dir.join("config.toml"))?;
        fs::create_dir_all(&m.paths.gemini_dir)?;
        let (done, said, _) = m.setup();
        assert!(matches!(done, Err(Error::Io { .. })), "{done:?}");
        assert!(
            !said.iter().any(|l| l.starts_with("warning")),
            "an error is not a warning: {said:#?}"
        );
        // The agents after it were still tried.
        assert!(m.paths.gemini_dir.join("settings.json").exists());

        let mut m = Machine::new(Service::Skip)?;
        fs::write(m.tmp.path().join("file"), "")?;
        m.opts.bin_dir = m.tmp.path().join("file/bin");
        let (done, _, _) = m.setup();
        assert!(matches!(done, Err(Error::Io { .. })), "{done:?}");
        Ok(())
    }

    /// Regression: after an upgrade, setup copied the new binary but left the
    /// service running the old one, restarting it only when its unit changed.
    #[cfg(not(target_os = "macos"))]
    #[test]
    fn the_service_restarts_when_the_binary_or_the_unit_changed_and_not_otherwise(
    ) -> anyhow::Result<()> {
        let restart = "systemctl --user restart kith-watch.service";
        let m = Machine::new(Service::Enable)?;
        let (done, _, commands) = m.setup();
        done?;
        assert_eq!(
            commands,
            [
                "systemctl --user daemon-reload",
                "systemctl --user enable --now kith-watch.service",
                restart,
            ],
            "a new unit"
        );

        let (done, said, commands) = m.setup();
        done?;
        assert!(
            !commands.iter().any(|c| c == restart),
            "nothing changed: {commands:?}"
        );
        assert!(
            said.iter().any(|l| l.ends_with("is this kith already")),
            "{said:#?}"
        );

        fs::write(&m.exe, "kith v2")?;
        let (done, said, commands) = m.setup();
        done?;
        assert_eq!(fs::read(m.opts.bin_dir.join("kith"))?, b"kith v2");
        assert!(
            !said.iter().any(|l| l.starts_with("wrote ")),
            "same unit: {said:#?}"
        );
        assert_eq!(
            commands.last().map(String::as_str),
            Some(restart),
            "new binary"
        );

        // The unit changed (an older kith's), the binary did not.
        let unit = m.tmp.path().join("units/kith-watch.service");
        fs::write(&unit, "[Service]\nExecStart=/old/kith watch\n")?;
        let (done, _, commands) = m.setup();
        done?;
        assert_eq!(
            commands.last().map(String::as_str),
            Some(restart),
            "new unit"
        );
        Ok(())
    }

    /// Regression: one agent config that no longer parsed stopped `kith
    /// setup --uninstall` there, leaving the other hooks, the PATH line and
    /// the record; removing the binary while a hook still runs it would
    /// break every turn of that agent.
    #[test]
    fn uninstall_goes_past_a_hook_it_cannot_take_out_and_finishes_once_mended() -> anyhow::Result<()>
    {
        let m = Machine::new(Service::WriteOnly)?;
        fs::create_dir_all(&m.paths.claude_dir)?;
        fs::create_dir_all(&m.paths.gemini_dir)?;
        let (done, said, _) = m.setup();
        done.map_err(|e| anyhow::anyhow!("{e}: {said:#?}"))?;
        let claude = m.paths.claude_dir.join("settings.json");
        let gemini = m.paths.gemini_dir.join("settings.json");
        let installed = fs::read_to_string(&claude)?;
        assert!(installed.contains("kith hook"), "{installed}");
        assert!(fs::read_to_string(&gemini)?.contains("kith hook"));
        let kith = m.opts.bin_dir.join("kith");
        let profile = Manifest::load(&m.paths)?.profile;

        let broken = installed.replacen('{', "{ ,", 1);
        fs::write(&claude, &broken)?;
        let (done, said, _) = m.uninstall();
        let err = done.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("claude-code") && err.contains("--uninstall"),
            "{err}"
        );
        assert!(
            said.iter().any(|l| l.starts_with("warning: claude-code:")),
            "{said:#?}"
        );
        // Everything else is undone; the hook left still finds its kith.
        assert!(!gemini.exists(), "gemini's file held only kith's hook");
        assert!(!m.tmp.path().join("units/kith-watch.service").exists());
        if let Some(profile) = &profile {
            assert!(!fs::read_to_string(profile)
                .unwrap_or_default()
                .contains(PATH_MARK));
        }
        assert_eq!(fs::read_to_string(&claude)?, broken);
        assert!(kith.exists(), "a hook still runs it");
        assert_eq!(Manifest::load(&m.paths)?.hooks, ["claude-code"]);

        fs::write(&claude, &installed)?;
        m.uninstall().0?;
        assert!(!claude.exists(), "claude's file held only kith's hook");
        assert!(!kith.exists());
        assert_eq!(Manifest::load(&m.paths)?, Manifest::default());
        Ok(())
    }

    /// Regression: a hook or MCP server `kith install` added after setup
    /// (an agent installed later) stayed when `--uninstall` removed the
    /// binary it runs, and failed every turn of its agent. Every entry that
    /// runs that binary goes with it.
    #[test]
    fn uninstall_takes_out_what_kith_install_added_since() -> anyhow::Result<()> {
        use crate::install::{self, mcp, Agent};
        let m = Machine::new(Service::Skip)?;
        fs::create_dir_all(&m.paths.claude_dir)?;
        m.setup().0?;
        let kith = m.opts.bin_dir.join("kith");
        // Gemini CLI installed later, and the MCP server asked for.
        fs::create_dir_all(&m.paths.gemini_dir)?;
        let gemini = install::config_file(&m.paths, Agent::Gemini);
        fs::write(&gemini, "{\n  \"theme\": \"dark\"\n}\n")?;
        install::install(&m.paths, Agent::Gemini, &kith, true)?;
        let servers = mcp::install(&m.paths, Agent::ClaudeCode, &kith, true)?.file;
        // Cursor's hook runs another kith, which stays installed.
        let other = Path::new("/opt/other/kith");
        let cursor = install::install(&m.paths, Agent::Cursor, other, true)?.file;
        let kith_text = kith.display().to_string();
        for file in [&gemini, &servers] {
            assert!(
                fs::read_to_string(file)?.contains(&kith_text),
                "{}",
                file.display()
            );
        }
        let (done, said, _) = m.uninstall();
        done.map_err(|e| anyhow::anyhow!("{e}: {said:#?}"))?;
        for file in [&gemini, &servers] {
            let text = fs::read_to_string(file).unwrap_or_default();
            assert!(!text.contains(&kith_text), "{}: {text}", file.display());
        }
        assert!(fs::read_to_string(&gemini)?.contains("\"theme\": \"dark\""));
        assert!(fs::read_to_string(&cursor)?.contains("/opt/other/kith hook"));
        assert!(!kith.exists());
        Ok(())
    }

    /// Regression: a service setup wrote but did not enable (`--no-enable`,
    /// or a failed enable) and the user then enabled went on running after
    /// `--uninstall` took its file away. It is stopped whoever enabled it;
    /// one nobody enabled (another kith-watch may run on this machine) is
    /// left to the service manager.
    #[cfg(not(target_os = "macos"))]
    #[test]
    fn uninstall_stops_a_service_the_user_enabled() -> anyhow::Result<()> {
        let disable = "systemctl --user disable --now kith-watch.service";
        for user_enabled in [true, false] {
            let m = Machine::new(Service::WriteOnly)?;
            m.setup().0?;
            let service = Manifest::load(&m.paths)?.service;
            assert!(service.as_ref().is_some_and(|s| !s.enabled));
            let unit = m.tmp.path().join("units/kith-watch.service");
            if user_enabled {
                // What `systemctl --user enable` does.
                let wants = m.tmp.path().join("units/default.target.wants");
                fs::create_dir_all(&wants)?;
                std::os::unix::fs::symlink(&unit, wants.join("kith-watch.service"))?;
            }
            let (done, said, commands) = m.uninstall();
            done?;
            let expected: &[&str] = if user_enabled {
                &[disable, "systemctl --user daemon-reload"]
            } else {
                &[]
            };
            assert_eq!(commands, expected, "{said:#?}");
            assert_eq!(
                said.iter().any(|l| l.contains("stopped and disabled")),
                user_enabled,
                "{said:#?}"
            );
            assert!(!unit.exists());
        }
        Ok(())
    }

    /// Regression: a unit file kept as a symlink (with the user's dotfiles)
    /// was replaced by a regular file.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_unit_goes_into_the_file_a_symlinked_unit_points_to() -> anyhow::Result<()> {
        let m = Machine::new(Service::WriteOnly)?;
        let units = m.tmp.path().join("units");
        let real = m.tmp.path().join("dotfiles/kith-watch.service");
        fs::create_dir_all(&units)?;
        fs::create_dir_all(m.tmp.path().join("dotfiles"))?;
        fs::write(&real, "[Service]\nExecStart=/old/kith watch\n")?;
        let unit = units.join("kith-watch.service");
        std::os::unix::fs::symlink(&real, &unit)?;

        let (done, said, _) = m.setup();
        done.map_err(|e| anyhow::anyhow!("{e}: {said:#?}"))?;
        assert!(
            fs::symlink_metadata(&unit)?.file_type().is_symlink(),
            "{said:#?}"
        );
        let text = fs::read_to_string(&real)?;
        assert!(
            text.contains(" watch") && !text.contains("/old/kith"),
            "{text}"
        );
        Ok(())
    }

    /// Regression: a login profile kept as a symlink was replaced by a
    /// regular file with kith's PATH line.
    #[test]
    fn the_path_line_goes_into_the_file_a_symlinked_profile_points_to() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let m = Machine::new(Service::Skip)?;
        let profile = login_profile(&m.opts.home, &std::env::var("SHELL").unwrap_or_default());
        let real = m.tmp.path().join("dotfiles/profile");
        fs::create_dir_all(m.tmp.path().join("dotfiles"))?;
        fs::write(&real, "umask 022\n")?;
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600))?;
        std::os::unix::fs::symlink(&real, &profile)?;

        let (done, said, _) = m.setup();
        done?;
        assert!(
            fs::symlink_metadata(&profile)?.file_type().is_symlink(),
            "{said:#?}"
        );
        let text = fs::read_to_string(&real)?;
        assert!(text.starts_with("umask 022\nexport PATH="), "{text}");
        assert!(text.contains(PATH_MARK), "{text}");
        assert_eq!(fs::metadata(&real)?.permissions().mode() & 0o777, 0o600);

        m.uninstall().0?;
        assert!(fs::symlink_metadata(&profile)?.file_type().is_symlink());
        assert_eq!(fs::read_to_string(&real)?, "umask 022\n");
        Ok(())
    }

    #[test]
    fn the_unit_runs_the_installed_kith_even_from_a_path_with_spaces() {
        let unit = systemd_unit(Path::new("/home/a b/.local/bin/kith"));
        let exec: Vec<&str> = unit
            .lines()
            .filter(|l| l.starts_with("ExecStart="))
            .collect();
        assert_eq!(exec, ["ExecStart=\"/home/a b/.local/bin/kith\" watch"]);
        assert!(unit.contains("WantedBy=default.target"), "{unit}");
        assert!(!unit.contains("/usr/bin/kith"), "{unit}");
    }

    #[test]
    fn the_launchd_agent_escapes_its_paths() {
        let plist = launchd_plist(Path::new("/Users/a&b/kith"), Path::new("/tmp/<log>"));
        assert!(plist.contains("<string>/Users/a&amp;b/kith</string><string>watch</string>"));
        assert!(plist.contains("<string>/tmp/&lt;log&gt;</string>"));
        assert!(plist.contains("<key>RunAtLoad</key><true/>"));
    }

    #[test]
    fn the_login_profile_is_the_one_the_shell_reads() {
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let home = home.path();
        assert_eq!(login_profile(home, "/bin/zsh"), home.join(".zprofile"));
        assert_eq!(login_profile(home, "/bin/bash"), home.join(".profile"));
        fs::write(home.join(".bash_profile"), "").unwrap_or_else(|e| panic!("{e}"));
        // bash skips ~/.profile when ~/.bash_profile exists.
        assert_eq!(login_profile(home, "/bin/bash"), home.join(".bash_profile"));
        assert_eq!(login_profile(home, "/bin/zsh"), home.join(".zprofile"));
    }
}
