//! The family's archive survives a lost disk: `kith-central backup` taken
//! while central serves, a second one to the same folder copying only what
//! is new, `restore` into a new folder serving each member what they read
//! at the backup's time (and nothing stored after it), and `verify`
//! naming a changed byte, a lost blob and a cut registry, each of which
//! `restore` refuses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_tests::{claude_user_line, delta, run_central, Api, Central, Machine};
use serde_json::Value;

const WITHIN: Duration = Duration::from_secs(60);

/// A Claude Code user line saying `text` at second `s`.
fn line(text: &str, s: u32) -> String {
    claude_user_line(text, &format!("2026-05-11T08:00:{s:02}.000Z"))
}

/// What a member reads: the runs keyword searches find, in rank order, the
/// conversations list, and every listed conversation's turns.
#[derive(Debug, PartialEq)]
struct Reading {
    searches: Vec<(&'static str, Vec<String>)>,
    conversations: Value,
    turns: Vec<Value>,
}

const WORDS: [&str; 4] = ["pangolin", "importer", "checksum", "walrus"];

fn reading(api: &Api) -> Result<Reading> {
    let mut searches = Vec::new();
    for word in WORDS {
        searches.push((word, api.keyword(word)?));
    }
    let list = api.get("/api/conversations")?;
    ensure!(list.status == 200, "{list:?}");
    let mut turns = Vec::new();
    for c in list.body["conversations"].as_array().into_iter().flatten() {
        let id = c["id"].as_str().unwrap_or_default();
        let t = api.get(&format!("/api/conversations/{id}/turns"))?;
        ensure!(t.status == 200, "turns of {id}: {t:?}");
        turns.push(t.body);
    }
    Ok(Reading {
        searches,
        conversations: list.body,
        turns,
    })
}

/// Runs `kith-central ARGS --data-dir DATA`, which must succeed (`ok`) or
/// fail with exit code 1; what it said on stdout and stderr.
fn central_says(data: &Path, args: &[&str], ok: bool) -> Result<String> {
    let out = run_central(data, args)?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let want = if ok { Some(0) } else { Some(1) };
    ensure!(
        out.status.code() == want,
        "kith-central {args:?} exited {:?}, not {want:?}:\n{said}",
        out.status
    );
    Ok(said)
}

/// The snapshot a backup's output names.
fn snapshot_of(said: &str) -> Result<String> {
    said.lines()
        .find_map(|l| l.strip_prefix("snapshot "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .with_context(|| format!("no snapshot named in:\n{said}"))
}

/// Where the backup in `dest` keeps the blob of `run` in `snapshot`,
/// relative to `dest`, as its manifest says.
fn object_of(dest: &Path, snapshot: &str, run: &str) -> Result<String> {
    let path = dest.join("snapshots").join(snapshot).join("manifest.json");
    let manifest: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let blob = format!("/{run}.jsonl");
    manifest["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["path"].as_str().is_some_and(|p| p.ends_with(&blob)))
        .and_then(|e| e["object"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("run {run} has no object in {manifest}"))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn flip_a_byte(path: &Path) -> Result<()> {
    let mut bytes = std::fs::read(path)?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(path, bytes)?;
    Ok(())
}

fn text(path: &Path) -> Result<&str> {
    path.to_str().context("a UTF-8 path")
}

#[test]
fn a_backup_taken_while_central_serves_brings_the_family_back_as_it_was() -> Result<()> {
    let mut central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let (alice, bob) = (central.client(&alice_token), central.client(&bob_token));
    let first = line("why does the pangolin importer drop rows", 1);
    let runs = [
        alice.ingest(&delta("alice-1", 0, &first))?,
        alice.ingest(&delta(
            "alice-1",
            first.len() as u64,
            &line("the importer skips rows whose checksum is empty", 2),
        ))?,
        bob.ingest(&delta("bob-1", 0, &line("bob's own pangolin notes", 3)))?,
    ];
    for (api, id) in [(&alice, &runs[0]), (&alice, &runs[1]), (&bob, &runs[2])] {
        api.wait_indexed(id, WITHIN)?;
    }
    let before = [reading(&alice)?, reading(&bob)?];
    ensure!(
        before[0].searches[0].1.contains(&runs[0]) && !before[0].searches[0].1.contains(&runs[2]),
        "alice finds her pangolin, not bob's: {:?}",
        before[0].searches
    );
    ensure!(
        before[1].searches[0].1 == [runs[2].clone()],
        "bob finds his own: {:?}",
        before[1].searches
    );

    let tmp = tempfile::tempdir()?;
    let dest = tmp.path().join("backup");
    let data = central.data_dir.clone();
    let said = central_says(&data, &["backup", text(&dest)?], true)?;
    ensure!(
        said.contains("blobs: 3 copied") && said.contains("records: 3 copied"),
        "the first backup copies every blob and record:\n{said}"
    );
    ensure!(
        said.contains("the index is not copied; `reindex` rebuilds it"),
        "{said}"
    );
    let first_snapshot = snapshot_of(&said)?;
    // Central served on: it takes a delta after the backup and finds it.
    let late = alice.ingest(&delta(
        "alice-2",
        0,
        &line("the walrus release ships on friday", 4),
    ))?;
    alice.wait_indexed(&late, WITHIN)?;
    ensure!(
        alice.keyword("walrus")? == [late.clone()],
        "the late delta is found"
    );
    let said = central_says(&data, &["backup", text(&dest)?], true)?;
    ensure!(
        said.contains("blobs: 1 copied") && said.contains("3 already there"),
        "the second backup copies only the new blob:\n{said}"
    );
    ensure!(said.contains("records: 1 copied"), "{said}");
    let newest = snapshot_of(&said)?;
    ensure!(newest > first_snapshot, "{newest} after {first_snapshot}");
    let said = central_says(&data, &["verify", text(&dest)?], true)?;
    ensure!(
        said.contains(&format!("snapshots/{first_snapshot}: 3 runs"))
            && said.contains(&format!("snapshots/{newest}: 4 runs"))
            && said.contains("no damage"),
        "{said}"
    );
    let said = central_says(&data, &["verify"], true)?;
    ensure!(
        said.contains("4 blobs") && said.contains("no damage"),
        "{said}"
    );
    central.kill()?;

    let said = central_says(&data, &["restore", text(&dest)?], false)?;
    ensure!(
        said.contains("is not empty"),
        "restore over a data directory: {said}"
    );

    let restored_dir = tmp.path().join("restored");
    let said = central_says(
        &restored_dir,
        &["restore", text(&dest)?, "--snapshot", &first_snapshot],
        true,
    )?;
    ensure!(said.contains("reindexed 3 runs"), "{said}");
    let restored = Central::start_on(&restored_dir, &[])?;
    let (alice_again, bob_again) = (restored.client(&alice_token), restored.client(&bob_token));
    let after = [reading(&alice_again)?, reading(&bob_again)?];
    ensure!(
        after == before,
        "the restored central reads as the original did at the backup's time:\n{after:#?}\nnot\n{before:#?}"
    );
    let gone = alice_again.get(&format!("/api/runs/{late}"))?;
    ensure!(
        gone.status == 404 && alice_again.keyword("walrus")?.is_empty(),
        "the delta stored after the backup is not restored: {gone:?}"
    );
    drop(restored);

    // Without --snapshot, the newest: the late delta with it.
    let newest_dir = tmp.path().join("newest");
    let said = central_says(&newest_dir, &["restore", text(&dest)?], true)?;
    ensure!(
        said.contains(&newest) && said.contains("reindexed 4 runs"),
        "{said}"
    );
    let restored = Central::start_on(&newest_dir, &[])?;
    ensure!(
        restored.client(&alice_token).keyword("walrus")? == [late],
        "the newest snapshot holds the late delta"
    );
    Ok(())
}

#[test]
fn verify_names_a_changed_byte_a_lost_blob_and_a_cut_registry() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let changed = alice.ingest(&delta("s-1", 0, &line("the pangolin importer", 1)))?;
    let lost = alice.ingest(&delta("s-2", 0, &line("the walrus release", 2)))?;
    for id in [&changed, &lost] {
        alice.wait_indexed(id, WITHIN)?;
    }
    let data = central.data_dir.clone();
    let tmp = tempfile::tempdir()?;
    let dest = tmp.path().join("backup");
    let snapshot = snapshot_of(&central_says(&data, &["backup", text(&dest)?], true)?)?;
    let registry = format!("snapshots/{snapshot}/registry.sqlite");
    let cases: [(&str, String); 3] = [
        ("changed-byte", object_of(&dest, &snapshot, &changed)?),
        ("lost-blob", object_of(&dest, &snapshot, &lost)?),
        ("cut-registry", registry),
    ];
    for (what, file) in cases {
        let copy = tmp.path().join(what);
        copy_dir(&dest, &copy)?;
        let said = central_says(&data, &["verify", text(&copy)?], true)?;
        ensure!(
            said.contains("no damage") && !said.contains("damaged"),
            "{what}: the copy is sound before:\n{said}"
        );
        let at = copy.join(&file);
        match what {
            "changed-byte" => flip_a_byte(&at)?,
            "lost-blob" => std::fs::remove_file(&at)?,
            _ => {
                let len = std::fs::metadata(&at)?.len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&at)?
                    .set_len(len / 2)?;
            }
        }
        let said = central_says(&data, &["verify", text(&copy)?], false)?;
        ensure!(
            said.contains(&format!("damaged: {file}")),
            "{what}: verify names {file}:\n{said}"
        );
        let target = tmp.path().join(format!("{what}-restored"));
        let said = central_says(&target, &["restore", text(&copy)?], false)?;
        ensure!(
            said.contains("is damaged; nothing was restored") && !target.exists(),
            "{what}: restore refuses a damaged snapshot:\n{said}"
        );
    }

    // The live data directory, as central serves it.
    let said = central_says(&data, &["verify"], true)?;
    ensure!(said.contains("no damage"), "{said}");
    let blob = blob_of(&data, &changed)?;
    flip_a_byte(&blob)?;
    let said = central_says(&data, &["verify"], false)?;
    let named = blob.strip_prefix(&data)?.display().to_string();
    ensure!(
        said.contains(&format!("damaged: {named}")),
        "verify names the data directory's blob {named}:\n{said}"
    );
    Ok(())
}

/// The data directory's blob of `run`.
fn blob_of(data: &Path, run: &str) -> Result<PathBuf> {
    let name = format!("{run}.jsonl");
    let mut stack = vec![data.join("runs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name.as_str()) {
                return Ok(path);
            }
        }
    }
    anyhow::bail!("no blob of {run} in {}", data.display())
}

/// Whether any file under `dir` holds `word`.
fn any_file_holds(dir: &Path, word: &str) -> Result<bool> {
    Ok(!kith_tests::files_containing(dir, word)?.is_empty())
}

#[test]
fn a_forget_reaches_every_backup_and_names_the_one_it_cannot() -> Result<()> {
    let mut central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let said_once = line("rotate the okapi credentials on tuesday", 1);
    let secret = alice.ingest(&delta("s-1", 0, &said_once))?;
    let kept = alice.ingest(&delta("s-2", 0, &line("the walrus release", 2)))?;
    for id in [&secret, &kept] {
        alice.wait_indexed(id, WITHIN)?;
    }
    let data = central.data_dir.clone();
    let tmp = tempfile::tempdir()?;
    let (dest, offsite) = (tmp.path().join("backup"), tmp.path().join("offsite"));
    let before = snapshot_of(&central_says(&data, &["backup", text(&dest)?], true)?)?;
    central_says(&data, &["backup", text(&offsite)?], true)?;
    // An older copy of the folder, as an off-site sync of it holds.
    let old_copy = tmp.path().join("old-copy");
    copy_dir(&dest, &old_copy)?;
    for folder in [&dest, &offsite] {
        ensure!(
            any_file_holds(folder, "okapi")?,
            "{} holds the conversation before the forget",
            folder.display()
        );
    }
    // The off-site disk is not mounted when the forget comes.
    let away = tmp.path().join("offsite-away");
    std::fs::rename(&offsite, &away)?;
    let forgot = alice.send(
        alice
            .http
            .delete(alice.url(&format!("/api/conversations/{secret}"))),
    )?;
    ensure!(forgot.status == 200, "{forgot:?}");
    let not_cleared = forgot.body["backups_not_cleared"].to_string();
    ensure!(
        not_cleared.contains(text(&offsite)?) && not_cleared.contains("not reached"),
        "the answer names the folder it could not reach: {not_cleared}"
    );
    ensure!(
        !not_cleared.contains(&format!("{}\"", text(&dest)?))
            && !not_cleared.contains(&format!("{}:", text(&dest)?)),
        "and not the one it cleared: {not_cleared}"
    );
    ensure!(
        !any_file_holds(&dest, "okapi")?,
        "no file of the backup holds the forgotten text: not a blob, not a registry's copy"
    );
    let tombstone = dest.join("tombstones").join(format!("{secret}.json"));
    ensure!(tombstone.is_file(), "its tombstone is in the backup");
    use std::os::unix::fs::PermissionsExt;
    ensure!(std::fs::metadata(&tombstone)?.permissions().mode() & 0o777 == 0o600);
    let said = central_says(&data, &["verify", text(&dest)?], true)?;
    ensure!(
        said.contains(&format!("snapshots/{before}: 1 runs")) && said.contains("no damage"),
        "the backup verifies with the conversation gone from it:\n{said}"
    );
    ensure!(
        alice.keyword("walrus")? == [kept.clone()],
        "the other conversation stays"
    );

    let restored_dir = tmp.path().join("restored");
    let said = central_says(
        &restored_dir,
        &["restore", text(&dest)?, "--snapshot", &before],
        true,
    )?;
    ensure!(said.contains("reindexed 1 runs"), "{said}");
    ensure!(
        !any_file_holds(&restored_dir, "okapi")?,
        "no file of the restored data directory holds the forgotten text"
    );

    // The off-site disk back: it still held the text, and its next backup
    // forgets it there.
    std::fs::rename(&away, &offsite)?;
    ensure!(
        any_file_holds(&offsite, "okapi")?,
        "unreached, it still held it"
    );
    let said = central_says(&data, &["backup", text(&offsite)?], true)?;
    ensure!(
        said.contains("forgot in 1 earlier snapshots"),
        "its next backup forgets the conversation there:\n{said}"
    );
    ensure!(
        !any_file_holds(&offsite, "okapi")?,
        "now no file there holds it"
    );
    central_says(&data, &["verify", text(&offsite)?], true)?;
    central.kill()?;

    // An older copy of the folder that meets the backup's tombstones (a
    // sync of tombstones/ over it) with the forgotten blob gone: verify
    // calls that forgotten, not damage, and restore leaves the run out.
    let newer = std::fs::read_dir(dest.join("tombstones"))?;
    std::fs::create_dir_all(old_copy.join("tombstones"))?;
    for entry in newer {
        let entry = entry?;
        std::fs::copy(
            entry.path(),
            old_copy.join("tombstones").join(entry.file_name()),
        )?;
    }
    std::fs::remove_file(old_copy.join(object_of(&old_copy, &before, &secret)?))?;
    let said = central_says(&data, &["verify", text(&old_copy)?], true)?;
    ensure!(
        said.contains("forgotten") && said.contains("no damage") && !said.contains("damaged:"),
        "{said}"
    );
    let from_old = tmp.path().join("from-old");
    let said = central_says(&from_old, &["restore", text(&old_copy)?], true)?;
    ensure!(
        said.contains("left out 1 forgotten runs") && said.contains("reindexed 1 runs"),
        "{said}"
    );
    let restored = Central::start_on(&from_old, &[])?;
    let alice = restored.client(&token);
    ensure!(
        alice.keyword("okapi")?.is_empty(),
        "the forgotten run is not found"
    );
    ensure!(
        alice.keyword("walrus")? == [kept],
        "the other conversation is"
    );
    let again = alice.post("/api/runs", &delta("s-1", 0, &said_once))?;
    ensure!(
        again.body["status"] == "forgotten",
        "its lines sent again are refused as forgotten: {again:?}"
    );
    ensure!(!any_file_holds(&from_old.join("runs"), "okapi")?);
    Ok(())
}

/// The snapshots whole in the backup folder `dest`, oldest first.
fn snapshots_in(dest: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dest.join("snapshots"))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".partial") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Waits for `n` lines of central's log holding `what`; the lines.
fn wait_logged(central: &Central, what: &str, n: usize) -> Result<Vec<String>> {
    let deadline = std::time::Instant::now() + WITHIN;
    let mut seen = Vec::new();
    while seen.len() < n {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = central
            .log
            .recv_timeout(left)
            .with_context(|| format!("{} of {n} lines {what:?} logged: {seen:#?}", seen.len()))?;
        if line.contains(what) {
            seen.push(line);
        }
    }
    Ok(seen)
}

#[test]
fn serve_backs_up_on_its_schedule_and_keeps_the_newest() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dest = tmp.path().join("backup");
    let config = tmp.path().join("central.toml");
    std::fs::write(
        &config,
        format!(
            "[backup]\ndest = \"{}\"\nevery = \"2s\"\nkeep = 2\n",
            text(&dest)?
        ),
    )?;
    let data = tmp.path().join("data");
    let mut central = Central::start_on(&data, &[("KITH_CENTRAL_CONFIG", text(&config)?)])?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let first = alice.ingest(&delta("s-1", 0, &line("the pangolin importer", 1)))?;
    alice.wait_indexed(&first, WITHIN)?;
    // Ingest and search go on while backups are taken.
    let taken = wait_logged(&central, "backup taken", 4)?;
    let second = alice.ingest(&delta("s-2", 0, &line("the walrus release", 2)))?;
    alice.wait_indexed(&second, WITHIN)?;
    ensure!(
        alice.keyword("walrus")? == [second.clone()],
        "search answers"
    );
    wait_logged(&central, "backup taken", 1)?;
    let names = snapshots_in(&dest)?;
    ensure!(
        names.len() == 2,
        "the newest 2 of at least 5 backups are kept: {names:?}\n{taken:#?}"
    );
    ensure!(
        taken.iter().any(|l| l.contains("snapshots_removed=1")),
        "older snapshots were removed: {taken:#?}"
    );
    let said = central_says(&data, &["verify", text(&dest)?], true)?;
    ensure!(
        said.contains(&format!("snapshots/{}: 2 runs", names[1]))
            && said.contains("no damage")
            && !said.contains("no snapshot lists"),
        "the kept snapshots verify, and no blob only a removed one listed is left:\n{said}"
    );
    central.kill()?;

    // By hand, keeping one: the newest, with both runs.
    let said = central_says(&data, &["backup", text(&dest)?, "--keep", "1"], true)?;
    ensure!(
        said.contains("kept the newest 1 snapshots: removed 2 older ones"),
        "{said}"
    );
    ensure!(
        snapshots_in(&dest)? == [snapshot_of(&said)?],
        "one snapshot is left"
    );
    let restored = tmp.path().join("restored");
    let said = central_says(&restored, &["restore", text(&dest)?], true)?;
    ensure!(said.contains("reindexed 2 runs"), "{said}");
    let out = run_central(&data, &["backup", text(&dest)?, "--keep", "0"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && said.contains("--keep") && snapshots_in(&dest)?.len() == 1,
        "keeping none is refused, and nothing is taken: {said}"
    );

    // A period that is none is named, and serve does not start.
    std::fs::write(
        &config,
        format!("[backup]\ndest = \"{}\"\nevery = \"6x\"\n", text(&dest)?),
    )?;
    let refused = Central::start_on(&data, &[("KITH_CENTRAL_CONFIG", text(&config)?)]);
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("\"6x\": want a whole number and a unit")),
        "{:?}",
        refused.err()
    );
    // Nor with the backup folder inside the data directory.
    std::fs::write(
        &config,
        format!("[backup]\ndest = \"{}/b\"\nevery = \"1h\"\n", text(&data)?),
    )?;
    let refused = Central::start_on(&data, &[("KITH_CENTRAL_CONFIG", text(&config)?)]);
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("is inside the data directory")),
        "{:?}",
        refused.err()
    );
    Ok(())
}

