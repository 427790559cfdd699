use super::*;

const KITH: &str = "/usr/local/bin/kith";

/// Settings as Claude Code writes them (2-space JSON), with a user hook.
const SETTINGS: &str = r#"{
  "model": "opus",
  "permissions": {
    "allow": [
      "Bash(npm test)"
    ],
    "deny": []
  },
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send done"
          }
        ]
      }
    ]
  },
  "cleanupPeriodDays": 60
}
"#;

fn device() -> anyhow::Result<(tempfile::TempDir, Paths)> {
    let tmp = tempfile::tempdir()?;
    let paths = Paths::under(tmp.path());
    Ok((tmp, paths))
}

#[test]
fn claude_install_is_idempotent_keeps_settings_and_uninstall_restores_them() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.claude_dir.join("settings.json");
    fs::create_dir_all(&paths.claude_dir)?;
    fs::write(&file, SETTINGS)?;
    let kith = Path::new(KITH);

    assert!(install(&paths, Agent::ClaudeCode, kith, true)?.changed);
    let once = fs::read_to_string(&file)?;
    assert!(
        !install(&paths, Agent::ClaudeCode, kith, true)?.changed,
        "second install"
    );
    assert_eq!(fs::read_to_string(&file)?, once);

    let v: Value = serde_json::from_str(&once)?;
    assert_eq!(v["model"], "opus");
    assert_eq!(v["cleanupPeriodDays"], 60);
    assert_eq!(v["permissions"]["allow"][0], "Bash(npm test)");
    assert_eq!(
        v["hooks"]["Stop"][0]["hooks"][0]["command"],
        "notify-send done"
    );
    for event in CLAUDE_EVENTS {
        let groups = v["hooks"][event].as_array().map(Vec::len);
        let ours = &v["hooks"][event].as_array().and_then(|g| g.last()).cloned();
        assert_eq!(
            ours.as_ref().map(|g| g["hooks"][0]["command"].clone()),
            Some(json!("/usr/local/bin/kith hook")),
            "{event}"
        );
        assert_eq!(groups, Some(if event == "Stop" { 2 } else { 1 }), "{event}");
    }
    // The user's keys keep their order.
    let order: Vec<usize> = [
        "\"model\"",
        "\"permissions\"",
        "\"hooks\"",
        "\"cleanupPeriodDays\"",
    ]
    .iter()
    .filter_map(|k| once.find(k))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{once}");

    assert!(install(&paths, Agent::ClaudeCode, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        SETTINGS,
        "uninstall restores the file byte for byte"
    );
    assert!(!install(&paths, Agent::ClaudeCode, kith, false)?.changed);
    Ok(())
}

#[test]
fn recall_on_start_is_a_session_start_hook_that_uninstall_removes() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.claude_dir.join("settings.json");
    fs::create_dir_all(&paths.claude_dir)?;
    fs::write(&file, SETTINGS)?;
    let kith = Path::new(KITH);
    install(&paths, Agent::ClaudeCode, kith, true)?;
    let hooked = fs::read_to_string(&file)?;
    let v: Value = serde_json::from_str(&hooked)?;
    assert!(v["hooks"].get("SessionStart").is_none(), "off unless asked");

    assert!(install_recall(&paths, kith, true)?.changed);
    assert!(!install_recall(&paths, kith, true)?.changed, "twice");
    let v: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
    assert_eq!(
        v["hooks"]["SessionStart"],
        json!([{"hooks": [{"type": "command", "command": "/usr/local/bin/kith context --hook", "timeout": 10}]}])
    );
    assert_eq!(v["hooks"]["Stop"].as_array().map(Vec::len), Some(2));

    assert!(install_recall(&paths, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        hooked,
        "exactly the recall hook goes"
    );
    install_recall(&paths, kith, true)?;
    // Uninstalling kith's hooks takes the recall hook too.
    assert!(install(&paths, Agent::ClaudeCode, kith, false)?.changed);
    assert_eq!(fs::read_to_string(&file)?, SETTINGS);
    Ok(())
}

