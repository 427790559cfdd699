use kith_shared::transcript::{self, Format};
use rusqlite::{params, Connection};

use super::*;
use crate::mirror::journal_path;

/// The tables of OpenCode v1.2's `opencode.db` that kith reads.
const SCHEMA: &str = "
    PRAGMA journal_mode = WAL;
    CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT,
        slug TEXT NOT NULL, directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL,
        time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
    CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
        time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
        time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
";

struct Machine {
    _dir: tempfile::TempDir,
    paths: Paths,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().expect("a temp dir");
        let paths = Paths::under(dir.path());
        std::fs::create_dir_all(&paths.opencode_dir).expect("OpenCode's folder");
        Machine { _dir: dir, paths }
    }

    /// OpenCode's database with one session, as OpenCode opens it.
    fn db(&self) -> Connection {
        let db = Connection::open(database(&self.paths)).expect("the database");
        db.execute_batch(SCHEMA).expect("the schema");
        db.execute(
            "INSERT INTO session VALUES ('ses_a', 'p1', 'ses_parent', 's', '/home/sam/src/tally', 't', '1.2.4', 1, 2)",
            [],
        )
        .expect("a session");
        db
    }

    fn journal(&self, session: &str) -> PathBuf {
        journal_path(
            &self.paths,
            AgentRuntime::OpenCode,
            Path::new(&format!("{session}.jsonl")),
        )
    }

    fn lines(&self, session: &str) -> Vec<String> {
        std::fs::read_to_string(self.journal(session))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The journal read as central reads it: (role, text) of each turn.
    fn turns(&self, session: &str) -> Vec<(String, String)> {
        let bytes = std::fs::read(self.journal(session)).unwrap_or_default();
        transcript::parse(Format::OpenCode, &bytes)
            .turns
            .into_iter()
            .map(|t| (t.role.as_str().to_owned(), t.text))
            .collect()
    }

    fn refresh_db(&self) -> Result<Vec<PathBuf>> {
        refresh(&self.paths, &database(&self.paths))
    }

    /// A refresh as if the clock read `now` (ms since the epoch).
    fn refresh_db_at(&self, now: i64) -> Result<Vec<PathBuf>> {
        refresh_db(&self.paths, now)
    }
}