#[test]
fn admins_see_how_the_backups_stand_and_members_do_not() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let mut central = Central::start_on(&data, &[])?;
    let root_token = central.register_admin("root.test", "server")?;
    let alice_token = central.register("alice.test", "laptop")?;
    let (root, alice) = (central.client(&root_token), central.client(&alice_token));
    let backup_of = |api: &Api| -> Result<Value> {
        let status = api.get("/api/status")?;
        ensure!(status.status == 200, "{status:?}");
        Ok(status.body["backup"].clone())
    };
    let said = backup_of(&root)?;
    ensure!(
        said["warning"]
            .as_str()
            .is_some_and(|w| w.contains("no backup configured")),
        "an admin is told none is configured: {said}"
    );
    ensure!(backup_of(&alice)?.is_null(), "a member is told nothing");
    central.kill()?;
    let said = central_says(&data, &["doctor"], true)?;
    ensure!(
        said.contains("backups: no good backup yet; warning: no backup configured"),
        "{said}"
    );

    let dest = tmp.path().join("backup");
    let config = tmp.path().join("central.toml");
    std::fs::write(
        &config,
        format!(
            "[backup]\ndest = \"{}\"\nevery = \"1h\"\nkeep = 2\n",
            text(&dest)?
        ),
    )?;
    let central = Central::start_on(&data, &[("KITH_CENTRAL_CONFIG", text(&config)?)])?;
    // None taken yet: the first is taken at once.
    wait_logged(&central, "backup taken", 1)?;
    let (root, alice) = (central.client(&root_token), central.client(&alice_token));
    let said = backup_of(&root)?;
    ensure!(
        said["last_good_dest"] == text(&dest)?
            && said["dest"] == text(&dest)?
            && said["every_secs"] == 3600
            && said["last_good_age_secs"].as_u64().is_some_and(|a| a < 60)
            && said["last_good_at"].is_string()
            && said["warning"].is_null(),
        "an admin sees the last good backup, and no warning: {said}"
    );
    ensure!(backup_of(&alice)?.is_null(), "a member is told nothing");
    let root_machine = Machine::new(&central, &root_token)?;
    let line = root_machine.text(&["status"])?;
    ensure!(
        line.contains("last good backup ") && line.contains(text(&dest)?),
        "kith status tells an admin: {line}"
    );
    let line = Machine::new(&central, &alice_token)?.text(&["status"])?;
    ensure!(!line.contains("backup"), "and not a member: {line}");
    let json = root_machine.json(&["status", "--json"])?;
    ensure!(
        json["central"]["backup"]["last_good_dest"] == text(&dest)?,
        "{json}"
    );
    drop(central);

    // A folder that cannot be written: serve goes on, and says so.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"")?;
    let unwritable = file.join("backup");
    std::fs::write(
        &config,
        format!(
            "[backup]\ndest = \"{}\"\nevery = \"1h\"\n",
            text(&unwritable)?
        ),
    )?;
    let central = Central::start_on(&data, &[("KITH_CENTRAL_CONFIG", text(&config)?)])?;
    let root = central.client(&root_token);
    // The failure is noted when the first scheduled attempt ends (at once:
    // this folder has no good backup), however busy the machine is.
    let deadline = std::time::Instant::now() + 2 * WITHIN;
    let said = loop {
        let said = backup_of(&root)?;
        let noted = said["warning"]
            .as_str()
            .is_some_and(|w| w.contains("the last attempt failed"));
        if noted || std::time::Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let none_yet = format!("no good backup to {} yet", text(&unwritable)?);
    ensure!(
        said["warning"]
            .as_str()
            .is_some_and(|w| w.contains(&none_yet) && w.contains("the last attempt failed")),
        "the failure is reported: {said}"
    );
    ensure!(root.keyword("anything")?.is_empty(), "serve still answers");
    drop(central);
    let said = central_says(&data, &["doctor", "--config", text(&config)?], true)?;
    ensure!(said.contains("the last attempt failed"), "{said}");
    Ok(())
}

