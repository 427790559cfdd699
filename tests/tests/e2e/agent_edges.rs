//! What a real machine throws at the agent, end to end with the real `kith`
//! and a real `kith-central`: a central whose certificate a private CA
//! signed, a FIFO or socket where a transcript should be, a transcript
//! reached through a symlinked folder, an agent installed after `kith watch`
//! started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use kith_shared::fixtures;
use kith_tests::{described, stop_payload, Api, Background, Central, Home, PrivateCa};

const CLAUDE: &str = "claude-code/-home-sam-src-tally/3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90.jsonl";
const CODEX: &str =
    "codex/2026/05/11/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl";

/// A machine: a HOME of its own; `kith` runs there with nothing of the
/// test's environment pointing it (or its TLS trust) elsewhere.
struct Machine {
    home: Home,
}

impl Machine {
    fn new() -> Result<Self> {
        Ok(Self { home: Home::new()? })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path(rel)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.home.kith(args);
        cmd.env("KITH_LOG", "warn");
        cmd
    }

    /// Runs kith to the end, failing the test if it takes over `within`
    /// (a hang is the failure some of these tests look for).
    fn run(&self, mut cmd: Command, within: Duration) -> Result<Output> {
        let child = cmd.spawn()?;
        finish(child, within)
    }

    /// `kith login` with the token on the environment, as a script would.
    fn login(
        &self,
        central: &str,
        token: &str,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> Result<Output> {
        let mut cmd = self.command(&[&["login", "--central", central], extra].concat());
        cmd.env("KITH_TOKEN", token);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.run(cmd, Duration::from_secs(60))
    }

    /// A Claude Code transcript at `rel` under `~/.claude/projects`.
    fn claude_transcript(&self, rel: &str) -> Result<PathBuf> {
        let dest = self.path(".claude/projects").join(rel);
        std::fs::create_dir_all(dest.parent().unwrap_or(Path::new(".")))?;
        std::fs::write(&dest, fixtures::read(CLAUDE))?;
        Ok(dest)
    }
}

fn finish(mut child: Child, within: Duration) -> Result<Output> {
    let deadline = Instant::now() + within;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output()?;
            bail!(
                "kith did not finish within {within:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child.wait_with_output()?)
}

/// The chains central holds whose source is a file named `name`: (source
/// identity, bytes held).
fn chains_of(api: &Api, name: &str) -> Result<Vec<(String, u64)>> {
    let suffix = format!("/{name}#");
    Ok(api
        .chains()?
        .into_iter()
        .filter(|(s, _)| s.contains(&suffix))
        .map(|(s, bytes)| (s, bytes.len() as u64))
        .collect())
}

/// Polls until central holds a chain of `len` bytes for `name`, or `within`.
fn wait_for(api: &Api, name: &str, len: u64, within: Duration) -> Result<Vec<(String, u64)>> {
    let deadline = Instant::now() + within;
    loop {
        let got = chains_of(api, name)?;
        if got.iter().any(|(_, held)| *held == len) || Instant::now() > deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn login_trusts_a_private_ca_and_a_certificate_error_is_named_as_one() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let ca = PrivateCa::make(tmp.path())?;
    let [(cert_var, cert), (key_var, key)] = ca.central_env();
    let central = Central::start_on(
        &tmp.path().join("data"),
        &[(cert_var, cert.as_str()), (key_var, key.as_str())],
    )?;
    assert!(central.url.starts_with("https://"), "{}", central.url);
    let token = central.register("alice.test", "laptop")?;

    // Not trusted: the error says certificate, and nothing is stored.
    let laptop = Machine::new()?;
    let out = laptop.login(&central.url, &token, &[], &[])?;
    let said = described(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("certificate"), "{said}");
    assert!(said.contains("--ca-cert"), "{said}");
    assert!(!said.contains("unreachable"), "{said}");
    assert!(!said.contains(&token), "the token is never printed: {said}");
    assert!(!laptop.path(".config/kith/auth.json").exists());

    // A file with no certificate in it is refused before anything is sent.
    let junk = tmp.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n")?;
    let out = laptop.login(
        &central.url,
        &token,
        &["--ca-cert", &junk.display().to_string()],
        &[],
    )?;
    assert!(!out.status.success(), "{}", described(&out));
    assert!(
        described(&out).contains("no PEM certificate"),
        "{}",
        described(&out)
    );

    // --ca-cert: logged in, and the CA stays with the login for capture and
    // the family commands.
    let ca_arg = ca.ca.display().to_string();
    let out = laptop.login(&central.url, &token, &["--ca-cert", &ca_arg], &[])?;
    assert!(out.status.success(), "{}", described(&out));
    let auth = std::fs::read_to_string(laptop.path(".config/kith/auth.json"))?;
    assert!(auth.contains("BEGIN CERTIFICATE"), "{auth}");
    let file = laptop.claude_transcript("-home-sam-src-tally/3f1c2a4e.jsonl")?;
    let out = laptop.run(laptop.command(&["backfill"]), Duration::from_secs(120))?;
    assert!(out.status.success(), "{}", described(&out));
    let out = laptop.run(laptop.command(&["tree"]), Duration::from_secs(60))?;
    assert!(out.status.success(), "{}", described(&out));
    assert!(
        described(&out).contains("tally import"),
        "the conversation's title: {}",
        described(&out)
    );
    // So does the recall hook a new session of an agent runs.
    let payload = serde_json::json!({
        "hook_event_name": "SessionStart", "source": "startup", "cwd": "/home/sam/src/tally",
    });
    let out = kith_tests::run_with_input(
        laptop.command(&["context", "--hook"]),
        payload.to_string().as_bytes(),
    )?;
    let block = String::from_utf8_lossy(&out.stdout);
    assert!(
        block.starts_with("Recent work in this project") && block.contains("tally import"),
        "{}",
        described(&out)
    );
    let api = central.client(&token);
    let trusted = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca.ca)?)?)
        .build()?;
    let api = Api {
        http: trusted,
        ..api
    };
    let len = std::fs::metadata(&file)?.len();
    assert_eq!(
        chains_of(&api, "3f1c2a4e.jsonl")?
            .iter()
            .map(|c| c.1)
            .sum::<u64>(),
        len
    );

