//! Machine identity against a real PDS: the real `kith-central` binary, a
//! real `@atproto/pds` with an in-memory PLC (deploy/pds), all on loopback.
//! Each test uses its own handles on the binary's shared PDS, or its own PDS
//! when it stops it.

use std::path::Path;
use std::process::Output;

use anyhow::{Context, Result};
use kith_shared::hash::sha256_hex;
use kith_tests::pds::{run_central_with, Pds};
use kith_tests::Central;

/// Everything a command printed, to prove what it never shows.
#[derive(Default)]
struct Transcript(String);

impl Transcript {
    fn record(&mut self, out: &Output) {
        self.0.push_str(&String::from_utf8_lossy(&out.stdout));
        self.0.push_str(&String::from_utf8_lossy(&out.stderr));
    }

    fn assert_never_shows(&self, secret: &str) {
        assert!(
            !self.0.contains(secret),
            "a secret was printed:\n{}",
            self.0
        );
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A family member with an account on `pds`, added to central with `--pds`.
struct Member<'a> {
    pds: &'a Pds,
    handle: &'static str,
    password: &'static str,
    did: String,
}

impl<'a> Member<'a> {
    fn add(
        pds: &'a Pds,
        central: &Path,
        handle: &'static str,
        password: &'static str,
        log: &mut Transcript,
    ) -> Result<Self> {
        let email = format!("{}@example.com", handle.trim_end_matches(".test"));
        let did = pds.create_account(handle, &email, password)?;
        let out = run_central_with(
            central,
            &["user", "add", "--handle", handle, "--pds", &pds.url],
            &[],
            "",
        )?;
        log.record(&out);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains(&did), "{}", stdout(&out));
        Ok(Self {
            pds,
            handle,
            password,
            did,
        })
    }

    /// `machine register` with the main password in KITH_PDS_PASSWORD.
    fn register(&self, central: &Path, name: &str, password: &str) -> Result<Output> {
        run_central_with(
            central,
            &["machine", "register", "--user", self.handle, "--name", name],
            &[("KITH_PDS_PASSWORD", password)],
            "",
        )
    }

    fn revoke(&self, central: &Path, name: &str) -> Result<Output> {
        run_central_with(
            central,
            &["machine", "revoke", "--user", self.handle, "--name", name],
            &[("KITH_PDS_PASSWORD", self.password)],
            "",
        )
    }

    fn app_passwords(&self) -> Result<Vec<String>> {
        self.pds.app_passwords(self.handle, self.password)
    }
}

/// The token on the last line of a successful register's stdout.
fn token_of(out: &Output) -> String {
    stdout(out)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Names of the machines in central's registry.
fn machines(central: &Path) -> Result<Vec<String>> {
    let out = run_central_with(central, &["machine", "list"], &[], "")?;
    assert!(out.status.success(), "{}", stderr(&out));
    Ok(stdout(&out)
        .lines()
        .filter_map(|l| l.split('\t').nth(1).map(str::to_owned))
        .collect())
}

/// The bytes of the registry database and its WAL.
fn registry_bytes(central: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(central)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("registry.sqlite") {
            bytes.extend(std::fs::read(&path)?);
        }
    }
    Ok(bytes)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn register_with_the_main_password_gives_a_working_token_stored_only_as_its_hash() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let alice = Member::add(
        pds,
        &central.data_dir,
        "alice.test",
        "alice-main-pw-1",
        &mut log,
    )?;

    let out = alice.register(&central.data_dir, "laptop", alice.password)?;
    log.record(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = token_of(&out);
    // An app password: xxxx-xxxx-xxxx-xxxx.
    assert_eq!(token.len(), 19, "{token:?}");
    assert_eq!(token.matches('-').count(), 3, "{token:?}");

    let s = central.client(&token).get("/api/status")?;
    assert_eq!(s.status, 200, "{s:?}");
    assert_eq!(
        (s.body["user"].as_str(), s.body["machine"].as_str()),
        (Some("alice.test"), Some("laptop"))
    );
    // The same secret is a real app password on the PDS, named after the machine.
    assert_eq!(pds.login_status(alice.handle, &token)?, 200);
    let names = alice.app_passwords()?;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("kith-laptop-"), "{names:?}");

    // Central keeps the hash, never the token.
    let db = registry_bytes(&central.data_dir)?;
    assert!(contains(&db, &sha256_hex(token.as_bytes())));
    assert!(!contains(&db, &token));
    assert!(!contains(&db, alice.password));
    assert!(contains(&db, &alice.did));

    // The token shows once, on stdout only; the main password never.
    assert_eq!(stdout(&out).matches(&token).count(), 1);
    assert!(!stderr(&out).contains(&token));
    let listed = run_central_with(&central.data_dir, &["machine", "list"], &[], "")?;
    log.record(&listed);
    assert!(!stdout(&listed).contains(&token));
    log.assert_never_shows(alice.password);
    Ok(())
}

