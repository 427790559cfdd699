//! OpenCode (sst): one journal per session, `journals/opencode/<session id>.jsonl`,
//! fed from `opencode.db` (v1.2 and later: SQLite in WAL mode, rows updated
//! in place) or from the JSON storage tree before it (`storage/session/
//! <project>/<ses>.json`, `storage/message/<ses>/<msg>.json`,
//! `storage/part/<msg>/<prt>.json`, each file rewritten whole).
//!
//! Each row becomes a record keyed `session:<id>`, `message:<id>` or
//! `part:<id>` whose line is the row's ids and its `data` exactly as
//! OpenCode stored it (a session row has no `data`: its columns, bar the
//! diffs' file contents; the format is in kith-shared's
//! `transcript::opencode`). The session line comes first, so the journal's
//! first line names the parent session (OpenCode's subagents are child
//! sessions) for `discover::peek`.
//!
//! A row that cannot be read right now (its JSON is invalid, a file torn
//! mid-write) is never taken for a removed one: the journal keeps what it
//! last said, and the refresh answers an error naming the row, so the
//! row is captured once it reads.
//!
//! An answer OpenCode is still writing waits (`streaming`): while it
//! streams, OpenCode rewrites the answer's parts many times a second, and
//! journalling each version would append every prefix of the answer. Its
//! rows are journalled once the message is marked completed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kith_proto::AgentRuntime;
use notify::RecursiveMode;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;
use serde_json::value::RawValue;

use super::{journal_path, sync, Journal, Record, Seen};
use crate::config::Paths;
use crate::error::{Error, Result};
use crate::untrusted::{plain_id, read_regular, MAX_LINE};

/// How long a read waits for OpenCode to finish a write that locks the
/// database (a WAL checkpoint; plain reads never wait in WAL mode).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an assistant message not marked completed counts as still
/// being written; one older was left unfinished (OpenCode stopped
/// mid-answer) and is journalled as it is.
const STREAMING_GRACE_MS: i64 = 10 * 60 * 1000;

/// A session with a row written in the last day is read whole again at
/// least this often, whatever its fingerprint says: OpenCode can rewrite a
/// row without changing its `time_updated` (twice in one millisecond, read
/// in between), which changes no count, latest or sum. Such a rewrite is
/// captured within this bound, at the cost of re-reading the day's active
/// sessions (a journal takes only what changed).
const REREAD_ACTIVE_MS: i64 = 5 * 60 * 1000;
const ACTIVE_MS: i64 = 24 * 60 * 60 * 1000;

/// Whether a change to `path` is one of OpenCode's sources.
pub(super) fn is_source(paths: &Paths, path: &Path) -> bool {
    let db = database(paths);
    path == db
        || path == db.with_file_name("opencode.db-wal")
        || (path.starts_with(storage(paths)) && path.extension().is_some_and(|e| e == "json"))
}

/// OpenCode's data folder alone (the database and its WAL; not its logs
/// and snapshots), and the storage tree whole.
pub(super) fn folders(paths: &Paths) -> Vec<(PathBuf, RecursiveMode)> {
    vec![
        (paths.opencode_dir.clone(), RecursiveMode::NonRecursive),
        (storage(paths), RecursiveMode::Recursive),
    ]
}

/// Whether `dir` is a message's folder of parts in the storage tree (or
/// inside one).
pub(super) fn holds(paths: &Paths, dir: &Path) -> bool {
    dir.starts_with(storage(paths).join("part"))
}

/// The database, if there is one; else every session file of the storage
/// tree (OpenCode v1.2 copies the tree into the database and leaves it, so
/// once there is a database the tree is history it already holds).
pub(super) fn sources(paths: &Paths) -> Vec<PathBuf> {
    let db = database(paths);
    if db.is_file() {
        return vec![db];
    }
    let mut out = Vec::new();
    for project in dir_entries(&storage(paths).join("session")) {
        out.extend(
            dir_entries(&project)
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "json")),
        );
    }
    out
}