/// Runs `restic ARGS` on the repository `repo`, its password in the
/// environment only; what it printed. Fails when restic is not installed
/// (tests/run.sh installs it).
fn restic(repo: &Path, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("restic")
        .arg("--repo")
        .arg(repo)
        .args(args)
        .env("RESTIC_PASSWORD", "a passphrase only the environment holds")
        .env_remove("RESTIC_REPOSITORY")
        .stdin(std::process::Stdio::null())
        .output()
        .context("cannot run restic: it is not installed (tests/run.sh installs it: apt-get install restic)")?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "restic {args:?} exited {:?}:\n{said}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(said)
}

/// The summary `restic backup --json` ends with.
fn restic_summary(said: &str) -> Result<Value> {
    said.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["message_type"] == "summary")
        .with_context(|| format!("no summary in:\n{said}"))
}

#[test]
fn a_backup_copied_off_site_with_restic_comes_back_whole() -> Result<()> {
    let mut central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let data = central.data_dir.clone();
    let tmp = tempfile::tempdir()?;
    let dest = tmp.path().join("backup");
    let mut runs = Vec::new();
    for (i, words) in ["the pangolin importer", "the walrus release"]
        .iter()
        .enumerate()
    {
        let id = alice.ingest(&delta(&format!("s-{i}"), 0, &line(words, i as u32)))?;
        alice.wait_indexed(&id, WITHIN)?;
        runs.push(id);
        central_says(&data, &["backup", text(&dest)?], true)?;
    }
    let repo = tmp.path().join("restic-repo");
    restic(&repo, &["init"])?;
    let first = restic_summary(&restic(&repo, &["backup", "--json", text(&dest)?])?)?;
    // A third backup, then the off-site copy again: only what is new.
    let late = alice.ingest(&delta("s-late", 0, &line("the checksum rewrite", 9)))?;
    alice.wait_indexed(&late, WITHIN)?;
    central_says(&data, &["backup", text(&dest)?], true)?;
    let second = restic_summary(&restic(&repo, &["backup", "--json", text(&dest)?])?)?;
    ensure!(
        second["files_unmodified"].as_u64() > Some(0)
            && second["files_new"].as_u64() > Some(0)
            && second["data_added"].as_u64() < first["data_added"].as_u64(),
        "the second copy is incremental: {second}\nafter {first}"
    );
    central.kill()?;

    let out = tmp.path().join("restic-restored");
    restic(&repo, &["restore", "latest", "--target", text(&out)?])?;
    let copy = out.join(dest.strip_prefix("/")?);
    let said = central_says(&data, &["verify", text(&copy)?], true)?;
    ensure!(
        said.contains("3 runs, ") && said.contains("no damage") && !said.contains("damaged:"),
        "the copy restic brought back verifies, the newest snapshot with 3 runs:\n{said}"
    );
    let restored = tmp.path().join("restored");
    let said = central_says(&restored, &["restore", text(&copy)?], true)?;
    ensure!(said.contains("reindexed 3 runs"), "{said}");
    let central = Central::start_on(&restored, &[])?;
    let alice = central.client(&token);
    ensure!(
        alice.keyword("checksum")? == [late],
        "the latest run is found"
    );
    ensure!(
        alice.keyword("pangolin")? == [runs[0].clone()],
        "and the first"
    );
    ensure!(alice.keyword("okapi")?.is_empty(), "and nothing else");
    Ok(())
}