fn put_message(db: &Connection, id: &str, role: &str, at: i64) {
    let data = format!(r#"{{"role":"{role}","time":{{"created":{at}}},"modelID":"gpt-5"}}"#);
    db.execute(
        "INSERT INTO message VALUES (?1, 'ses_a', ?2, ?2, ?3)",
        params![id, at, data],
    )
    .expect("a message");
}

fn put_part(db: &Connection, id: &str, message: &str, data: &str, at: i64) {
    db.execute(
        "INSERT OR REPLACE INTO part VALUES (?1, ?2, 'ses_a', ?3, ?3, ?4)",
        params![id, message, at, data],
    )
    .expect("a part");
}

/// A second session, `ses_b`, started after `ses_a`, with one message.
fn second_session(db: &Connection) {
    db.execute_batch(
        "INSERT INTO session VALUES ('ses_b', 'p1', NULL, 's', '/tmp', 't', '1.2.4', 3, 3);
         INSERT INTO message VALUES ('msg_b', 'ses_b', 3, 3, '{\"role\":\"user\"}');",
    )
    .expect("a second session");
}

fn text(s: &str) -> String {
    format!(r#"{{"type":"text","text":"{s}"}}"#)
}

fn pair(role: &str, text: &str) -> (String, String) {
    (role.to_owned(), text.to_owned())
}

#[test]
fn each_row_change_is_appended_once_and_a_deleted_row_is_removed() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    put_message(&db, "msg_1", "user", 10);
    // The part's JSON as OpenCode stores it, spacing and key order included.
    let asked = r#"{"type": "text",  "text":"why 1,200?"}"#;
    put_part(&db, "prt_1", "msg_1", asked, 11);
    put_message(&db, "msg_2", "assistant", 20);
    put_part(&db, "prt_2", "msg_2", &text("draft"), 21);

    assert_eq!(m.refresh_db()?, [m.journal("ses_a")]);
    let lines = m.lines("ses_a");
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let first: serde_json::Value = serde_json::from_str(&lines[0]).expect("JSON");
    assert_eq!(first["kind"], "session");
    assert_eq!(first["parent_id"], "ses_parent");
    assert_eq!(first["data"]["directory"], "/home/sam/src/tally");
    assert!(
        lines[2].contains(&format!(r#","data":{asked}}}"#)),
        "the data column byte for byte: {}",
        lines[2]
    );

    // Nothing changed: nothing appended.
    m.refresh_db()?;
    assert_eq!(m.lines("ses_a").len(), 5);

    // The answer streams on, then the person reverts it and asks again.
    put_part(&db, "prt_2", "msg_2", &text("the final answer"), 22);
    m.refresh_db()?;
    assert_eq!(m.lines("ses_a").len(), 6);
    assert_eq!(
        m.turns("ses_a"),
        [
            pair("user", "why 1,200?"),
            pair("assistant", "the final answer")
        ]
    );
    db.execute_batch(
        "DELETE FROM part WHERE message_id = 'msg_2'; DELETE FROM message WHERE id = 'msg_2';",
    )
    .expect("a revert");
    put_message(&db, "msg_3", "user", 30);
    put_part(&db, "prt_3", "msg_3", &text("strip the comma"), 31);
    m.refresh_db()?;
    let lines = m.lines("ses_a");
    let removed: Vec<&String> = lines.iter().filter(|l| l.contains("\"removed\"")).collect();
    assert_eq!(removed.len(), 2, "{lines:#?}");
    assert_eq!(
        m.turns("ses_a"),
        [pair("user", "why 1,200?"), pair("user", "strip the comma")]
    );

    // A published v1.2 database (`../shared/fixtures/`), when present.
    if let Some(dir) = kith_shared::fixtures::third_party_dir() {
        let m = Machine::new();
        let published = dir.join("opencode/git-ai-project__git-ai__opencode.db");
        std::fs::copy(published, database(&m.paths)).expect("the published database");
        m.refresh_db()?;
        let turns = m.turns("test-session-123");
        assert_eq!(turns.first().map(|t| t.0.as_str()), Some("user"));
        assert_eq!(
            turns.last(),
            Some(&pair("assistant", "Done from sqlite source."))
        );
        assert!(m.lines("test-session-123")[0].contains(r#""parent_id":"parent-session-456""#));
    }
    Ok(())
}

#[test]
fn an_answer_still_streaming_is_journalled_once_when_it_completes() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    let now = now_ms();
    put_message(&db, "msg_1", "user", now - 2000);
    put_part(&db, "prt_1", "msg_1", &text("why 1,200?"), now - 2000);
    // The answer as OpenCode writes it: created, not completed, its part
    // rewritten as it streams, a refresh after each write.
    put_message(&db, "msg_2", "assistant", now - 1000);
    for (i, so_far) in ["The", "The comma", "The comma is the locale's"]
        .into_iter()
        .enumerate()
    {
        put_part(&db, "prt_2", "msg_2", &text(so_far), now - 900 + i as i64);
        m.refresh_db()?;
    }
    let lines = m.lines("ses_a");
    assert_eq!(lines.len(), 3, "the session and the question: {lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("msg_2")), "{lines:#?}");
    assert_eq!(m.turns("ses_a"), [pair("user", "why 1,200?")]);

    // Completed: its row changes, and the answer is appended once, whole.
    let done = format!(
        r#"{{"role":"assistant","time":{{"created":{},"completed":{now}}}}}"#,
        now - 1000
    );
    db.execute(
        "UPDATE message SET data = ?1, time_updated = ?2 WHERE id = 'msg_2'",
        params![done, now],
    )
    .expect("completed");
    m.refresh_db()?;
    m.refresh_db()?;
    let lines = m.lines("ses_a");
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("The comma")).count(),
        1,
        "{lines:#?}"
    );
    assert_eq!(
        m.turns("ses_a"),
        [
            pair("user", "why 1,200?"),
            pair("assistant", "The comma is the locale's")
        ]
    );

    // An answer left unfinished past the grace (OpenCode stopped
    // mid-answer) is taken as it is.
    let stale = now - STREAMING_GRACE_MS - 1000;
    put_message(&db, "msg_3", "assistant", stale);
    put_part(&db, "prt_3", "msg_3", &text("half an ans"), now);
    m.refresh_db()?;
    assert!(
        m.turns("ses_a").contains(&pair("assistant", "half an ans")),
        "{:#?}",
        m.lines("ses_a")
    );
    Ok(())
}

#[test]
fn only_sessions_whose_rows_changed_are_read_again() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    second_session(&db);
    put_message(&db, "msg_1", "user", 10);
    assert_eq!(m.refresh_db()?, [m.journal("ses_a"), m.journal("ses_b")]);
    assert_eq!(m.refresh_db()?, Vec::<PathBuf>::new(), "nothing changed");

    put_part(&db, "prt_1", "msg_1", &text("asked"), 11);
    assert_eq!(m.refresh_db()?, [m.journal("ses_a")]);
    // A deleted row changes its session's count.
    db.execute("DELETE FROM part WHERE id = 'prt_1'", [])
        .expect("a delete");
    assert_eq!(m.refresh_db()?, [m.journal("ses_a")]);
    assert_eq!(m.turns("ses_a"), Vec::<(String, String)>::new());

    // A journal gone (its state folder wiped) is written again whole.
    std::fs::remove_file(m.journal("ses_b")).expect("removed");
    assert_eq!(m.refresh_db()?, [m.journal("ses_b")]);
    assert_eq!(m.lines("ses_b").len(), 2);
    Ok(())
}

/// Regression: a row OpenCode rewrote without changing its `time_updated`
/// (twice in one millisecond, read in between) was never captured until
/// something else in its session changed. An active session is read whole
/// again each `REREAD_ACTIVE_MS`; an idle one is not.
#[test]
fn a_row_rewritten_at_the_same_time_is_captured_within_the_reread_bound() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    let now: i64 = 1_790_000_000_000;
    let at = now - 1_000;
    // A user's message: an answer this young would still be streaming.
    put_message(&db, "msg_1", "user", at);
    put_part(&db, "prt_1", "msg_1", &text("draft answer"), at);
    second_session(&db);
    assert_eq!(
        m.refresh_db_at(now)?,
        [m.journal("ses_a"), m.journal("ses_b")]
    );
    assert_eq!(m.turns("ses_a"), [pair("user", "draft answer")]);

    // The same row, new text, the same `time_updated`.
    db.execute(
        "UPDATE part SET data = ?1 WHERE id = 'prt_1'",
        [text("final answer")],
    )
    .expect("a rewrite");
    // Within the same period nothing tells it changed.
    assert_eq!(m.refresh_db_at(now + 1)?, Vec::<PathBuf>::new());
    // The next period reads the active session whole, not the idle one.
    let later = now + REREAD_ACTIVE_MS;
    assert_eq!(m.refresh_db_at(later)?, [m.journal("ses_a")]);
    assert_eq!(m.turns("ses_a"), [pair("user", "final answer")]);
    // Idle for a day: read again only when its rows change.
    let idle = at + ACTIVE_MS + 1;
    assert_eq!(m.refresh_db_at(idle)?, [m.journal("ses_a")]);
    assert_eq!(
        m.refresh_db_at(idle + 2 * REREAD_ACTIVE_MS)?,
        Vec::<PathBuf>::new()
    );
    Ok(())
}

/// OpenCode not running: its WAL database closed, no `-wal` or `-shm` beside it.
#[test]
fn a_closed_wal_database_is_read() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    put_message(&db, "msg_1", "user", 10);
    put_part(&db, "prt_1", "msg_1", &text("asked while OpenCode ran"), 11);
    drop(db);
    assert!(!m.paths.opencode_dir.join("opencode.db-wal").exists());
    assert_eq!(m.refresh_db()?, [m.journal("ses_a")]);
    assert_eq!(m.turns("ses_a"), [pair("user", "asked while OpenCode ran")]);
    Ok(())
}

/// A reader never waits for a writer in WAL mode, and sees only what was
/// committed when its read began.
#[test]
fn an_open_write_transaction_neither_blocks_nor_leaks_into_the_journal() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    put_message(&db, "msg_1", "user", 10);
    put_part(&db, "prt_1", "msg_1", &text("committed"), 11);
    db.execute_batch("BEGIN IMMEDIATE")
        .expect("a write transaction");
    put_part(&db, "prt_1", "msg_1", &text("not yet committed"), 12);
    m.refresh_db()?;
    db.execute_batch("ROLLBACK").expect("rolled back");
    assert_eq!(m.turns("ses_a"), [pair("user", "committed")]);
    Ok(())
}