#[test]
fn register_reads_the_password_from_stdin_and_writes_auth_json() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let carol = Member::add(
        pds,
        &central.data_dir,
        "carol.test",
        "carol-main-pw-3",
        &mut log,
    )?;
    let dir = tempfile::tempdir()?;
    let auth = dir.path().join("auth.json");
    std::fs::write(&auth, "{\"old\": true}\n")?;

    let out = run_central_with(
        &central.data_dir,
        &[
            "machine",
            "register",
            "--user",
            carol.handle,
            "--name",
            "desk",
            "--auth-json",
            auth.to_str().context("utf-8 path")?,
            "--central-url",
            &central.url,
        ],
        &[],
        &format!("{}\n", carol.password),
    )?;
    log.record(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&auth)?)?;
    assert_eq!(written["central_url"], central.url.as_str());
    let token = written["token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(central.client(&token).get("/api/status")?.status, 200);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&auth)?.permissions().mode() & 0o777,
            0o600
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("auth.json.bak"))?,
        "{\"old\": true}\n"
    );
    assert!(!dir.path().join("auth.json.tmp").exists());
    log.assert_never_shows(&token);
    log.assert_never_shows(carol.password);
    Ok(())
}

#[test]
fn a_wrong_password_is_refused_and_registers_nothing() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let dave = Member::add(
        pds,
        &central.data_dir,
        "dave.test",
        "dave-main-pw-4",
        &mut log,
    )?;

    let wrong = "not-daves-password";
    let out = dave.register(&central.data_dir, "laptop", wrong)?;
    log.record(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused the password for dave.test"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
    assert!(machines(&central.data_dir)?.is_empty());
    assert!(dave.app_passwords()?.is_empty());

    // No password at all (no env, empty stdin) is refused before the PDS is asked.
    let out = run_central_with(
        &central.data_dir,
        &[
            "machine",
            "register",
            "--user",
            "dave.test",
            "--name",
            "laptop",
        ],
        &[],
        "",
    )?;
    log.record(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no main PDS password"),
        "{}",
        stderr(&out)
    );
    log.assert_never_shows(wrong);
    log.assert_never_shows(dave.password);
    Ok(())
}

#[test]
fn a_handle_the_pds_does_not_know_is_a_clear_error() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let out = run_central_with(
        &central.data_dir,
        &["user", "add", "--handle", "nobody.test", "--pds", &pds.url],
        &[],
        "",
    )?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the handle nobody.test does not resolve on the PDS at"),
        "{}",
        stderr(&out)
    );
    let users = run_central_with(&central.data_dir, &["user", "list"], &[], "")?;
    assert_eq!(stdout(&users), "");
    Ok(())
}

#[test]
fn a_duplicate_machine_name_is_refused_before_the_pds_is_asked() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let erin = Member::add(
        pds,
        &central.data_dir,
        "erin.test",
        "erin-main-pw-5",
        &mut log,
    )?;
    let first = erin.register(&central.data_dir, "laptop", erin.password)?;
    log.record(&first);
    assert!(first.status.success(), "{}", stderr(&first));

    let again = erin.register(&central.data_dir, "laptop", erin.password)?;
    log.record(&again);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("erin.test already has a machine named \"laptop\""),
        "{}",
        stderr(&again)
    );
    // Still one app password on the PDS, and the first token still works.
    assert_eq!(erin.app_passwords()?.len(), 1);
    let token = token_of(&first);
    assert_eq!(central.client(&token).get("/api/status")?.status, 200);
    log.assert_never_shows(erin.password);
    Ok(())
}