/// Refreshes the journals `source` feeds: every changed session's for the
/// database, the one session's a storage file belongs to (unless there is
/// a database, see [`sources`]).
pub(super) fn refresh(paths: &Paths, source: &Path) -> Result<Vec<PathBuf>> {
    if source.starts_with(storage(paths)) {
        if database(paths).is_file() {
            return Ok(Vec::new());
        }
        return match legacy_session_of(&storage(paths), source) {
            Some(session) => refresh_legacy(paths, &session),
            None => Ok(Vec::new()),
        };
    }
    refresh_db(paths, now_ms())
}

fn database(paths: &Paths) -> PathBuf {
    paths.opencode_dir.join("opencode.db")
}

fn storage(paths: &Paths) -> PathBuf {
    paths.opencode_dir.join("storage")
}

/// One journal line. `data` is embedded as stored, never re-serialised.
#[derive(Serialize)]
struct Line<'a> {
    kind: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_updated: Option<i64>,
    data: &'a RawValue,
}

impl Line<'_> {
    fn record(&self) -> Record {
        Record {
            key: format!("{}:{}", self.kind, self.id),
            // Serialising ids, numbers and raw JSON cannot fail.
            line: serde_json::to_string(self).unwrap_or_default(),
        }
    }
}

/// What a journal line says, for `sync`.
fn seen(line: &str) -> Seen {
    #[derive(serde::Deserialize)]
    struct Head {
        kind: String,
        id: Option<String>,
        key: Option<String>,
    }
    match serde_json::from_str::<Head>(line) {
        Ok(Head {
            kind,
            key: Some(key),
            ..
        }) if kind == "removed" => Seen::Removed(key),
        Ok(Head {
            kind, id: Some(id), ..
        }) => Seen::Put(format!("{kind}:{id}")),
        _ => Seen::Other,
    }
}

fn removal(key: &str) -> String {
    serde_json::json!({"kind": "removed", "key": key}).to_string()
}

/// `text` as a journal's raw JSON: one line (whitespace outside strings
/// dropped only when it spans lines, since a journal line holds no
/// newline), or why it is not JSON.
fn raw_json(text: &str) -> std::result::Result<Box<RawValue>, String> {
    let text = if text.contains('\n') {
        super::compact(text)
    } else {
        text.to_owned()
    };
    RawValue::from_string(text).map_err(|e| e.to_string())
}

/// Syncs one session's journal with `records`; answers the journal. When
/// some rows were left out (`partial`: not readable now, or an answer
/// still streaming), no key is removed: a row left out is not a removed
/// row, and a torn file may not even say its id.
fn sync_session(
    paths: &Paths,
    session: &str,
    mut records: Vec<Record>,
    partial: bool,
) -> Result<PathBuf> {
    let path = session_journal(paths, session);
    let mut journal = Journal::open(&path)?;
    if partial {
        let mut last: HashMap<String, &String> = HashMap::new();
        for line in journal.lines() {
            match seen(line) {
                Seen::Put(key) => {
                    last.insert(key, line);
                }
                Seen::Removed(key) => {
                    last.remove(&key);
                }
                Seen::Other => {}
            }
        }
        let present: HashSet<String> = records.iter().map(|r| r.key.clone()).collect();
        for (key, line) in last {
            if !present.contains(&key) {
                records.push(Record {
                    key,
                    line: line.clone(),
                });
            }
        }
    }
    sync(&mut journal, &records, seen, removal)?;
    Ok(path)
}

fn session_journal(paths: &Paths, session: &str) -> PathBuf {
    journal_path(
        paths,
        AgentRuntime::OpenCode,
        Path::new(&format!("{session}.jsonl")),
    )
}

