//! Installing kith: central's refusal of plain HTTP off loopback (the flag,
//! and the shipped systemd unit), and `kith setup` putting the binary, the
//! agents' hooks and the user service in place and taking them away again.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kith_tests::background::lines_of;
use kith_tests::bin;

/// How a `kith-central serve` ended up: refused (its exit code and what it
/// said) or serving (what it said up to "listening on", then killed).
#[derive(Debug)]
enum Served {
    Refused { code: Option<i32>, said: String },
    Listening { said: String },
}

/// Runs `kith-central` with `args` and `env` (nothing else of ours from the
/// environment) until it exits or says it is listening.
fn serve(args: &[&str], env: &[(&str, &str)]) -> Result<Served> {
    let mut cmd = Command::new(bin("kith-central"));
    cmd.args(args)
        .env("KITH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("KITH_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().context("cannot start kith-central")?;
    let rx = lines_of(child.stderr.take().context("no stderr")?);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let listening = line.contains("listening on");
                said.push(line);
                if listening {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Ok(Served::Listening {
                        said: said.join("\n"),
                    });
                }
            }
            // stderr closed: the process is ending.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait()?;
                return Ok(Served::Refused {
                    code: status.code(),
                    said: said.join("\n"),
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "kith-central neither exited nor listened within 30 s:\n{}",
                    said.join("\n")
                );
            }
        }
    }
}

#[test]
fn central_refuses_plain_http_off_loopback_unless_insecure_http() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let data = data.to_str().context("temp path")?;

    let refused = serve(&["serve", "--listen", "0.0.0.0:0", "--data-dir", data], &[])?;
    let Served::Refused { code, said } = &refused else {
        bail!("plain HTTP on 0.0.0.0 was served: {refused:?}");
    };
    assert_ne!(*code, Some(0), "{said}");
    assert!(said.contains("--insecure-http"), "{said}");
    assert!(said.contains("plain HTTP on 0.0.0.0"), "{said}");
    assert!(said.contains("TLS"), "{said}");

    // The same address with the flag: served, with a loud warning.
    let served = serve(
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--insecure-http",
            "--data-dir",
            data,
        ],
        &[],
    )?;
    let Served::Listening { said } = &served else {
        bail!("--insecure-http did not serve: {served:?}");
    };
    assert!(said.contains("INSECURE"), "{said}");

    // Loopback needs neither TLS nor the flag, and warns of nothing.
    let served = serve(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data],
        &[],
    )?;
    let Served::Listening { said } = &served else {
        bail!("loopback was refused: {served:?}");
    };
    assert!(!said.contains("INSECURE"), "{said}");

    // The configuration file's equivalent of the flag.
    let config = tmp.path().join("central.toml");
    std::fs::write(&config, "insecure_http = true\n")?;
    let served = serve(
        &[
            "serve",
            "--config",
            config.to_str().context("temp path")?,
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
            data,
        ],
        &[],
    )?;
    assert!(
        matches!(&served, Served::Listening { said } if said.contains("INSECURE")),
        "{served:?}"
    );
    Ok(())
}

/// `Environment=` pairs and the `ExecStart=` words of a systemd unit.
fn unit_service(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut env = Vec::new();
    let mut exec = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(pair) = line.strip_prefix("Environment=") {
            if let Some((k, v)) = pair.split_once('=') {
                env.push((k.to_owned(), v.to_owned()));
            }
        } else if let Some(cmd) = line.strip_prefix("ExecStart=") {
            exec = cmd.split_whitespace().map(str::to_owned).collect();
        }
    }
    (env, exec)
}

