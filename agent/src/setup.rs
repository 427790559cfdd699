//! `kith setup`: everything a machine needs to capture, in one idempotent
//! step. It copies the running `kith` into a bin folder, puts that folder on
//! the login shell's PATH when it is not, installs kith's hook for every
//! agent whose folder exists, and writes (and enables) a user service that
//! runs `kith watch`: a systemd user unit on Linux, a launchd agent on
//! macOS. What it changed is recorded in `<state>/setup.json`, so that
//! `kith setup --uninstall` removes exactly that and nothing the user had.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::config::{write_file, Durability, Paths};
use crate::error::{Error, IoContext, Result};
use crate::install::Agent;

/// What to set up, from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where `kith` goes.
    pub bin_dir: PathBuf,
    /// The user's home (profile files, the service's folder).
    pub home: PathBuf,
    pub service: Service,
}

/// How far the `kith watch` service step goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// No service at all (`--no-service`).
    Skip,
    /// The unit or plist is written, not enabled (`--no-enable`).
    WriteOnly,
    /// Written, enabled and started.
    Enable,
}

/// What `kith setup` changed, kept for `--uninstall`. Each run adds to it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The binary setup copied (absent when `kith` already ran from there).
    pub binary: Option<PathBuf>,
    /// The profile file setup added the PATH line to.
    pub profile: Option<PathBuf>,
    /// The agents whose hook setup installed.
    pub hooks: Vec<String>,
    /// Files that did not exist before setup wrote them (agent configs, the
    /// profile): removed again when nothing else was added to them.
    pub created: Vec<PathBuf>,
    /// The service file setup wrote, and whether it enabled it.
    pub service: Option<ServiceFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceFile {
    pub file: PathBuf,
    pub enabled: bool,
}

const AGENTS: [(Agent, &str); 6] = [
    (Agent::ClaudeCode, "claude-code"),
    (Agent::Codex, "codex"),
    (Agent::Pi, "pi"),
    (Agent::Gemini, "gemini"),
    (Agent::Cursor, "cursor"),
    (Agent::Copilot, "copilot"),
];

/// Runs every step, printing a line for each through `say`. A step that
/// fails (an agent config kith will not edit) does not stop the others; the
/// first failure is returned after all ran and what was done is recorded.
pub fn setup(paths: &Paths, opts: &Options, say: &mut dyn FnMut(&str)) -> Result<()> {
    let mut manifest = Manifest::load(paths)?;
    let mut failed: Option<Error> = None;

    let kith = copy_binary(&opts.bin_dir, &mut manifest, say)?;
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
            Err(e) => {
                say(&format!("{name}: {e}"));
                failed.get_or_insert(e);
            }
        }
    }
    manifest.save(paths)?;

    if opts.service != Service::Skip {
        service(paths, opts, &kith, &mut manifest, say)?;
        manifest.save(paths)?;
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Undoes what `setup.json` records, newest step first.
pub fn uninstall(paths: &Paths, say: &mut dyn FnMut(&str)) -> Result<()> {
    let manifest = Manifest::load(paths)?;
    if manifest == Manifest::default() {
        say("kith setup changed nothing here; nothing to undo");
        return Ok(());
    }
    if let Some(service) = &manifest.service {
        if service.enabled {
            disable(&service.file, say);
        }
        remove(&service.file, say)?;
        if !cfg!(target_os = "macos") && service.enabled {
            // So the manager forgets the unit it no longer has a file for.
            let _ = systemctl(&["daemon-reload"]);
        }
    }
    let kith = manifest
        .binary
        .clone()
        .unwrap_or_else(|| PathBuf::from("kith"));
    for (agent, name) in AGENTS {
        if manifest.hooks.iter().any(|h| h == name) {
            let outcome = crate::install::install(paths, agent, &kith, false)?;
            say(&format!("{name}: {outcome}"));
            // A file that held only kith's hook goes as it came.
            let emptied =
                fs::read_to_string(&outcome.file).is_ok_and(|t| matches!(t.trim(), "" | "{}"));
            if emptied && manifest.created.contains(&outcome.file) {
                remove(&outcome.file, say)?;
            }
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
            write_file(profile, kept.as_bytes(), mode, Durability::Durable)?;
            say(&format!(
                "removed kith's PATH line from {}",
                profile.display()
            ));
        }
        if kept.is_empty() && manifest.created.contains(profile) {
            remove(profile, say)?;
        }
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

/// `<bin_dir>/kith`, a copy of the running binary unless it is that binary
/// or already has its bytes.
fn copy_binary(
    bin_dir: &Path,
    manifest: &mut Manifest,
    say: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let target = bin_dir.join("kith");
    let me = std::env::current_exe()
        .map_err(|e| Error::Refused(format!("cannot tell where this kith is: {e}")))?;
    let me = me.canonicalize().unwrap_or(me);
    if target.canonicalize().is_ok_and(|t| t == me) {
        say(&format!("kith runs from {} already", target.display()));
        return Ok(target);
    }
    let bytes = fs::read(&me).at("read", &me)?;
    if fs::read(&target).is_ok_and(|old| old == bytes) {
        say(&format!("{} is this kith already", target.display()));
        return Ok(target);
    }
    write_file(&target, &bytes, 0o755, Durability::Durable)?;
    manifest.binary = Some(target.clone());
    say(&format!("installed kith as {}", target.display()));
    Ok(target)
}

fn path_has(dir: &Path) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d == dir))
}

/// Where `kith` goes when no folder is given: where it runs from when that
/// is on PATH already (a package's /usr/bin, `cargo install`'s
/// ~/.cargo/bin), else `~/.local/bin`.
pub fn default_bin_dir(home: &Path) -> PathBuf {
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
    write_file(&profile, new.as_bytes(), mode, Durability::Durable)?;
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

/// Writes the service file and, unless told not to, enables and starts it.
/// When the service manager cannot be reached it says so and how to run
/// `kith watch` instead.
fn service(
    paths: &Paths,
    opts: &Options,
    kith: &Path,
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
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| opts.home.join(".config"));
        (
            config.join("systemd/user/kith-watch.service"),
            systemd_unit(kith),
        )
    };
    let same = fs::read_to_string(&file).is_ok_and(|old| old == text);
    if !same {
        write_file(&file, text.as_bytes(), 0o644, Durability::Durable)?;
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
        match enable(&file, !same) {
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

/// Enables and starts the service; `changed`: restarts it on its new file.
fn enable(file: &Path, changed: bool) -> std::result::Result<(), String> {
    if cfg!(target_os = "macos") {
        let plist = file.to_string_lossy();
        // launchctl refuses to load a loaded agent: unload it first.
        let _ = run("launchctl", &["unload", &plist]);
        run("launchctl", &["load", "-w", &plist])
    } else {
        systemctl(&["daemon-reload"])?;
        systemctl(&["enable", "--now", "kith-watch.service"])?;
        if changed {
            systemctl(&["restart", "kith-watch.service"])?;
        }
        Ok(())
    }
}

fn disable(file: &Path, say: &mut dyn FnMut(&str)) {
    let done = if cfg!(target_os = "macos") {
        run("launchctl", &["unload", "-w", &file.to_string_lossy()])
    } else {
        systemctl(&["disable", "--now", "kith-watch.service"])
    };
    match done {
        Ok(()) => say("stopped and disabled the `kith watch` service"),
        Err(why) => say(&format!("could not disable the service ({why})")),
    }
}

fn systemctl(args: &[&str]) -> std::result::Result<(), String> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    run("systemctl", &all)
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