#[test]
fn claude_install_creates_settings_and_moves_an_old_kith_hook() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.claude_dir.join("settings.json");
    assert!(install(&paths, Agent::ClaudeCode, Path::new("/old/kith"), true)?.changed);
    assert!(
        install(
            &paths,
            Agent::ClaudeCode,
            Path::new("/new place/kith"),
            true
        )?
        .changed
    );
    let v: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
    assert_eq!(
        v["hooks"]["SessionEnd"].as_array().map(Vec::len),
        Some(1),
        "replaced, not added"
    );
    assert_eq!(
        v["hooks"]["SessionEnd"][0]["hooks"][0]["command"],
        "'/new place/kith' hook"
    );
    install(
        &paths,
        Agent::ClaudeCode,
        Path::new("/new place/kith"),
        false,
    )?;
    assert_eq!(fs::read_to_string(&file)?, "{}\n");
    Ok(())
}

#[test]
fn claude_settings_that_are_not_json_are_left_alone() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.claude_dir.join("settings.json");
    fs::create_dir_all(&paths.claude_dir)?;
    fs::write(&file, "{ not json")?;
    assert!(install(&paths, Agent::ClaudeCode, Path::new(KITH), true).is_err());
    assert_eq!(fs::read_to_string(&file)?, "{ not json");
    Ok(())
}

