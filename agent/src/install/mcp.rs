//! `kith install|uninstall claude-code|codex --mcp`: register (or remove)
//! `kith mcp` as an MCP server where each agent reads its servers,
//! keeping everything else as it was written.
//!
//! - Claude Code, user scope: `mcpServers.kith` in `.claude.json` (beside
//!   the `.claude` folder, or inside a folder named otherwise, as with
//!   `CLAUDE_CONFIG_DIR`); every other member keeps its exact text;
//! - Codex: `[mcp_servers.kith]` in `config.toml`, formatting kept by
//!   `toml_edit`.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{Agent, Member, Members, Outcome};
use crate::config::Paths;
use crate::error::{Error, Result};

/// The agents `--mcp` registers with.
pub(crate) const MCP_AGENTS: &str =
    "--mcp is for claude-code and codex (kith captures pi, Gemini CLI, Cursor and Copilot CLI without it)";

/// The server's name in each agent's configuration.
const NAME: &str = "kith";

/// The file holding `agent`'s MCP servers, for the agents that take kith's.
pub(crate) fn config_file(paths: &Paths, agent: Agent) -> Option<PathBuf> {
    match agent {
        Agent::ClaudeCode => Some(claude_json(&paths.claude_dir)),
        Agent::Codex => Some(paths.codex_dir.join("config.toml")),
        Agent::Pi | Agent::Gemini | Agent::Cursor | Agent::Copilot => None,
    }
}

/// Adds (`add`) or removes the `kith mcp` server for `agent`.
pub(crate) fn install(paths: &Paths, agent: Agent, kith: &Path, add: bool) -> Result<Outcome> {
    let edit: super::Edit = match agent {
        Agent::ClaudeCode => claude_servers,
        Agent::Codex => codex_servers,
        Agent::Pi | Agent::Gemini | Agent::Cursor | Agent::Copilot => {
            return Err(Error::Refused(MCP_AGENTS.into()))
        }
    };
    let file = config_file(paths, agent).ok_or_else(|| Error::Refused(MCP_AGENTS.into()))?;
    // .claude.json holds Claude's own state too: private to the user.
    let outcome = super::edit_file(&file, 0o600, false, |text| edit(text, kith, add), add)?;
    Ok(Outcome {
        what: "the kith MCP server",
        ..outcome
    })
}

/// Where Claude Code keeps user-scope MCP servers for this config folder.
fn claude_json(claude_dir: &Path) -> PathBuf {
    match (claude_dir.file_name(), claude_dir.parent()) {
        (Some(name), Some(parent)) if name == ".claude" => parent.join(".claude.json"),
        _ => claude_dir.join(".claude.json"),
    }
}

fn claude_servers(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let bad = |reason: String| Error::Invalid {
        what: "Claude Code .claude.json",
        path: PathBuf::from(".claude.json"),
        reason,
    };
    let (top, mut servers) = Members::open(text, "mcpServers", &bad)?;
    let ours =
        json!({"type": "stdio", "command": kith.display().to_string(), "args": ["mcp"], "env": {}});
    let current: Option<serde_json::Value> = servers
        .raw(NAME)
        .and_then(|raw| serde_json::from_str(raw.get()).ok());
    match (current, add) {
        (Some(v), true) if v == ours => return Ok(None),
        (None, false) => return Ok(None),
        (_, true) => servers.set(NAME, Member::Value(ours)),
        (Some(_), false) => servers.remove(NAME),
    }
    top.close("mcpServers", servers, &bad).map(Some)
}