#[test]
fn the_shipped_central_unit_listens_on_loopback_and_refuses_plain_http_elsewhere() -> Result<()> {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kith-central.service");
    let text = std::fs::read_to_string(&unit)?;
    let (env, exec) = unit_service(&text);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let listen: std::net::SocketAddr = get("KITH_LISTEN").context("no KITH_LISTEN")?.parse()?;
    assert!(listen.ip().is_loopback(), "{listen}");
    // Semantic search: a model directory the service can read under
    // ProtectHome (not under /home, /root or /run/user).
    let models = get("KITH_MODEL_DIR").context("no KITH_MODEL_DIR")?;
    assert!(text.contains("ProtectHome=true"));
    assert!(
        !["/home", "/root", "/run/user"]
            .iter()
            .any(|p| models.starts_with(p)),
        "{models}"
    );
    assert_eq!(
        exec.first().map(String::as_str),
        Some("kith-central"),
        "{exec:?}"
    );

    // The unit as shipped, moved to a non-loopback address without TLS.
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let mut env: Vec<(&str, &str)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .filter(|(k, _)| !matches!(*k, "KITH_LISTEN" | "KITH_DATA_DIR"))
        .collect();
    env.push(("KITH_LISTEN", "0.0.0.0:0"));
    env.push(("KITH_DATA_DIR", data.to_str().context("temp path")?));
    let args: Vec<&str> = exec[1..].iter().map(String::as_str).collect();
    let refused = serve(&args, &env)?;
    let Served::Refused { code, said } = &refused else {
        bail!("the shipped unit served plain HTTP on 0.0.0.0: {refused:?}");
    };
    assert_ne!(*code, Some(0), "{said}");
    assert!(said.contains("refusing to serve plain HTTP"), "{said}");
    assert!(said.contains("--insecure-http"), "{said}");
    Ok(())
}

/// Every file under `root` with its bytes, for before/after comparisons.
fn files(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.display().to_string(), std::fs::read(&path)?));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `kith setup ARGS` for a user whose home is `home` (no KITH_* folders,
/// bash, a PATH without the bin folder); stdout, or the failure.
fn setup(home: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(bin("kith"));
    cmd.arg("setup").args(args);
    as_user(cmd, home, "/usr/bin:/bin")
}

/// `deploy/install-agent.sh ARGS --bin <the built kith>`, as `setup`.
fn install_agent(home: &Path, args: &[&str]) -> Result<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/install-agent.sh");
    let mut cmd = Command::new(script);
    cmd.args(args).arg("--bin").arg(bin("kith"));
    as_user(cmd, home, "/usr/bin:/bin")
}

