//! The web page in a real headless Chromium, against the real central and a
//! real PDS on loopback: alice signs in with her PDS password, searches,
//! reads a conversation and shares it with bob; bob signs in and reads it
//! until alice revokes, then gets "not found"; a local member signs in with
//! the one-time link `kith web --print` gives. Also: the session cookie's
//! flags, CSRF refusals, sign-out ending the session on the server, and
//! failed sign-ins refused then rate-limited.
//!
//! On failure, a screenshot of each browser's page is written to the
//! test's temp dir (kept, and named in the failure).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kith_tests::browser::{Browser, Driver};
use kith_tests::pds::{run_central_with, Pds};
use kith_tests::{bin, claude_response_line, claude_user_line, delta, Api, Central};
use serde_json::json;

// Handles are unique in the test binary: the PDS these tests share
// (`Pds::shared`) serves the identity tests' members too.
const ALICE: (&str, &str) = ("alice-web.test", "alice-pds-pass-1");
const BOB: (&str, &str) = ("bob-web.test", "bob-pds-pass-1");
const CAROL: (&str, &str) = ("carol-web.test", "carol-pds-pass-1");

/// Adds a PDS member to central; registers a machine for them if `machine`.
fn member(pds: &Pds, data: &Path, (handle, password): (&str, &str)) -> Result<()> {
    let email = format!("{}@example.com", handle.trim_end_matches(".test"));
    pds.create_account(handle, &email, password)?;
    let out = run_central_with(
        data,
        &["user", "add", "--handle", handle, "--pds", &pds.url],
        &[],
        "",
    )?;
    ensure!(
        out.status.success(),
        "user add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `machine register` for a PDS member; the machine's token.
fn machine(data: &Path, (handle, password): (&str, &str), name: &str) -> Result<String> {
    let out = run_central_with(
        data,
        &["machine", "register", "--user", handle, "--name", name],
        &[("KITH_PDS_PASSWORD", password)],
        "",
    )?;
    ensure!(
        out.status.success(),
        "register: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned())
}

/// Posts one conversation (its own transcript `source`) and waits until it
/// is searchable; its first run id.
fn conversation(api: &Api, source: &str, lines: &[String]) -> Result<String> {
    let jsonl = lines.concat();
    let res = api.post("/api/runs", &delta(source, 0, &jsonl))?;
    ensure!(res.status == 202, "ingest: {:?}", res.body);
    let run = res.body["run_id"].as_str().unwrap_or_default().to_owned();
    api.wait_indexed(&run, Duration::from_secs(60))?;
    Ok(run)
}

fn assistant_line(text: &str, ts: &str) -> String {
    let line = json!({
        "type": "assistant", "uuid": format!("a-{ts}"), "parentUuid": null, "sessionId": "s1",
        "timestamp": ts, "cwd": "/home/alice/proj",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}
    });
    format!("{line}\n")
}

fn sign_in(b: &Browser<'_>, base: &str, (handle, password): (&str, &str)) -> Result<()> {
    b.goto(&format!("{base}/signin"))?;
    b.fill("input[name=handle]", handle)?;
    b.fill("input[name=password]", password)?;
    b.click("button[type=submit]")?;
    b.wait("#signin-error, .who")
}

/// The session cookie a browser holds.
fn session_cookie(b: &Browser<'_>) -> Result<kith_tests::browser::Cookie> {
    b.cookies()?
        .into_iter()
        .find(|c| c.name == "kith_session")
        .context("no kith_session cookie")
}

/// A plain HTTP client that does not follow redirects (to see them).
/// The `name=value` of the first cookie `res` sets ("" when none).
fn set_cookie(res: &reqwest::blocking::Response) -> String {
    res.headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .to_owned()
}

/// The value of the hidden input `name` in a page ("" when none).
fn hidden(page: &str, name: &str) -> String {
    page.split(&format!("name=\"{name}\" value=\""))
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_default()
        .to_owned()
}

/// Opens a `kith web` link in a browser and signs in on the page it shows.
fn open_link(b: &Browser<'_>, link: &str, handle: &str) -> Result<()> {
    b.goto(link)?;
    let page = b.text()?;
    ensure!(page.contains(&format!("Sign in as {handle}")), "{page}");
    b.click("#signin-link")?;
    b.wait(".who")?;
    Ok(())
}

/// The password sign-in form, filled and posted as a browser does (with
/// the form page's cookie and CSRF token).
fn post_sign_in(
    client: &reqwest::blocking::Client,
    base: &str,
    handle: &str,
    password: &str,
) -> Result<reqwest::blocking::Response> {
    let form = client.get(format!("{base}/signin")).send()?;
    let cookie = set_cookie(&form);
    let csrf = hidden(&form.text()?, "csrf");
    Ok(client
        .post(format!("{base}/signin"))
        .header("cookie", cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("handle", handle),
            ("password", password),
        ])
        .send()?)
}

fn http() -> Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

/// A search hit deep in a long conversation opens the page of the reader
/// that holds its turn (the reader shows 500 turns a page), with a link to
/// the turns before it.
#[test]
fn a_hit_deep_in_a_long_conversation_opens_the_page_that_holds_it() -> Result<()> {
    let central = Central::start()?;
    let base = central.url.clone();
    let token = kith_tests::register_local(&central.data_dir, "ivy.local", "laptop")?;
    let api = central.client(&token);
    let lines: Vec<String> = (1..=1200)
        .map(|i| {
            let word = if i == 1100 { "zeppelin" } else { "routine" };
            claude_user_line(
                &format!("turn {i}: the {word} check"),
                &format!(
                    "2026-05-03T{:02}:{:02}:{:02}Z",
                    i / 3600,
                    i / 60 % 60,
                    i % 60
                ),
            )
        })
        .collect();
    conversation(&api, "ivy-long", &lines)?;
    let (client, cookie) = link_session(&base, &api)?;
    let get = |path: &str| -> Result<String> {
        let res = client
            .get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .send()?;
        ensure!(res.status() == 200, "{path}: {}", res.status());
        Ok(res.text()?)
    };
    let results = get("/?q=zeppelin&mode=keyword")?;
    let href = results
        .split("class=\"hit\" href=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .context("no hit")?
        .replace("&#38;", "&");
    let reader = get(&href)?;
    ensure!(reader.contains("turn 1100: the zeppelin check"), "{href}");
    ensure!(!reader.contains("turn 999: "), "{href}: only its page");
    ensure!(reader.contains("Earlier turns"), "{href}");
    let first = href.split('?').next().unwrap_or_default();
    let start = get(first)?;
    ensure!(start.contains("turn 1: ") && !start.contains("zeppelin"));
    ensure!(!start.contains("Earlier turns"));
    Ok(())
}

/// A web session signed in with a one-time link, as `kith web` opens it:
/// the client and the session's cookie.
fn link_session(base: &str, api: &Api) -> Result<(reqwest::blocking::Client, String)> {
    let link = api.post("/api/web/link", &json!({}))?;
    ensure!(link.status == 201, "{link:?}");
    let client = http()?;
    let page = client
        .get(format!(
            "{base}{}",
            link.body["path"].as_str().unwrap_or_default()
        ))
        .send()?;
    let signin = set_cookie(&page);
    let html = page.text()?;
    let res = client
        .post(format!("{base}/signin/link"))
        .header("cookie", signin)
        .form(&[
            ("csrf", hidden(&html, "csrf").as_str()),
            ("token", hidden(&html, "token").as_str()),
        ])
        .send()?;
    let cookie = set_cookie(&res);
    ensure!(cookie.starts_with("kith_session="), "{cookie}");
    Ok((client, cookie))
}

/// The admin page shows the family's health and revokes any member's
/// machine; a member can neither see it nor revoke another's machine.
#[test]
fn an_admin_sees_the_familys_health_and_revokes_any_machine() -> Result<()> {
    let central = Central::start()?;
    let base = central.url.clone();
    let data = central.data_dir.clone();
    let admin = central.client(&kith_tests::register_local(&data, "ada.local", "laptop")?);
    let made = kith_tests::run_central(&data, &["user", "admin", "ada.local"])?;
    ensure!(made.status.success(), "{made:?}");
    let joe_token = kith_tests::register_local(&data, "joe.local", "desk")?;
    let joe = central.client(&joe_token);
    conversation(
        &joe,
        "joe-1",
        &[claude_user_line("joe's notes", "2026-05-03T10:00:00Z")],
    )?;

    let (client, cookie) = link_session(&base, &admin)?;
    let page = client
        .get(format!("{base}/admin"))
        .header("cookie", &cookie)
        .send()?;
    ensure!(page.status() == 200);
    let html = page.text()?;
    for what in [
        "Health",
        "Chunks embedded",
        "Waiting to be indexed",
        "Archive",
        "joe.local",
    ] {
        ensure!(html.contains(what), "{what} missing: {html}");
    }
    ensure!(
        !html.contains("joe's notes"),
        "no member's text on the admin page"
    );

    // A member: no admin page, and another's machine is "not found".
    let (joe_client, joe_cookie) = link_session(&base, &joe)?;
    let page = joe_client
        .get(format!("{base}/admin"))
        .header("cookie", &joe_cookie)
        .send()?;
    ensure!(page.status() == 404);
    let mine = joe_client
        .get(format!("{base}/machines"))
        .header("cookie", &joe_cookie)
        .send()?;
    let csrf = hidden(&mine.text()?, "csrf");
    let users = kith_tests::run_central(&data, &["user", "list"])?;
    let list = String::from_utf8_lossy(&users.stdout).into_owned();
    let id_of = |handle: &str| -> String {
        list.lines()
            .find(|l| l.starts_with(handle))
            .and_then(|l| l.split('\t').nth(1))
            .unwrap_or_default()
            .to_owned()
    };
    let refused = joe_client
        .post(format!("{base}/machines/revoke"))
        .header("cookie", &joe_cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "laptop"),
            ("user", &id_of("ada.local")),
        ])
        .send()?;
    ensure!(refused.status() == 404, "{}", refused.status());
    ensure!(
        admin.get("/api/status")?.status == 200,
        "ada's machine lives"
    );

    // The admin revokes joe's desk: its token stops at once.
    let page = client
        .get(format!("{base}/admin"))
        .header("cookie", &cookie)
        .send()?;
    let csrf = hidden(&page.text()?, "csrf");
    let done = client
        .post(format!("{base}/machines/revoke"))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "desk"),
            ("user", &id_of("joe.local")),
        ])
        .send()?;
    ensure!(
        done.status().is_success() || done.status().is_redirection(),
        "{}",
        done.status()
    );
    ensure!(joe.get("/api/status")?.status == 401, "revoked");
    Ok(())
}

