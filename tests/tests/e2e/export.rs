//! `kith export`: a member's own conversations as a tar archive of their
//! exact bytes and kith's metadata, read back with `tar`; another's only
//! when shared, and never one that is not.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use kith_tests::{claude_user_line, delta, Central, Machine};
use serde_json::{json, Value};

/// A Claude Code user line saying `text`.
fn line(text: &str, s: u32) -> String {
    claude_user_line(text, &format!("2026-05-11T08:00:{s:02}.000Z"))
}

/// The archive at `tar` unpacked (by the system's `tar`) into `into`: its
/// manifest, and each conversation's JSONL as text, by conversation id.
fn unpack(tar: &Path, into: &Path) -> Result<(Value, Vec<(String, String)>)> {
    std::fs::create_dir_all(into)?;
    let out = std::process::Command::new("tar")
        .arg("-xf")
        .arg(tar)
        .arg("-C")
        .arg(into)
        .output()
        .context("cannot run tar")?;
    ensure!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = into.join("kith-export");
    let manifest: Value = serde_json::from_slice(&std::fs::read(root.join("manifest.json"))?)?;
    let mut jsonl = Vec::new();
    for c in manifest["conversations"].as_array().into_iter().flatten() {
        let id = c["id"].as_str().unwrap_or_default().to_owned();
        let bytes = std::fs::read(root.join(c["jsonl"].as_str().unwrap_or_default()))?;
        ensure!(
            c["bytes"] == bytes.len() && c["sha256"] == kith_shared::hash::sha256_hex(&bytes),
            "the manifest says the file's size and sha256: {c}"
        );
        let metadata: Value = serde_json::from_slice(&std::fs::read(
            root.join(c["metadata"].as_str().unwrap_or_default()),
        )?)?;
        ensure!(metadata["id"] == id.as_str(), "{metadata}");
        jsonl.push((id, String::from_utf8(bytes)?));
    }
    Ok((manifest, jsonl))
}

#[test]
fn a_member_exports_their_own_and_what_is_shared_never_the_rest() -> Result<()> {
    let central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let (alice, bob) = (central.client(&alice_token), central.client(&bob_token));
    let mine = [
        line("the pangolin importer drops rows", 1),
        line("the walrus release notes", 2),
    ];
    let shared = line("bob's okapi notes he shares", 3);
    let private = line("bob's private quokka diary", 4);
    for (i, text) in mine.iter().enumerate() {
        let id = alice.ingest(&delta(&format!("a-{i}"), 0, text))?;
        alice.wait_indexed(&id, std::time::Duration::from_secs(60))?;
    }
    let shared_run = bob.ingest(&delta("b-1", 0, &shared))?;
    let private_run = bob.ingest(&delta("b-2", 0, &private))?;
    let res = bob.post(
        "/api/shares",
        &json!({"scope": format!("conversation:{shared_run}"), "with": "alice.test"}),
    )?;
    ensure!(res.status == 201 || res.status == 200, "{res:?}");

    let machine = Machine::new(&central, &alice_token)?;
    let tmp = tempfile::tempdir()?;
    let all = tmp.path().join("mine.tar");
    let said = machine.text(&["export", "--out", all.to_str().context("utf-8")?])?;
    ensure!(said.contains("exported 2 conversations"), "{said}");
    use std::os::unix::fs::PermissionsExt;
    ensure!(std::fs::metadata(&all)?.permissions().mode() & 0o777 == 0o600);
    let (manifest, files) = unpack(&all, &tmp.path().join("mine"))?;
    ensure!(manifest["user"] == "alice.test", "{manifest}");
    let mut texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
    texts.sort();
    let mut want: Vec<&str> = mine.iter().map(String::as_str).collect();
    want.sort();
    ensure!(
        texts == want,
        "her own conversations, byte for byte as her agent wrote them: {texts:#?}"
    );
    ensure!(
        !files
            .iter()
            .any(|(_, t)| t.contains("okapi") || t.contains("quokka")),
        "none of bob's, shared or not"
    );

    // Named: bob's shared one, as the share covers it.
    let named = tmp.path().join("shared.tar");
    machine.text(&[
        "export",
        &shared_run,
        "--out",
        named.to_str().context("utf-8")?,
    ])?;
    let (manifest, files) = unpack(&named, &tmp.path().join("shared"))?;
    ensure!(
        files.len() == 1 && files[0].1 == shared,
        "the shared conversation's bytes: {files:?}"
    );
    ensure!(
        manifest["conversations"][0]["owner"] == "bob.test",
        "{manifest}"
    );

    // Bob's private one is not found, and nothing is written.
    let refused = tmp.path().join("private.tar");
    let said = machine.fails(&[
        "export",
        &private_run,
        "--out",
        refused.to_str().context("utf-8")?,
    ])?;
    ensure!(
        said.contains("not found") || said.contains("404"),
        "bob's private conversation is not found: {said}"
    );
    ensure!(
        !refused.exists() && !said.contains("quokka"),
        "nothing of it is written"
    );

    // Nothing since a time to come: said, and no file.
    let empty = tmp.path().join("empty.tar");
    let said = machine.fails(&[
        "export",
        "--since",
        "2099-01-01T00:00:00Z",
        "--out",
        empty.to_str().context("utf-8")?,
    ])?;
    ensure!(
        said.contains("nothing to export") && !empty.exists(),
        "{said}"
    );
    let said = machine.fails(&[
        "export",
        "--since",
        "someday",
        "--out",
        empty.to_str().context("utf-8")?,
    ])?;
    ensure!(
        said.contains("--since \"someday\""),
        "a bad time is named: {said}"
    );
    Ok(())
}