#[test]
fn codex_notify_is_added_once_keeps_formatting_and_never_replaces_another() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.codex_dir.join("config.toml");
    fs::create_dir_all(&paths.codex_dir)?;
    let config =
        "# my codex\nmodel = \"o3\"   # fast enough\n\n[profiles.fast]\nmodel = \"mini\"\n";
    fs::write(&file, config)?;
    let kith = Path::new(KITH);

    assert!(install(&paths, Agent::Codex, kith, true)?.changed);
    let added = fs::read_to_string(&file)?;
    let doc: toml_edit::DocumentMut = added.parse()?;
    let argv: Vec<&str> = doc["notify"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(argv, vec![KITH, "hook"]);
    assert!(added.contains("model = \"o3\"   # fast enough"), "{added}");
    assert!(
        added.find("notify") < added.find("[profiles.fast]"),
        "a top-level key, before the tables: {added}"
    );
    assert!(!install(&paths, Agent::Codex, kith, true)?.changed);

    assert!(install(&paths, Agent::Codex, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        config,
        "uninstall restores the file"
    );

    let theirs = "notify = [\"/usr/bin/notify-me\"]\nmodel = \"o3\"\n";
    fs::write(&file, theirs)?;
    let refused = install(&paths, Agent::Codex, kith, true);
    assert!(
        matches!(&refused, Err(Error::Refused(why)) if why.contains("notify-me")),
        "{refused:?}"
    );
    assert!(!install(&paths, Agent::Codex, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        theirs,
        "the user's notify is untouched"
    );
    Ok(())
}

#[test]
fn pi_extension_is_written_once_and_removed_only_if_ours() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.pi_dir.join("extensions/kith.ts");
    let kith = Path::new(KITH);
    assert!(install(&paths, Agent::Pi, kith, true)?.changed);
    let text = fs::read_to_string(&file)?;
    assert!(
        text.contains(r#"pi.exec("/usr/local/bin/kith", ["hook", "--pi", file]"#),
        "{text}"
    );
    assert!(text.contains(r#"pi.on("turn_end""#) && text.contains(r#"pi.on("session_shutdown""#));
    assert!(!install(&paths, Agent::Pi, kith, true)?.changed);
    assert!(install(&paths, Agent::Pi, kith, false)?.changed);
    assert!(!file.exists());

    fs::write(&file, "// someone else's kith.ts\n")?;
    assert!(install(&paths, Agent::Pi, kith, true).is_err());
    assert!(!install(&paths, Agent::Pi, kith, false)?.changed);
    assert!(file.exists(), "not ours: kept");
    Ok(())
}

/// Gemini CLI settings as it writes them, with a user's hook on AfterAgent.
const GEMINI_SETTINGS: &str = r#"{
  "general": {
    "preferredEditor": "vim"
  },
  "hooks": {
    "AfterAgent": [
      {
        "matcher": "*",
        "hooks": [
          {
            "name": "ding",
            "type": "command",
            "command": "paplay done.oga"
          }
        ]
      }
    ]
  }
}
"#;

#[test]
fn gemini_install_adds_kiths_hook_beside_the_users_and_uninstall_restores_them(
) -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.gemini_dir.join("settings.json");
    fs::create_dir_all(&paths.gemini_dir)?;
    fs::write(&file, GEMINI_SETTINGS)?;
    let kith = Path::new(KITH);

    assert!(install(&paths, Agent::Gemini, kith, true)?.changed);
    let once = fs::read_to_string(&file)?;
    assert!(!install(&paths, Agent::Gemini, kith, true)?.changed);
    assert_eq!(fs::read_to_string(&file)?, once, "second install");
    let v: Value = serde_json::from_str(&once)?;
    assert_eq!(v["general"]["preferredEditor"], "vim");
    for event in ["AfterAgent", "PreCompress", "SessionEnd"] {
        let groups = v["hooks"][event].as_array().cloned().unwrap_or_default();
        let ours = groups.last().map(|g| g["hooks"][0].clone());
        assert_eq!(
            ours,
            Some(
                json!({"type": "command", "command": "/usr/local/bin/kith hook", "timeout": 10000})
            ),
            "{event}"
        );
        let users = usize::from(event == "AfterAgent");
        assert_eq!(groups.len(), users + 1, "{event}");
    }
    assert_eq!(
        v["hooks"]["AfterAgent"][0]["hooks"][0]["command"],
        "paplay done.oga"
    );
    assert!(v["hooks"].get("Stop").is_none(), "no Claude event");

    assert!(install(&paths, Agent::Gemini, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        GEMINI_SETTINGS,
        "uninstall restores it"
    );
    assert!(!install(&paths, Agent::Gemini, kith, false)?.changed);
    Ok(())
}

/// Cursor's `hooks.json` as its documentation shows it, with a user's
/// formatter after edits and their own `stop` hook.
const CURSOR_HOOKS: &str = r#"{
  "version": 1,
  "hooks": {
    "afterFileEdit": [
      {
        "command": "./hooks/format.sh"
      }
    ],
    "stop": [
      {
        "command": "./hooks/audit.sh",
        "loop_limit": 3
      }
    ]
  }
}
"#;

#[test]
fn cursor_install_adds_kiths_command_beside_the_users_and_uninstall_restores_them(
) -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.cursor_dir.join("hooks.json");
    fs::create_dir_all(&paths.cursor_dir)?;
    fs::write(&file, CURSOR_HOOKS)?;
    let kith = Path::new(KITH);

    assert!(install(&paths, Agent::Cursor, kith, true)?.changed);
    let once = fs::read_to_string(&file)?;
    assert!(!install(&paths, Agent::Cursor, kith, true)?.changed);
    assert_eq!(fs::read_to_string(&file)?, once, "second install");
    let v: Value = serde_json::from_str(&once)?;
    assert_eq!(v["version"], 1);
    assert_eq!(
        v["hooks"]["stop"],
        json!([
            {"command": "./hooks/audit.sh", "loop_limit": 3},
            {"command": "/usr/local/bin/kith hook"},
        ])
    );
    assert_eq!(
        v["hooks"]["sessionEnd"],
        json!([{"command": "/usr/local/bin/kith hook"}])
    );
    assert_eq!(
        v["hooks"]["afterFileEdit"],
        json!([{"command": "./hooks/format.sh"}])
    );

    // Installed from elsewhere: the one entry moves, none is added.
    assert!(install(&paths, Agent::Cursor, Path::new("/opt/kith/kith"), true)?.changed);
    let moved: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
    assert_eq!(moved["hooks"]["stop"][1]["command"], "/opt/kith/kith hook");
    assert_eq!(moved["hooks"]["stop"].as_array().map(Vec::len), Some(2));

    assert!(install(&paths, Agent::Cursor, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        CURSOR_HOOKS,
        "uninstall restores it"
    );
    assert!(!install(&paths, Agent::Cursor, kith, false)?.changed);
    Ok(())
}

#[test]
fn cursor_install_writes_a_new_hooks_file_and_uninstall_removes_it() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.cursor_dir.join("hooks.json");
    let kith = Path::new("/home/me/.local/bin/kith");
    assert!(install(&paths, Agent::Cursor, kith, true)?.changed);
    let v: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
    assert_eq!(
        v,
        json!({"version": 1, "hooks": {
            "stop": [{"command": "/home/me/.local/bin/kith hook"}],
            "sessionEnd": [{"command": "/home/me/.local/bin/kith hook"}],
        }})
    );
    assert!(install(&paths, Agent::Cursor, kith, false)?.changed);
    assert!(!file.exists(), "a file of kith's hook alone goes with it");

    // A file that is not JSON is refused and left as it was.
    fs::write(&file, "{ not json")?;
    assert!(install(&paths, Agent::Cursor, kith, true).is_err());
    assert_eq!(fs::read_to_string(&file)?, "{ not json");
    Ok(())
}

#[test]
fn copilot_install_writes_kiths_own_hook_file_and_uninstall_removes_it() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let hooks = paths.copilot_dir.join("hooks");
    let file = hooks.join("kith.json");
    // A hook file of the user's beside kith's is never touched.
    let theirs = hooks.join("audit.json");
    let audit =
        r#"{"version": 1, "hooks": {"preToolUse": [{"type": "command", "bash": "./audit.sh"}]}}"#;
    fs::create_dir_all(&hooks)?;
    fs::write(&theirs, audit)?;
    let kith = Path::new(KITH);

    let outcome = install(&paths, Agent::Copilot, kith, true)?;
    assert!(outcome.changed);
    assert_eq!(outcome.file, file);
    let once = fs::read_to_string(&file)?;
    let handler =
        json!([{"type": "command", "bash": "/usr/local/bin/kith hook", "timeoutSec": 10}]);
    assert_eq!(
        serde_json::from_str::<Value>(&once)?,
        json!({"version": 1, "hooks": {"agentStop": handler, "sessionEnd": handler}})
    );
    assert!(!install(&paths, Agent::Copilot, kith, true)?.changed);
    assert_eq!(fs::read_to_string(&file)?, once, "second install");

    // Installed from elsewhere: the file follows the new kith.
    assert!(
        install(
            &paths,
            Agent::Copilot,
            Path::new("/opt/kith bin/kith"),
            true
        )?
        .changed
    );
    let moved: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
    assert_eq!(
        moved["hooks"]["sessionEnd"][0]["bash"],
        "'/opt/kith bin/kith' hook"
    );
    assert!(!fs::read_to_string(&file)?.contains(KITH));

    // One an older kith wrote, on fewer events: kith's, brought up to date.
    fs::write(
        &file,
        r#"{"version": 1, "hooks": {"agentStop": [{"type": "command", "bash": "/old/kith hook"}]}}"#,
    )?;
    assert!(install(&paths, Agent::Copilot, kith, true)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        once,
        "reinstalled over an old one"
    );

    assert!(install(&paths, Agent::Copilot, kith, false)?.changed);
    assert!(!file.exists(), "uninstall removes kith's file");
    assert!(!install(&paths, Agent::Copilot, kith, false)?.changed);
    assert_eq!(fs::read_to_string(&theirs)?, audit, "the user's file");
    Ok(())
}