    // SSL_CERT_FILE: the system trust store path, for a whole machine.
    let desktop = Machine::new()?;
    let desktop_token = central.register("alice.test", "desktop")?;
    let out = desktop.login(
        &central.url,
        &desktop_token,
        &[],
        &[("SSL_CERT_FILE", &ca.ca)],
    )?;
    assert!(out.status.success(), "{}", described(&out));
    let auth = std::fs::read_to_string(desktop.path(".config/kith/auth.json"))?;
    assert!(
        !auth.contains("BEGIN CERTIFICATE"),
        "nothing stored: {auth}"
    );
    Ok(())
}

#[test]
fn a_fifo_or_socket_named_like_a_transcript_hangs_nothing() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let machine = Machine::new()?;
    let real = machine.claude_transcript("-home-sam-src-tally/real.jsonl")?;
    let folder = real.parent().unwrap_or(Path::new("."));
    let fifo = folder.join("fifo.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status()?;
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(folder.join("socket.jsonl"))?;
    let env = |mut cmd: Command| {
        cmd.env("KITH_CENTRAL_URL", &central.url)
            .env("KITH_TOKEN", &token);
        cmd
    };

    // The hook named the FIFO: it ends (exit 0, as hooks always do) at once.
    for special in ["fifo.jsonl", "socket.jsonl"] {
        let mut cmd = env(machine.command(&["hook"]));
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn()?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("piped");
            stdin.write_all(stop_payload(&folder.join(special)).as_bytes())?;
        }
        let out = finish(child, Duration::from_secs(30))?;
        assert_eq!(out.status.code(), Some(0), "{special}: {}", described(&out));
    }

    // Backfill walks past them and captures the real transcript.
    let out = machine.run(env(machine.command(&["backfill"])), Duration::from_secs(60))?;
    assert!(out.status.success(), "{}", described(&out));
    let len = std::fs::metadata(&real)?.len();
    assert_eq!(
        chains_of(&api, "real.jsonl")?
            .iter()
            .map(|c| c.1)
            .sum::<u64>(),
        len
    );
    assert!(chains_of(&api, "fifo.jsonl")?.is_empty());
    assert!(chains_of(&api, "socket.jsonl")?.is_empty());

    // A FIFO appearing while `kith watch` runs: watch goes on capturing
    // what is written after it.
    let mut watch = Background::spawn(env(machine.command(&["watch"])))?;
    watch.wait_watching(folder)?;
    let made = Command::new("mkfifo")
        .arg(folder.join("fifo2.jsonl"))
        .status()?;
    assert!(made.success());
    // The transcript follows at once: watch takes what changed in name
    // order, and the FIFO's event came first, so a watch that hangs on the
    // FIFO never captures the transcript.
    let later = machine.claude_transcript("-home-sam-src-tally/later.jsonl")?;
    let len = std::fs::metadata(&later)?.len();
    let got = wait_for(&api, "later.jsonl", len, Duration::from_secs(30))?;
    assert!(
        got.iter().any(|c| c.1 == len),
        "kith watch went on capturing after the FIFO: {got:?}"
    );
    Ok(())
}