/// The error a refresh answers after syncing the rest when rows could not
/// be read: how many, and the first few by name.
fn skipped(path: &Path, what: &'static str, reasons: Vec<String>) -> Result<Vec<PathBuf>> {
    const NAMED: usize = 3;
    let more = match reasons.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    Err(Error::Invalid {
        what,
        path: path.to_owned(),
        reason: format!(
            "{} row(s) not read yet, their last captured version kept: {}{more}",
            reasons.len(),
            reasons[..reasons.len().min(NAMED)].join("; ")
        ),
    })
}

// ---- opencode.db ----

/// A database error as kith says it: one OpenCode holds locked past the
/// busy timeout is read again on its next change; anything else is a
/// database kith cannot read.
fn db_error(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    move |e| match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => Error::Refused(format!(
            "OpenCode's database {} stayed locked for {} s; it is read again on its next change",
            path.display(),
            BUSY_TIMEOUT.as_secs()
        )),
        _ => Error::Invalid {
            what: "OpenCode database",
            path: path.to_owned(),
            reason: e.to_string(),
        },
    }
}

/// A message or part row.
struct Row {
    id: String,
    session_id: String,
    message_id: Option<String>,
    time_updated: i64,
    /// As stored: TEXT, or a BLOB if something wrote one.
    data: Vec<u8>,
}

/// A session row: its columns as one JSON object (it has no JSON column
/// of its own), but for `SESSION_COLUMNS_LEFT_OUT`.
struct SessionRow {
    id: String,
    parent_id: Option<String>,
    data: Box<RawValue>,
}