#[test]
fn copilot_install_and_uninstall_refuse_a_kith_json_kith_did_not_write() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.copilot_dir.join("hooks/kith.json");
    fs::create_dir_all(paths.copilot_dir.join("hooks"))?;
    let kith = Path::new(KITH);
    let foreign = [
        // Kith's command beside one of the user's.
        r#"{"version": 1, "hooks": {"agentStop": [{"type": "command", "bash": "/usr/local/bin/kith hook", "timeoutSec": 10}, {"type": "command", "bash": "./notify.sh"}], "sessionEnd": [{"type": "command", "bash": "/usr/local/bin/kith hook", "timeoutSec": 10}]}}"#,
        r#"{"version": 1, "hooks": {"agentStop": [{"type": "command", "bash": "./notify.sh"}]}}"#,
        // Kith's command with the user's environment.
        r#"{"version": 1, "hooks": {"agentStop": [{"type": "command", "bash": "/usr/local/bin/kith hook", "env": {"A": "1"}}]}}"#,
        r#"{"version": 1, "hooks": {}}"#,
        "[]",
        "{ not json",
    ];
    for text in foreign {
        fs::write(&file, text)?;
        for add in [true, false] {
            let err = install(&paths, Agent::Copilot, kith, add)
                .err()
                .ok_or_else(|| anyhow::anyhow!("accepted {text} (add: {add})"))?;
            let said = err.to_string();
            assert!(said.contains("kith did not write"), "{said}");
            assert!(said.contains(&file.display().to_string()), "{said}");
            assert_eq!(fs::read_to_string(&file)?, text, "left intact");
        }
    }
    Ok(())
}