#[test]
fn revoke_stops_the_token_at_once_and_on_the_pds() -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let fred = Member::add(
        pds,
        &central.data_dir,
        "fred.test",
        "fred-main-pw-6",
        &mut log,
    )?;
    let out = fred.register(&central.data_dir, "laptop", fred.password)?;
    log.record(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = token_of(&out);
    let api = central.client(&token);
    assert_eq!(api.get("/api/status")?.status, 200);

    let revoked = fred.revoke(&central.data_dir, "laptop")?;
    log.record(&revoked);
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    let r = api.get("/api/status")?;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    assert_eq!(pds.login_status(fred.handle, &token)?, 401);
    assert!(fred.app_passwords()?.is_empty());
    assert!(!stdout(&revoked).contains(&token) && !stderr(&revoked).contains(&token));
    log.assert_never_shows(fred.password);
    Ok(())
}

#[test]
fn a_pds_that_is_down_registers_nothing_and_revoke_still_works_locally() -> Result<()> {
    let mut pds = Pds::start()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let gwen = Member::add(
        &pds,
        &central.data_dir,
        "gwen.test",
        "gwen-main-pw-7",
        &mut log,
    )?;
    let (handle, password) = (gwen.handle, gwen.password);
    let out = gwen.register(&central.data_dir, "laptop", password)?;
    log.record(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = token_of(&out);
    drop(gwen);
    pds.kill()?;

    let register = |name: &str| {
        run_central_with(
            &central.data_dir,
            &["machine", "register", "--user", handle, "--name", name],
            &[("KITH_PDS_PASSWORD", password)],
            "",
        )
    };
    let down = register("desktop")?;
    log.record(&down);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        stderr(&down).contains("cannot reach the PDS at"),
        "{}",
        stderr(&down)
    );
    assert_eq!(machines(&central.data_dir)?, vec!["laptop".to_owned()]);

    // Revoke while the PDS is down: kith refuses the token at once and says
    // the PDS side failed.
    let revoked = run_central_with(
        &central.data_dir,
        &["machine", "revoke", "--user", handle, "--name", "laptop"],
        &[("KITH_PDS_PASSWORD", password)],
        "",
    )?;
    log.record(&revoked);
    assert_eq!(revoked.status.code(), Some(1));
    let err = stderr(&revoked);
    assert!(
        err.contains("kith no longer accepts the token, but revoking app password")
            && err.contains("cannot reach the PDS at"),
        "{err}"
    );
    let r = central.client(&token).get("/api/status")?;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    assert!(!err.contains(&token) && !stdout(&revoked).contains(&token));
    log.assert_never_shows(password);
    Ok(())
}

/// central's PDS client on its own: the answers the CLI builds its messages on.
#[test]
fn the_pds_client_names_each_refusal_and_never_shows_a_password() -> Result<()> {
    use kith_central::pds::{self, Password};

    let pds = Pds::shared()?;
    let did = pds.create_account("hank.test", "hank@example.com", "hank-main-pw-8")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let main = Password::new("hank-main-pw-8".into());
    assert_eq!(format!("{main:?}"), "Password(***)");
    assert_eq!(
        rt.block_on(pds::resolve_handle(&pds.url, "hank.test"))?,
        did
    );

    let app = rt.block_on(pds::create_app_password(
        &pds.url,
        "hank.test",
        &main,
        "kith-dup",
    ))?;
    assert_eq!(app.name, "kith-dup");
    assert!(!format!("{app:?}").contains(app.secret.expose()));
    assert_eq!(
        rt.block_on(pds::check_app_password(&pds.url, "hank.test", &app.secret))?,
        did
    );

    // The PDS answers a duplicate name with a bare 500.
    let dup = rt
        .block_on(pds::create_app_password(
            &pds.url,
            "hank.test",
            &main,
            "kith-dup",
        ))
        .err()
        .context("a duplicate app password name was accepted")?;
    assert_eq!(dup.code(), "app_password_exists");
    assert!(dup
        .to_string()
        .contains("an app password with this name already exists"));

    // An app password cannot mint another one.
    let scoped = rt
        .block_on(pds::create_app_password(
            &pds.url,
            "hank.test",
            &app.secret,
            "kith-other",
        ))
        .err()
        .context("an app password created another")?;
    assert_eq!(scoped.code(), "main_password_required");

    let wrong = Password::new("hank-wrong-pw".into());
    let refused = rt
        .block_on(pds::check_app_password(&pds.url, "hank.test", &wrong))
        .err()
        .context("a wrong password logged in")?;
    assert_eq!(refused.code(), "wrong_password");
    for e in [&dup, &scoped, &refused] {
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("hank-main-pw-8") && !shown.contains("hank-wrong-pw"));
        assert!(!shown.contains(app.secret.expose()));
    }

    rt.block_on(pds::revoke_app_password(
        &pds.url,
        "hank.test",
        &main,
        "kith-dup",
    ))?;
    assert_eq!(pds.login_status("hank.test", app.secret.expose())?, 401);
    Ok(())
}

