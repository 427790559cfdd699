//! kith's end-to-end tests, in one binary (one link, as ripgrep's): a
//! module per area, each driving the real `kith` and `kith-central` (built
//! by `cargo build --workspace` first, as `tests/run.sh` does) against real
//! servers through the harness in `tests/src` (`kith_tests`); `privacy`
//! drives central's router in process.
//!
//! A test is named by its module: `cargo test -p kith-tests --test e2e
//! capture::` runs the capture tests, `... -- --exact
//! capture::hook_always_exits_zero` one of them.
//!
//! What some tests need is installed by `tests/run.sh`: the embedding model
//! (`KITH_MODEL_DIR`), a Meilisearch server (`KITH_TEST_MEILI_URL`, or a
//! binary for the tests that stop and start their own), a PDS, Chromium and
//! two Python venvs. Without the model or Meilisearch, the part of a test
//! that needs it says on stderr that it did not run; with
//! `KITH_REQUIRE_MODEL=1` or `KITH_REQUIRE_MEILI=1` (which `tests/run.sh`
//! sets when it has them) it fails the test instead.

mod agent_edges;
mod agents;
mod backup;
mod bench;
mod capture;
mod central;
mod cli;
mod conformance;
mod conversations;
mod export;
mod fairness;
mod forget;
mod identity;
mod install;
mod mcp;
mod openapi;
mod privacy;
mod resume;
mod search;
mod sharing;
mod upgrade;
mod usage;
mod web;
