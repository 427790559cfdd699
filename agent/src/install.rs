//! `kith install|uninstall claude-code|codex|pi|gemini|cursor|copilot`: add
//! (or remove) exactly kith's hook in each agent's own configuration,
//! keeping everything else as the user wrote it. Installing twice changes
//! nothing; uninstalling removes only what kith added.
//!
//! - Claude Code: a command hook on Stop, SubagentStop, PreCompact and
//!   SessionEnd in `settings.json` (other keys and hooks kept verbatim);
//! - Codex: `notify = [<kith>, "hook"]` in `config.toml` (formatting kept by
//!   `toml_edit`); another program already there is never replaced;
//! - pi: the extension `extensions/kith.ts`, which runs `kith hook --pi FILE`;
//! - Gemini CLI: a command hook on AfterAgent, PreCompress and SessionEnd in
//!   `~/.gemini/settings.json`, which has Claude's shape (its payload names
//!   the `transcript_path` too) and may hold comments (`install::jsonc`);
//! - Cursor: a command on `stop` and `sessionEnd` in `~/.cursor/hooks.json`
//!   (`cursor_hooks`);
//! - Copilot CLI: kith's own hook file `hooks/kith.json` in Copilot's home,
//!   running kith on `agentStop` and `sessionEnd` (`copilot_hooks`).
//!
//! `--mcp` also registers `kith mcp` as an MCP server (`install::mcp`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::config::{write_through, Durability, Paths};
use crate::error::{Error, IoContext, Result};

mod jsonc;
pub(crate) mod mcp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Agent {
    ClaudeCode,
    Codex,
    Pi,
    Gemini,
    Cursor,
    Copilot,
}

/// What an install or uninstall did, for the one line `kith` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// What was added or removed: "kith's hook", "the kith MCP server".
    pub(crate) what: &'static str,
    pub(crate) file: PathBuf,
    pub(crate) changed: bool,
    pub(crate) add: bool,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, file) = (self.what, self.file.display());
        match (self.changed, self.add) {
            (true, true) => write!(f, "installed {what} in {file}"),
            (true, false) => write!(f, "removed {what} from {file}"),
            (false, true) => write!(f, "{what} is already in {file}"),
            (false, false) => write!(f, "{what} was not in {file}"),
        }
    }
}

/// An agent's config text -> the new text, or `None` when nothing changes.
type Edit = fn(&str, &Path, bool) -> Result<Option<String>>;

/// Adds (`add`) or removes kith's hook for `agent`; `kith` is the binary the
/// hook runs. Removing also removes the recall hook.
pub(crate) fn install(paths: &Paths, agent: Agent, kith: &Path, add: bool) -> Result<Outcome> {
    let file = config_file(paths, agent);
    let edit: Edit = match agent {
        Agent::ClaudeCode => claude_settings,
        Agent::Codex => codex_config,
        Agent::Pi => pi_extension,
        Agent::Gemini => gemini_settings,
        Agent::Cursor => cursor_hooks,
        Agent::Copilot => copilot_hooks,
    };
    // pi's extension and Copilot's `kith.json` are files of kith's own, and
    // a `hooks.json` left with no hook says nothing: removing kith's empties
    // and removes them.
    let remove_empty = matches!(agent, Agent::Pi | Agent::Cursor | Agent::Copilot);
    let outcome = edit_file(
        &file,
        0o644,
        remove_empty,
        |text| edit(text, kith, add),
        add,
    )?;
    Ok(Outcome {
        what: "kith's hook",
        ..outcome
    })
}

/// Adds (`add`) or removes Claude Code's SessionStart hook that runs
/// `kith context --hook` (`kith install claude-code --recall-on-start`).
pub(crate) fn install_recall(paths: &Paths, kith: &Path, add: bool) -> Result<Outcome> {
    let file = paths.claude_dir.join("settings.json");
    let outcome = edit_file(
        &file,
        0o644,
        false,
        |text| claude_recall(text, kith, add),
        add,
    )?;
    Ok(Outcome {
        what: "kith's SessionStart recall hook",
        ..outcome
    })
}

