//! `kith install|uninstall claude-code|codex|pi`: add (or remove) exactly
//! kith's hook in each agent's own configuration, keeping everything else.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::config::Paths;

const CLAUDE_EVENTS: [&str; 4] = ["Stop", "SubagentStop", "PreCompact", "SessionEnd"];
const PI_EXTENSION: &str = "kith.ts";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
}

fn our_command(kith: &Path) -> String {
    format!("{} hook", kith.display())
}

fn is_ours(handler: &Value, command: &str) -> bool {
    handler.get("command").and_then(Value::as_str) == Some(command)
}

/// Adds kith's command hook to each capture event; idempotent.
pub fn claude_add(settings: &mut Value, command: &str) -> Result<bool> {
    let obj = settings
        .as_object_mut()
        .context("settings.json is not a JSON object")?;
    let hooks = obj.entry("hooks").or_insert_with(|| json!({}));
    let hooks = hooks
        .as_object_mut()
        .context("settings.json \"hooks\" is not an object")?;
    let mut changed = false;
    for event in CLAUDE_EVENTS {
        let groups = hooks.entry(event).or_insert_with(|| json!([]));
        let groups = groups
            .as_array_mut()
            .with_context(|| format!("hooks.{event} is not a list"))?;
        let present = groups.iter().any(|g| {
            g.get("hooks")
                .and_then(Value::as_array)
                .is_some_and(|hs| hs.iter().any(|h| is_ours(h, command)))
        });
        if !present {
            groups.push(json!({"hooks": [{"type": "command", "command": command, "timeout": 10}]}));
            changed = true;
        }
    }
    Ok(changed)
}

/// Removes exactly what `claude_add` added.
pub fn claude_remove(settings: &mut Value, command: &str) -> bool {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    for event in CLAUDE_EVENTS {
        let Some(groups) = hooks.get_mut(event).and_then(Value::as_array_mut) else {
            continue;
        };
        let before = groups.len();
        groups.retain(|g| {
            !g.get("hooks")
                .and_then(Value::as_array)
                .is_some_and(|hs| hs.len() == 1 && is_ours(&hs[0], command))
        });
        changed |= groups.len() != before;
        if groups.is_empty() {
            hooks.remove(event);
        }
    }
    if hooks.is_empty() {
        if let Some(o) = settings.as_object_mut() {
            o.remove("hooks");
        }
    }
    changed
}

/// `notify = [kith, "hook"]` as the first line of Codex's config.toml (a
/// top-level key must precede every table); refuses to replace another notify.
pub fn codex_add(config: &str, kith: &Path) -> Result<Option<String>> {
    let line = codex_line(kith);
    if config.lines().any(|l| l.trim() == line) {
        return Ok(None);
    }
    if config.lines().any(|l| l.trim_start().starts_with("notify")) {
        bail!("Codex already has a `notify` program in config.toml; add `{line}` by hand or remove the other one");
    }
    Ok(Some(format!("{line}\n{config}")))
}

pub fn codex_remove(config: &str, kith: &Path) -> Option<String> {
    let line = codex_line(kith);
    let kept: Vec<&str> = config.lines().filter(|l| l.trim() != line).collect();
    (kept.len() != config.lines().count()).then(|| {
        let mut s = kept.join("\n");
        if config.ends_with('\n') && !s.is_empty() {
            s.push('\n');
        }
        s
    })
}

fn codex_line(kith: &Path) -> String {
    format!(
        "notify = [{}, \"hook\"]  # kith",
        json!(kith.display().to_string())
    )
}

fn pi_extension(kith: &Path) -> String {
    format!(
        r#"// kith: capture this pi session when a turn ends. Added by `kith install pi`.
export default function (pi: any) {{
  const capture = async (_event: any, ctx: any) => {{
    const file = ctx?.sessionManager?.getSessionFile?.();
    if (file) await pi.exec({kith}, ["hook", "--pi", file]).catch(() => {{}});
  }};
  pi.on("turn_end", capture);
  pi.on("session_shutdown", capture);
}}
"#,
        kith = json!(kith.display().to_string())
    )
}