/// Gemini CLI settings with comments, which Gemini reads and keeps.
const GEMINI_COMMENTED: &str = r#"// Gemini CLI settings (JSON with comments)
{
  "general": {
    "preferredEditor": "vim" // or "code"
  },
  /* Light theme
     in the day. */
  "ui": {"theme": "GitHub"} // "http://not/a/comment" stays as text
}
"#;

/// Regression: a `settings.json` with comments was refused as invalid JSON,
/// so the Gemini hook could never be installed there.
#[test]
fn gemini_install_keeps_the_users_comments_and_uninstall_restores_them() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.gemini_dir.join("settings.json");
    fs::create_dir_all(&paths.gemini_dir)?;
    fs::write(&file, GEMINI_COMMENTED)?;
    let kith = Path::new(KITH);

    assert!(install(&paths, Agent::Gemini, kith, true)?.changed);
    let once = fs::read_to_string(&file)?;
    let hooks_at = once.find("\"hooks\"").unwrap_or(once.len());
    assert_eq!(
        &once[..hooks_at],
        "// Gemini CLI settings (JSON with comments)\n{\n  \"general\": {\n    \
         \"preferredEditor\": \"vim\" // or \"code\"\n  },\n  /* Light theme\n     in the day. */\n  \
         \"ui\": {\"theme\": \"GitHub\"}, // \"http://not/a/comment\" stays as text\n  ",
        "every comment stays where it was: {once}"
    );
    assert!(once.ends_with("}\n"), "{once}");
    let v: Value = serde_json::from_str(&super::jsonc::strip_comments(&once))?;
    assert_eq!(v["general"]["preferredEditor"], "vim");
    assert_eq!(v["ui"]["theme"], "GitHub");
    for event in ["AfterAgent", "PreCompress", "SessionEnd"] {
        assert_eq!(
            v["hooks"][event],
            json!([{"hooks": [{"type": "command", "command": "/usr/local/bin/kith hook", "timeout": 10000}]}]),
            "{event}"
        );
    }
    assert!(
        !install(&paths, Agent::Gemini, kith, true)?.changed,
        "second install"
    );
    assert_eq!(fs::read_to_string(&file)?, once);

    assert!(install(&paths, Agent::Gemini, kith, false)?.changed);
    assert_eq!(
        fs::read_to_string(&file)?,
        GEMINI_COMMENTED,
        "uninstall restores it byte for byte"
    );
    Ok(())
}

