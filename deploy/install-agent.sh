#!/usr/bin/env bash
# Sets this machine up to capture: `kith` in ~/.local/bin (or $PREFIX/bin),
# on the login shell's PATH, kith's hook in every agent found here (Claude
# Code, Codex, pi, Gemini CLI, Cursor, Copilot CLI) and a user service running
# `kith watch` (systemd user unit on Linux, launchd agent on macOS).
# Idempotent: a second run changes nothing.
#
#   deploy/install-agent.sh [--bin PATH] [kith setup flags]
#
# Without --bin, builds kith from this checkout (release). The other flags go
# to `kith setup`: --no-service, --no-enable, --bin-dir DIR, --uninstall.
set -euo pipefail

kith=""
setup=()
while (($#)); do
  if [[ "$1" == "--bin" ]]; then
    [[ -n "${2:-}" ]] || { echo "install-agent: --bin needs the path of a kith binary" >&2; exit 2; }
    kith="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
    shift 2
  else
    setup+=("$1")
    shift
  fi
done
if [[ -z "$kith" ]]; then
  cd "$(dirname "$0")/.."
  echo "== building kith (release)"
  cargo build --release --locked -p kith-agent
  kith="$PWD/target/release/kith"
fi
[[ -x "$kith" ]] || { echo "install-agent: $kith is not an executable kith" >&2; exit 1; }
exec "$kith" setup ${setup[@]+"${setup[@]}"}
