//! Where the tests find transcripts (test support, behind the `fixtures`
//! feature): the repository's own fixtures in `tests/fixtures/`, written for
//! kith in each agent's real format and folder layout, which every test reads;
//! and the third-party reference transcripts (real sessions from public
//! repositories) in `../shared/fixtures/` beside a development checkout, which
//! tests read as well where they are present. A user's clone has only the
//! first; the tests pass on it and say on stderr that the second was absent.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The agents whose transcripts are fixtures: each one's folder name in both
/// sets, which is also the format.
pub const RUNTIMES: [&str; 6] = ["claude-code", "codex", "pi", "gemini", "copilot", "cursor"];

/// Where `runtime` keeps its sessions, relative to the home folder: a
/// fixture's `layout` is relative to it.
pub fn sessions_folder(runtime: &str) -> &'static str {
    match runtime {
        "claude-code" => ".claude/projects",
        "codex" => ".codex/sessions",
        "pi" => ".pi/agent/sessions",
        "gemini" => ".gemini/tmp",
        "copilot" => ".copilot/session-state",
        "cursor" => ".cursor/projects",
        other => panic!("no sessions folder for {other}"),
    }
}

/// One transcript file of either set.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// `claude-code`, `codex` or `pi`.
    pub runtime: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Where the agent would have written it, relative to its sessions
    /// folder ([`sessions_folder`]).
    pub layout: PathBuf,
    /// `repo:<runtime>/<path>` or `third-party:<runtime>/<file>`, for
    /// messages.
    pub name: String,
    /// Whether it is one of the repository's own.
    pub own: bool,
}

/// The repository's root. Cargo sets `CARGO_MANIFEST_DIR` when it runs a
/// test (any workspace member's, each one level below the root): that is the
/// checkout under test even when its binaries came from a target directory
/// another checkout built. A binary run by hand uses the path it was built
/// from.
fn root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest
        .parent()
        .map_or(manifest.clone(), Path::to_path_buf)
}

/// `tests/fixtures/`.
pub fn repo_dir() -> PathBuf {
    root().join("tests").join("fixtures")
}

/// The repository fixture `rel` (`claude-code/-home-sam-src-tally/….jsonl`).
pub fn path(rel: &str) -> PathBuf {
    repo_dir().join(rel)
}

/// The repository fixture `rel`; panics naming it when there is none.
pub fn get(rel: &str) -> Fixture {
    own()
        .into_iter()
        .find(|f| f.path == path(rel))
        .unwrap_or_else(|| panic!("no fixture {}", path(rel).display()))
}

/// The bytes of the repository fixture `rel`; panics naming the file when it
/// cannot be read (it is part of the repository).
pub fn read(rel: &str) -> Vec<u8> {
    let path = path(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The third-party set beside the repository, if this checkout has it. The
/// first call in a process says on stderr which sets the tests read (written
/// past the test harness's capture, so that it shows in every run).
pub fn third_party_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = root().join("..").join("shared").join("fixtures");
        let dir = dir.canonicalize().unwrap_or(dir);
        let present = dir.join("SOURCES.tsv").is_file();
        let said = if present {
            format!(
                "kith fixtures: the repository's ({}) and the third-party set ({})",
                repo_dir().display(),
                dir.display()
            )
        } else {
            format!(
                "kith fixtures: the repository's only ({}); no third-party set at {}, \
                 so the tests that also read it checked the repository's alone",
                repo_dir().display(),
                dir.display()
            )
        };
        // On its own line: test output around it may be mid-line.
        let _ = writeln!(std::io::stderr(), "\n{said}");
        present.then_some(dir)
    })
    .clone()
}

/// The bytes of the third-party fixture `rel` (`claude-code/<file>`), or
/// `None` when the set is absent; panics naming the file when the set is
/// there but the file is not.
pub fn third_party(rel: &str) -> Option<Vec<u8>> {
    let path = third_party_dir()?.join(rel);
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// The repository's transcripts, by runtime, each runtime's sorted by path.
pub fn own() -> Vec<Fixture> {
    let mut out = Vec::new();
    for runtime in RUNTIMES {
        let base = repo_dir().join(runtime);
        let mut files = Vec::new();
        walk(&base, &mut files);
        files.sort();
        for path in files {
            let layout = path.strip_prefix(&base).unwrap_or(&path).to_path_buf();
            out.push(Fixture {
                runtime,
                name: format!("repo:{runtime}/{}", layout.display()),
                path,
                layout,
                own: true,
            });
        }
    }
    assert!(!out.is_empty(), "no fixtures in {}", repo_dir().display());
    out
}

/// The third-party transcripts (none when the set is absent), laid out as
/// their names say: `<owner>__<repo>__<path parts>`, a Claude Code session's
/// subagents under `<session>/subagents/`.
pub fn third_party_all() -> Vec<Fixture> {
    let Some(dir) = third_party_dir() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for runtime in RUNTIMES {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(runtime))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".jsonl"))
            .collect();
        names.sort();
        for file in names {
            let parts: Vec<&str> = file.split("__").skip(2).collect();
            let last = parts.last().copied().unwrap_or(&file);
            let layout = match runtime {
                "claude-code" => Path::new("-home-me-proj").join(parts.join("/")),
                "codex" => Path::new("2026/05/11").join(last),
                "gemini" => Path::new("proj/chats").join(last),
                "copilot" => Path::new(last.trim_end_matches(".jsonl")).join("events.jsonl"),
                "cursor" => Path::new("home-me-proj/agent-transcripts").join(last),
                _ => Path::new("--home-me-proj--").join(last),
            };
            out.push(Fixture {
                runtime,
                name: format!("third-party:{runtime}/{file}"),
                path: dir.join(runtime).join(&file),
                layout,
                own: false,
            });
        }
    }
    out
}

/// Both sets: the repository's, then the third-party transcripts if present.
pub fn all() -> Vec<Fixture> {
    let mut out = own();
    out.extend(third_party_all());
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
}