fn as_user(mut cmd: Command, home: &Path, path: &str) -> Result<String> {
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    for (k, _) in std::env::vars() {
        if k.starts_with("KITH_")
            || k.starts_with("XDG_")
            || k == "CLAUDE_CONFIG_DIR"
            || k == "CODEX_HOME"
            || k == "COPILOT_HOME"
            || k == "PREFIX"
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .env("HOME", home)
        .env("SHELL", "/bin/bash")
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8(out.stdout)?;
    if !out.status.success() {
        bail!(
            "{args:?} failed:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

#[test]
fn setup_installs_kith_and_the_present_agents_hooks_is_idempotent_and_uninstall_undoes_it(
) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let home = tmp.path();
    // Claude Code (its settings as Claude writes them), Codex and Copilot
    // CLI are on this machine, pi is not.
    std::fs::create_dir_all(home.join(".claude"))?;
    std::fs::create_dir_all(home.join(".copilot/session-state"))?;
    std::fs::write(
        home.join(".claude/settings.json"),
        "{\n  \"theme\": \"dark\"\n}\n",
    )?;
    std::fs::create_dir_all(home.join(".codex"))?;
    std::fs::write(home.join(".profile"), "umask 022\n")?;
    let before = files(home)?;
    let kith = home.join(".local/bin/kith");
    let kith_str = kith.display().to_string();

    let said = install_agent(home, &["--no-service"])?;
    assert!(
        said.contains(&format!("installed kith as {kith_str}")),
        "{said}"
    );
    let version = Command::new(&kith).arg("--version").output()?;
    assert!(version.status.success());
    assert!(String::from_utf8(version.stdout)?.starts_with("kith "));
    let claude = std::fs::read_to_string(home.join(".claude/settings.json"))?;
    assert!(claude.contains(&format!("{kith_str} hook")), "{claude}");
    assert!(claude.contains("\"theme\": \"dark\""), "{claude}");
    let codex = std::fs::read_to_string(home.join(".codex/config.toml"))?;
    assert!(
        codex.contains(&format!("notify = [\"{kith_str}\", \"hook\"]")),
        "{codex}"
    );
    let copilot = std::fs::read_to_string(home.join(".copilot/hooks/kith.json"))?;
    assert!(
        copilot.contains(&format!("\"bash\": \"{kith_str} hook\"")),
        "{copilot}"
    );
    assert!(!home.join(".pi").exists(), "setup made a pi folder");
    assert!(said.contains("pi: "), "{said}");
    assert!(
        !home.join(".config/systemd").exists(),
        "--no-service wrote a service"
    );
    // A new login shell finds the bare `kith`.
    let login = Command::new("env")
        .args(["-i", &format!("HOME={}", home.display())])
        .args(["PATH=/usr/bin:/bin", "bash", "-lc", "command -v kith"])
        .output()?;
    assert_eq!(String::from_utf8(login.stdout)?.trim(), kith_str);

    // The user service: written with this kith, not enabled here.
    let said = setup(home, &["--no-enable"])?;
    let unit = home.join(".config/systemd/user/kith-watch.service");
    let text = std::fs::read_to_string(&unit)?;
    assert!(
        text.lines()
            .any(|l| l == format!("ExecStart=\"{kith_str}\" watch")),
        "{text}"
    );
    assert!(text.contains("WantedBy=default.target"), "{text}");
    assert!(said.contains("not enabled"), "{said}");

    // Again: nothing changes, and it says so.
    let installed = files(home)?;
    let said = setup(home, &["--no-enable"])?;
    assert_eq!(
        files(home)?,
        installed,
        "a second run changed files:\n{said}"
    );
    assert!(said.contains("already"), "{said}");
    assert!(!said.contains("installed kith"), "{said}");
    assert!(!said.contains("wrote "), "{said}");

    let said = setup(home, &["--uninstall"])?;
    assert_eq!(files(home)?, before, "uninstall left changes:\n{said}");
    let said = setup(home, &["--uninstall"])?;
    assert!(said.contains("nothing to undo"), "{said}");
    Ok(())
}

#[test]
fn setup_goes_on_past_an_agent_config_it_will_not_edit_and_says_so() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let home = tmp.path();
    std::fs::create_dir_all(home.join(".pi/agent"))?;
    std::fs::create_dir_all(home.join(".codex"))?;
    // Codex runs one notify program, and this one is not kith's.
    let codex = "notify = [\"/usr/bin/notify-send\", \"done\"]\n";
    std::fs::write(home.join(".codex/config.toml"), codex)?;
    let before = files(home)?;

    // Setup succeeds, and says which hook it left out, where and why.
    let said = setup(home, &["--no-service"])?;
    assert!(
        said.contains("warning: codex: no hook installed") && said.contains("Codex already runs"),
        "{said}"
    );
    assert!(said.contains("warning: no hook for codex"), "{said}");
    assert_eq!(
        std::fs::read_to_string(home.join(".codex/config.toml"))?,
        codex
    );
    // pi's hook went in all the same.
    let pi = std::fs::read_to_string(home.join(".pi/agent/extensions/kith.ts"))?;
    assert!(
        pi.contains(&home.join(".local/bin/kith").display().to_string()),
        "{pi}"
    );

    setup(home, &["--uninstall"])?;
    assert_eq!(files(home)?, before);
    Ok(())
}

#[test]
fn setup_leaves_a_kith_that_is_on_path_where_it_is() -> Result<()> {
    // As from a package (/usr/bin) or `cargo install` (~/.cargo/bin).
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("home");
    let pkg = tmp.path().join("pkg/bin");
    std::fs::create_dir_all(home.join(".claude"))?;
    std::fs::create_dir_all(&pkg)?;
    std::fs::copy(bin("kith"), pkg.join("kith"))?;
    let mut cmd = Command::new(pkg.join("kith"));
    cmd.args(["setup", "--no-service"]);
    let said = as_user(cmd, &home, &format!("{}:/usr/bin:/bin", pkg.display()))?;
    assert!(said.contains("kith runs from"), "{said}");
    assert!(
        !home.join(".local/bin").exists(),
        "setup copied kith:\n{said}"
    );
    assert!(
        !home.join(".profile").exists(),
        "setup edited PATH:\n{said}"
    );
    let claude = std::fs::read_to_string(home.join(".claude/settings.json"))?;
    assert!(
        claude.contains(&format!("{} hook", pkg.join("kith").display())),
        "{claude}"
    );
    Ok(())
}