/// A PDS that does not answer: the sign-in page says so plainly, without
/// its address or the HTTP client's reason (whoever sees this page is not
/// signed in), and the attempt counts as no failure.
#[test]
fn a_pds_that_does_not_answer_is_named_without_its_address() -> Result<()> {
    const HAL: (&str, &str) = ("hal.test", "hal-pds-pass-1");
    let mut pds = Pds::start()?;
    let central = Central::start()?;
    member(&pds, &central.data_dir, HAL)?;
    let address = pds.url.trim_start_matches("http://").to_owned();
    pds.kill()?;
    let client = http()?;
    for _ in 0..6 {
        let res = post_sign_in(&client, &central.url, HAL.0, HAL.1)?;
        ensure!(res.status() == 503, "{}", res.status());
        let page = res.text()?;
        ensure!(page.contains("Your PDS did not answer"), "{page}");
        ensure!(!page.contains(&address), "the page names the PDS: {page}");
    }
    Ok(())
}

/// A machine's token is an app password on the PDS, so the sign-in form
/// takes it: the session it opens is that machine's and ends when the
/// machine is revoked, and a revoked machine's token signs nothing in,
/// even while the PDS still takes it (here its revocation there failed).
#[test]
fn a_machine_token_signs_in_only_while_its_machine_lives() -> Result<()> {
    const GINA: (&str, &str) = ("gina-web.test", "gina-pds-pass-1");
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let (data, base) = (central.data_dir.clone(), central.url.clone());
    member(pds, &data, GINA)?;
    let token = machine(&data, GINA, "laptop")?;
    let client = http()?;
    let sign_in = |password: &str| -> Result<(u16, String)> {
        let res = post_sign_in(&client, &base, GINA.0, password)?;
        Ok((res.status().as_u16(), set_cookie(&res)))
    };
    let recent = |cookie: &str| -> Result<u16> {
        Ok(client
            .get(format!("{base}/recent"))
            .header("cookie", cookie)
            .send()?
            .status()
            .as_u16())
    };
    let (status, by_token) = sign_in(&token)?;
    ensure!(
        status == 303 && by_token.starts_with("kith_session="),
        "{status} {by_token}"
    );
    ensure!(recent(&by_token)? == 200);
    // Revoked without the main password: kith stops taking the token, the
    // PDS still does.
    let revoke = run_central_with(
        &data,
        &["machine", "revoke", "--user", GINA.0, "--name", "laptop"],
        &[],
        "",
    )?;
    ensure!(!revoke.status.success(), "the PDS step needs the password");
    ensure!(central.client(&token).get("/api/status")?.status == 401);
    ensure!(
        pds.login_status(GINA.0, &token)? == 200,
        "the PDS still takes it"
    );
    ensure!(
        recent(&by_token)? == 303,
        "the machine's session ended with it"
    );
    let (status, cookie) = sign_in(&token)?;
    ensure!(
        status == 401 && !cookie.starts_with("kith_session="),
        "{status} {cookie}"
    );
    let (status, by_password) = sign_in(GINA.1)?;
    ensure!(status == 303 && recent(&by_password)? == 200, "{status}");
    Ok(())
}

