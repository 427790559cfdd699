//! `kith install|uninstall claude-code|codex|pi|gemini`: add (or remove) exactly
//! kith's hook in each agent's own configuration, keeping everything else as
//! the user wrote it. Installing twice changes nothing; uninstalling removes
//! only what kith added.
//!
//! - Claude Code: a command hook on Stop, SubagentStop, PreCompact and
//!   SessionEnd in `settings.json` (other keys and hooks kept verbatim);
//! - Codex: `notify = [<kith>, "hook"]` in `config.toml` (formatting kept by
//!   `toml_edit`); another program already there is never replaced;
//! - pi: the extension `extensions/kith.ts`, which runs `kith hook --pi FILE`;
//! - Gemini CLI: a command hook on AfterAgent, PreCompress and SessionEnd in
//!   `~/.gemini/settings.json`, which has Claude's shape (its payload names
//!   the `transcript_path` too).
//!
//! Copilot CLI and Cursor have no hook kith uses: `kith watch` captures them.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::config::{write_file, Durability, Paths};
use crate::error::{Error, IoContext, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
    Gemini,
}

/// What an install or uninstall did, for the one line `kith` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub file: PathBuf,
    pub changed: bool,
    pub add: bool,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.display();
        match (self.changed, self.add) {
            (true, true) => write!(f, "installed kith's hook in {file}"),
            (true, false) => write!(f, "removed kith's hook from {file}"),
            (false, true) => write!(f, "kith's hook is already in {file}"),
            (false, false) => write!(f, "kith's hook was not in {file}"),
        }
    }
}

/// An agent's config text -> the new text, or `None` when nothing changes.
type Edit = fn(&str, &Path, bool) -> Result<Option<String>>;

/// Adds (`add`) or removes kith's hook for `agent`; `kith` is the binary the
/// hook runs.
pub fn install(paths: &Paths, agent: Agent, kith: &Path, add: bool) -> Result<Outcome> {
    let (file, edit): (PathBuf, Edit) = match agent {
        Agent::ClaudeCode => (paths.claude_dir.join("settings.json"), claude_settings),
        Agent::Codex => (paths.codex_dir.join("config.toml"), codex_config),
        Agent::Pi => (
            paths.pi_dir.join("extensions").join("kith.ts"),
            pi_extension,
        ),
        Agent::Gemini => (paths.gemini_dir.join("settings.json"), gemini_settings),
    };
    let (text, mode) = match fs::read_to_string(&file) {
        Ok(text) => {
            let mode = fs::metadata(&file).at("stat", &file)?.permissions().mode();
            (text, mode & 0o777)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), 0o644),
        Err(e) => return Err(e).at("read", &file),
    };
    let new = edit(&text, kith, add).map_err(|e| match e {
        Error::Refused(why) => Error::Refused(format!("{}: {why}", file.display())),
        e => e,
    })?;
    let changed = new.is_some();
    match new {
        Some(new) if new.is_empty() && agent == Agent::Pi => {
            fs::remove_file(&file).at("remove", &file)?
        }
        Some(new) => write_file(&file, new.as_bytes(), mode, Durability::Durable)?,
        None => {}
    }
    Ok(Outcome { file, changed, add })
}

/// An agent whose `settings.json` holds Claude-shaped hooks: `hooks.<event>`
/// is a list of matcher groups, each with its command handlers.
struct HookSettings {
    what: &'static str,
    events: &'static [&'static str],
    /// The handler's `timeout`, in the agent's own unit.
    timeout: u64,
}

const CLAUDE_EVENTS: [&str; 4] = ["Stop", "SubagentStop", "PreCompact", "SessionEnd"];

const CLAUDE: HookSettings = HookSettings {
    what: "Claude Code settings JSON",
    events: &CLAUDE_EVENTS,
    // Seconds.
    timeout: 10,
};

const GEMINI: HookSettings = HookSettings {
    what: "Gemini CLI settings JSON",
    events: &["AfterAgent", "PreCompress", "SessionEnd"],
    // Milliseconds.
    timeout: 10_000,
};

fn claude_settings(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    hook_settings(&CLAUDE, text, kith, add)
}

fn gemini_settings(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    hook_settings(&GEMINI, text, kith, add)
}

/// The shell command a hook runs: `<kith> hook`, the path quoted if needed.
fn hook_command(kith: &Path) -> String {
    let path = kith.display().to_string();
    let plain = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@%=".contains(&b));
    if plain {
        format!("{path} hook")
    } else {
        format!("'{}' hook", path.replace('\'', r"'\''"))
    }
}

/// `<anything>/kith hook`, quoted or not: a hook kith added (perhaps from
/// another install location).
fn is_kith_command(command: &str) -> bool {
    let Some(program) = command.trim().strip_suffix(" hook") else {
        return false;
    };
    let program = program.trim().trim_matches('\'').trim_matches('"');
    Path::new(program).file_name().is_some_and(|n| n == "kith")
}

/// A matcher group that holds kith's handler and nothing else.
fn is_kith_group(group: &Value) -> bool {
    match group
        .get("hooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        Some([handler]) => handler
            .get("command")
            .and_then(Value::as_str)
            .is_some_and(is_kith_command),
        _ => false,
    }
}

