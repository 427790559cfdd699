#!/usr/bin/env bash
# kith usage side by side with ccusage 17.2.1 (npm; its 20.x releases need a
# platform package the registry does not serve), and kith's report latency:
# installs ccusage into a prefix, then runs `kith-bench --usage` with it
# (every Claude Code fixture in one HOME, days in UTC for both).
#
#   tests/peers/ccusage.sh [--messages N] [--out FILE]
#
# Build the workspace in release mode first; CCUSAGE_PREFIX (default
# /tmp/kith-ccusage) keeps the install between runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=${CCUSAGE_PREFIX:-/tmp/kith-ccusage}
VERSION=17.2.1
CCUSAGE=$PREFIX/node_modules/.bin/ccusage
if ! "$CCUSAGE" --version 2>/dev/null | grep -q "$VERSION"; then
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund "ccusage@$VERSION" >&2
fi
exec "$ROOT/target/release/kith-bench" --usage --ccusage "$CCUSAGE" "$@"