#[test]
fn a_transcript_reached_through_a_symlinked_folder_is_captured_once() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let machine = Machine::new()?;
    // The project folder lives elsewhere (a dotfiles checkout, another
    // disk) and ~/.claude/projects/<project> links to it.
    let real_dir = machine.path("elsewhere/-home-sam-src-tally");
    std::fs::create_dir_all(&real_dir)?;
    let real = real_dir.join("linked.jsonl");
    let bytes = fixtures::read(CLAUDE);
    let half = bytes
        .iter()
        .take(bytes.len() / 2)
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    std::fs::write(&real, &bytes[..half])?;
    let projects = machine.path(".claude/projects");
    std::fs::create_dir_all(&projects)?;
    std::os::unix::fs::symlink(&real_dir, projects.join("-home-sam-src-tally"))?;
    let via_link = projects.join("-home-sam-src-tally/linked.jsonl");

    let hook = |file: &Path| -> Result<()> {
        let mut cmd = machine.command(&["hook"]);
        cmd.env("KITH_CENTRAL_URL", &central.url)
            .env("KITH_TOKEN", &token)
            .stdin(Stdio::piped());
        let mut child = cmd.spawn()?;
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(stop_payload(file).as_bytes())?;
        }
        let out = finish(child, Duration::from_secs(60))?;
        assert_eq!(out.status.code(), Some(0), "{}", described(&out));
        Ok(())
    };
    // First turn named through the link, the second through the real path.
    hook(&via_link)?;
    std::fs::write(&real, &bytes)?;
    hook(&real)?;
    hook(&via_link)?;

    let got = chains_of(&api, "linked.jsonl")?;
    assert_eq!(got.len(), 1, "one chain for one file: {got:?}");
    assert_eq!(got[0].1, bytes.len() as u64, "every byte once: {got:?}");
    let canonical = std::fs::canonicalize(&real)?;
    assert!(
        got[0].0.starts_with(&*canonical.display().to_string()),
        "{got:?}"
    );
    Ok(())
}

#[test]
fn watch_picks_up_an_agent_installed_after_it_started() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let machine = Machine::new()?;
    std::fs::create_dir_all(machine.path(".claude/projects"))?;
    let mut cmd = machine.command(&["watch"]);
    cmd.env("KITH_CENTRAL_URL", &central.url)
        .env("KITH_TOKEN", &token);
    let mut watch = Background::spawn(cmd)?;
    // Its first look at the roots is done: the one root there is watched.
    watch.wait_watching(&machine.path(".claude/projects"))?;

    // Codex is installed: ~/.codex/sessions appears with a first session.
    let rel = CODEX.trim_start_matches("codex/");
    let dest = machine.path(".codex/sessions").join(rel);
    std::fs::create_dir_all(dest.parent().unwrap_or(Path::new(".")))?;
    let bytes = fixtures::read(CODEX);
    std::fs::write(&dest, &bytes)?;
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // Far under the ten-minute rescan: the new root is watched within seconds.
    let got = wait_for(&api, name, bytes.len() as u64, Duration::from_secs(30))?;
    assert!(got.iter().any(|c| c.1 == bytes.len() as u64), "{got:?}");
    Ok(())
}