/// The agent's settings with kith's group on each capture event, or without
/// any; `None` when nothing changes. Values kith does not edit keep their
/// exact text (and so their order and formatting).
fn hook_settings(
    agent: &HookSettings,
    text: &str,
    kith: &Path,
    add: bool,
) -> Result<Option<String>> {
    let bad = |reason: String| Error::Invalid {
        what: agent.what,
        path: PathBuf::from("settings.json"),
        reason,
    };
    let members = |raw: &str| serde_json::from_str::<Members>(raw).map_err(|e| bad(e.to_string()));
    let mut top = if text.trim().is_empty() {
        Members::default()
    } else {
        members(text)?
    };
    let mut hooks = match top.raw("hooks") {
        Some(raw) => members(raw.get())?,
        None => Members::default(),
    };
    let ours = json!({"hooks": [{"type": "command", "command": hook_command(kith),
                                 "timeout": agent.timeout}]});
    let mut changed = false;
    for &event in agent.events {
        let groups: Vec<Box<RawValue>> = match hooks.raw(event) {
            Some(raw) => {
                serde_json::from_str(raw.get()).map_err(|e| bad(format!("hooks.{event}: {e}")))?
            }
            None => Vec::new(),
        };
        let parsed: Vec<Value> = groups
            .iter()
            .map(|g| serde_json::from_str(g.get()).unwrap_or(Value::Null))
            .collect();
        let kith_groups: Vec<&Value> = parsed.iter().filter(|g| is_kith_group(g)).collect();
        let already = if add {
            kith_groups.len() == 1 && *kith_groups[0] == ours
        } else {
            kith_groups.is_empty()
        };
        if already {
            continue;
        }
        changed = true;
        let mut kept: Vec<Member> = groups
            .into_iter()
            .zip(&parsed)
            .filter(|(_, g)| !is_kith_group(g))
            .map(|(raw, _)| Member::Raw(raw))
            .collect();
        if add {
            kept.push(Member::Value(ours.clone()));
        }
        if kept.is_empty() {
            hooks.remove(event);
        } else {
            hooks.set(event, Member::List(kept));
        }
    }
    if !changed {
        return Ok(None);
    }
    if hooks.0.is_empty() {
        top.remove("hooks");
    } else {
        top.set("hooks", Member::Object(hooks));
    }
    let mut out = serde_json::to_string_pretty(&top).map_err(|e| bad(e.to_string()))?;
    out.push('\n');
    Ok(Some(out))
}

/// A JSON object whose members keep their order; members kith did not edit
/// keep their exact text.
#[derive(Debug, Default)]
struct Members(Vec<(String, Member)>);

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Member {
    /// As the user wrote it.
    Raw(Box<RawValue>),
    Object(Members),
    List(Vec<Member>),
    Value(Value),
}

impl Members {
    fn raw(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find_map(|(k, v)| match v {
            Member::Raw(raw) if k == key => Some(&**raw),
            _ => None,
        })
    }

    fn set(&mut self, key: &str, value: Member) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, Member::Raw(v)));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for Members {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Codex's config with (or without) `notify = [<kith>, "hook"]`; `None` when
/// nothing changes. Refuses to replace another program's `notify`.
fn codex_config(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let mut doc: toml_edit::DocumentMut =
        text.parse()
            .map_err(|e: toml_edit::TomlError| Error::Invalid {
                what: "Codex config TOML",
                path: PathBuf::from("config.toml"),
                reason: e.to_string(),
            })?;
    let kith = kith.display().to_string();
    let current: Option<Vec<String>> = doc.get("notify").map(|item| {
        item.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    });
    let is_ours = |argv: &[String]| {
        argv.len() == 2
            && argv[1] == "hook"
            && Path::new(&argv[0]).file_name().is_some_and(|n| n == "kith")
    };
    match (current, add) {
        (None, false) => Ok(None),
        (None, true) => {
            let argv: toml_edit::Array = [kith.as_str(), "hook"].into_iter().collect();
            doc.insert("notify", toml_edit::value(argv));
            Ok(Some(doc.to_string()))
        }
        (Some(argv), true) if is_ours(&argv) && argv[0] == kith => Ok(None),
        (Some(argv), true) if is_ours(&argv) => {
            let new: toml_edit::Array = [kith.as_str(), "hook"].into_iter().collect();
            doc.insert("notify", toml_edit::value(new));
            Ok(Some(doc.to_string()))
        }
        (Some(argv), true) => Err(Error::Refused(format!(
            "Codex already runs {argv:?} after each turn (`notify`), and Codex takes only one program; \
             kith will not replace it. Remove it (or have it call `{kith} hook` with the same argument), \
             then run `kith install codex` again"
        ))),
        (Some(argv), false) if is_ours(&argv) => {
            doc.remove("notify");
            Ok(Some(doc.to_string()))
        }
        (Some(_), false) => Ok(None),
    }
}

const PI_MARKER: &str = "// kith: added by `kith install pi`";

/// The pi extension (or `Some("")` to delete it); `None` when nothing
/// changes. A `kith.ts` kith did not write is never touched.
fn pi_extension(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let ours = text.starts_with(PI_MARKER);
    if !text.is_empty() && !ours {
        return if add {
            Err(Error::Refused(
                "a kith.ts that kith did not write is already there; move it away and run `kith install pi` again".into(),
            ))
        } else {
            Ok(None)
        };
    }
    if !add {
        return Ok(ours.then(String::new));
    }
    let kith = json!(kith.display().to_string());
    let want = format!(
        r#"{PI_MARKER}; `kith uninstall pi` removes it.
// Captures this pi session after every turn and when pi exits.
export default function (pi: any) {{
  const capture = (ctx: any) => {{
    const file = ctx?.sessionManager?.getSessionFile?.();
    return file
      ? pi.exec({kith}, ["hook", "--pi", file], {{ timeout: 5000 }}).catch(() => {{}})
      : Promise.resolve();
  }};
  pi.on("turn_end", (_event: any, ctx: any) => {{
    void capture(ctx);
  }});
  pi.on("session_shutdown", async (_event: any, ctx: any) => {{
    await capture(ctx);
  }});
}}
"#
    );
    Ok((text != want).then_some(want))
}

#[cfg(test)]
mod tests;
