//! Privacy as a property: random users, run trees, tags, grants (snapshots
//! and following ones, some expired, some revoked) given between runs, tag
//! edits after them (the owner's, and refused ones by others), and
//! quarantines; for every read path, a viewer sees exactly the runs a
//! simple model says it may read, and nothing else.

use std::collections::{BTreeSet, HashMap};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use kith_central::config::Config;
use kith_central::registry::UserRow;
use kith_central::state::AppState;
use kith_shared::ids::{MachineId, UserId};
use serde_json::{json, Value};
use tower::ServiceExt;

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Run {
    id: String,
    /// When it was captured, in grants given before it (see `Grant::at`).
    seq: usize,
    owner: usize,
    ancestors: Vec<String>,
    tags: Vec<String>,
    quarantined: bool,
    /// The input tokens its one model response used (its usage).
    input_tokens: u64,
    /// Its conversation's id.
    conversation: String,
}

/// The member who is central's admin.
const ADMIN: usize = 0;

struct Grant {
    grantor: usize,
    grantee: usize,
    scope: String,
    live: bool,
    /// Runs with a smaller `seq` were captured before the grant was given.
    at: usize,
    follow: bool,
}

fn model_readable(viewer: usize, run: &Run, grants: &[Grant]) -> bool {
    if run.owner == viewer {
        return true;
    }
    !run.quarantined
        && grants.iter().any(|g| {
            g.live
                && g.grantee == viewer
                && g.grantor == run.owner
                && match g.scope.split_once(':') {
                    Some(("run", id)) => {
                        run.ancestors.iter().any(|a| a == id) && (g.follow || run.seq < g.at)
                    }
                    Some(("tag", t)) => run.tags.iter().any(|x| x == t),
                    _ => false,
                }
        })
}

