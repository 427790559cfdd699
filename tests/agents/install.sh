#!/usr/bin/env bash
# Installs the real coding agents the end-to-end tests drive (pinned in
# package-lock.json) into tests/agents/node_modules: Claude Code's and
# Codex's native Linux binaries come in their optional dependencies, so no
# install script runs.
# Idempotent and fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")"

STAMP="node_modules/.kith-installed"
CLAUDE="node_modules/@anthropic-ai/claude-code-linux-x64/claude"
CODEX="node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
if [ -f "$STAMP" ] && [ "$STAMP" -nt package-lock.json ] && [ -x "$CLAUDE" ] && [ -x "$CODEX" ]; then
    exit 0
fi
npm ci --no-audit --no-fund --ignore-scripts --engine-strict=false >&2
for bin in "$CLAUDE" "$CODEX"; do
    if [ ! -x "$bin" ]; then
        echo "tests/agents/install.sh: $bin is missing after npm ci" >&2
        exit 1
    fi
done
touch "$STAMP"
