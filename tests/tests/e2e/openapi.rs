//! The OpenAPI document against the real central: it declares the bearer
//! scheme, id patterns and the refusals each operation can answer, and
//! schemathesis (PyPI, pinned in tests/schemathesis/requirements.txt)
//! drives every operation with generated requests, a bounded number per
//! operation, and finds no 5xx and no answer the document does not allow.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Result};
use kith_tests::{claude_user_line, delta, target_dir, Central};
use serde_json::Value;

/// Generated requests per operation and phase: about a minute in all.
const EXAMPLES_PER_OPERATION: &str = "20";

/// schemathesis's `st`: `KITH_SCHEMATHESIS`, else the venv tests/run.sh
/// makes in the target folder.
fn schemathesis() -> Result<PathBuf> {
    let venv = target_dir().join("schemathesis-venv");
    let st = match std::env::var_os("KITH_SCHEMATHESIS") {
        Some(path) => PathBuf::from(path),
        None => venv.join("bin/st"),
    };
    if !st.is_file() {
        bail!(
            "schemathesis is not installed at {}: tests/run.sh installs it \
             (python3 -m venv {venv} && \
             {venv}/bin/pip install -r tests/schemathesis/requirements.txt), \
             or set KITH_SCHEMATHESIS to its `st`",
            st.display(),
            venv = venv.display(),
        );
    }
    Ok(st)
}

/// Issue #22: the document declared no security scheme and few of the
/// refusals its operations give (401 on every authenticated route, 413 on
/// every route, 404 for an unknown id).
#[test]
fn openapi_declares_the_bearer_scheme_ids_and_refusals() -> Result<()> {
    // With the embedder, so semantic and hybrid searches are exercised too
    // (without one, semantic search answers its documented 503).
    anyhow::ensure!(
        kith_tests::model_dir()?.is_some(),
        "the embedding model is missing: run tests/run.sh (it installs the model and sets KITH_MODEL_DIR)"
    );
    let central = Central::start()?;
    let doc =
        reqwest::blocking::get(format!("{}/api/openapi.json", central.url))?.json::<Value>()?;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{}",
        doc["components"]
    );
    assert_eq!(doc["security"][0]["bearer"], Value::Array(Vec::new()));
    let mut n_ops = 0;
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            n_ops += 1;
            let answers = &op["responses"];
            let public = ["/healthz", "/api/openapi.json"].contains(&path.as_str());
            let what = format!("{method} {path}");
            assert!(answers["413"].is_object(), "{what} lacks 413");
            assert_eq!(answers["401"].is_object(), !public, "{what}: 401");
            assert_eq!(
                op["security"] == serde_json::json!([{}]),
                public,
                "{what}: security"
            );
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" {
                    assert_eq!(p["schema"]["pattern"], "^[A-Za-z0-9_-]{1,128}$", "{what}");
                    assert!(answers["404"].is_object(), "{what} lacks 404");
                    assert!(answers["400"].is_object(), "{what} lacks 400");
                }
            }
            if op["requestBody"].is_object() {
                assert!(answers["400"].is_object(), "{what} lacks 400");
            }
        }
    }
    assert!(n_ops >= 17, "{n_ops} operations");
    Ok(())
}

#[test]
fn schemathesis_finds_no_server_error_and_no_schema_violation() -> Result<()> {
    let st = schemathesis()?;
    // With the embedder, so semantic and hybrid searches are exercised too
    // (without one, semantic search answers its documented 503).
    anyhow::ensure!(
        kith_tests::model_dir()?.is_some(),
        "the embedding model is missing: run tests/run.sh (it installs the model and sets KITH_MODEL_DIR)"
    );
    let central = Central::start()?;
    // An admin, so /metrics is exercised past its 403; one run to find.
    let token = central.register_admin("root.test", "server")?;
    let api = central.client(&token);
    let run = api.post(
        "/api/runs",
        &delta(
            "s",
            0,
            &claude_user_line("the okapi plan", "2026-05-11T08:00:00Z"),
        ),
    )?;
    assert_eq!(run.status, 202, "{run:?}");
    let dir = tempfile::tempdir()?;
    // The token goes in through the environment, never argv.
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        "[headers]\nAuthorization = \"Bearer ${KITH_TOKEN}\"\n",
    )?;
    let out = Command::new(&st)
        .arg("--config-file")
        .arg(&config)
        .args(["--no-color", "run"])
        .arg(format!("{}/api/openapi.json", central.url))
        .args(["--url", &central.url])
        .args(["--max-examples", EXAMPLES_PER_OPERATION])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--workers", "1", "--seed", "22"])
        .env("KITH_TOKEN", &token)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("passed"), "{said}");
    assert!(!said.contains(&token), "the token is never printed");
    Ok(())
}