/// Every session of the database that changed since it was last
/// journalled, from one read transaction: a consistent snapshot however
/// OpenCode writes meanwhile. Answers the journals of those sessions.
/// A sync that fails (a full disk) fails the refresh; the fingerprints of
/// the sessions synced before it are lost with it, which costs a re-read.
/// `now` (ms since the epoch) tells a streaming answer and an active session.
fn refresh_db(paths: &Paths, now: i64) -> Result<Vec<PathBuf>> {
    let db = database(paths);
    if !db.is_file() {
        return Ok(Vec::new());
    }
    let err = db_error(&db);
    let mut conn = Connection::open_with_flags(
        &db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(&err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(&err)?;
    let tx = conn.transaction().map_err(&err)?;
    for table in ["session", "message", "part"] {
        let found: bool = tx
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .map_err(&err)?;
        if !found {
            return Err(Error::Invalid {
                what: "OpenCode database",
                path: db.clone(),
                reason: format!(
                    "it has no `{table}` table (an OpenCode version kith does not read)"
                ),
            });
        }
    }
    let mut reasons = Vec::new();
    let mut known = Fingerprints::load(paths);
    let prints = fingerprints(&tx).map_err(&err)?;
    let sessions = session_rows(&tx).map_err(&err)?;
    // A session deleted in OpenCode keeps its journal; its fingerprint goes.
    let live: HashSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    known.retain(|id| live.contains(id));
    // One session's rows in memory at a time, its journal synced while the
    // snapshot is held (in WAL mode that holds back only checkpoints).
    let mut synced = Vec::new();
    for session in sessions {
        if !plain_id(&session.id) {
            reasons.push(format!("session {:?}: not a usable id", session.id));
            continue;
        }
        let print = print_of(&session, &prints, now);
        let journal = session_journal(paths, &session.id);
        if known.get(&session.id) == Some(&print) && journal.is_file() {
            continue;
        }
        let n_reasons = reasons.len();
        let messages = rows(&tx, MESSAGES, &session.id, &mut reasons).map_err(&err)?;
        let parts = rows(&tx, PARTS, &session.id, &mut reasons).map_err(&err)?;
        let (records, waiting) = session_records(&session, &messages, &parts, now, &mut reasons);
        let partial = reasons.len() > n_reasons || waiting;
        synced.push(sync_session(paths, &session.id, records, partial)?);
        // A session with a row not read, or an answer still streaming, is
        // read again next time.
        if !partial {
            known.insert(session.id, print);
        }
    }
    drop(tx);
    known.save(paths)?;
    if reasons.is_empty() {
        Ok(synced)
    } else {
        skipped(&db, "OpenCode database", reasons)
    }
}

const MESSAGES: &str = "SELECT id, session_id, NULL, time_updated, data FROM message \
     WHERE session_id = ?1 ORDER BY time_created, id";
const PARTS: &str = "SELECT id, session_id, message_id, time_updated, data FROM part \
     WHERE session_id = ?1 ORDER BY message_id, id";

/// A session's records: the session, then each message followed by its
/// parts, in conversation order; and whether an answer still streaming at
/// `now_ms` was left out with its parts.
fn session_records(
    session: &SessionRow,
    messages: &[Row],
    parts: &[Row],
    now_ms: i64,
    reasons: &mut Vec<String>,
) -> (Vec<Record>, bool) {
    let mut by_message: HashMap<&str, Vec<&Row>> = HashMap::new();
    for p in parts {
        if let Some(message) = &p.message_id {
            by_message.entry(message).or_default().push(p);
        }
    }
    let mut records = vec![Line {
        kind: "session",
        id: &session.id,
        parent_id: session.parent_id.as_deref(),
        message_id: None,
        session_id: None,
        time_updated: None,
        data: &session.data,
    }
    .record()];
    let mut waiting = false;
    for m in messages {
        if streaming(&m.data, now_ms) {
            waiting = true;
            continue;
        }
        row_record(m, "message", &mut records, reasons);
        for p in by_message.get(m.id.as_str()).into_iter().flatten() {
            row_record(p, "part", &mut records, reasons);
        }
    }
    (records, waiting)
}

/// Whether a message's `data` is an answer OpenCode is still writing: an
/// assistant message without `time.completed`, created less than
/// `STREAMING_GRACE_MS` before `now_ms`. Completing it changes its row, so
/// its session is read again then.
fn streaming(data: &[u8], now_ms: i64) -> bool {
    #[derive(serde::Deserialize)]
    struct Message {
        role: Option<String>,
        time: Option<Times>,
    }
    #[derive(serde::Deserialize)]
    struct Times {
        created: Option<i64>,
        completed: Option<i64>,
    }
    let Ok(Message {
        role,
        time: Some(time),
    }) = serde_json::from_slice(data)
    else {
        return false;
    };
    role.as_deref() == Some("assistant")
        && time.completed.is_none()
        && time
            .created
            .is_some_and(|at| now_ms.saturating_sub(at) < STREAMING_GRACE_MS)
}

fn now_ms() -> i64 {
    kith_shared::timestamp::epoch_ms(time::OffsetDateTime::now_utc())
}

/// Per session, the count, latest and sum of `time_updated` of its
/// messages and of its parts, from one scan of each table: OpenCode stamps
/// each row it writes, so a row added, changed or deleted changes them (a
/// row rewritten within the millisecond it was read in is caught by
/// `REREAD_ACTIVE_MS`). With each, the latest `time_updated` as a number.
fn fingerprints(tx: &rusqlite::Transaction) -> rusqlite::Result<HashMap<String, (String, i64)>> {
    let mut out: HashMap<String, (String, i64)> = HashMap::new();
    for table in ["message", "part"] {
        let sql = format!(
            "SELECT session_id, count(*), max(time_updated), total(time_updated) \
             FROM {table} GROUP BY session_id"
        );
        let mut stmt = tx.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            // Whatever a column holds (a text `time_updated` included):
            // the print only has to change when the rows do.
            let Ok(session) = r.get::<_, String>(0) else {
                continue;
            };
            let (n, last, sum): (i64, _, f64) = (r.get(1)?, r.get_ref(2)?, r.get(3)?);
            let (print, latest) = out.entry(session).or_default();
            print.push_str(&format!("{table}:{n}:{last:?}:{sum};"));
            *latest = (*latest).max(last.as_i64().unwrap_or_default());
        }
    }
    Ok(out)
}

/// A session's fingerprint at `now_ms`: its own row (small, read whole) and
/// its rows'; for a session active in the last day, also the
/// `REREAD_ACTIVE_MS` period `now_ms` falls in, so it is read again each.
fn print_of(session: &SessionRow, prints: &HashMap<String, (String, i64)>, now_ms: i64) -> String {
    let (rows, latest) = prints
        .get(&session.id)
        .map_or(("", 0), |(p, latest)| (p.as_str(), *latest));
    let period = if now_ms.saturating_sub(latest) < ACTIVE_MS {
        (now_ms / REREAD_ACTIVE_MS).to_string()
    } else {
        String::new()
    };
    kith_shared::hash::sha256_hex(format!("{}|{rows}|{period}", session.data.get()).as_bytes())
}

/// The fingerprint of each session as last journalled whole, so that a
/// refresh reads only the sessions that changed:
/// `<state>/mirror/opencode.json`. Losing it costs one full read.
struct Fingerprints {
    by_session: HashMap<String, String>,
    /// Whether it differs from the file (written only then).
    changed: bool,
}

impl Fingerprints {
    fn path(paths: &Paths) -> PathBuf {
        paths.state_dir.join("mirror").join("opencode.json")
    }

    fn load(paths: &Paths) -> Fingerprints {
        let by_session = std::fs::read(Self::path(paths))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Fingerprints {
            by_session,
            changed: false,
        }
    }

    fn get(&self, session: &str) -> Option<&String> {
        self.by_session.get(session)
    }

    fn insert(&mut self, session: String, print: String) {
        self.changed |= self.by_session.insert(session, print.clone()) != Some(print);
    }

    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.by_session.len();
        self.by_session.retain(|id, _| keep(id));
        self.changed |= self.by_session.len() != before;
    }

    fn save(&self, paths: &Paths) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        let json = serde_json::to_vec(&self.by_session).unwrap_or_default();
        crate::config::write_file(
            &Self::path(paths),
            &json,
            0o600,
            crate::config::Durability::NotTorn,
        )
    }
}

