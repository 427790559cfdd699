#!/usr/bin/env bash
# kith side by side with its peers: installs agentsview (PyPI)
# and cass (crates.io `coding-agent-search`, the newest release that builds
# on the installed Rust) into a temp prefix, builds one corpus of Claude Code
# transcripts in a fake HOME, lets each tool index it, and measures index
# time, search latency, RSS, index size and LoCoMo session recall in one run
# (tests/peers/compare.py). Only loopback; everything at nice 10.
#
#   tests/peers/compare.sh [--sessions N] [--questions N] [--out FILE]
#
# PEERS_PREFIX (default /tmp/kith-peers) keeps the installs between runs;
# PEERS_SKIP_CASS=1 skips the cass build attempts.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=${PEERS_PREFIX:-/tmp/kith-peers}
AGENTSVIEW_VERSION=0.46.1
# Newest first; 0.7.0 needs rustc 1.96 (its vergen dependencies), and 0.6.7
# is yanked. At most three attempts.
CASS_VERSIONS=(0.6.13 0.6.9 0.6.6)
OUT=$PREFIX/compare.json
ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --sessions|--questions) ARGS+=("$1" "$2"); shift 2 ;;
    *) echo "usage: $0 [--sessions N] [--questions N] [--out FILE]" >&2; exit 2 ;;
  esac
done
mkdir -p "$PREFIX"
NICE=(nice -n 10)

# kith: the release binaries, built only if missing.
BIN=$ROOT/target/release
if [ ! -x "$BIN/kith" ] || [ ! -x "$BIN/kith-central" ]; then
  (cd "$ROOT" && "${NICE[@]}" cargo build --release --bins -j 1)
fi
# A copy, so that a rebuild in the shared tree mid-run cannot swap them.
mkdir -p "$PREFIX/bin"
cp "$BIN/kith" "$BIN/kith-central" "$PREFIX/bin/"
BIN=$PREFIX/bin
MODEL_DIR=${KITH_MODEL_DIR:-$("$ROOT/deploy/install-model.sh" "$HOME/.local/share/kith/models" | tail -n1)}

# agentsview from PyPI, in a venv (the wheel ships its binary).
AV=$PREFIX/av-venv/bin/agentsview
if ! "$AV" --version 2>/dev/null | grep -q "v$AGENTSVIEW_VERSION"; then
  python3 -m venv "$PREFIX/av-venv"
  "${NICE[@]}" "$PREFIX/av-venv/bin/pip" install -q "agentsview==$AGENTSVIEW_VERSION"
fi

# cass from crates.io: the newest release that builds here. None does on
# stable Rust (0.7.0 needs rustc 1.96; 0.6.13 locks asupersync 0.3.4 and
# 0.6.9/0.6.6 lock fsqlite-btree/-pager 0.1.5, which use #![feature]); if
# one ever builds, compare.py has no driver for it yet and says so.
CASS_STATUS="no cass release built on $(rustc --version)"
if [ "${PEERS_SKIP_CASS:-}" != 1 ]; then
  for v in "${CASS_VERSIONS[@]}"; do
    if [ -x "$PREFIX/cass-$v/bin/cass" ]; then
      CASS_STATUS="cass $v built ($PREFIX/cass-$v/bin/cass); compare.py does not drive it yet"; break
    fi
    if [ -e "$PREFIX/cass-$v.failed" ]; then
      CASS_STATUS="$CASS_STATUS; $v: $(cat "$PREFIX/cass-$v.failed")"; continue
    fi
    echo "building cass $v (cargo install --locked; minutes) ..." >&2
    if CARGO_TARGET_DIR=$PREFIX/cass-build timeout 5400 "${NICE[@]}" cargo install --locked -j 1 \
        --root "$PREFIX/cass-$v" "coding-agent-search@$v" >"$PREFIX/cass-$v.log" 2>&1; then
      CASS_STATUS="cass $v built ($PREFIX/cass-$v/bin/cass); compare.py does not drive it yet"; break
    fi
    grep -m1 -E '^error' "$PREFIX/cass-$v.log" >"$PREFIX/cass-$v.failed" || echo failed >"$PREFIX/cass-$v.failed"
    CASS_STATUS="$CASS_STATUS; $v: $(cat "$PREFIX/cass-$v.failed")"
  done
  echo "$CASS_STATUS" >&2
fi

exec "${NICE[@]}" python3 "$ROOT/tests/peers/compare.py" --prefix "$PREFIX/run" --out "$OUT" \
  --kith-bin "$BIN" --model-dir "$MODEL_DIR" --agentsview "$AV" --cass-status "$CASS_STATUS" \
  --command "tests/peers/compare.sh ${ARGS[*]}" "${ARGS[@]}"
