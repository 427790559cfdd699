#!/usr/bin/env bash
# One command to a working single-machine kith on embedded defaults: builds
# the binaries, installs kith-central for this user (deploy/install-central.sh
# --user: a service on 127.0.0.1:7878 with the embedding model), registers
# this machine with a local token, sets this machine up to capture
# (deploy/install-agent.sh: kith on PATH, the agents' hooks, the `kith watch`
# service, and a backfill of the transcripts already on disk).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG_DIR="${KITH_CONFIG_DIR:-$HOME/.config/kith}"
STATE_DIR="${KITH_STATE_DIR:-$HOME/.local/state/kith}"
BIN_DIR="$HOME/.local/bin"
ME="${USER:-$(id -un)}"

echo "== building kith and kith-central (release)"
cargo build --release --locked --bins

echo "== installing kith-central for $ME"
CENTRAL="$(deploy/install-central.sh --user --bin target/release/kith-central | tail -n 1)"
DATA_DIR="${KITH_DATA_DIR:-$HOME/.local/share/kith-central}"

if [ ! -f "$CONFIG_DIR/auth.json" ]; then
  mkdir -p -m 0700 "$CONFIG_DIR"
  echo "== registering this machine ($(hostname)) for user $ME.local"
  # The token goes straight into auth.json (0600): never on screen or argv.
  "$BIN_DIR/kith-central" machine register --data-dir "$DATA_DIR" --local \
    --user "$ME.local" --name "$(hostname)" \
    --auth-json "$CONFIG_DIR/auth.json" --central-url "$CENTRAL"
fi

echo "== setting this machine up to capture (and capturing what is already on disk)"
deploy/install-agent.sh --bin target/release/kith --bin-dir "$BIN_DIR"

# Without a systemd user manager (a container) `kith setup` could only
# write the service: keep capturing for this session, and say so.
if ! systemctl --user is-active --quiet kith-watch.service 2>/dev/null &&
  ! pgrep -f "$BIN_DIR/kith watch" >/dev/null 2>&1; then
  mkdir -p "$STATE_DIR"
  nohup "$BIN_DIR/kith" watch >>"$STATE_DIR/watch.log" 2>&1 &
  echo "kith watch runs in the background until the next reboot (no systemd user manager here)"
fi

# A new login shell finds `kith` (kith setup saw to it); this one may not.
case ":$PATH:" in
  *":$BIN_DIR:"*) KITH=kith ;;
  *) KITH="$BIN_DIR/kith" ;;
esac
cat <<MSG

kith is running: central at $CENTRAL, data in $DATA_DIR.
Search your history:   $KITH search "what you remember"
Browse the run tree:   $KITH tree
Capture coverage:      $KITH status
MSG