fn codex_servers(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let mut doc = super::codex_document(text)?;
    let kith = kith.display().to_string();
    let has = doc.get("mcp_servers").and_then(|s| s.get(NAME)).is_some();
    if !add {
        if !has {
            return Ok(None);
        }
        if let Some(servers) = doc
            .get_mut("mcp_servers")
            .and_then(|s| s.as_table_like_mut())
        {
            servers.remove(NAME);
            if servers.is_empty() {
                doc.remove("mcp_servers");
            }
        }
        return Ok(Some(doc.to_string()));
    }
    let current = doc.get("mcp_servers").and_then(|s| s.get(NAME));
    let same = current.is_some_and(|t| {
        t.get("command").and_then(|c| c.as_str()) == Some(kith.as_str())
            && t.get("args")
                .and_then(|a| a.as_array())
                .is_some_and(|a| a.len() == 1 && a.get(0).and_then(|v| v.as_str()) == Some("mcp"))
    });
    if same {
        return Ok(None);
    }
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| Error::Refused("`mcp_servers` in config.toml is not a table".into()))?;
    let mut ours = toml_edit::Table::new();
    ours.insert("command", toml_edit::value(kith));
    let args: toml_edit::Array = ["mcp"].into_iter().collect();
    ours.insert("args", toml_edit::value(args));
    servers.insert(NAME, toml_edit::Item::Table(ours));
    Ok(Some(doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(f: super::super::Edit, text: &str, add: bool) -> Option<String> {
        match f(text, Path::new("/opt/kith/bin/kith"), add) {
            Ok(out) => out,
            Err(e) => panic!("edit failed: {e}"),
        }
    }

    #[test]
    fn claude_gets_a_user_scope_server_and_loses_exactly_it() {
        let before = "{\n  \"numStartups\": 12,\n  \"mcpServers\": {\"other\": {\"command\":\"x\"}},\n  \"projects\": {\"/a\": {\"allowedTools\": []}}\n}\n";
        let added = edit(claude_servers, before, true).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&added).unwrap_or_default();
        assert_eq!(v["mcpServers"]["kith"]["command"], "/opt/kith/bin/kith");
        assert_eq!(v["mcpServers"]["kith"]["args"], json!(["mcp"]));
        assert_eq!(v["mcpServers"]["other"], json!({"command": "x"}));
        // Other members keep their exact text.
        assert!(added.contains("{\"command\":\"x\"}") && added.contains("\"numStartups\": 12"));
        assert_eq!(
            edit(claude_servers, &added, true),
            None,
            "twice changes nothing"
        );
        let removed = edit(claude_servers, &added, false).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&removed).unwrap_or_default();
        assert!(v["mcpServers"].get("kith").is_none());
        assert_eq!(v["mcpServers"]["other"], json!({"command": "x"}));
        assert_eq!(v["projects"], json!({"/a": {"allowedTools": []}}));
        assert_eq!(edit(claude_servers, &removed, false), None);
        // Alone, the server list goes with it.
        let only = edit(claude_servers, "", true).unwrap_or_default();
        assert_eq!(edit(claude_servers, &only, false).as_deref(), Some("{}\n"));
    }

    #[test]
    fn codex_gets_a_mcp_servers_table_keeping_formatting() {
        let before =
            "# my settings\nmodel = \"o3\"  # keep\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n";
        let added = edit(codex_servers, before, true).unwrap_or_default();
        assert!(added.starts_with(before), "{added}");
        assert!(
            added.contains(
                "[mcp_servers.kith]\ncommand = \"/opt/kith/bin/kith\"\nargs = [\"mcp\"]\n"
            ),
            "{added}"
        );
        assert_eq!(edit(codex_servers, &added, true), None);
        assert_eq!(edit(codex_servers, &added, false).as_deref(), Some(before));
        let fresh = edit(codex_servers, "model = \"o3\"\n", true).unwrap_or_default();
        assert_eq!(
            fresh,
            "model = \"o3\"\n\n[mcp_servers.kith]\ncommand = \"/opt/kith/bin/kith\"\nargs = [\"mcp\"]\n"
        );
        assert_eq!(
            edit(codex_servers, &fresh, false).as_deref(),
            Some("model = \"o3\"\n")
        );
    }

    #[test]
    fn claude_json_sits_beside_the_claude_folder() {
        assert_eq!(
            claude_json(Path::new("/home/a/.claude")),
            Path::new("/home/a/.claude.json")
        );
        assert_eq!(
            claude_json(Path::new("/etc/claude-config")),
            Path::new("/etc/claude-config/.claude.json")
        );
    }
}