/// One message or part row as a record, or why it cannot be read now.
fn row_record(row: &Row, kind: &'static str, records: &mut Vec<Record>, reasons: &mut Vec<String>) {
    let text = std::str::from_utf8(&row.data).map_err(|e| e.to_string());
    match text.and_then(raw_json) {
        Ok(data) => records.push(
            Line {
                kind,
                id: &row.id,
                parent_id: None,
                message_id: row.message_id.as_deref(),
                session_id: Some(&row.session_id),
                time_updated: Some(row.time_updated),
                data: &data,
            }
            .record(),
        ),
        Err(e) => reasons.push(format!("{kind} {}: data is not JSON ({e})", row.id)),
    }
}

/// Session columns left out of the journal: the file contents of the
/// session's diffs (`summary_diffs`, each file before and after) and of
/// its last revert, which OpenCode rewrites at every step; the turns hold
/// the same edits as tool calls. Journalled, every step would append them
/// whole again.
const SESSION_COLUMNS_LEFT_OUT: [&str; 2] = ["summary_diffs", "revert"];

fn session_rows(tx: &rusqlite::Transaction) -> rusqlite::Result<Vec<SessionRow>> {
    let mut stmt = tx.prepare("SELECT * FROM session ORDER BY time_created, id")?;
    let names: Vec<String> = stmt.column_names().into_iter().map(str::to_owned).collect();
    let mut out = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let mut object = serde_json::Map::new();
        for (i, name) in names.iter().enumerate() {
            if SESSION_COLUMNS_LEFT_OUT.contains(&name.as_str()) {
                continue;
            }
            let value = match row.get_ref(i)? {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(n) => n.into(),
                ValueRef::Real(x) => x.into(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                ValueRef::Blob(_) => continue,
            };
            object.insert(name.clone(), value);
        }
        let text = |key: &str| object.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        let (Some(id), parent_id) = (text("id"), text("parent_id")) else {
            continue;
        };
        // A map of plain values always serialises.
        let data = serde_json::value::to_raw_value(&object)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        out.push(SessionRow {
            id,
            parent_id,
            data,
        });
    }
    Ok(out)
}