/// The family story end to end: two people on a real PDS, three machines,
/// capture, one shared run, reads both ways, one machine revoked.
#[test]
fn two_members_three_machines_share_one_run_and_revoke_one_machine() -> Result<()> {
    use serde_json::json;
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let mut log = Transcript::default();
    let gina = Member::add(
        pds,
        &central.data_dir,
        "gina.test",
        "gina-main-pw-7",
        &mut log,
    )?;
    let hank = Member::add(
        pds,
        &central.data_dir,
        "ivan.test",
        "ivan-main-pw-7",
        &mut log,
    )?;
    let mut token = |m: &Member, name: &str| -> Result<String> {
        let out = m.register(&central.data_dir, name, m.password)?;
        log.record(&out);
        assert!(out.status.success(), "{}", stderr(&out));
        Ok(token_of(&out))
    };
    let gina_laptop = central.client(&token(&gina, "laptop")?);
    let gina_desktop = central.client(&token(&gina, "desktop")?);
    let hank_laptop = central.client(&token(&hank, "laptop")?);

    // Each captures a run; Gina shares hers with Hank.
    let capture = |api: &kith_tests::Api, source: &str, text: &str| -> Result<String> {
        let line = kith_tests::claude_user_line(text, "2026-05-11T08:00:00Z");
        let r = api.post("/api/runs", &kith_tests::delta(source, 0, &line))?;
        assert_eq!(r.status, 202, "{r:?}");
        let id = r.body["run_id"].as_str().unwrap_or_default().to_owned();
        api.wait_indexed(&id, std::time::Duration::from_secs(10))?;
        Ok(id)
    };
    let shared = capture(&gina_laptop, "g1", "the greenhouse sensor firmware")?;
    let private = capture(&gina_desktop, "g2", "the greenhouse budget spreadsheet")?;
    let hanks = capture(&hank_laptop, "h1", "the greenhouse door hinge")?;
    let grant = gina_desktop.post(
        "/api/shares",
        &json!({"scope": format!("run:{shared}"), "with": "ivan.test"}),
    )?;
    assert_eq!(grant.status, 201, "{grant:?}");

    let search = |api: &kith_tests::Api| -> Result<Vec<String>> {
        let r = api.post(
            "/api/search",
            &json!({"query": "greenhouse", "mode": "keyword"}),
        )?;
        let mut ids: Vec<String> = r.body["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["run_id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        Ok(ids)
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // Gina reads both of hers from either machine, never Hank's.
    for api in [&gina_laptop, &gina_desktop] {
        assert_eq!(search(api)?, sorted(vec![shared.clone(), private.clone()]));
        assert_eq!(api.get(&format!("/api/runs/{hanks}"))?.status, 404);
    }
    // Hank reads his own and the shared one, never Gina's private run.
    assert_eq!(
        search(&hank_laptop)?,
        sorted(vec![shared.clone(), hanks.clone()])
    );
    assert_eq!(
        hank_laptop
            .get_bytes(&format!("/api/runs/{shared}/jsonl"))?
            .0,
        200
    );
    for path in [
        format!("/api/runs/{private}"),
        format!("/api/runs/{private}/jsonl"),
    ] {
        assert_eq!(hank_laptop.get(&path)?.status, 404, "{path}");
    }
    let audit = gina_laptop.get("/api/audit")?;
    assert!(audit.body["entries"].as_array().is_some_and(|e| e
        .iter()
        .all(|x| x["reader"] == "ivan.test" && x["run_id"] == shared.as_str())));

    // Gina's laptop is revoked: it is refused at once, her desktop and Hank
    // keep working, and her data stays.
    let out = gina.revoke(&central.data_dir, "laptop")?;
    log.record(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(gina_laptop.get("/api/status")?.status, 401);
    assert_eq!(
        search(&gina_desktop)?,
        sorted(vec![shared.clone(), private.clone()])
    );
    assert_eq!(search(&hank_laptop)?, sorted(vec![shared, hanks]));
    assert_eq!(
        gina.app_passwords()?.len(),
        1,
        "only the desktop's app password is left"
    );
    log.assert_never_shows(gina.password);
    log.assert_never_shows(hank.password);
    Ok(())
}