#[test]
fn family_uses_the_web_page_in_a_real_browser() -> Result<()> {
    let shots = tempfile::tempdir()?;
    let driver = Driver::start()?;
    let alice_b = driver.browser(&shots.path().join("alice-profile"))?;
    let bob_b = driver.browser(&shots.path().join("bob-profile"))?;
    let dave_b = driver.browser(&shots.path().join("dave-profile"))?;
    let res = scenario(&alice_b, &bob_b, &dave_b);
    if let Err(e) = res {
        let dir = shots.keep();
        for (name, b) in [("alice", &alice_b), ("bob", &bob_b), ("dave", &dave_b)] {
            let path: PathBuf = dir.join(format!("{name}.png"));
            let _ = b.screenshot(&path);
        }
        bail!(
            "{e:#}\nscreenshots of each browser's page: {}",
            dir.display()
        );
    }
    Ok(())
}

fn scenario(alice_b: &Browser<'_>, bob_b: &Browser<'_>, dave_b: &Browser<'_>) -> Result<()> {
    let pds = Pds::shared()?;
    let central = Central::start()?;
    let data = central.data_dir.clone();
    let base = central.url.clone();
    for m in [ALICE, BOB, CAROL] {
        member(pds, &data, m)?;
    }
    let alice = central.client(&machine(&data, ALICE, "laptop")?);
    let shared_run = conversation(
        &alice,
        "alice-walrus",
        &[
            claude_user_line(
                "plan the walrus migration <img src=x id=injected>",
                "2026-05-01T10:00:00Z",
            ),
            assistant_line(
                "Walrus plan:\n```\ncargo run --bin walrus-migrate\n```",
                "2026-05-01T10:00:05Z",
            ),
        ],
    )?;
    let private_run = conversation(
        &alice,
        "alice-private",
        &[claude_user_line(
            "the private narwhal diary",
            "2026-05-02T10:00:00Z",
        )],
    )?;

    // A wrong password is refused, with a session for nobody.
    sign_in(alice_b, &base, (ALICE.0, "not-her-password"))?;
    ensure!(
        alice_b
            .text_of("#signin-error")?
            .contains("Wrong handle or password"),
        "{}",
        alice_b.text()?
    );
    ensure!(alice_b.cookies()?.iter().all(|c| c.name != "kith_session"));

    // Alice signs in with her PDS password; the cookie has its flags.
    sign_in(alice_b, &base, ALICE)?;
    ensure!(alice_b.text_of(".who")? == ALICE.0, "{}", alice_b.text()?);
    let cookie = session_cookie(alice_b)?;
    ensure!(cookie.http_only && cookie.secure, "{cookie:?}");
    ensure!(cookie.same_site == "Lax", "{cookie:?}");

    // "/" focuses the search box (the script runs under the CSP).
    alice_b.key("/")?;
    ensure!(
        alice_b.focused_id()? == "q",
        "the / shortcut did not focus the search"
    );

    // She searches, and finds the conversation with its match highlighted.
    alice_b.fill("#q", "walrus")?;
    alice_b.click("select[name=mode] option[value=keyword]")?;
    alice_b.click(".search button[type=submit]")?;
    alice_b.wait(".results, #no-results")?;
    let results = alice_b.text_of(".results")?;
    ensure!(results.contains("plan the walrus migration"), "{results}");
    ensure!(
        results.contains(ALICE.0) && results.contains("laptop"),
        "{results}"
    );
    ensure!(!results.contains("narwhal"), "{results}");
    ensure!(alice_b
        .text_of(".results mark")?
        .eq_ignore_ascii_case("walrus"));

    // She opens it: turns in order, code monospaced, the prompt's markup
    // shown as text (escaped), and a raw download.
    alice_b.click(".results a.title")?;
    alice_b.wait("#conversation-title")?;
    let url = alice_b.url()?;
    ensure!(url.starts_with(&format!("{base}/c/")), "{url}");
    let title = alice_b.text_of("#conversation-title")?;
    ensure!(title.contains("<img src=x id=injected>"), "{title}");
    ensure!(
        !alice_b.has("#injected")?,
        "the prompt's markup became an element"
    );
    ensure!(
        alice_b
            .text_of("pre code")?
            .contains("cargo run --bin walrus-migrate"),
        "{}",
        alice_b.text()?
    );
    ensure!(alice_b.has("a[download][href$='/raw']")?);
    let cookie_header = format!("kith_session={}", cookie.value);
    let raw = http()?
        .get(format!("{url}/raw"))
        .header("cookie", &cookie_header)
        .send()?;
    ensure!(raw.status() == 200);
    ensure!(raw.text()?.contains("plan the walrus migration"));

    // A form without the CSRF token, or with another, is refused and shares
    // nothing.
    for csrf in [None, Some("0".repeat(64))] {
        let mut form = vec![
            ("conversation", shared_run.clone()),
            ("with", BOB.0.to_owned()),
        ];
        if let Some(c) = &csrf {
            form.push(("csrf", c.clone()));
        }
        let res = http()?
            .post(format!("{base}/shares"))
            .header("cookie", &cookie_header)
            .form(&form)
            .send()?;
        ensure!(res.status() == 400, "csrf {csrf:?}: {}", res.status());
        ensure!(res.text()?.contains("did not come from this site"));
    }
    // The sign-in form without its own cookie is refused the same way.
    let res = http()?
        .post(format!("{base}/signin"))
        .form(&[("csrf", "x"), ("handle", ALICE.0), ("password", ALICE.1)])
        .send()?;
    ensure!(
        res.status() == 400,
        "sign-in without its cookie: {}",
        res.status()
    );

    // She shares it with bob, as it is now.
    alice_b.goto(&url)?;
    alice_b.fill(".share input[name=with]", BOB.0)?;
    alice_b.click(".share button[type=submit]")?;
    alice_b.wait("#given")?;
    ensure!(alice_b.url()? == format!("{base}/shares"));
    let given = alice_b.text_of("#given")?;
    ensure!(given.contains(BOB.0) && given.contains("active"), "{given}");
    ensure!(given.contains("snapshot"), "{given}");

    // Bob signs in, finds it shared with him, reads and finds it; alice's
    // private conversation stays "not found", like one that does not exist.
    sign_in(bob_b, &base, BOB)?;
    bob_b.goto(&format!("{base}/shares"))?;
    let received = bob_b.text_of("#received")?;
    ensure!(received.contains(ALICE.0), "{received}");
    bob_b.goto(&url)?;
    ensure!(bob_b.text_of("#conversation-title")?.contains("walrus"));
    ensure!(
        !bob_b.has("form.share")?,
        "bob may not share alice's conversation"
    );
    bob_b.goto(&format!("{base}/?q=walrus&mode=keyword"))?;
    ensure!(bob_b
        .text_of(".results")?
        .contains("plan the walrus migration"));
    // The filters are the API's: another owner's name finds nothing.
    bob_b.goto(&format!("{base}/?q=walrus&mode=keyword&owner={}", BOB.0))?;
    ensure!(bob_b.has("#no-results")?, "{}", bob_b.text()?);
    ensure!(bob_b.has("details.filters[open]")?);
    bob_b.goto(&format!("{base}/?q=narwhal&mode=keyword"))?;
    ensure!(bob_b.has("#no-results")?, "{}", bob_b.text()?);
    // Hits that hold too few of the query's words are below the relevance
    // floor: the page says nothing is relevant, and shows them, marked
    // weak, only when asked.
    bob_b.goto(&format!(
        "{base}/?q=walrus+xyzzyqwerty+florbnax+quimble&mode=keyword"
    ))?;
    ensure!(bob_b.has("#nothing-relevant")?, "{}", bob_b.text()?);
    ensure!(!bob_b.has("li.group")? && !bob_b.has("#no-results")?);
    bob_b.click("#nothing-relevant a")?;
    bob_b.wait("li.group.weak")?;
    ensure!(bob_b
        .text_of(".results")?
        .contains("plan the walrus migration"));
    ensure!(bob_b.text_of(".results")?.contains("weak match"));
    bob_b.goto(&format!("{base}/c/{private_run}"))?;
    let unreadable = bob_b.text_of("main")?;
    // A run id of the same form that no run has.
    let last = if private_run.ends_with('0') { "1" } else { "0" };
    let nobody = format!("{}{last}", &private_run[..private_run.len() - 1]);
    bob_b.goto(&format!("{base}/c/{nobody}"))?;
    let missing = bob_b.text_of("main")?;
    ensure!(unreadable.starts_with("Not found"), "{unreadable}");
    ensure!(unreadable == missing, "{unreadable:?} vs {missing:?}");
    let bob_cookie = format!("kith_session={}", session_cookie(bob_b)?.value);
    for path in [format!("/c/{private_run}"), format!("/c/{private_run}/raw")] {
        let res = http()?
            .get(format!("{base}{path}"))
            .header("cookie", &bob_cookie)
            .send()?;
        ensure!(res.status() == 404, "{path}: {}", res.status());
        ensure!(!res.text()?.contains("narwhal"));
    }

    // Alice sees who read her runs, by conversation title.
    alice_b.goto(&format!("{base}/audit"))?;
    let audit = alice_b.text_of("#audit")?;
    ensure!(
        audit.contains(BOB.0) && audit.contains("plan the walrus migration"),
        "{audit}"
    );
    ensure!(!audit.contains("narwhal"), "{audit}");

    // Alice revokes; bob's next read is "not found".
    alice_b.goto(&format!("{base}/shares"))?;
    alice_b.click("#given button.revoke")?;
    alice_b.wait_text("#given", "revoked")?;
    bob_b.goto(&url)?;
    ensure!(bob_b.text_of("main")? == missing, "{}", bob_b.text()?);

    // Alice signs out: her old cookie no longer opens a page.
    alice_b.click("form.signout button")?;
    alice_b.wait("input[name=password]")?;
    ensure!(alice_b.url()?.ends_with("/signin"));
    let res = http()?
        .get(format!("{base}/"))
        .header("cookie", &cookie_header)
        .send()?;
    ensure!(res.status() == 303, "after sign-out: {}", res.status());
    ensure!(res.headers()["location"] == "/signin");

    // A local member without a PDS signs in with `kith web --print`'s link,
    // which works once.
    let dave_token = kith_tests::register_local(&data, "dave.local", "desk")?;
    let home = tempfile::tempdir()?;
    let web_link = |token: &str| -> Result<String> {
        let out = Command::new(bin("kith"))
            .args(["web", "--print"])
            .env("HOME", home.path())
            .env("KITH_CENTRAL_URL", &base)
            .env("KITH_TOKEN", token)
            .env_remove("KITH_CONFIG_DIR")
            .env_remove("KITH_STATE_DIR")
            .stdin(Stdio::null())
            .output()?;
        ensure!(
            out.status.success(),
            "kith web: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout)?;
        let link = stdout.lines().next().unwrap_or_default().to_owned();
        ensure!(
            link.starts_with(&format!("{base}/signin/link?token=")),
            "{stdout}"
        );
        Ok(link)
    };
    let link = web_link(&dave_token)?;
    open_link(dave_b, &link, "dave.local")?;
    ensure!(
        dave_b.text_of(".who")? == "dave.local",
        "{}",
        dave_b.text()?
    );
    ensure!(session_cookie(dave_b)?.http_only);
    let again = http()?.get(&link).send()?;
    ensure!(again.status() == 400, "a used link: {}", again.status());
    ensure!(again.text()?.contains("used already"));

    // A session made with the link of dave's second machine.
    let laptop_token = kith_tests::register_local(&data, "dave.local", "laptop")?;
    let confirm =
        |signin_cookie: &str, csrf: &str, token: &str| -> Result<reqwest::blocking::Response> {
            Ok(http()?
                .post(format!("{base}/signin/link"))
                .header("cookie", signin_cookie)
                .form(&[("csrf", csrf), ("token", token)])
                .send()?)
        };
    let session_of = |link: &str| -> Result<String> {
        let page = http()?.get(link).send()?;
        ensure!(page.status() == 200, "{link}: {}", page.status());
        let signin = set_cookie(&page);
        let html = page.text()?;
        let res = confirm(&signin, &hidden(&html, "csrf"), &hidden(&html, "token"))?;
        let cookie = set_cookie(&res);
        ensure!(cookie.starts_with("kith_session="), "{cookie}");
        Ok(cookie)
    };
    // Opening a link signs nobody in and spends nothing (a link previewer
    // fetches it), nor does a form another site posts without the page's
    // cookie (it would sign the browser in to dave's account).
    let laptop_link = web_link(&laptop_token)?;
    let preview = http()?.get(&laptop_link).send()?;
    ensure!(
        set_cookie(&preview).starts_with("kith_signin="),
        "{:?}",
        preview.headers()
    );
    let token = laptop_link.split("token=").nth(1).unwrap_or_default();
    let forged = confirm("", "0", token)?;
    ensure!(forged.status() == 400, "a forged form: {}", forged.status());
    ensure!(!set_cookie(&forged).starts_with("kith_session="));
    let other = session_of(&laptop_link)?;
    let page = |cookie: &str| -> Result<u16> {
        Ok(http()?
            .get(format!("{base}/recent"))
            .header("cookie", cookie)
            .send()?
            .status()
            .as_u16())
    };
    ensure!(page(&other)? == 200);
    // Dave revokes his desk: its token stops working at once, and so do
    // its link's session (this browser's) and its unused links; the
    // laptop's session goes on.
    let unused = web_link(&dave_token)?;
    dave_b.goto(&format!("{base}/machines"))?;
    ensure!(dave_b
        .text_of("main table tbody tr:nth-child(1)")?
        .contains("desk"));
    ensure!(central.client(&dave_token).get("/api/status")?.status == 200);
    dave_b.click("main table tbody tr:nth-child(1) button.revoke")?;
    dave_b.wait("input[name=password]")?;
    ensure!(central.client(&dave_token).get("/api/status")?.status == 401);
    ensure!(central.client(&laptop_token).get("/api/status")?.status == 200);
    ensure!(
        page(&other)? == 200,
        "the laptop's session ended with the desk"
    );
    let res = http()?.get(&unused).send()?;
    ensure!(
        res.status() == 400,
        "a revoked machine's link: {}",
        res.status()
    );

    // Signing out everywhere ends dave's other sessions too.
    open_link(dave_b, &web_link(&laptop_token)?, "dave.local")?;
    ensure!(dave_b.text_of(".who")? == "dave.local");
    dave_b.goto(&format!("{base}/machines"))?;
    dave_b.click("form.everywhere button")?;
    dave_b.wait("input[name=password]")?;
    ensure!(
        page(&other)? == 303,
        "the other session outlived sign-out everywhere"
    );

    // Wrong passwords are refused, then the handle is rate-limited: even
    // the right password waits.
    let client = http()?;
    let attempt = |handle: &str, password: &str| -> Result<(u16, String)> {
        let res = post_sign_in(&client, &base, handle, password)?;
        Ok((res.status().as_u16(), res.text()?))
    };
    for i in 0..5 {
        let (status, page) = attempt(CAROL.0, &format!("guess-{i}"))?;
        ensure!(status == 401, "guess {i}: {status}");
        ensure!(page.contains("Wrong handle or password"));
    }
    let (status, page) = attempt(CAROL.0, CAROL.1)?;
    ensure!(status == 429, "after 5 failures: {status}");
    ensure!(page.contains("Too many failed sign-ins"));
    ensure!(!page.contains(CAROL.1), "the page shows the password");
    // What is not a handle is refused before it is counted or shown back;
    // a form past the pages' limit is refused unread.
    let long = "a".repeat(300);
    let (status, page) = attempt(&long, "x")?;
    ensure!(status == 400, "a 300-letter handle: {status}");
    ensure!(page.contains("not a handle") && !page.contains(&long));
    let (status, page) = attempt(&"a.".repeat(50_000), "x")?;
    ensure!(status == 413, "a 100 kB form: {status}");
    // The error page, as the page's other refusals, not axum's text.
    ensure!(
        page.contains("<html")
            && page.contains("16384 bytes")
            && !page.contains("Failed to buffer"),
        "{page}"
    );
    let log: Vec<String> = central.log.try_iter().collect();
    let log = log.join("\n");
    for secret in [
        ALICE.1,
        BOB.1,
        CAROL.1,
        cookie.value.as_str(),
        dave_token.as_str(),
    ] {
        ensure!(!log.contains(secret), "central logged a secret");
    }
    Ok(())
}

/// A Claude Code line of `kind` (`user` or `assistant`) whose message holds
/// `content` blocks, on branch `feature-x` with model `claude-x`.
fn claude_blocks(kind: &str, uuid: &str, ts: &str, content: serde_json::Value) -> String {
    let line = json!({
        "type": kind, "uuid": uuid, "parentUuid": null, "sessionId": "s-reader",
        "timestamp": ts, "cwd": "/home/ivy/importer", "gitBranch": "feature-x",
        "message": {"id": format!("m-{uuid}"), "role": kind, "model": "claude-x", "content": content}
    });
    format!("{line}\n")
}

/// The reader in a real browser: markdown rendered safely (no script, no
/// `javascript:` link), code highlighted, an Edit shown as a diff, a tool's
/// output once, turns numbered through the conversation, the agent, model
/// and branch on the page and on each search hit; search counts its
/// results, pages through them and offers each filter's values.
#[test]
fn the_reader_renders_markdown_diffs_badges_and_pages_search() -> Result<()> {
    let shots = tempfile::tempdir()?;
    let driver = Driver::start()?;
    let b = driver.browser(&shots.path().join("ivy-profile"))?;
    let res = reader_scenario(&b);
    if let Err(e) = res {
        let dir = shots.keep();
        let _ = b.screenshot(&dir.join("ivy.png"));
        bail!("{e:#}\nscreenshot: {}", dir.display());
    }
    Ok(())
}

fn reader_scenario(b: &Browser<'_>) -> Result<()> {
    let central = Central::start()?;
    let base = central.url.clone();
    let token = kith_tests::register_local(&central.data_dir, "ivy.local", "laptop")?;
    let api = central.client(&token);
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let first = [
        claude_blocks(
            "user",
            "u1",
            "2026-05-01T10:00:00Z",
            json!(
                "make the **importer** retry; see [docs](javascript:alert(1)) \
                   <script id=injected>alert(1)</script>"
            ),
        ),
        claude_blocks(
            "assistant",
            "a1",
            "2026-05-01T10:00:05Z",
            text("Here is the loop:\n\n```rust\nfn retry() { let s = \"again\"; }\n```"),
        ),
        claude_blocks(
            "assistant",
            "a2",
            "2026-05-01T10:00:06Z",
            json!([{"type": "tool_use", "id": "t1", "name": "Edit", "input": {
                "file_path": "/home/ivy/importer/src/fetch.rs",
                "old_string": "let tries = 1;\nfetch(url)",
                "new_string": "let tries = 5;\nfetch(url)"
            }}]),
        ),
        claude_blocks(
            "user",
            "u2",
            "2026-05-01T10:00:07Z",
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "EDIT-APPLIED-MARK"}]),
        ),
    ]
    .concat();
    api.ingest(&delta("ivy-reader", 0, &first))?;
    // A second delta of the same transcript: its turn is numbered on.
    let second = claude_blocks(
        "user",
        "u3",
        "2026-05-01T10:01:00Z",
        json!("second delta pelicanreader"),
    );
    let last = api.ingest(&delta("ivy-reader", first.len() as u64, &second))?;
    api.wait_indexed(&last, Duration::from_secs(60))?;
    // Twenty-four more conversations that mention the pelican, to page.
    for i in 0..24 {
        conversation(
            &api,
            &format!("ivy-pelican-{i}"),
            &[claude_user_line(
                &format!("pelicanreader count {i}"),
                &format!("2026-05-02T10:{i:02}:00Z"),
            )],
        )?;
    }

    // Another member's private conversation: its machine and branch are
    // not offered to ivy.
    let jo = central.client(&kith_tests::register_local(
        &central.data_dir,
        "jo.local",
        "jo-secret-desktop",
    )?);
    conversation(
        &jo,
        "jo-private",
        &[claude_blocks(
            "user",
            "j1",
            "2026-05-03T10:00:00Z",
            json!("pelicanreader of jo's"),
        )
        .replace("feature-x", "jo-secret-branch")],
    )?;

    let link = api.post("/api/web/link", &json!({}))?;
    ensure!(link.status == 201, "{link:?}");
    open_link(
        b,
        &format!("{base}{}", link.body["path"].as_str().unwrap_or_default()),
        "ivy.local",
    )?;

    // Search pages: twenty, then the rest; every filter offers its values.
    b.goto(&format!("{base}/?q=pelicanreader&mode=keyword"))?;
    b.wait("#result-count")?;
    let count = b.text_of("#result-count")?;
    ensure!(count.contains("Conversations 1–20"), "{count}");
    ensure!(b.has("datalist#values-machine option[value=laptop]")?);
    ensure!(b.has("datalist#values-branch option[value=feature-x]")?);
    ensure!(b.has("datalist#values-runtime option[value=codex]")?);
    ensure!(!b.has("datalist#values-machine option[value=jo-secret-desktop]")?);
    ensure!(!b.has("datalist#values-branch option[value=jo-secret-branch]")?);
    ensure!(b.has("datalist#values-owner option[value='ivy.local']")?);
    ensure!(!b.has("datalist#values-owner option[value='jo.local']")?);
    let results = b.text_of(".results")?;
    ensure!(results.contains("claude-code"), "{results}");
    b.click("#next-page")?;
    b.wait_text("#result-count", "21–25")?;
    ensure!(!b.has("#next-page")?, "the last page has no next");
    ensure!(b.has("nav.pages a[rel=prev]")?);

    // The hit of the reader's conversation carries its agent, model and branch.
    b.goto(&format!("{base}/?q=importer&mode=keyword"))?;
    b.wait(".results")?;
    ensure!(b.text_of(".results .badge.model")? == "claude-x");
    ensure!(b.text_of(".results .badge.branch")? == "feature-x");
    b.click(".results a.title")?;
    b.wait("#conversation-title")?;

    // Markdown: bold is bold, the script and the javascript: link are text.
    ensure!(b.text_of(".turn.user .text strong")? == "importer");
    ensure!(
        !b.has("script#injected")?,
        "the prompt's script became an element"
    );
    ensure!(!b.has("a[href^='javascript']")?);
    ensure!(b.text()?.contains("<script id=injected>"), "{}", b.text()?);
    // Code is highlighted.
    ensure!(b.text_of("pre code .hl-kw")? == "fn");
    ensure!(b.text_of("pre code .hl-str")?.contains("again"));
    // The Edit is a diff: the old line removed, the new added, the
    // unchanged line neither.
    b.click(".turn.tool summary")?;
    ensure!(b.text_of(".diff .diff-del")?.contains("let tries = 1;"));
    ensure!(b.text_of(".diff .diff-add")?.contains("let tries = 5;"));
    ensure!(!b.text_of(".diff .diff-add")?.contains("fetch(url)"));
    // Turns are numbered through both deltas.
    let page = b.text()?;
    ensure!(page.matches("EDIT-APPLIED-MARK").count() == 1, "{page}");
    ensure!(page.contains("#4"), "the second delta's turn is #4: {page}");
    ensure!(!page.contains("L1 "), "{page}");
    // The page's header names agent, model and branch.
    ensure!(b.text_of(".conversation .meta .badge.agent")? == "claude-code");
    ensure!(b.text_of(".conversation .meta .badge.model")? == "claude-x");
    ensure!(b.text_of(".conversation .meta .badge.branch")? == "feature-x");
    Ok(())
}

