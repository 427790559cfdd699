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
//! two Python venvs.

mod agent_edges;
mod agents;
mod bench;
mod capture;
mod central;
mod cli;
mod conformance;
mod conversations;
mod forget;
mod identity;
mod install;
mod mcp;
mod openapi;
mod privacy;
mod search;
mod sharing;
mod web;
