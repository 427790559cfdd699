//! What a test needs that a machine may lack: the embedding model, a
//! Meilisearch server. Missing, the part of a test that needs it does not
//! run and says so on stderr (in every run's output, not only a failing
//! test's); when the run said it has it (`KITH_REQUIRE_MODEL=1`,
//! `KITH_REQUIRE_MEILI=1`: `tests/run.sh` sets them when it installed the
//! model or found a Meilisearch), missing is a failure that names it.

use std::io::Write;

use anyhow::{bail, Result};

/// Set to 1 when the embedding model must be there.
pub const REQUIRE_MODEL: &str = "KITH_REQUIRE_MODEL";
/// Set to 1 when a Meilisearch server (and its binary) must be there.
pub const REQUIRE_MEILI: &str = "KITH_REQUIRE_MEILI";

/// `what` cannot run because `why`: an error when `require` (one of the
/// variables above) is 1, otherwise said on stderr, past the test
/// harness's capture, with the test's name.
pub fn missing(require: &str, what: &str, why: &str) -> Result<()> {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    if std::env::var(require).is_ok_and(|v| v == "1") {
        bail!("{test}: {what} cannot run ({require}=1): {why}");
    }
    let _ = writeln!(std::io::stderr(), "{test}: {what} did not run: {why}");
    Ok(())
}

/// `Some(dir)` when the embedded model is installed (`KITH_MODEL_DIR`;
/// tests/run.sh installs it and sets it); `None`, said, when it is not and
/// need not be. A `KITH_MODEL_DIR` that is not a folder is a mistake to
/// mend, not a reason to skip.
pub fn model_dir() -> Result<Option<String>> {
    if let Some(dir) = std::env::var("KITH_MODEL_DIR")
        .ok()
        .filter(|d| !d.is_empty())
    {
        if !std::path::Path::new(&dir).is_dir() {
            bail!(
                "KITH_MODEL_DIR={dir} is not a folder (deploy/install-model.sh installs the model)"
            );
        }
        return Ok(Some(dir));
    }
    missing(
        REQUIRE_MODEL,
        "semantic search",
        "KITH_MODEL_DIR is not set (tests/run.sh installs the model and sets it)",
    )?;
    Ok(None)
}