async fn call(
    app: &axum::Router,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"));
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let res = app
        .clone()
        .oneshot(req.body(body).unwrap_or_default())
        .await
        .unwrap_or_else(|e| match e {});
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Every read path, for every viewer, answers exactly the runs the model
/// says it may read.
async fn check_reads(
    app: &axum::Router,
    tokens: &[String],
    runs: &[Run],
    grants: &[Grant],
    seed: u64,
) {
    for (viewer, token) in tokens.iter().enumerate() {
        let expected: BTreeSet<&str> = runs
            .iter()
            .filter(|r| model_readable(viewer, r, grants))
            .map(|r| r.id.as_str())
            .collect();
        for run in runs {
            let want = model_readable(viewer, run, grants);
            let paths = [
                "/api/runs/{}",
                "/api/runs/{}/jsonl",
                "/api/runs/{}/descendants",
                "/api/conversations/{}",
                "/api/conversations/{}/turns",
                "/api/conversations/{}/jsonl",
            ];
            for path in paths {
                let path = path.replace("{}", &run.id);
                let (status, _) = call(app, token, "GET", &path, None).await;
                let want_status = if want {
                    StatusCode::OK
                } else {
                    StatusCode::NOT_FOUND
                };
                assert_eq!(status, want_status, "seed {seed} viewer {viewer}: {path}");
            }
        }
        let (_, res) = call(
            app,
            token,
            "POST",
            "/api/search",
            Some(json!({"query": "needle", "mode": "keyword", "limit": 100})),
        )
        .await;
        let found: BTreeSet<String> = res["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["run_id"].as_str().map(str::to_owned))
            .collect();
        let found: BTreeSet<&str> = found.iter().map(String::as_str).collect();
        assert_eq!(found, expected, "seed {seed} viewer {viewer}: search");
        let (_, forest) = call(app, token, "GET", "/api/runs/forest?limit=500", None).await;
        let in_forest: BTreeSet<String> = forest["trees"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["runs"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r["run"]["id"].as_str().map(str::to_owned))
            .collect();
        let in_forest: BTreeSet<&str> = in_forest.iter().map(String::as_str).collect();
        assert_eq!(in_forest, expected, "seed {seed} viewer {viewer}: forest");
        let (_, listed) = call(app, token, "GET", "/api/conversations?limit=200", None).await;
        let listed: BTreeSet<String> = listed["conversations"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["run_ids"].as_array().cloned().unwrap_or_default())
            .filter_map(|id| id.as_str().map(str::to_owned))
            .collect();
        let listed: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
        assert_eq!(
            listed, expected,
            "seed {seed} viewer {viewer}: conversations"
        );
        // Usage is one's own alone: what a grant shares is never counted.
        let own: u64 = runs
            .iter()
            .filter(|r| r.owner == viewer)
            .map(|r| r.input_tokens)
            .sum();
        let (status, usage) = call(app, token, "GET", "/api/usage?report=session", None).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "seed {seed} viewer {viewer}: {usage}"
        );
        assert_eq!(
            usage["totals"]["input_tokens"], own,
            "seed {seed} viewer {viewer}: usage"
        );
        check_family_usage(app, token, viewer, runs, grants, seed).await;
    }
}

/// The family's usage: the admin sees each member's tokens exactly, and
/// of a run it may not read no conversation id (nor project, nor
/// machine); anyone else is refused it.
async fn check_family_usage(
    app: &axum::Router,
    token: &str,
    viewer: usize,
    runs: &[Run],
    grants: &[Grant],
    seed: u64,
) {
    let (status, people) = call(
        app,
        token,
        "GET",
        "/api/usage?by=person&report=monthly",
        None,
    )
    .await;
    let (sessions_status, sessions) = call(
        app,
        token,
        "GET",
        "/api/usage?report=session&family=true&by=machine",
        None,
    )
    .await;
    if viewer != ADMIN {
        for (status, res) in [(status, &people), (sessions_status, &sessions)] {
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "seed {seed} viewer {viewer}: {res}"
            );
            assert_eq!(res["error"]["code"], "admin_only", "seed {seed}: {res}");
        }
        return;
    }
    assert_eq!(status, StatusCode::OK, "seed {seed}: {people}");
    let mut per_person: HashMap<String, u64> = HashMap::new();
    for row in people["rows"].as_array().into_iter().flatten() {
        let who = row["group"].as_str().unwrap_or_default().to_owned();
        *per_person.entry(who).or_default() += row["input_tokens"].as_u64().unwrap_or(0);
    }
    let mut want: HashMap<String, u64> = HashMap::new();
    for r in runs {
        *want.entry(format!("user{}.test", r.owner)).or_default() += r.input_tokens;
    }
    assert_eq!(
        per_person, want,
        "seed {seed}: the admin's report by person"
    );

    assert_eq!(sessions_status, StatusCode::OK, "seed {seed}: {sessions}");
    let readable: BTreeSet<&str> = runs
        .iter()
        .filter(|r| model_readable(viewer, r, grants))
        .map(|r| r.conversation.as_str())
        .collect();
    let mut keys = BTreeSet::new();
    let mut total = 0;
    for row in sessions["rows"].as_array().into_iter().flatten() {
        let key = row["key"].as_str().unwrap_or_default();
        total += row["input_tokens"].as_u64().unwrap_or(0);
        if key == "not shared" {
            assert_eq!(
                row["group"],
                Value::Null,
                "seed {seed}: a machine named: {row}"
            );
        } else {
            assert!(
                readable.contains(key),
                "seed {seed}: the conversation {key} of a run the admin may not read: {sessions}"
            );
            assert_eq!(row["group"], "box", "seed {seed}: {row}");
            keys.insert(key);
        }
    }
    assert_eq!(keys, readable, "seed {seed}: the admin's readable sessions");
    assert_eq!(
        total,
        runs.iter().map(|r| r.input_tokens).sum::<u64>(),
        "seed {seed}: every member's tokens, once"
    );
}

async fn one_world(seed: u64) {
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let config = Config {
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    let state = AppState::open(config).unwrap_or_else(|e| panic!("{e}"));
    let app = kith_central::routes::app(state.clone());

    let n_users = 3 + rng.below(2);
    let mut tokens = Vec::new();
    let mut user_ids = Vec::new();
    for u in 0..n_users {
        let id = UserId::parse(&format!("u{u}")).unwrap_or_else(|e| panic!("{e}"));
        state
            .registry()
            .add_user(&UserRow {
                id: id.clone(),
                handle: format!("user{u}.test"),
                did: None,
                pds_url: None,
                is_admin: u == ADMIN,
                created_at: "2026-01-01T00:00:00.000Z".into(),
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let token = format!("kith_token_{seed}_{u}");
        let sha = kith_shared::hash::sha256_hex(token.as_bytes());
        let machine = MachineId::parse(&format!("m{u}")).unwrap_or_else(|e| panic!("{e}"));
        state
            .registry()
            .add_machine(&machine, &id, "box", None, &sha, "2026-01-01T00:00:00.000Z")
            .unwrap_or_else(|e| panic!("{e}"));
        tokens.push(token);
        user_ids.push(id);
    }

    // Runs, then grants, then more runs: each run either a new root or a
    // child of one of its owner's runs; each grant a snapshot of what was
    // captured by then, or one that follows later runs.
    let tags = ["work", "home", "secret"];
    let mut runs: Vec<Run> = Vec::new();
    let mut grants: Vec<Grant> = Vec::new();
    for phase in 0..2 {
        for _ in 0..(4 + rng.below(6)) {
            let i = runs.len();
            let owner = rng.below(n_users);
            let parent = runs.iter().filter(|r| r.owner == owner).nth(rng.below(3));
            let tag = if rng.below(2) == 0 {
                vec![tags[rng.below(3)].to_owned()]
            } else {
                vec![]
            };
            // A prompt, and an answer whose usage is the run's own number.
            let input_tokens = 1_000 + 7 * i as u64;
            let text = format!(
                "{{\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"needle topic{i}\"}}}}\n{}\n",
                json!({"type": "assistant", "message": {"id": format!("msg_{seed}_{i}"),
                    "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": "done"}],
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})
            );
            let mut body = json!({
                "jsonl": text, "agent_runtime": "claude-code", "source_identity": format!("src{i}"),
                "from_offset": 0, "to_offset": text.len(), "tags": tag,
                "started_at": format!("2026-05-01T00:{:02}:00Z", i),
            });
            let mut ancestors = vec![];
            if let Some(p) = parent {
                body["parent_run_id"] = json!(p.id);
                ancestors = p.ancestors.clone();
            }
            let (status, res) = call(&app, &tokens[owner], "POST", "/api/runs", Some(body)).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{res}");
            let id = res["run_id"].as_str().unwrap_or_default().to_owned();
            ancestors.push(id.clone());
            let (status, meta) = call(
                &app,
                &tokens[owner],
                "GET",
                &format!("/api/runs/{id}"),
                None,
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{meta}");
            let conversation = meta["conversation"].as_str().unwrap_or_default().to_owned();
            assert!(!conversation.is_empty(), "{meta}");
            runs.push(Run {
                id,
                seq: i,
                owner,
                ancestors,
                tags: tag,
                quarantined: false,
                input_tokens,
                conversation,
            });
        }
        if phase == 1 {
            break;
        }
        // A clock that must pass: capture and grant times are kept to the
        // millisecond, and the grants fall strictly between the two
        // phases' runs.
        std::thread::sleep(std::time::Duration::from_millis(3));
        for _ in 0..(4 + rng.below(6)) {
            let grantor = rng.below(n_users);
            let grantee = (grantor + 1 + rng.below(n_users - 1)) % n_users;
            let own: Vec<&Run> = runs.iter().filter(|r| r.owner == grantor).collect();
            let scope = if !own.is_empty() && rng.below(2) == 0 {
                format!("run:{}", own[rng.below(own.len())].id)
            } else {
                format!("tag:{}", tags[rng.below(3)])
            };
            let follow = rng.below(2) == 0;
            let body =
                json!({"scope": scope, "with": format!("user{grantee}.test"), "follow": follow});
            let tag_unused = scope
                .strip_prefix("tag:")
                .is_some_and(|t| !own.iter().any(|r| r.tags.iter().any(|x| x == t)));
            let (status, res) =
                call(&app, &tokens[grantor], "POST", "/api/shares", Some(body)).await;
            if tag_unused {
                // Sharing a tag none of one's runs has would share nothing.
                assert_eq!(status, StatusCode::BAD_REQUEST, "{res}");
                assert_eq!(res["error"]["code"], "unknown_tag");
                continue;
            }
            assert_eq!(status, StatusCode::CREATED, "{res}");
            let revoke = rng.below(4) == 0;
            if revoke {
                // Taken back by its giver, or declined by its recipient.
                let by = if rng.below(2) == 0 { grantor } else { grantee };
                let path = format!("/api/shares/{}", res["id"].as_str().unwrap_or_default());
                let (status, _) = call(&app, &tokens[by], "DELETE", &path, None).await;
                assert_eq!(status, StatusCode::NO_CONTENT);
                let (again, res) = call(&app, &tokens[by], "DELETE", &path, None).await;
                assert_eq!(again, StatusCode::CONFLICT, "{res}");
                // A third member can neither take it back nor decline it.
                let other = (0..tokens.len()).find(|u| *u != grantor && *u != grantee);
                if let Some(other) = other {
                    let (status, _) = call(&app, &tokens[other], "DELETE", &path, None).await;
                    assert_eq!(status, StatusCode::NOT_FOUND);
                }
            }
            grants.push(Grant {
                grantor,
                grantee,
                scope,
                live: !revoke,
                at: runs.len(),
                follow,
            });
        }
        // A grant given with an expiry that has passed (the API refuses
        // one in the past, so it is written as time would leave it).
        let grantor = rng.below(n_users);
        let grantee = (grantor + 1) % n_users;
        state
            .registry()
            .add_share(
                &format!("sexpired{seed}"),
                &user_ids[grantor],
                &user_ids[grantee],
                &kith_central::privacy::GrantScope::Tag(tags[rng.below(3)].to_owned()),
                Some("2020-01-01T00:00:00.000Z"),
                true,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        // And the next phase's runs are captured strictly after them.
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    while kith_central::indexer::worker::index_batch(&state).unwrap_or_else(|e| panic!("{e}")) > 0 {
    }

    // Tag edits after indexing: the owner's add or remove changes what a tag
    // grant covers (in the registry and, once indexed again, in search);
    // anyone else's edit is refused as not found and changes nothing.
    let tag_grants: Vec<(usize, &str)> = grants
        .iter()
        .filter(|g| g.live)
        .filter_map(|g| Some((g.grantor, g.scope.strip_prefix("tag:")?)))
        .collect();
    for _ in 0..(3 + rng.below(6)) {
        let mut r = rng.below(runs.len());
        let mut editor = rng.below(n_users);
        let mut tag = tags[rng.below(3)];
        let mut add = rng.below(2) == 0;
        // Half the edits add a tag a live grant shares, on a run of its
        // grantor's: the grant must start covering it.
        if !tag_grants.is_empty() && rng.below(2) == 0 {
            let (grantor, granted) = tag_grants[rng.below(tag_grants.len())];
            let own: Vec<usize> = (0..runs.len())
                .filter(|&i| runs[i].owner == grantor)
                .collect();
            if !own.is_empty() {
                (r, editor, tag, add) = (own[rng.below(own.len())], grantor, granted, true);
            }
        }
        let body = if add {
            json!({"add": [tag]})
        } else {
            json!({"remove": [tag]})
        };
        let path = format!("/api/conversations/{}/tags", runs[r].id);
        let (status, res) = call(&app, &tokens[editor], "POST", &path, Some(body)).await;
        if editor != runs[r].owner {
            assert_eq!(status, StatusCode::NOT_FOUND, "seed {seed}: {res}");
            assert_eq!(res["error"]["code"], "conversation_not_found");
            continue;
        }
        assert_eq!(status, StatusCode::OK, "seed {seed}: {res}");
        let conversation = format!("/api/conversations/{}", runs[r].id);
        let (_, c) = call(&app, &tokens[editor], "GET", &conversation, None).await;
        let members: Vec<&str> = c["conversation"]["run_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert!(members.contains(&runs[r].id.as_str()), "seed {seed}: {c}");
        assert_eq!(res["n_runs"], members.len(), "seed {seed}: {res}");
        for run in runs
            .iter_mut()
            .filter(|x| x.owner == editor && members.contains(&x.id.as_str()))
        {
            run.tags.retain(|t| t != tag);
            if add {
                run.tags.push(tag.to_owned());
            }
        }
    }
    while kith_central::indexer::worker::index_batch(&state).unwrap_or_else(|e| panic!("{e}")) > 0 {
    }

    // Quarantine one user's machine: those runs are hidden from others.
    let q = rng.below(n_users);
    if rng.below(2) == 0 {
        state
            .registry()
            .quarantine(&format!("m{q}"), "2000-01-01T00:00:00.000Z", true)
            .unwrap_or_else(|e| panic!("{e}"));
        for r in runs.iter_mut().filter(|r| r.owner == q) {
            r.quarantined = true;
        }
    }

    check_reads(&app, &tokens, &runs, &grants, seed).await;

    // Every read of someone else's run was audited for its owner.
    let mut audited: HashMap<usize, usize> = HashMap::new();
    for (owner, token) in tokens.iter().enumerate() {
        let (_, a) = call(&app, token, "GET", "/api/audit", None).await;
        let entries = a["entries"].as_array().cloned().unwrap_or_default();
        assert!(
            entries
                .iter()
                .all(|e| e["reader"] != format!("user{owner}.test")),
            "own reads are not audited"
        );
        audited.insert(owner, entries.len());
    }
    for run in &runs {
        let readers = (0..n_users)
            .filter(|&v| v != run.owner && model_readable(v, run, &grants))
            .count();
        if readers > 0 {
            assert!(
                audited[&run.owner] > 0,
                "seed {seed}: reads of {} not audited",
                run.id
            );
        }
    }
    // Forgetting: only the owner may, even a reader with a grant gets the
    // 404 of an unknown id; what goes is the conversation and everything
    // under it, and every read path agrees afterwards.
    let (_, unknown) = call(
        &app,
        &tokens[0],
        "DELETE",
        "/api/conversations/r00000000000000000000000000000000",
        None,
    )
    .await;
    for _ in 0..4 {
        let target = &runs[rng.below(runs.len())];
        let (id, owner) = (target.id.clone(), target.owner);
        let asker = rng.below(n_users);
        let path = format!("/api/conversations/{id}");
        let (status, res) = call(&app, &tokens[asker], "DELETE", &path, None).await;
        if asker == owner {
            assert_eq!(status, StatusCode::OK, "seed {seed}: {res}");
            let before = runs.len();
            runs.retain(|r| !r.ancestors.contains(&id));
            assert_eq!(res["n_runs"], json!(before - runs.len()), "seed {seed}");
        } else {
            assert_eq!(status, StatusCode::NOT_FOUND, "seed {seed}: {res}");
            assert_eq!(res, unknown, "seed {seed}: as if unknown");
        }
        if runs.is_empty() {
            break;
        }
    }
    check_reads(&app, &tokens, &runs, &grants, seed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_reads_outside_readable_by_on_any_path() {
    for seed in 1..=12u64 {
        one_world(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).await;
    }
}