/// The drill: three writers while serve backs up every second, a grant and
/// a revoked machine, central SIGKILLed while its schedule runs, restarted,
/// backed up once more; the newest snapshot restored into a new folder
/// holds every acknowledged delta byte for byte and once, and grants and
/// revocations hold.
#[test]
fn the_drill_writers_scheduled_backups_a_crash_and_a_restore() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("backup"));
    let config = tmp.path().join("central.toml");
    std::fs::write(
        &config,
        format!(
            "[backup]\ndest = \"{}\"\nevery = \"1s\"\nkeep = 3\n",
            text(&dest)?
        ),
    )?;
    let env = [("KITH_CENTRAL_CONFIG", text(&config)?)];
    let mut central = Central::start_on(&data, &env)?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let phone_token = central.register("alice.test", "old-phone")?;
    let writers = [
        ("alice-a", alice_token.clone()),
        ("alice-b", alice_token.clone()),
        ("bob-a", bob_token.clone()),
    ];
    // Each writer's source and its acknowledged bytes.
    let acked: Vec<(String, Vec<u8>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .iter()
            .map(|(source, token)| {
                let api = central.client(token);
                scope.spawn(move || -> Result<(String, Vec<u8>)> {
                    let mut bytes = Vec::new();
                    for k in 0..25 {
                        let l = line(&format!("{source} writes ostrich{k} again"), k % 60);
                        api.ingest(&delta(source, bytes.len() as u64, &l))?;
                        bytes.extend_from_slice(l.as_bytes());
                    }
                    Ok(((*source).to_owned(), bytes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a writer panicked"))?)
            .collect::<Result<_>>()
    })?;
    let alice = central.client(&alice_token);
    let conversations = alice.get("/api/conversations")?.body;
    let shared = conversations["conversations"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["title"].as_str().is_some_and(|t| t.contains("alice-a")))
        })
        .and_then(|c| c["id"].as_str())
        .context("alice-a's conversation")?
        .to_owned();
    let grant = alice.post(
        "/api/shares",
        &serde_json::json!({"scope": format!("conversation:{shared}"), "with": "bob.test"}),
    )?;
    ensure!(grant.status == 201 || grant.status == 200, "{grant:?}");
    central_says(
        &data,
        &[
            "machine",
            "revoke",
            "--user",
            "alice.test",
            "--name",
            "old-phone",
        ],
        true,
    )?;
    // A scheduled backup, then a crash while the schedule runs.
    let deadline = std::time::Instant::now() + WITHIN;
    while !dest.join("snapshots").exists() || snapshots_in(&dest)?.is_empty() {
        ensure!(std::time::Instant::now() < deadline, "no scheduled backup");
        std::thread::sleep(Duration::from_millis(100));
    }
    central.kill()?;
    // Restarted without its schedule: the next backup is taken by hand (a
    // scheduled one would hold the folder's lock).
    let central = Central::start_on(&data, &[])?;
    let said = central_says(&data, &["backup", text(&dest)?], true)?;
    let newest = snapshot_of(&said)?;
    let said = central_says(&data, &["verify", text(&dest)?], true)?;
    ensure!(said.contains("no damage"), "{said}");
    // A restarted central finishes indexing what the crash left pending.
    let bob = central.client(&bob_token);
    let deadline = std::time::Instant::now() + WITHIN;
    let before = loop {
        let found = bob.keyword("ostrich3")?;
        if found.len() == 2 || std::time::Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(central);

    let restored_dir = tmp.path().join("restored");
    let said = central_says(&restored_dir, &["restore", text(&dest)?], true)?;
    ensure!(
        said.contains(&newest) && said.contains("reindexed 75 runs"),
        "{said}"
    );
    let restored = Central::start_on(&restored_dir, &[])?;
    let chains: std::collections::BTreeMap<String, Vec<u8>> = [&alice_token, &bob_token]
        .into_iter()
        .map(|t| restored.client(t).chains())
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    for (source, bytes) in &acked {
        ensure!(
            chains.get(source) == Some(bytes),
            "{source}: the restored chain is not the acknowledged bytes, once"
        );
    }
    let bob = restored.client(&bob_token);
    // The same two runs (two equal scores may rank either way round).
    let (mut before, mut after) = (before, bob.keyword("ostrich3")?);
    before.sort();
    after.sort();
    ensure!(
        after == before && after.len() == 2,
        "bob reads his own and the shared: {after:?}, not {before:?}"
    );
    let gone = restored.client(&phone_token).get("/api/status")?;
    ensure!(
        gone.status == 401,
        "the revoked machine stays revoked: {gone:?}"
    );
    Ok(())
}