/// Regression: `kith watch` read config.toml once, so an exclusion added
/// while it ran (a private project noticed) was obeyed by the hooks and not
/// by the service, which went on sending. It reads the file again when it
/// changes; while the file does not parse nothing is captured.
#[test]
fn watch_applies_a_config_change_at_once() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let machine = Machine::new()?;
    let projects = machine.path(".claude/projects");
    // The open project's folder sorts after the secret one: a watch that
    // captured both in one pass would spool the secret file's delta first.
    for dir in ["secret", "work"] {
        std::fs::create_dir_all(projects.join(dir))?;
    }
    let mut cmd = machine.command(&["watch"]);
    cmd.env("KITH_CENTRAL_URL", &central.url)
        .env("KITH_TOKEN", &token);
    let watch = Background::spawn(cmd)?;
    let next = |want: &str| watch.next(want);
    next("watching")?;
    let line = |text: &str| kith_tests::claude_user_line(text, "2026-05-11T08:00:00Z");
    let append = |path: &Path, text: &str| -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        f.write_all(line(text).as_bytes())?;
        Ok(())
    };
    let secret = projects.join("secret/diary.jsonl");
    append(&secret, "the first diary entry")?;
    let first = line("the first diary entry").len() as u64;
    let got = wait_for(&api, "diary.jsonl", first, Duration::from_secs(30))?;
    ensure!(got.iter().any(|c| c.1 == first), "{got:?}");

    let config = machine.path(".config/kith/config.toml");
    std::fs::create_dir_all(config.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&config, "exclude = [\"~/.claude/projects/secret/**\"]\n")?;
    next("its rules apply")?;
    append(&secret, "the second diary entry, private now")?;
    // The kept file's line follows at once: watch takes what changed in
    // name order (secret/ before work/), so once the kept line is in
    // central, the secret file's change was handled, in this pass or one
    // before.
    let kept = projects.join("work/notes.jsonl");
    append(&kept, "notes anyone may see")?;
    let len = line("notes anyone may see").len() as u64;
    let got = wait_for(&api, "notes.jsonl", len, Duration::from_secs(30))?;
    ensure!(got.iter().any(|c| c.1 == len), "{got:?}");
    let diary = chains_of(&api, "diary.jsonl")?;
    ensure!(diary.len() == 1 && diary[0].1 == first, "{diary:?}");

    // A config that does not parse stops capture until it is mended.
    std::fs::write(&config, "exclude = [\n")?;
    next("until it is mended")?;
    let later = projects.join("work/later.jsonl");
    append(&later, "written while the config was broken")?;
    // What the test shows is an absence: nothing arrives in a window past
    // the longest watch waits before it captures a changed file (2 s).
    std::thread::sleep(Duration::from_secs(3));
    ensure!(
        chains_of(&api, "later.jsonl")?.is_empty(),
        "captured with a broken config"
    );
    std::fs::write(&config, "exclude = [\"~/.claude/projects/secret/**\"]\n")?;
    next("its rules apply")?;
    let len = line("written while the config was broken").len() as u64;
    let got = wait_for(&api, "later.jsonl", len, Duration::from_secs(30))?;
    ensure!(got.iter().any(|c| c.1 == len), "{got:?}");
    Ok(())
}

/// Regression: a package upgrade put a new `kith` on disk and `kith watch`
/// went on running the old one until the next login. It runs the new one
/// in its place (the same process, so a service manager sees no restart),
/// which captures on.
#[cfg(target_os = "linux")]
#[test]
fn watch_runs_the_new_kith_when_its_program_is_replaced() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let machine = Machine::new()?;
    std::fs::create_dir_all(machine.path(".claude/projects"))?;
    let bin_dir = tempfile::tempdir()?;
    let program = bin_dir.path().join("kith");
    std::fs::copy(kith_tests::bin("kith"), &program)?;
    let mut cmd = machine.home.kith_from(&program, &["watch"]);
    cmd.env("KITH_CENTRAL_URL", &central.url)
        .env("KITH_TOKEN", &token);
    let mut watch = Background::spawn(cmd)?;
    let pid = watch.pid();
    watch.next("watching")?;

    // What is not a complete program (an install cut short, a script) is
    // not run: the old one goes on. An absence, seen over a window past
    // the 2 s at which watch looks at its program and the 1 s a new file
    // must have been left alone.
    let stays = |watch: &mut Background| -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(4);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if let Ok(line) = watch.said.recv_timeout(left) {
                ensure!(!line.contains("was replaced"), "{line}");
            }
        }
        ensure!(watch.running()?, "watch stopped");
        Ok(())
    };
    let new = bin_dir.path().join("kith.new");
    std::fs::write(&new, "#!/bin/sh\nexit 0\n")?;
    std::fs::set_permissions(&new, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    // Left alone for an hour: only its not being a program keeps it from
    // running.
    std::fs::File::options()
        .write(true)
        .open(&new)?
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))?;
    std::fs::rename(&new, &program)?;
    stays(&mut watch)?;
    // Nor is one whose file changed under a second ago (here: in the future).
    std::fs::copy(kith_tests::bin("kith"), &new)?;
    std::fs::File::options()
        .write(true)
        .open(&new)?
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))?;
    std::fs::rename(&new, &program)?;
    stays(&mut watch)?;

    // The upgrade: a new file renamed over the old, as dpkg and `kith
    // setup` write it.
    std::fs::copy(kith_tests::bin("kith"), &new)?;
    std::fs::rename(&new, &program)?;
    let line = watch.next("was replaced")?;
    assert!(line.contains(&*program.display().to_string()), "{line}");
    watch.next("watching")?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    assert_eq!(exe, program, "the same process runs the new file");

    let dest = machine.path(".claude/projects/proj/after-upgrade.jsonl");
    std::fs::create_dir_all(dest.parent().unwrap_or(Path::new(".")))?;
    let bytes = kith_tests::claude_user_line("captured after the upgrade", "2026-05-11T08:00:00Z");
    std::fs::write(&dest, &bytes)?;
    let got = wait_for(
        &api,
        "after-upgrade.jsonl",
        bytes.len() as u64,
        Duration::from_secs(30),
    )?;
    assert!(got.iter().any(|c| c.1 == bytes.len() as u64), "{got:?}");
    Ok(())
}