/// The rows `sql` selects for one session. A row whose columns are not of
/// the types OpenCode writes (a NULL `data`, an id that is not text) is
/// named in `reasons` and left out, the rest read.
fn rows(
    tx: &rusqlite::Transaction,
    sql: &str,
    session: &str,
    reasons: &mut Vec<String>,
) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let mut out = Vec::new();
    let mut found = stmt.query([session])?;
    while let Some(r) = found.next()? {
        let text = |i| match r.get_ref(i) {
            Ok(ValueRef::Text(t)) => std::str::from_utf8(t).ok().map(str::to_owned),
            _ => None,
        };
        let data = match r.get_ref(4)? {
            ValueRef::Text(b) | ValueRef::Blob(b) => Some(b.to_vec()),
            _ => None,
        };
        match (text(0), text(1), data) {
            (Some(id), Some(session_id), Some(data)) => out.push(Row {
                id,
                session_id,
                message_id: text(2),
                time_updated: r.get_ref(3)?.as_i64().unwrap_or_default(),
                data,
            }),
            (id, ..) => reasons.push(format!(
                "a row of session {session} ({}): its id, session id or data is not text",
                id.as_deref().unwrap_or("no id")
            )),
        }
    }
    Ok(out)
}

// ---- the storage tree (before v1.2) ----

/// The session a storage file belongs to: named by the file
/// (`session/<project>/<ses>.json`) or its folder (`message/<ses>/`); for a
/// part (`part/<msg>/`), by its `sessionID`, else by the folder holding its
/// message's file.
fn legacy_session_of(storage: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(storage).ok()?;
    let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    match parts.as_slice() {
        ["session", _, _] => match read_storage(file)? {
            Ok((_, id)) => Some(id),
            Err(_) => Some(stem(file)),
        },
        ["message", session, _] => Some((*session).to_owned()),
        ["part", message, _] => json_of(file)
            .and_then(|v| v.get("sessionID")?.as_str().map(str::to_owned))
            .or_else(|| message_folder(storage, message)),
        _ => None,
    }
    .filter(|s| plain_id(s))
}

/// The session folder under `message/` holding the message `id`: as
/// `<id>.json` (how OpenCode names it), else as the `id` inside a file.
fn message_folder(storage: &Path, id: &str) -> Option<String> {
    let folders = dir_entries(&storage.join("message"));
    let names_it = |f: &PathBuf| has_id(f, id);
    let dir = folders
        .iter()
        .find(|d| d.join(format!("{id}.json")).is_file())
        .or_else(|| folders.iter().find(|d| json_files(d).iter().any(names_it)))?;
    Some(dir.file_name()?.to_str()?.to_owned())
}

/// The most a storage file may hold: far past a message or a part, and
/// what a line of the journal may hold.
const MAX_STORAGE_FILE: u64 = MAX_LINE as u64;

