//! The `kith` command line as a person and a script meet it, with the real
//! binary against a real central: `config.toml`'s exclusions and tag rules
//! at capture, `kith tag`, `kith config` with its sources, `kith status`'s
//! first line, `--json` on every read command (errors too), completions.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_tests::{described, Api, Central, Home, Machine};
use serde_json::{json, Value};

/// A Claude Code session of `home` whose agent worked in `~/<project>`,
/// saying `text`.
fn session(home: &Home, project: &str, session: &str, text: &str) -> Result<PathBuf> {
    let cwd = home.path(project);
    let folder = home
        .path(".claude/projects")
        .join(cwd.display().to_string().replace(['/', '.'], "-"));
    std::fs::create_dir_all(&folder)?;
    let line = json!({
        "type": "user", "uuid": "u1", "parentUuid": null, "sessionId": session,
        "timestamp": "2026-05-01T10:00:00.000Z", "cwd": cwd,
        "message": {"role": "user", "content": text},
    });
    let path = folder.join(format!("{session}.jsonl"));
    std::fs::write(&path, format!("{line}\n"))?;
    Ok(path)
}

/// `home`'s `config.toml`.
fn config(home: &Home, toml: &str) -> Result<()> {
    std::fs::create_dir_all(home.path(".config/kith"))?;
    std::fs::write(home.path(".config/kith/config.toml"), toml)?;
    Ok(())
}