/// Reads `file` (empty when missing), applies `edit` and writes the result
/// back with the file's mode (`new_mode` for a new file); an empty result
/// removes the file when `remove_empty`.
pub(crate) fn edit_file(
    file: &Path,
    new_mode: u32,
    remove_empty: bool,
    edit: impl Fn(&str) -> Result<Option<String>>,
    add: bool,
) -> Result<Outcome> {
    // The agent may rewrite its file meanwhile (Claude Code saves
    // `.claude.json` often): an edit of a file that changed since it was read
    // is made again on the new text, so neither side's change is lost.
    let mut tries = 0;
    let (new, mode) = loop {
        tries += 1;
        let seen = crate::config::file_stamp(file);
        let (text, mode) = match fs::read_to_string(file) {
            Ok(text) => {
                let mode = fs::metadata(file).at("stat", file)?.permissions().mode();
                (text, mode & 0o777)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), new_mode),
            Err(e) => return Err(e).at("read", file),
        };
        // The edits know the file only by its name: errors name it in full.
        let new = edit(&text).map_err(|e| match e {
            Error::Refused(why) => Error::Refused(format!("{}: {why}", file.display())),
            Error::Invalid { what, reason, .. } => Error::Invalid {
                what,
                path: file.to_owned(),
                reason,
            },
            e => e,
        })?;
        if new.is_none() || crate::config::file_stamp(file) == seen {
            break (new, mode);
        }
        if tries == 5 {
            return Err(Error::Refused(format!(
                "{}: it kept changing while kith edited it (the agent saving it?); try again",
                file.display()
            )));
        }
    };
    let changed = new.is_some();
    match new {
        Some(new) if new.is_empty() && remove_empty => fs::remove_file(file).at("remove", file)?,
        // A dotfile kept as a symlink stays one.
        Some(new) => write_through(file, new.as_bytes(), mode, Durability::Durable)?,
        None => {}
    }
    Ok(Outcome {
        what: "",
        file: file.to_owned(),
        changed,
        add,
    })
}