#[test]
fn a_row_that_is_not_json_is_named_and_nothing_is_removed_for_it() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    put_message(&db, "msg_1", "user", 10);
    put_part(&db, "prt_1", "msg_1", &text("first"), 11);
    put_part(&db, "prt_2", "msg_1", &text("second"), 12);
    m.refresh_db()?;
    let before = m.lines("ses_a");

    put_part(&db, "prt_2", "msg_1", r#"{"type":"text","te"#, 13);
    let err = m.refresh_db().expect_err("a row that is not JSON");
    let said = err.to_string();
    assert!(said.contains("part prt_2: data is not JSON"), "{said}");
    assert_eq!(m.lines("ses_a"), before, "the row is kept, not removed");

    put_part(&db, "prt_2", "msg_1", &text("second, readable again"), 14);
    m.refresh_db()?;
    assert_eq!(
        m.turns("ses_a"),
        [
            pair("user", "first"),
            pair("user", "second, readable again")
        ]
    );
    Ok(())
}

#[test]
fn a_database_of_another_schema_or_not_a_database_is_refused_clearly() {
    let m = Machine::new();
    let db = Connection::open(database(&m.paths)).expect("a database");
    db.execute_batch("CREATE TABLE session (id TEXT); CREATE TABLE message (id TEXT);")
        .expect("an older schema");
    let said = m.refresh_db().expect_err("no part table").to_string();
    assert!(said.contains("no `part` table"), "{said}");
    drop(db);

    std::fs::write(database(&m.paths), b"not a database at all, just text").expect("garbage");
    let _ = std::fs::remove_file(m.paths.opencode_dir.join("opencode.db-wal"));
    let said = m.refresh_db().expect_err("not a database").to_string();
    assert!(said.contains("not valid OpenCode database"), "{said}");
    assert!(!m.paths.state_dir.join("journals").join("opencode").exists());
}