/// The stdout of a finished `kith`, which must have succeeded.
fn ok(out: Output) -> Result<String> {
    ensure!(out.status.success(), "{}", described(&out));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn parse(text: &str) -> Result<Value> {
    serde_json::from_str(text.trim()).with_context(|| format!("not one JSON document: {text}"))
}

/// The runs a keyword search finds for `word`, once indexing has caught
/// up: polls until `word` is found.
fn found_soon(api: &Api, word: &str) -> Result<Vec<String>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let runs = api.keyword(word)?;
        if !runs.is_empty() || std::time::Instant::now() > deadline {
            return Ok(runs);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_excluded_project_never_reaches_central_and_tag_rules_tag_the_rest() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.local", "laptop")?;
    let alice = central.client(&token);
    let device = Machine::new(&central, &token)?;
    session(
        &device.home,
        "secret-project/api",
        "11111111-1111-4111-8111-111111111111",
        "quokkasecret plans",
    )?;
    let site = session(
        &device.home,
        "work/site",
        "22222222-2222-4222-8222-222222222222",
        "quokkaopen plans",
    )?;
    config(
        &device.home,
        r#"
        exclude = ["~/secret-project/**"]
        [[tag]]
        project = "~/work/**"
        tags = ["work"]
        "#,
    )?;
    device.text(&["backfill"])?;

    let open = found_soon(&alice, "quokkaopen")?;
    ensure!(open.len() == 1, "the open project is there: {open:?}");
    ensure!(
        alice.keyword("quokkasecret")?.is_empty(),
        "the excluded project is not"
    );
    let run = alice.wait_indexed(&open[0], Duration::from_secs(30))?;
    ensure!(run["tags"] == json!(["work"]), "tagged by its rule: {run}");
    let state = device.path(".local/state/kith");
    ensure!(
        kith_tests::files_containing(&state, "quokkasecret")?.is_empty(),
        "nothing of it was ever spooled"
    );

    let status = device.text(&["status"])?;
    ensure!(
        status.contains("excluded: ~/secret-project/** (file ")
            && status.contains("1 transcripts never read nor sent"),
        "{status}"
    );
    let status = parse(&device.text(&["status", "--json"])?)?;
    ensure!(
        status["excluded"]
            == json!([{"glob": "~/secret-project/**", "transcripts": 1,
            "origin": format!("file {}", device.path(".config/kith/config.toml").display())}]),
        "{status}"
    );
    ensure!(
        status["sources"][0]["files"] == 1,
        "only the open transcript counts as captured: {status}"
    );

    // A configuration that does not parse stops capture, and says where.
    config(&device.home, "exclude = [\"relative/**\"]")?;
    let out = device.kith(&["backfill"], b"")?;
    ensure!(out.status.code() == Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("config.toml") && err.contains("must start with"),
        "{err}"
    );

    // A rule added later tags what the conversation said before it too.
    config(
        &device.home,
        "[[tag]]\nproject = \"~/work/**\"\ntags = [\"work\", \"site\"]\n",
    )?;
    let mut text = std::fs::read_to_string(&site)?;
    text = text
        .replace("\"u1\"", "\"u2\"")
        .replace("quokkaopen plans", "quokkalater plans");
    let mut file = std::fs::OpenOptions::new().append(true).open(&site)?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    device.text(&["backfill"])?;
    let later = found_soon(&alice, "quokkalater")?;
    ensure!(
        later.len() == 1 && later != open,
        "a second delta: {later:?}"
    );
    for id in [&open[0], &later[0]] {
        let run = alice.wait_indexed(id, Duration::from_secs(30))?;
        ensure!(run["tags"] == json!(["site", "work"]), "{id}: {run}");
    }
    Ok(())
}

#[test]
fn tags_are_the_owners_to_set_show_everywhere_and_share() -> Result<()> {
    let central = Central::start()?;
    let alice_token = central.register("alice.local", "laptop")?;
    let bob_token = central.register("bob.local", "desk")?;
    let bob = central.client(&bob_token);
    let alice_dev = Machine::new(&central, &alice_token)?;
    let bob_dev = Machine::new(&central, &bob_token)?;
    session(
        &alice_dev.home,
        "home/garden",
        "33333333-3333-4333-8333-333333333333",
        "wombatgarden layout",
    )?;
    alice_dev.text(&["backfill"])?;
    let alice = central.client(&alice_token);
    let runs = found_soon(&alice, "wombatgarden")?;
    ensure!(runs.len() == 1, "{runs:?}");
    let run = &runs[0];

    // Nobody shares a tag no run has yet (central refuses the request: 2).
    let out = alice_dev.kith(&["share", "tag", "family", "--with", "bob.local"], b"")?;
    ensure!(out.status.code() == Some(2), "{out:?}");
    ensure!(alice_dev.text(&["tag", "list"])?.contains("no tags yet"));

    let said = alice_dev.text(&["tag", "add", run, "family", "garden"])?;
    ensure!(said.contains("(1 runs) has tags family, garden"), "{said}");
    alice.wait_indexed(run, Duration::from_secs(30))?;

    // Bob cannot tag Alice's conversation, readable or not.
    let out = bob_dev.kith(&["tag", "add", run, "mine"], b"")?;
    ensure!(out.status.code() == Some(1), "{out:?}");
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("conversation_not_found"),
        "{out:?}"
    );

    // The tags show in show, tree and search, as text and JSON.
    let shown = parse(&alice_dev.text(&["show", run, "--json"])?)?;
    ensure!(
        shown["conversation"]["tags"] == json!(["family", "garden"]),
        "{shown}"
    );
    let tree = alice_dev.text(&["tree"])?;
    ensure!(tree.contains("#family #garden"), "{tree}");
    let text = alice_dev.text(&["show", run])?;
    ensure!(text.contains("#family #garden"), "{text}");
    let search = alice_dev.text(&["search", "wombatgarden"])?;
    ensure!(search.contains("#family #garden"), "{search}");
    let search = parse(&alice_dev.text(&["search", "wombatgarden", "--json"])?)?;
    ensure!(
        search["groups"][0]["tags"] == json!(["family", "garden"]),
        "{search}"
    );

    // `tag list` counts what carries each tag; `--tag` filters by them.
    let listed = alice_dev.text(&["tag", "list"])?;
    ensure!(
        listed == "family  1 conversation\ngarden  1 conversation\n",
        "{listed}"
    );
    let tagged =
        parse(&alice_dev.text(&["search", "wombatgarden", "--tag", "garden", "--json"])?)?;
    ensure!(tagged["hits"][0]["run_id"] == run.as_str(), "{tagged}");
    let other = parse(&alice_dev.text(&["search", "wombatgarden", "--tag", "work", "--json"])?)?;
    ensure!(other["hits"] == json!([]), "{other}");
    // A project by its folder's name, not only its path.
    let by_name =
        parse(&alice_dev.text(&["search", "wombatgarden", "--project", "garden", "--json"])?)?;
    ensure!(by_name["hits"][0]["run_id"] == run.as_str(), "{by_name}");
    let near =
        parse(&alice_dev.text(&["search", "wombatgarden", "--project", "gard", "--json"])?)?;
    ensure!(near["hits"] == json!([]), "{near}");

    // A handle no member has is named, with the member meant.
    let out = alice_dev.kith(&["share", "tag", "family", "--with", "bob"], b"")?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "{out:?}");
    ensure!(
        said.contains("no member bob; did you mean bob.local?"),
        "{said}"
    );
    let said = alice_dev.fails(&["search", "wombatgarden", "--owner", "alice"])?;
    ensure!(said.contains("did you mean alice.local?"), "{said}");

    // A tag grant covers the tagged run; taking the tag off ends that.
    ensure!(bob.keyword("wombatgarden")?.is_empty());
    ensure!(bob_dev.text(&["tag", "list"])?.contains("no tags yet"));
    alice_dev.text(&["share", "tag", "family", "--with", "bob.local"])?;
    ensure!(bob_dev
        .text(&["tag", "list"])?
        .contains("family  1 conversation"));
    ensure!(bob.keyword("wombatgarden")? == runs, "shared by its tag");
    ensure!(bob.get(&format!("/api/runs/{run}"))?.status == 200);
    let said = alice_dev.text(&["tag", "remove", run, "family"])?;
    ensure!(said.contains("has tags garden"), "{said}");
    ensure!(bob.get(&format!("/api/runs/{run}"))?.status == 404);
    alice.wait_indexed(run, Duration::from_secs(30))?;
    ensure!(bob.keyword("wombatgarden")?.is_empty(), "no longer shared");
    Ok(())
}