fn json_of(path: &Path) -> Option<serde_json::Value> {
    let bytes = read_regular(path, MAX_STORAGE_FILE).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// Whether the storage file at `path` says it is `id`.
fn has_id(path: &Path, id: &str) -> bool {
    json_of(path).is_some_and(|v| v.get("id").and_then(|x| x.as_str()) == Some(id))
}

/// The `.json` files of a folder in name order: OpenCode names each by
/// its id, and its ids sort in the order it made them.
fn json_files(dir: &Path) -> Vec<PathBuf> {
    dir_entries(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect()
}

/// The file of session `id`: `session/<project>/<id>.json` (how OpenCode
/// names it), else the file whose JSON `id` it is.
fn session_file(storage: &Path, id: &str) -> Option<PathBuf> {
    let projects = dir_entries(&storage.join("session"));
    let named = |f: &PathBuf| has_id(f, id);
    projects
        .iter()
        .map(|p| p.join(format!("{id}.json")))
        .find(|f| f.is_file())
        .or_else(|| projects.iter().flat_map(|p| json_files(p)).find(named))
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A storage file read: its JSON and its `id` (else its name), `None`
/// when it is gone, or why it cannot be read now.
fn read_storage(path: &Path) -> Option<std::result::Result<(Box<RawValue>, String), String>> {
    // A FIFO or device named like a storage file is not one (and is never
    // waited on with the state lock held).
    let text = match read_regular(path, MAX_STORAGE_FILE) {
        Ok(Some(bytes)) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return Some(Err(format!("{}: not UTF-8", path.display()))),
        },
        Ok(None) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
    };
    Some(
        raw_json(&text)
            .map(|data| {
                let id = serde_json::from_str::<serde_json::Value>(data.get())
                    .ok()
                    .and_then(|v| v.get("id")?.as_str().map(str::to_owned))
                    .unwrap_or_else(|| stem(path));
                (data, id)
            })
            .map_err(|e| format!("{}: not JSON ({e})", path.display())),
    )
}

/// One session of the storage tree into its journal. A session whose file
/// is gone is left as its journal has it.
fn refresh_legacy(paths: &Paths, session: &str) -> Result<Vec<PathBuf>> {
    let storage = storage(paths);
    let Some(session_file) = session_file(&storage, session) else {
        return Ok(Vec::new());
    };
    let mut records = Vec::new();
    let mut reasons = Vec::new();
    match read_storage(&session_file) {
        Some(Ok((data, _))) => {
            let parent = serde_json::from_str::<serde_json::Value>(data.get())
                .ok()
                .and_then(|v| v.get("parentID")?.as_str().map(str::to_owned));
            records.push(
                Line {
                    kind: "session",
                    id: session,
                    parent_id: parent.as_deref(),
                    message_id: None,
                    session_id: None,
                    time_updated: None,
                    data: &data,
                }
                .record(),
            );
        }
        // Torn mid-rewrite: nothing of the session this time. Its journal
        // must begin with its session line (its folder, for `exclude`, and
        // its parent are read from that line alone).
        Some(Err(reason)) => return skipped(&session_file, "OpenCode session", vec![reason]),
        None => return Ok(Vec::new()),
    }
    let mut waiting = false;
    let now = now_ms();
    for message in json_files(&storage.join("message").join(session)) {
        let id = match read_storage(&message) {
            Some(Ok((data, _))) if streaming(data.get().as_bytes(), now) => {
                waiting = true;
                continue;
            }
            Some(Ok((data, id))) => {
                records.push(
                    Line {
                        kind: "message",
                        id: &id,
                        parent_id: None,
                        message_id: None,
                        session_id: Some(session),
                        time_updated: None,
                        data: &data,
                    }
                    .record(),
                );
                id
            }
            Some(Err(reason)) => {
                reasons.push(reason);
                continue;
            }
            None => continue,
        };
        // The id names the folder of the message's parts; one that is not a
        // plain id ("../x", "/etc") would read files outside the tree.
        if !plain_id(&id) {
            reasons.push(format!(
                "{}: message id {id:?} is not a plain id",
                message.display()
            ));
            continue;
        }
        for part in json_files(&storage.join("part").join(&id)) {
            match read_storage(&part) {
                Some(Ok((data, part_id))) => records.push(
                    Line {
                        kind: "part",
                        id: &part_id,
                        parent_id: None,
                        message_id: Some(&id),
                        session_id: Some(session),
                        time_updated: None,
                        data: &data,
                    }
                    .record(),
                ),
                Some(Err(reason)) => reasons.push(reason),
                None => {}
            }
        }
    }
    let journal = sync_session(paths, session, records, !reasons.is_empty() || waiting)?;
    if reasons.is_empty() {
        Ok(vec![journal])
    } else {
        skipped(&session_file, "OpenCode session", reasons)
    }
}

fn dir_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[cfg(test)]
mod tests;
