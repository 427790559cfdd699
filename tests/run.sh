#!/usr/bin/env bash
# Runs kith's whole test suite on a fresh machine: installs what the tests
# need, checks formatting and lints, builds the real binaries the end-to-end
# tests drive, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version

echo "== format"
cargo fmt --all --check

echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== build (the end-to-end tests run these binaries)"
cargo build --workspace --bins --locked

echo "== test"
cargo test --workspace --locked -- --test-threads 2