#[test]
fn config_shows_every_setting_with_where_it_came_from() -> Result<()> {
    let device = Home::new()?;
    let xdg = device.path("xdg-config");
    std::fs::create_dir_all(xdg.join("kith"))?;
    std::fs::write(
        xdg.join("kith/config.toml"),
        "central_url = \"http://127.0.0.1:9\"\nexclude = [\"~/secret/**\"]\n\
         [aider]\nroots = [\"~/src\"]\n",
    )?;
    let file = xdg.join("kith/config.toml");
    let config = |extra: &[&str], env: &[(&str, &str)]| -> Result<Value> {
        let mut args = vec!["config", "--json"];
        args.extend_from_slice(extra);
        let mut cmd = device.kith(&args);
        cmd.env("XDG_CONFIG_HOME", &xdg)
            .env("XDG_STATE_HOME", device.path("xdg-state"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        parse(&ok(cmd.output()?)?)
    };

    let c = config(&[], &[])?;
    let from_file = format!("file {}", file.display());
    ensure!(
        c["central_url"] == json!({"value": "http://127.0.0.1:9", "origin": from_file}),
        "{c}"
    );
    ensure!(
        c["dirs"]["state_dir"]
            == json!({"value": device.path("xdg-state/kith"), "origin": "env XDG_STATE_HOME"}),
        "{c}"
    );
    ensure!(
        c["dirs"]["config_dir"]["origin"] == "env XDG_CONFIG_HOME",
        "{c}"
    );
    ensure!(c["dirs"]["claude_dir"]["origin"] == "default", "{c}");
    // Every agent's folder, not only the first three's.
    for agent in ["gemini", "copilot", "cursor", "opencode"] {
        let dir = &c["dirs"][format!("{agent}_dir")];
        ensure!(
            dir["origin"] == "default" && dir["value"].is_string(),
            "{c}"
        );
    }
    ensure!(c["token"].is_null(), "{c}");

    // file < env < flag; exclusions from every source add up.
    let c = config(
        &["--exclude", "/flagged/**", "--state-dir", "/tmp/s"],
        &[
            ("KITH_CENTRAL_URL", "http://127.0.0.1:10"),
            ("KITH_EXCLUDE", "/env/**"),
            ("KITH_TOKEN", "kith_not_shown_anywhere"),
        ],
    )?;
    ensure!(
        c["central_url"]
            == json!({"value": "http://127.0.0.1:10", "origin": "env KITH_CENTRAL_URL"}),
        "{c}"
    );
    ensure!(
        c["dirs"]["state_dir"] == json!({"value": "/tmp/s", "origin": "flag --state-dir"}),
        "{c}"
    );
    ensure!(
        c["exclude"]
            == json!([
                {"glob": "~/secret/**", "origin": from_file},
                {"glob": "/env/**", "origin": "env KITH_EXCLUDE"},
                {"glob": "/flagged/**", "origin": "flag --exclude"},
            ]),
        "{c}"
    );
    ensure!(c["token"] == json!({"origin": "env KITH_TOKEN"}), "{c}");
    // Claude Code's own variable moves its folder, under kith's.
    let c = config(&[], &[("CLAUDE_CONFIG_DIR", "/work/claude")])?;
    ensure!(
        c["dirs"]["claude_dir"]["origin"] == "env CLAUDE_CONFIG_DIR"
            && c["dirs"]["claude_dir"]["value"]
                .as_str()
                .is_some_and(|v| v.starts_with("/work/claude")),
        "{c}"
    );
    let c = config(
        &[],
        &[
            ("CLAUDE_CONFIG_DIR", "/work/claude"),
            ("KITH_CLAUDE_DIR", "/work/k"),
        ],
    )?;
    ensure!(
        c["dirs"]["claude_dir"]["origin"] == "env KITH_CLAUDE_DIR",
        "{c}"
    );
    // Aider's roots: the file's, then the environment's.
    let c = config(&[], &[("KITH_AIDER_ROOTS", "/work/a:/work/b")])?;
    ensure!(
        c["aider_roots"]
            == json!([
                {"path": device.path("src"), "origin": from_file},
                {"path": "/work/a", "origin": "env KITH_AIDER_ROOTS"},
                {"path": "/work/b", "origin": "env KITH_AIDER_ROOTS"},
            ]),
        "{c}"
    );
    let c = config(
        &["--central-url", "http://127.0.0.1:11"],
        &[("KITH_CENTRAL_URL", "http://127.0.0.1:10")],
    )?;
    ensure!(c["central_url"]["origin"] == "flag --central-url", "{c}");

    let mut cmd = device.kith(&["config"]);
    cmd.env("XDG_CONFIG_HOME", &xdg)
        .env("KITH_TOKEN", "kith_not_shown_anywhere");
    let text = ok(cmd.output()?)?;
    ensure!(
        text.contains("exclude") && text.contains("~/secret/**") && text.contains(&from_file),
        "{text}"
    );
    ensure!(
        text.lines().any(|l| l.starts_with("aider_root")
            && l.contains(&device.path("src").display().to_string())),
        "{text}"
    );
    ensure!(!text.contains("kith_not_shown_anywhere"), "{text}");
    Ok(())
}

#[test]
fn read_commands_speak_json_and_so_do_their_errors() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.local", "laptop")?;
    let device = Machine::new(&central, &token)?;
    session(
        &device.home,
        "proj",
        "44444444-4444-4444-8444-444444444444",
        "numbat question",
    )?;
    device.text(&["backfill"])?;
    let run = found_soon(&central.client(&token), "numbat")?
        .pop()
        .context("captured")?;

    let status = device.text(&["status"])?;
    let first = status.lines().next().unwrap_or_default();
    ensure!(
        first.starts_with(&format!(
            "central {} · alice.local on laptop · logged in · last send ",
            central.url
        )) && first.contains(" · outbox 0 · embedded ")
            && first.ends_with(" chunks"),
        "{first}"
    );
    ensure!(!first.contains("last send never"), "{first}");
    let status = parse(&device.text(&["status", "--json"])?)?;
    ensure!(
        status["login"] == "logged_in" && status["central"]["user"] == "alice.local",
        "{status}"
    );
    for args in [
        vec!["tree", "--json"],
        vec!["tree", "--deltas", "--json"],
        vec!["show", run.as_str(), "--json"],
        vec!["search", "numbat", "--json"],
        vec!["share", "list", "--json"],
        vec!["audit", "--json"],
        vec!["config", "--json"],
    ] {
        let doc = parse(&device.text(&args)?)?;
        ensure!(doc.is_object(), "{args:?}: {doc}");
        ensure!(doc.get("error").is_none(), "{args:?}: {doc}");
    }

    // Errors: kith's error body as the one line on stderr, nothing on
    // stdout, the same exit codes.
    let error = |args: &[&str], token: &str, exit: i32| -> Result<String> {
        let out = device.home.kith_at(&central.url, token, args).output()?;
        ensure!(out.status.code() == Some(exit), "{args:?}: {out:?}");
        ensure!(out.stdout.is_empty(), "{args:?}: {out:?}");
        let doc = parse(&String::from_utf8_lossy(&out.stderr))?;
        Ok(doc["error"]["code"].as_str().context("a code")?.to_owned())
    };
    let unknown = "c0123456789abcdef";
    ensure!(error(&["show", unknown, "--json"], &token, 1)? == "conversation_not_found");
    ensure!(error(&["tree", "--json"], "kith_wrong", 1)? == "unauthorized");
    ensure!(error(&["tree", "--bogus", "--json"], &token, 2)? == "usage");
    let out = device.home.kith(&["audit", "--json"]).output()?;
    ensure!(out.status.code() == Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(parse(&err)?["error"]["code"] == "not_logged_in", "{err}");
    // Without --json, a usage error is clap's text, exit 2.
    let out = device.home.kith(&["tree", "--bogus"]).output()?;
    ensure!(
        out.status.code() == Some(2) && out.stdout.is_empty(),
        "{out:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("--bogus") && !err.contains("\"error\""),
        "{err}"
    );
    Ok(())
}

#[test]
fn completions_cover_every_subcommand_for_each_shell() -> Result<()> {
    let device = Home::new()?;
    for shell in ["bash", "zsh", "fish"] {
        let script = ok(device.kith(&["completions", shell]).output()?)?;
        for sub in ["search", "tag", "share", "status", "config", "completions"] {
            ensure!(script.contains(sub), "{shell}: no {sub}");
        }
    }
    let out = device.kith(&["completions", "tcsh"]).output()?;
    ensure!(out.status.code() == Some(2), "{out:?}");
    Ok(())
}

/// One exit rule: 0 success (a reader that closed the pipe included), 2 a
/// command line at fault (clap's, kith's or central's refusal of an
/// argument), 1 any other failure; and the asking commands' help leaves
/// the capture-only flags out.
#[test]
fn one_exit_rule_a_closed_pipe_is_no_failure_and_help_says_what_applies() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("erin.local", "laptop")?;
    let dev = Machine::new(&central, &token)?;
    session(
        &dev.home,
        "proj",
        "44444444-4444-4444-8444-444444444444",
        "quokka notes",
    )?;
    dev.text(&["backfill"])?;
    found_soon(&central.client(&token), "quokka")?;

    let code = |args: &[&str]| -> Result<Option<i32>> { Ok(dev.kith(args, b"")?.status.code()) };
    ensure!(code(&["search", "quokka"])? == Some(0));
    ensure!(code(&["search", "quokka", "--since", "yesterday-ish"])? == Some(2));
    ensure!(code(&["search", "quokka", "--runtime", "emacs"])? == Some(2));
    ensure!(
        code(&["search", "quokka", "--diversity", "2"])? == Some(2),
        "central's 400"
    );
    ensure!(code(&["search", "--bogus"])? == Some(2), "clap's");
    ensure!(
        code(&["show", &format!("c{}", "0".repeat(32))])? == Some(1),
        "not found"
    );
    let said = dev.fails(&["search", "quokka", "--since", "yesterday-ish"])?;
    ensure!(
        said.contains("--since") && said.contains("yesterday"),
        "{said}"
    );

    // Days as people write them; a range with nothing in it says so.
    for since in ["yesterday", "today", "2026-02-01"] {
        ensure!(
            code(&["search", "quokka", "--since", since])? == Some(0),
            "{since}"
        );
    }
    let empty = dev.text(&["search", "quokka", "--since", "2099-01-01"])?;
    ensure!(
        empty.trim() == "nothing you may read matches since 2099-01-01T00:00:00.000Z",
        "{empty}"
    );

    // `kith status | head -1`: the reader went away; nothing failed.
    for _ in 0..5 {
        let mut child = dev
            .command(&["status"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        drop(child.stdout.take());
        let out = child.wait_with_output()?;
        ensure!(out.status.code() == Some(0), "{}", described(&out));
        ensure!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }

    let help = |args: &[&str]| -> Result<String> { Ok(String::from_utf8(dev.ok(args)?)?) };
    for cmd in ["search", "show", "share", "audit", "tree"] {
        let text = help(&[cmd, "--help"])?;
        for flag in ["--exclude", "--claude-dir", "--codex-dir", "--pi-dir"] {
            ensure!(
                !text.contains(flag),
                "kith {cmd} --help shows {flag}: {text}"
            );
        }
    }
    let text = help(&["backfill", "--help"])?;
    ensure!(
        text.contains("--claude-dir") && text.contains("--exclude"),
        "{text}"
    );
    Ok(())
}

/// `kith setup` ends by capturing what is already on disk once logged in,
/// and says what to do when it is not.
#[test]
fn setup_backfills_once_logged_in_and_says_how_otherwise() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("fay.local", "laptop")?;
    let dev = Machine::new(&central, &token)?;
    session(
        &dev.home,
        "proj",
        "55555555-5555-4555-8555-555555555555",
        "wallaby setup notes",
    )?;
    let bin_dir = dev.path("bin");
    let bin_dir = bin_dir.display().to_string();
    let said = dev.text(&["setup", "--no-service", "--bin-dir", &bin_dir])?;
    ensure!(
        said.contains("capturing the transcripts already on disk"),
        "{said}"
    );
    ensure!(said.contains("central accepted 1 deltas"), "{said}");
    ensure!(found_soon(&central.client(&token), "wallaby")?.len() == 1);

    // Not logged in: setup is done, and says how to capture the rest.
    let other = Home::new()?;
    session(
        &other,
        "proj",
        "66666666-6666-4666-8666-666666666666",
        "numbat notes",
    )?;
    let bin_dir = other.path("bin").display().to_string();
    let said = ok(other
        .kith(&["setup", "--no-service", "--bin-dir", &bin_dir])
        .output()?)?;
    ensure!(
        said.contains("not logged in yet") && said.contains("kith backfill"),
        "{said}"
    );
    ensure!(!said.contains("capturing"), "{said}");
    let said = dev.text(&[
        "setup",
        "--no-service",
        "--no-backfill",
        "--bin-dir",
        &bin_dir,
    ])?;
    ensure!(!said.contains("capturing"), "{said}");
    Ok(())
}

/// A Cursor transcript names neither its folder nor its time: the folder
/// comes from its project's slug (the folder on disk that writes the same),
/// its start from cursor-agent's chat store.
#[test]
fn a_cursor_chat_gets_its_folder_and_its_start() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("gus.local", "laptop")?;
    let dev = Machine::new(&central, &token)?;
    let project = dev.path("src/my.app");
    std::fs::create_dir_all(&project)?;
    let slug: String = project
        .display()
        .to_string()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '-' })
        .collect();
    let id = "0f3c2a9e-1b4d-4e7f-8a6c-5d2e1f0a9b38";
    let transcripts = dev.path(&format!(
        ".cursor/projects/{}/agent-transcripts",
        slug.trim_start_matches('-')
    ));
    std::fs::create_dir_all(&transcripts)?;
    let line = json!({"role": "user", "message": {"content": [
        {"type": "text", "text": "<user_query>platypus layout</user_query>"}]}});
    std::fs::write(transcripts.join(format!("{id}.jsonl")), format!("{line}\n"))?;
    let chat = dev.path(&format!(
        ".cursor/chats/9e107d9d372bb6826bd81d3542a419d6/{id}"
    ));
    std::fs::create_dir_all(&chat)?;
    let store = rusqlite::Connection::open(chat.join("store.db"))?;
    store.execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")?;
    let meta = hex::encode(format!(r#"{{"agentId":"{id}","createdAt":1775522590321}}"#));
    store.execute("INSERT INTO meta VALUES ('0', ?1)", [meta])?;
    drop(store);

    dev.text(&["backfill"])?;
    let tree = dev.json(&["tree", "--json"])?;
    let chat = &tree["conversations"][0];
    ensure!(chat["agent_runtime"] == "cursor", "{tree}");
    ensure!(chat["cwd"] == project.display().to_string(), "{tree}");
    let started = chat["started_at"].as_str().unwrap_or_default();
    ensure!(started.starts_with("2026-04-07T00:43:10"), "{tree}");
    ensure!(found_soon(&central.client(&token), "platypus")?.len() == 1);
    let found = parse(&dev.text(&[
        "search",
        "platypus",
        "--mode",
        "keyword",
        "--project",
        "my.app",
        "--json",
    ])?)?;
    ensure!(
        found["hits"].as_array().is_some_and(|h| !h.is_empty()),
        "{found}"
    );
    Ok(())
}