/// An older OpenCode's database without WAL, held under an exclusive lock
/// past the busy timeout: a clear error, and nothing journalled.
#[test]
fn a_database_locked_past_the_timeout_is_said_so() {
    let m = Machine::new();
    let db = Connection::open(database(&m.paths)).expect("a database");
    db.execute_batch(&SCHEMA.replace("PRAGMA journal_mode = WAL;", ""))
        .expect("the schema");
    db.execute_batch("BEGIN EXCLUSIVE")
        .expect("an exclusive lock");
    let said = m.refresh_db().expect_err("locked").to_string();
    assert!(said.contains("stayed locked for 5 s"), "{said}");
    db.execute_batch("COMMIT").expect("released");
    assert!(!m.paths.state_dir.join("journals").exists());
}

/// Copies the folder `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for entry in std::fs::read_dir(from).expect("a fixture folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("a fixture file");
        }
    }
}

const LEGACY: &str = "ses_6b1f0e2a4ffeYc1Q2w3e4r5t6y";

#[test]
fn the_storage_tree_is_journalled_like_the_database() -> Result<()> {
    let m = Machine::new();
    let tree = storage(&m.paths);
    copy_tree(&kith_shared::fixtures::path("opencode/storage"), &tree);
    assert_eq!(sources(&m.paths).len(), 1, "one session file");
    let failed = crate::mirror::refresh_all(&m.paths);
    assert!(failed.is_empty(), "{failed:?}");
    let turns = m.turns(LEGACY);
    assert_eq!(turns.len(), 3, "{turns:#?}");
    assert_eq!(turns[0].0, "user");
    assert!(turns[1]
        .1
        .starts_with("read: /home/sam/src/tally/src/report.rs\n<file>"));
    assert!(turns[2].1.ends_with("`{:02}` fixes both."));
    // A pretty-printed file is one journal line, its JSON otherwise as written.
    let session_file = tree
        .join("session/3f8a1c2e9b")
        .join(format!("{LEGACY}.json"));
    let written = std::fs::read_to_string(&session_file).expect("the session file");
    let lines = m.lines(LEGACY);
    assert!(
        lines[0].contains(&crate::mirror::compact(&written)),
        "{}",
        lines[0]
    );

    // A part torn mid-write is named and kept; a deleted part is removed.
    let parts = tree.join("part/msg_6b1f0e2b0002Mn9oPq1rSt3uVw");
    let torn = parts.join("prt_6b1f0e2b2003Ef3gHi5jKl7mNo.json");
    std::fs::write(&torn, "{\"id\": \"prt_6b1f").expect("a torn file");
    let said = refresh(&m.paths, &torn).expect_err("torn").to_string();
    assert!(
        said.contains("prt_6b1f0e2b2003Ef3gHi5jKl7mNo.json: not JSON"),
        "{said}"
    );
    assert_eq!(m.turns(LEGACY), turns, "nothing removed for a torn file");
    std::fs::remove_file(&torn).expect("deleted");
    assert_eq!(refresh(&m.paths, &torn)?, [m.journal(LEGACY)]);
    assert_eq!(m.turns(LEGACY), turns[..2]);

    // Once OpenCode has moved to its database, the tree is not read.
    drop(m.db());
    assert_eq!(sources(&m.paths), [database(&m.paths)]);
    std::fs::remove_file(&session_file).expect("deleted");
    assert!(refresh(&m.paths, &session_file)?.is_empty());

    // A published storage tree (`../shared/fixtures/`), when present.
    if let Some(dir) = kith_shared::fixtures::third_party_dir() {
        let m = Machine::new();
        copy_tree(
            &dir.join("opencode/jazzyalex__agent-sessions__storage_v2"),
            &storage(&m.paths),
        );
        let failed = crate::mirror::refresh_all(&m.paths);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(
            m.turns("s_stage0_small"),
            [
                pair("user", "Hello"),
                pair("tool", "bash: ls /tmp/repo\na.txt\nb.txt"),
                pair("assistant", "Found 2 files."),
            ]
        );
        assert_eq!(
            m.turns("s_stage0_large").first().map(|t| t.0.as_str()),
            Some("user")
        );
    }
    Ok(())
}

