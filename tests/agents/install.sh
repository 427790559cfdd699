#!/usr/bin/env bash
# Installs the real coding agents the end-to-end tests drive (pinned in
# package-lock.json) into tests/agents/node_modules: Claude Code's native
# Linux binary comes in its optional dependency, so no install script runs.
# Idempotent and fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")"

STAMP="node_modules/.kith-installed"
CLAUDE="node_modules/@anthropic-ai/claude-code-linux-x64/claude"
if [ -f "$STAMP" ] && [ "$STAMP" -nt package-lock.json ] && [ -x "$CLAUDE" ]; then
    exit 0
fi
npm ci --no-audit --no-fund --ignore-scripts --engine-strict=false >&2
if [ ! -x "$CLAUDE" ]; then
    echo "tests/agents/install.sh: $CLAUDE is missing after npm ci" >&2
    exit 1
fi
touch "$STAMP"