/// The file kith's hook for `agent` lives in.
pub(crate) fn config_file(paths: &Paths, agent: Agent) -> PathBuf {
    match agent {
        Agent::ClaudeCode => paths.claude_dir.join("settings.json"),
        Agent::Codex => paths.codex_dir.join("config.toml"),
        Agent::Pi => paths.pi_dir.join("extensions").join("kith.ts"),
        Agent::Gemini => paths.gemini_dir.join("settings.json"),
        Agent::Cursor => paths.cursor_dir.join("hooks.json"),
        Agent::Copilot => paths.copilot_dir.join("hooks").join("kith.json"),
    }
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
/// Where `--recall-on-start` runs `kith context --hook`: what it prints
/// begins a new session's context.
const RECALL_EVENT: &str = "SessionStart";
const RECALL_ARGS: &str = "context --hook";

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

/// The shell command a hook runs: `<kith> <args>`, the path quoted if needed.
fn hook_command(kith: &Path, args: &str) -> String {
    let path = kith.display().to_string();
    let plain = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@%=".contains(&b));
    if plain {
        format!("{path} {args}")
    } else {
        format!("'{}' {args}", path.replace('\'', r"'\''"))
    }
}

/// `<anything>/kith hook` or `<anything>/kith context --hook`, quoted or
/// not: a hook kith added (perhaps from another install location).
fn is_kith_command(command: &str) -> bool {
    let command = command.trim();
    let Some(program) = command
        .strip_suffix(" hook")
        .or_else(|| command.strip_suffix(&format!(" {RECALL_ARGS}")))
    else {
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

/// kith's matcher group running `<kith> <args>`, with the agent's timeout.
fn hook_group(agent: &HookSettings, kith: &Path, args: &str) -> Value {
    json!({"hooks": [{"type": "command", "command": hook_command(kith, args),
                      "timeout": agent.timeout}]})
}

/// Claude's settings with kith's group on each capture event, or without
/// any (and without the recall hook); `None` when nothing changes.
fn claude_settings(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let mut events: Vec<(&str, Option<Value>)> = CLAUDE
        .events
        .iter()
        .map(|e| (*e, add.then(|| hook_group(&CLAUDE, kith, "hook"))))
        .collect();
    if !add {
        events.push((RECALL_EVENT, None));
    }
    settings_hooks(CLAUDE.what, text, &events)
}

/// Gemini CLI's settings with kith's group on each capture event, or
/// without any; `None` when nothing changes. Gemini reads the file with
/// `//` and `/* */` comments and keeps them when it saves: with comments,
/// only `hooks` is rewritten and every comment outside it stays; comments
/// inside `hooks` would be lost, so that edit is refused.
fn gemini_settings(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let events: Vec<(&str, Option<Value>)> = GEMINI
        .events
        .iter()
        .map(|e| (*e, add.then(|| hook_group(&GEMINI, kith, "hook"))))
        .collect();
    let plain = jsonc::strip_comments(text);
    let Some(edited) = settings_hooks(GEMINI.what, &plain, &events)? else {
        return Ok(None);
    };
    if plain == text {
        return Ok(Some(edited));
    }
    let spliced =
        jsonc::splice_member(text, &plain, "hooks", &edited).map_err(|e| Error::Invalid {
            what: GEMINI.what,
            path: PathBuf::from("settings.json"),
            reason: e.to_string(),
        })?;
    let (verb, command) = if add {
        ("add", "install")
    } else {
        ("remove", "uninstall")
    };
    spliced.map(Some).ok_or_else(|| {
        Error::Refused(format!(
            "it has comments inside \"hooks\", which kith would lose when it rewrites \"hooks\" \
             to {verb} its own; move those comments out of \"hooks\" (or {verb} kith's hook on \
             {events} by hand), then run `kith {command} gemini` again",
            events = GEMINI.events.join(", ")
        ))
    })
}

/// Claude's settings with (or without) `kith context --hook` on
/// SessionStart; `None` when nothing changes.
pub(crate) fn claude_recall(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    settings_hooks(
        CLAUDE.what,
        text,
        &[(
            RECALL_EVENT,
            add.then(|| hook_group(&CLAUDE, kith, RECALL_ARGS)),
        )],
    )
}

/// Sets kith's group on each event of a Claude-shaped `settings.json` to
/// the one given (or to none), keeping every other group; `None` when
/// nothing changes. Values kith does not edit keep their exact text (and so
/// their order and formatting).
fn settings_hooks(
    what: &'static str,
    text: &str,
    events: &[(&str, Option<Value>)],
) -> Result<Option<String>> {
    let bad = |reason: String| Error::Invalid {
        what,
        path: PathBuf::from("settings.json"),
        reason,
    };
    let (top, mut hooks) = Members::open(text, "hooks", &bad)?;
    if !set_hooks(&mut hooks, events, is_kith_group, &bad)? {
        return Ok(None);
    }
    top.close("hooks", hooks, &bad).map(Some)
}

/// The events Cursor runs kith on: `stop` when an agent loop ends
/// (completed, aborted or failed), `sessionEnd` when the session closes.
const CURSOR_EVENTS: [&str; 2] = ["stop", "sessionEnd"];

/// Cursor's `hooks.json` with kith's command on each of `CURSOR_EVENTS`, or
/// without any (`Some("")` when nothing but the version is left); `None`
/// when nothing changes. Every other hook keeps its exact text.
///
/// Cursor's hooks documentation (cursor.com/docs/agent/hooks) defines
/// `hooks.json` at the project or user level (`~/.cursor/hooks.json`) as
/// `{"version": 1, "hooks": {"<event>": [{"command": "..."}]}}`, its
/// commands fed JSON on stdin; `stop` runs when the agent loop ends,
/// `sessionEnd` when the session does. Integrations that read the payload
/// (cupcake's Cursor reference, hookshot, entireio/cli's Cursor agent) give
/// its common fields as `conversation_id`, `generation_id`,
/// `hook_event_name`, `workspace_roots` and `transcript_path` (null in some
/// versions), and `stop`'s as `status` and `loop_count`; the transcript is
/// `agent-transcripts/<conversation id>.jsonl`, which `kith hook` finds by
/// that id when the path is null. A `stop` hook may answer a
/// `followup_message` on stdout: `kith hook` prints nothing, so it never
/// continues the conversation.
fn cursor_hooks(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let bad = |reason: String| Error::Invalid {
        what: "Cursor hooks JSON",
        path: PathBuf::from("hooks.json"),
        reason,
    };
    let (mut top, mut hooks) = Members::open(text, "hooks", &bad)?;
    let ours = json!({"command": hook_command(kith, "hook")});
    let events: Vec<(&str, Option<Value>)> = CURSOR_EVENTS
        .iter()
        .map(|e| (*e, add.then(|| ours.clone())))
        .collect();
    if !set_hooks(&mut hooks, &events, is_kith_handler, &bad)? {
        return Ok(None);
    }
    if hooks.0.is_empty() && top.0.iter().all(|(k, _)| k == "version" || k == "hooks") {
        return Ok(Some(String::new()));
    }
    if top.raw("version").is_none() {
        top.set("version", Member::Value(json!(1)));
    }
    top.close("hooks", hooks, &bad).map(Some)
}

/// A Cursor hook entry that runs kith.
fn is_kith_handler(handler: &Value) -> bool {
    handler
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(is_kith_command)
}

/// Sets kith's entry (`is_ours`) on each event of `hooks` to the one given
/// (or to none), keeping every other entry as written; whether anything
/// changed.
fn set_hooks(
    hooks: &mut Members,
    events: &[(&str, Option<Value>)],
    is_ours: fn(&Value) -> bool,
    bad: &impl Fn(String) -> Error,
) -> Result<bool> {
    let mut changed = false;
    for (event, ours) in events {
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
        let kith_groups: Vec<&Value> = parsed.iter().filter(|g| is_ours(g)).collect();
        let already = match ours {
            Some(ours) => kith_groups.len() == 1 && kith_groups[0] == ours,
            None => kith_groups.is_empty(),
        };
        if already {
            continue;
        }
        changed = true;
        let mut kept: Vec<Member> = groups
            .into_iter()
            .zip(&parsed)
            .filter(|(_, g)| !is_ours(g))
            .map(|(raw, _)| Member::Raw(raw))
            .collect();
        if let Some(ours) = ours {
            kept.push(Member::Value(ours.clone()));
        }
        if kept.is_empty() {
            hooks.remove(event);
        } else {
            hooks.set(event, Member::List(kept));
        }
    }
    Ok(changed)
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
    /// A settings file's text (empty: `{}`) and its object member `key`
    /// (absent: empty), for editing; `bad` names the file in errors.
    fn open(text: &str, key: &str, bad: &impl Fn(String) -> Error) -> Result<(Self, Self)> {
        let parse = |raw: &str| serde_json::from_str::<Self>(raw).map_err(|e| bad(e.to_string()));
        let top = if text.trim().is_empty() {
            Self::default()
        } else {
            parse(text)?
        };
        let inner = match top.raw(key) {
            Some(raw) => parse(raw.get())?,
            None => Self::default(),
        };
        Ok((top, inner))
    }

    /// The file's text with `inner` as its member `key` (left out when
    /// empty).
    fn close(mut self, key: &str, inner: Self, bad: &impl Fn(String) -> Error) -> Result<String> {
        if inner.0.is_empty() {
            self.remove(key);
        } else {
            self.set(key, Member::Object(inner));
        }
        let mut out = serde_json::to_string_pretty(&self).map_err(|e| bad(e.to_string()))?;
        out.push('\n');
        Ok(out)
    }

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

/// Codex's `config.toml`, parsed for editing with its formatting kept.
fn codex_document(text: &str) -> Result<toml_edit::DocumentMut> {
    text.parse()
        .map_err(|e: toml_edit::TomlError| Error::Invalid {
            what: "Codex config TOML",
            path: PathBuf::from("config.toml"),
            reason: e.to_string(),
        })
}

/// Codex's config with (or without) `notify = [<kith>, "hook"]`; `None` when
/// nothing changes. Refuses to replace another program's `notify`.
fn codex_config(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let mut doc = codex_document(text)?;
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

/// The events Copilot CLI runs kith on: `agentStop` when the main agent
/// ends a turn, `sessionEnd` when the session closes. A subagent's events
/// are in its parent's `events.jsonl`, which `agentStop` captures at the
/// end of the same turn, so `subagentStop` would add only a run per
/// subagent; the file is append-only, so compaction (`preCompact`) loses
/// nothing either.
const COPILOT_EVENTS: [&str; 2] = ["agentStop", "sessionEnd"];

/// Copilot CLI's hook file of kith's own (or `Some("")` to delete it);
/// `None` when nothing changes. A `kith.json` kith did not write is
/// refused, never overwritten or removed.
///
/// GitHub's Copilot CLI hooks reference (docs.github.com/en/copilot/
/// reference/copilot-cli-reference/cli-hooks-reference and
/// .../reference/hooks-configuration) loads user hooks from every `*.json`
/// in `~/.copilot/hooks/` (`$COPILOT_HOME/hooks/`) beside a repository's
/// `.github/hooks/*.json`, each `{"version": 1, "hooks": {"<event>":
/// [{"type": "command", "bash": "...", "timeoutSec": 30}]}}`, the command
/// fed a JSON payload on stdin. `agentStop` (documented in github/docs PR
/// 43876) sends `timestamp`, `cwd`, `sessionId`, `transcriptPath` and
/// `stopReason`; an `agentStop` hook that prints `{"decision": "block"}`
/// continues the conversation, and `kith hook` prints nothing.
fn copilot_hooks(text: &str, kith: &Path, add: bool) -> Result<Option<String>> {
    let want = copilot_file(&hook_command(kith, "hook"));
    if text.trim().is_empty() {
        return Ok(add.then_some(want));
    }
    if !is_kith_copilot_file(text) {
        return Err(Error::Refused(if add {
            "kith did not write this file and will not overwrite it; \
             move it away and run `kith install copilot` again"
                .into()
        } else {
            "kith did not write this file, so it holds no hook of kith's to remove; \
             kith left it as it is"
                .into()
        }));
    }
    Ok(match add {
        true => (text != want).then_some(want),
        false => Some(String::new()),
    })
}

/// The text of kith's Copilot hook file running `command` on each event.
fn copilot_file(command: &str) -> String {
    let handler = json!([{"type": "command", "bash": command, "timeoutSec": 10}]);
    let hooks: serde_json::Map<String, Value> = COPILOT_EVENTS
        .iter()
        .map(|e| ((*e).to_owned(), handler.clone()))
        .collect();
    format!("{:#}\n", json!({"version": 1, "hooks": hooks}))
}

/// Whether `text` is a hook file kith wrote, for whichever kith binary and
/// events: a version and hooks whose every handler is a `kith hook`
/// command with nothing but its type and timeout.
fn is_kith_copilot_file(text: &str) -> bool {
    let Ok(Value::Object(top)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let Some(Value::Object(hooks)) = top.get("hooks") else {
        return false;
    };
    let is_kith_handler = |h: &Value| {
        h["bash"].as_str().is_some_and(is_kith_command)
            && h.as_object().is_some_and(|h| {
                h.keys()
                    .all(|k| ["type", "bash", "timeoutSec"].contains(&k.as_str()))
            })
    };
    top.keys().all(|k| k == "version" || k == "hooks")
        && !hooks.is_empty()
        && hooks.values().all(|handlers| {
            handlers
                .as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(is_kith_handler))
        })
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