pub fn install(paths: &Paths, agent: Agent, kith: &Path, add: bool) -> Result<String> {
    match agent {
        Agent::ClaudeCode => {
            let file = paths.claude_dir.join("settings.json");
            let mut settings: Value = match fs::read(&file) {
                Ok(b) => serde_json::from_slice(&b)
                    .with_context(|| format!("{} is not valid JSON", file.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
                Err(e) => return Err(e.into()),
            };
            let command = our_command(kith);
            let changed = if add {
                claude_add(&mut settings, &command)?
            } else {
                claude_remove(&mut settings, &command)
            };
            if changed {
                fs::create_dir_all(&paths.claude_dir)?;
                fs::write(
                    &file,
                    format!("{}\n", serde_json::to_string_pretty(&settings)?),
                )?;
            }
            Ok(report(changed, add, &file))
        }
        Agent::Codex => {
            let file = paths.codex_dir.join("config.toml");
            let config = fs::read_to_string(&file).unwrap_or_default();
            let new = if add {
                codex_add(&config, kith)?
            } else {
                codex_remove(&config, kith)
            };
            if let Some(new) = &new {
                fs::create_dir_all(&paths.codex_dir)?;
                fs::write(&file, new)?;
            }
            Ok(report(new.is_some(), add, &file))
        }
        Agent::Pi => {
            let file = paths.pi_dir.join("extensions").join(PI_EXTENSION);
            let want = pi_extension(kith);
            let changed = if add {
                let same = fs::read_to_string(&file).is_ok_and(|s| s == want);
                if !same {
                    fs::create_dir_all(file.parent().context("no parent")?)?;
                    fs::write(&file, want)?;
                }
                !same
            } else {
                fs::remove_file(&file).is_ok()
            };
            Ok(report(changed, add, &file))
        }
    }
}

fn report(changed: bool, add: bool, file: &Path) -> String {
    match (changed, add) {
        (true, true) => format!("installed kith's hook in {}", file.display()),
        (true, false) => format!("removed kith's hook from {}", file.display()),
        (false, true) => format!("kith's hook is already in {}", file.display()),
        (false, false) => format!("kith's hook was not in {}", file.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_install_is_idempotent_keeps_settings_and_uninstalls_cleanly() -> Result<()> {
        let original = json!({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}});
        let mut s = original.clone();
        assert!(claude_add(&mut s, "/bin/kith hook")?);
        assert!(
            !claude_add(&mut s, "/bin/kith hook")?,
            "second install changes nothing"
        );
        assert_eq!(s["model"], "opus");
        assert_eq!(
            s["hooks"]["Stop"].as_array().map(Vec::len),
            Some(2),
            "the user's hook stays"
        );
        assert_eq!(
            s["hooks"]["SessionEnd"][0]["hooks"][0]["command"],
            "/bin/kith hook"
        );
        assert!(claude_remove(&mut s, "/bin/kith hook"));
        assert_eq!(s, original, "uninstall restores the user's settings");
        Ok(())
    }

    #[test]
    fn codex_notify_is_added_once_and_never_replaces_the_users() -> Result<()> {
        let kith = Path::new("/bin/kith");
        let config = "model = \"o3\"\n[profiles.fast]\nmodel = \"mini\"\n";
        let added = codex_add(config, kith)?.unwrap_or_default();
        assert!(added.starts_with("notify = [\"/bin/kith\", \"hook\"]"));
        assert!(added.ends_with(config));
        assert_eq!(codex_add(&added, kith)?, None);
        assert_eq!(codex_remove(&added, kith).as_deref(), Some(config));
        assert!(codex_add("notify = [\"other\"]\n", kith).is_err());
        Ok(())
    }
}
