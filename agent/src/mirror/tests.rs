use super::*;

fn rec(key: &str, line: &str) -> Record {
    Record {
        key: key.into(),
        line: line.into(),
    }
}

/// Lines `{"k":KEY,...}` put a key, `{"gone":KEY}` remove it.
fn read(line: &str) -> Seen {
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    match (v.get("k"), v.get("gone")) {
        (Some(k), _) => Seen::Put(k.as_str().unwrap_or_default().into()),
        (_, Some(k)) => Seen::Removed(k.as_str().unwrap_or_default().into()),
        _ => Seen::Other,
    }
}

fn removal(key: &str) -> String {
    format!(r#"{{"gone":"{key}"}}"#)
}

/// Two records of one key (two storage files claiming one id) are one:
/// its last line, appended once, not both again at every refresh.
#[test]
fn a_key_given_twice_is_appended_once() -> Result<()> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut j = Journal::open(&dir.path().join("s.jsonl"))?;
    let (a1, a2) = (r#"{"k":"a","v":1}"#, r#"{"k":"a","v":2}"#);
    let records = [rec("a", a1), rec("a", a2)];
    assert_eq!(sync(&mut j, &records, read, removal)?, 1);
    assert_eq!(j.lines(), [a2]);
    assert_eq!(sync(&mut j, &records, read, removal)?, 0);
    Ok(())
}

#[test]
fn sync_appends_what_changed_and_removes_what_went_away() -> Result<()> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("j/s.jsonl");
    let mut j = Journal::open(&path)?;
    let a1 = r#"{"k":"a","v":1}"#;
    let b1 = r#"{"k":"b","v":1}"#;
    assert_eq!(
        sync(&mut j, &[rec("a", a1), rec("b", b1)], read, removal)?,
        2
    );
    // The same records again: nothing.
    assert_eq!(
        sync(&mut j, &[rec("a", a1), rec("b", b1)], read, removal)?,
        0
    );
    // a changed, b gone, c new.
    let a2 = r#"{"k":"a","v":2}"#;
    let c1 = r#"{"k":"c","v":1}"#;
    assert_eq!(
        sync(&mut j, &[rec("a", a2), rec("c", c1)], read, removal)?,
        3
    );
    // b comes back as it was: appended again, since it was removed.
    assert_eq!(
        sync(
            &mut j,
            &[rec("a", a2), rec("b", b1), rec("c", c1)],
            read,
            removal
        )?,
        1
    );
    let on_disk = std::fs::read_to_string(&path).expect("the journal");
    assert_eq!(
        on_disk.lines().collect::<Vec<_>>(),
        [a1, b1, a2, c1, r#"{"gone":"b"}"#, b1]
    );
    // It holds what the agent wrote: the owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().expect("a folder")), 0o700);
    // Read back from disk, the journal says the same.
    let mut again = Journal::open(&path)?;
    assert_eq!(
        sync(
            &mut again,
            &[rec("a", a2), rec("b", b1), rec("c", c1)],
            read,
            removal
        )?,
        0
    );
    Ok(())
}

#[test]
fn a_torn_last_line_is_cut_and_appended_again_whole() -> Result<()> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("s.jsonl");
    let a = r#"{"k":"a"}"#;
    let b = r#"{"k":"b","text":"long"}"#;
    std::fs::write(&path, format!("{a}\n{}", &b[..8])).expect("written");
    let mut j = Journal::open(&path)?;
    assert_eq!(j.lines(), [a]);
    assert_eq!(
        std::fs::read_to_string(&path).expect("the journal"),
        format!("{a}\n")
    );
    assert_eq!(sync(&mut j, &[rec("a", a), rec("b", b)], read, removal)?, 1);
    assert_eq!(
        std::fs::read_to_string(&path).expect("the journal"),
        format!("{a}\n{b}\n")
    );
    Ok(())
}

#[test]
fn journals_name_their_runtime() {
    let paths = Paths::under(Path::new("/home/u"));
    let j = journal_path(&paths, AgentRuntime::Gemini, Path::new("p/chats/s.jsonl"));
    assert_eq!(
        crate::discover::runtime_of_journal(&paths, &j),
        Some(AgentRuntime::Gemini)
    );
    assert_eq!(
        crate::discover::runtime_of(&paths, &j),
        AgentRuntime::Gemini
    );
    assert!(crate::discover::is_transcript(&paths, &j));
    assert_eq!(
        crate::discover::runtime_of_journal(&paths, Path::new("/home/u/state/outbox/x")),
        None
    );
}

#[test]
fn a_stamp_matches_only_the_settled_source_it_was_recorded_for() -> Result<()> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("s.json");
    let journal = dir.path().join("s.jsonl");
    std::fs::write(&source, "{}").expect("written");
    let fresh = Stamp::of(&std::fs::metadata(&source).expect("stat"), &journal);
    fresh.record()?;
    assert!(!fresh.unchanged(), "a file changed just now is read again");
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    let f = File::options().write(true).open(&source).expect("open");
    f.set_modified(old).expect("mtime");
    let settled = Stamp::of(&std::fs::metadata(&source).expect("stat"), &journal);
    settled.record()?;
    assert!(!settled.unchanged(), "no journal yet: it is written");
    std::fs::write(&journal, "{}\n").expect("a journal");
    assert!(settled.unchanged());
    // Rewritten with the same size: its time differs.
    std::fs::write(&source, "[]").expect("written");
    let rewritten = Stamp::of(&std::fs::metadata(&source).expect("stat"), &journal);
    assert!(!rewritten.unchanged(), "rewritten: read again");
    Ok(())
}