#[test]
fn gemini_install_refuses_rather_than_drop_comments_inside_hooks() -> anyhow::Result<()> {
    let (_tmp, paths) = device()?;
    let file = paths.gemini_dir.join("settings.json");
    fs::create_dir_all(&paths.gemini_dir)?;
    let text = "{\n  \"hooks\": {\n    // my sound\n    \"AfterAgent\": []\n  }\n}\n";
    fs::write(&file, text)?;
    let err = install(&paths, Agent::Gemini, Path::new(KITH), true)
        .err()
        .ok_or_else(|| anyhow::anyhow!("installed over comments inside hooks"))?;
    let said = err.to_string();
    assert!(matches!(err, Error::Refused(_)), "{said}");
    for part in [
        file.display().to_string().as_str(),
        "comments inside \"hooks\"",
        "`kith install gemini`",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    assert_eq!(fs::read_to_string(&file)?, text, "left as it was");
    // Nothing of kith's to remove: nothing to lose either.
    assert!(!install(&paths, Agent::Gemini, Path::new(KITH), false)?.changed);

    // Settings that are not JSON even without their comments name the file.
    fs::write(&file, "// mine\n{ not json")?;
    let said = install(&paths, Agent::Gemini, Path::new(KITH), true)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(said.contains(&file.display().to_string()), "{said}");
    assert!(
        said.contains("line 2"),
        "the line as the user sees it: {said}"
    );
    Ok(())
}

/// Regression: a settings file kept as a symlink (GNU stow, home-manager)
/// was replaced by a regular file holding the hook.
#[test]
fn install_writes_through_a_symlinked_settings_file() -> anyhow::Result<()> {
    let (tmp, paths) = device()?;
    let dotfiles = tmp.path().join("dotfiles/claude");
    fs::create_dir_all(&dotfiles)?;
    fs::create_dir_all(&paths.claude_dir)?;
    let real = dotfiles.join("settings.json");
    fs::write(&real, SETTINGS)?;
    fs::set_permissions(&real, fs::Permissions::from_mode(0o600))?;
    let link = paths.claude_dir.join("settings.json");
    std::os::unix::fs::symlink("../dotfiles/claude/settings.json", &link)?;

    assert!(install(&paths, Agent::ClaudeCode, Path::new(KITH), true)?.changed);
    assert!(fs::symlink_metadata(&link)?.file_type().is_symlink());
    assert_eq!(
        fs::read_link(&link)?,
        Path::new("../dotfiles/claude/settings.json")
    );
    let v: Value = serde_json::from_str(&fs::read_to_string(&real)?)?;
    assert_eq!(
        v["hooks"]["SessionEnd"][0]["hooks"][0]["command"],
        "/usr/local/bin/kith hook"
    );
    assert_eq!(fs::metadata(&real)?.permissions().mode() & 0o777, 0o600);

    assert!(install(&paths, Agent::ClaudeCode, Path::new(KITH), false)?.changed);
    assert!(fs::symlink_metadata(&link)?.file_type().is_symlink());
    assert_eq!(fs::read_to_string(&real)?, SETTINGS);
    Ok(())
}

/// The agent saved its settings while kith edited them (Claude Code writes
/// `.claude.json` often): the edit is made again on what the agent wrote,
/// so both changes are kept.
#[test]
fn an_edit_of_a_file_the_agent_saved_meanwhile_is_made_again_on_its_text() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("settings.json");
    fs::write(&file, "theme=dark\n")?;
    let edits = std::cell::Cell::new(0);
    let outcome = edit_file(
        &file,
        0o644,
        false,
        |text| {
            edits.set(edits.get() + 1);
            if edits.get() == 1 {
                // The agent's own save, between kith's read and its write.
                fs::write(&file, "theme=light\nfont=mono\n").at("write", &file)?;
            }
            Ok(Some(format!("{text}hook=kith\n")))
        },
        true,
    )?;
    assert!(outcome.changed);
    assert_eq!(edits.get(), 2);
    assert_eq!(
        fs::read_to_string(&file)?,
        "theme=light\nfont=mono\nhook=kith\n"
    );
    Ok(())
}

/// Settings the agent keeps rewriting while kith edits them are left as the
/// agent wrote them, with an error saying why, rather than overwritten.
#[test]
fn an_edit_of_a_file_that_keeps_changing_is_refused() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("settings.json");
    fs::write(&file, "theme=dark\n")?;
    let saves = std::cell::Cell::new(0);
    let done = edit_file(
        &file,
        0o644,
        false,
        |text| {
            saves.set(saves.get() + 1);
            let agent = format!("theme=dark\nsave={}\n", saves.get());
            fs::write(&file, &agent).at("write", &file)?;
            Ok(Some(format!("{text}hook=kith\n")))
        },
        true,
    );
    let said = done.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(said.contains("kept changing"), "{said}");
    let left = fs::read_to_string(&file)?;
    assert!(!left.contains("hook=kith"), "{left}");
    assert_eq!(left, format!("theme=dark\nsave={}\n", saves.get()));
    Ok(())
}