/// A message file whose id climbs out of the tree ("../../outside") must
/// not make kith read the files of another folder as its parts.
#[test]
fn a_message_id_that_is_not_plain_reads_no_folder_outside_the_tree() -> Result<()> {
    let m = Machine::new();
    let tree = storage(&m.paths);
    copy_tree(&kith_shared::fixtures::path("opencode/storage"), &tree);
    let outside = m.paths.opencode_dir.join("outside");
    std::fs::create_dir_all(&outside).expect("a folder beside the tree");
    std::fs::write(
        outside.join("prt_x.json"),
        format!(r#"{{"id":"prt_x","messageID":"m","sessionID":"{LEGACY}","type":"text","text":"the secret beside the tree"}}"#),
    )
    .expect("a file outside the tree");
    let hostile = tree.join("message").join(LEGACY).join("msg_zz.json");
    std::fs::write(
        &hostile,
        format!(r#"{{"id":"../../outside","sessionID":"{LEGACY}","role":"user","time":{{"created":1778490009000}}}}"#),
    )
    .expect("a hostile message file");

    let said = refresh(&m.paths, &hostile).expect_err("named").to_string();
    assert!(
        said.contains("msg_zz.json: message id \"../../outside\" is not a plain id"),
        "{said}"
    );
    let journal = std::fs::read_to_string(m.journal(LEGACY)).expect("the session is journalled");
    assert!(!journal.contains("the secret beside the tree"), "{journal}");
    assert_eq!(
        m.turns(LEGACY).len(),
        3,
        "the session's own turns are all there"
    );
    Ok(())
}

/// A row with columns of types OpenCode never writes (a BLOB id, text in
/// `time_updated`) holds back neither the rest of its session nor the
/// sessions after it; one whose id cannot be read is named.
#[test]
fn a_row_of_another_type_holds_back_no_other_row_or_session() -> Result<()> {
    let m = Machine::new();
    let db = m.db();
    second_session(&db);
    db.execute(
        "INSERT INTO part VALUES ('prt_b', 'msg_b', 'ses_b', 4, 4, ?1)",
        [text("in b")],
    )
    .expect("a part of ses_b");
    put_message(&db, "msg_1", "user", 10);
    put_part(&db, "prt_1", "msg_1", &text("readable"), 11);
    db.execute(
        "INSERT INTO part VALUES (X'00FF', 'msg_1', 'ses_a', 12, 12, '{\"type\":\"text\",\"text\":\"unnamed\"}')",
        [],
    )
    .expect("a part whose id is a BLOB");
    db.execute(
        "INSERT INTO part VALUES ('prt_3', 'msg_1', 'ses_a', 13, 'soon', '{\"type\":\"text\",\"text\":\"late\"}')",
        [],
    )
    .expect("a part whose time_updated is text");

    let said = m.refresh_db().expect_err("named").to_string();
    assert!(said.contains("a row of session ses_a (no id)"), "{said}");
    assert_eq!(
        m.turns("ses_a"),
        [pair("user", "readable"), pair("user", "late")]
    );
    assert_eq!(m.turns("ses_b"), [pair("user", "in b")]);
    Ok(())
}

/// OpenCode's session row carries the file contents of the session's
/// diffs, rewritten at every step: the journal leaves them out and keeps
/// what the transcript reads.
#[test]
fn a_sessions_diffs_are_not_journalled() -> Result<()> {
    let m = Machine::new();
    let db = Connection::open(database(&m.paths)).expect("the database");
    db.execute_batch(&SCHEMA.replace(
        "time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);\n    CREATE TABLE message",
        "time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, summary_diffs TEXT, revert TEXT);\n    CREATE TABLE message",
    ))
    .expect("the schema with OpenCode's summary columns");
    let diffs = format!(
        r#"[{{"file":"src/big.rs","before":"{0}","after":"{0}!"}}]"#,
        "x".repeat(10_000)
    );
    db.execute(
        "INSERT INTO session VALUES ('ses_a', 'p1', NULL, 's', '/home/sam/src/tally', 't', '1.2.4', 1, 2, ?1, '{\"diff\":\"y\"}')",
        [&diffs],
    )
    .expect("a session with diffs");
    put_message(&db, "msg_1", "user", 10);
    m.refresh_db()?;
    let lines = m.lines("ses_a");
    assert!(
        lines[0].contains(r#""directory":"/home/sam/src/tally""#),
        "{}",
        lines[0]
    );
    assert!(
        !lines[0].contains("summary_diffs") && !lines[0].contains("revert"),
        "{}",
        lines[0]
    );
    assert!(
        lines.iter().all(|l| l.len() < 1_000),
        "nothing of the diffs"
    );
    Ok(())
}

/// Regression: a session file torn mid-rewrite at a session's first refresh
/// was left out and its messages journalled anyway, so the journal began
/// without its session line, from which capture reads the session's folder
/// (what `exclude` matches) and its parent, for good. Nothing is written
/// until the session file reads whole.
#[test]
fn a_torn_session_file_writes_no_journal_without_its_session_line() -> Result<()> {
    let m = Machine::new();
    let tree = storage(&m.paths);
    copy_tree(&kith_shared::fixtures::path("opencode/storage"), &tree);
    let session_file = tree
        .join("session/3f8a1c2e9b")
        .join(format!("{LEGACY}.json"));
    let whole = std::fs::read_to_string(&session_file).expect("the session file");
    std::fs::write(&session_file, &whole[..whole.len() / 2]).expect("torn");
    let said = refresh(&m.paths, &session_file)
        .expect_err("torn")
        .to_string();
    assert!(said.contains("not JSON"), "{said}");
    assert!(
        !m.journal(LEGACY).exists(),
        "a journal without its session line"
    );
    std::fs::write(&session_file, &whole).expect("whole again");
    assert_eq!(refresh(&m.paths, &session_file)?, [m.journal(LEGACY)]);
    assert!(
        m.lines(LEGACY)[0].contains("\"kind\":\"session\""),
        "{:?}",
        m.lines(LEGACY)
    );
    Ok(())
}

/// A FIFO named like a storage file (`mkfifo …/m.json`) is not read: a
/// refresh neither waits on it (with the state lock held) nor fails.
#[test]
fn a_fifo_in_the_storage_tree_is_not_waited_on() -> Result<()> {
    let m = Machine::new();
    let tree = storage(&m.paths);
    copy_tree(&kith_shared::fixtures::path("opencode/storage"), &tree);
    let fifo = tree.join("message").join(LEGACY).join("msg_zz.json");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("a FIFO");
    let session_file = tree
        .join("session/3f8a1c2e9b")
        .join(format!("{LEGACY}.json"));
    assert_eq!(refresh(&m.paths, &session_file)?, [m.journal(LEGACY)]);
    assert_eq!(m.turns(LEGACY).len(), 3);
    Ok(())
}

/// Only the folder a message's parts get (one per message) starts no
/// rescan when it appears; a session's new folders still do.
#[test]
fn only_a_messages_part_folder_is_held_without_a_rescan() {
    let m = Machine::new();
    let tree = storage(&m.paths);
    assert!(crate::mirror::holds_sources(
        &m.paths,
        &tree.join("part/msg_1")
    ));
    for dir in ["message/ses_1", "session/3f8a1c2e9b", "", "../part"] {
        assert!(
            !crate::mirror::holds_sources(&m.paths, &tree.join(dir)),
            "{dir}"
        );
    }
}