/// The usage page shows the member's own report (its totals to the token,
/// its models, the unpriced one named, the price table's date) and a
/// chart with one bar segment per model and day, drawn without a script;
/// another member's model and tokens are nowhere on it.
#[test]
fn the_usage_page_charts_a_members_own_tokens_by_model_and_day() -> Result<()> {
    let shots = tempfile::tempdir()?;
    let driver = Driver::start()?;
    let b = driver.browser(&shots.path().join("uma-profile"))?;
    let res = usage_scenario(&b);
    if let Err(e) = res {
        let dir = shots.keep();
        let _ = b.screenshot(&dir.join("uma.png"));
        bail!("{e:#}\nscreenshot: {}", dir.display());
    }
    Ok(())
}

fn usage_scenario(b: &Browser<'_>) -> Result<()> {
    let central = Central::start()?;
    let base = central.url.clone();
    let uma = central.client(&kith_tests::register_local(
        &central.data_dir,
        "uma.local",
        "laptop",
    )?);
    let vic = central.client(&kith_tests::register_local(
        &central.data_dir,
        "vic.local",
        "desk",
    )?);
    // Uma: opus and sonnet on May 1st, opus and a model no table prices
    // on May 2nd: four model-days.
    conversation(
        &uma,
        "uma-1",
        &[
            claude_user_line("plan it", "2026-05-01T09:00:00Z"),
            claude_response_line("u1", "claude-opus-4-6", "2026-05-01T09:00:05Z", 1_000, 200),
            claude_response_line(
                "u2",
                "claude-sonnet-4-5",
                "2026-05-01T10:00:00Z",
                3_000,
                400,
            ),
            claude_response_line("u3", "claude-opus-4-6", "2026-05-02T11:00:00Z", 500, 100),
            claude_response_line("u4", "mystery-model-9", "2026-05-02T12:00:00Z", 50, 5),
        ],
    )?;
    // Vic's, shared with uma: she may read it; it is not what she spent.
    let vics = conversation(
        &vic,
        "vic-1",
        &[
            claude_user_line("his", "2026-05-01T09:00:00Z"),
            claude_response_line("v1", "claude-haiku-4-5", "2026-05-01T09:30:00Z", 777_777, 0),
        ],
    )?;
    let share = vic.post(
        "/api/shares",
        &json!({"scope": format!("run:{vics}"), "with": "uma.local", "follow": true}),
    )?;
    ensure!(share.status == 201 || share.status == 200, "{share:?}");
    let api = uma.get("/api/usage")?;
    ensure!(api.status == 200, "{api:?}");
    let totals = &api.body["totals"];
    ensure!(totals["input_tokens"] == 4_550, "{}", api.body);

    let link = uma.post("/api/web/link", &json!({}))?;
    ensure!(link.status == 201, "{link:?}");
    let path = link.body["path"].as_str().unwrap_or_default();
    open_link(b, &format!("{base}{path}"), "uma.local")?;
    b.click("nav a[href='/usage']")?;
    b.wait("#usage-table")?;
    let page = b.text()?;
    let table = kith_shared::usage::PriceTable::builtin().as_of().to_owned();
    ensure!(
        page.contains(&format!("Days in UTC, prices as of {table}.")),
        "{page}"
    );
    let total = b.text_of("#usage-totals")?;
    // 1,000 + 3,000 + 500 + 50 in; 200 + 400 + 100 + 5 out.
    ensure!(total.contains("4,550") && total.contains("705"), "{total}");
    let usd = totals["cost_usd"].as_f64().unwrap_or_default();
    ensure!(
        usd > 0.0 && total.contains(&format!("${usd:.2}")),
        "{total}"
    );
    ensure!(
        b.text_of("#usage-unpriced")?.contains("mystery-model-9"),
        "{page}"
    );
    for model in ["claude-opus-4-6", "claude-sonnet-4-5", "mystery-model-9"] {
        ensure!(
            b.text_of("#usage-tokens .legend")?.contains(model),
            "{model}: {page}"
        );
    }
    for chart in ["#usage-tokens", "#usage-cost"] {
        let n = b.count(&format!("{chart} svg rect.segment"))?;
        ensure!(n == 4, "{chart}: {n} segments, not one per model-day");
    }
    let html = http()?
        .get(format!("{base}/usage?by=model"))
        .header(
            "cookie",
            format!("kith_session={}", session_cookie(b)?.value),
        )
        .send()?
        .text()?;
    ensure!(
        html.contains("<title>2026-05-01 · claude-sonnet-4-5: 3,400 tokens</title>"),
        "{html}"
    );
    ensure!(
        !html.contains("<script>") && !html.contains("style="),
        "{html}"
    );
    for vics in ["claude-haiku-4-5", "777,777", "777777"] {
        ensure!(!html.contains(vics), "vic's {vics} on uma's page");
    }

    // The form's choices: by model, a range of one day.
    b.goto(&format!(
        "{base}/usage?report=daily&by=model&since=2026-05-02&until=2026-05-02"
    ))?;
    b.wait("#usage-table")?;
    let rows = b.text_of("#usage-table tbody")?;
    ensure!(
        rows.contains("claude-opus-4-6") && rows.contains("mystery-model-9"),
        "{rows}"
    );
    ensure!(
        !rows.contains("2026-05-01") && !rows.contains("claude-sonnet-4-5"),
        "{rows}"
    );
    ensure!(b.count("#usage-tokens svg rect.segment")? == 2);
    // A choice the form does not offer is refused, saying what is.
    b.goto(&format!("{base}/usage?report=hourly"))?;
    ensure!(
        b.text()?.contains("report must be one of daily"),
        "{}",
        b.text()?
    );
    b.goto(&format!("{base}/usage?timezone=Mars/Olympus"))?;
    ensure!(b.text()?.contains("timezone"), "{}", b.text()?);

    // The family's usage is an admin's: refused to uma until she is one,
    // then each member's tokens, and of vic's conversation he did not
    // share nothing but its figures.
    let unshared = conversation(
        &vic,
        "vic-2",
        &[
            claude_user_line("his own", "2026-05-02T09:00:00Z"),
            claude_response_line("v2", "claude-haiku-4-5", "2026-05-02T09:30:00Z", 111, 0),
        ],
    )?;
    let unshared = vic.get(&format!("/api/runs/{unshared}"))?.body["conversation"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(!unshared.is_empty());
    ensure!(!b.has("select[name=by] option[value=person]")?);
    b.goto(&format!("{base}/usage?by=person"))?;
    ensure!(b.text()?.contains("only an admin"), "{}", b.text()?);
    let made = kith_tests::run_central(&central.data_dir, &["user", "admin", "uma.local"])?;
    ensure!(made.status.success(), "{made:?}");
    b.goto(&format!("{base}/usage?by=person&report=session"))?;
    b.wait("#usage-table")?;
    ensure!(b.has("select[name=by] option[value=person][selected]")?);
    let page = b.text()?;
    ensure!(
        page.contains("What the family's agents cost")
            && page.contains("vic.local")
            && page.contains("777,777")
            && page.contains("not shared"),
        "{page}"
    );
    let html = http()?
        .get(format!("{base}/usage?by=person&report=session"))
        .header(
            "cookie",
            format!("kith_session={}", session_cookie(b)?.value),
        )
        .send()?
        .text()?;
    ensure!(
        !html.contains(&unshared),
        "vic's unshared conversation on uma's page"
    );
    // Stacked by member: a segment per member and day (both, both days).
    ensure!(b.count("#usage-tokens svg rect.segment")? == 4);
    Ok(())
}
