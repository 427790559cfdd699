#!/usr/bin/env bash
# Installs kith-central as a service, with the embedded embedding model.
#
#   sudo deploy/install-central.sh [--bin PATH]    # the family's server
#   deploy/install-central.sh --user [--bin PATH]  # one machine, one user
#
# Server (as root): /usr/local/bin/kith-central, the pinned model in
# /usr/local/share/kith/models, the system user `kith`, the data directory
# /var/lib/kith (0700) and deploy/kith-central.service, enabled and started.
# It listens on 127.0.0.1:7878: put a TLS reverse proxy in front, or set
# KITH_TLS_CERT/KITH_TLS_KEY and KITH_LISTEN in the unit (plain HTTP on any
# other address is refused).
#
# --user: ~/.local/bin/kith-central, the model in ~/.local/share/kith/models,
# data in ~/.local/share/kith-central (0700), a systemd user unit listening on
# $KITH_LISTEN (default 127.0.0.1:7878). Without a systemd user manager it
# starts central in the background and says that it will not come back after
# a reboot.
#
# Without --bin, builds kith-central from this checkout (release).
# Idempotent. Prints central's URL on the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

user_mode=false
bin=""
while (($#)); do
  case "$1" in
    --user) user_mode=true ;;
    --bin)
      [[ -n "${2:-}" ]] || { echo "install-central: --bin needs a path" >&2; exit 2; }
      bin="$2"
      shift
      ;;
    *) echo "install-central: unknown argument $1 (want --user, --bin PATH)" >&2; exit 2 ;;
  esac
  shift
done
say() { echo "install-central: $*" >&2; }

if ! $user_mode && [[ "$(id -u)" != 0 ]]; then
  say "installing the server needs root (sudo $0), or use --user for this user only"
  exit 1
fi
if [[ -z "$bin" ]]; then
  say "building kith-central (release)"
  if [[ "$(id -u)" == 0 && -n "${SUDO_USER:-}" ]]; then
    # As the user who ran sudo: their toolchain, and target/ stays theirs.
    sudo -u "$SUDO_USER" -H bash -lc 'cargo build --release --locked -p kith-central' >&2
  else
    cargo build --release --locked -p kith-central >&2
  fi
  bin=target/release/kith-central
fi
# shellcheck source=deploy/need.sh
. deploy/need.sh
need "command -v curl" curl || exit 1
[[ -x "$bin" ]] || { say "$bin is not an executable kith-central"; exit 1; }

if $user_mode; then
  prefix="$HOME/.local/bin"
  models="${KITH_MODEL_DIR:-$HOME/.local/share/kith/models}"
  data="${KITH_DATA_DIR:-$HOME/.local/share/kith-central}"
  listen="${KITH_LISTEN:-127.0.0.1:7878}"
  units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
else
  prefix=/usr/local/bin
  models=/usr/local/share/kith/models
  data=/var/lib/kith
  listen=127.0.0.1:7878
  units=/etc/systemd/system
fi

mkdir -p "$prefix"
install -m 0755 "$bin" "$prefix/kith-central.new"
mv "$prefix/kith-central.new" "$prefix/kith-central"
say "installed $prefix/kith-central"
deploy/install-model.sh "$models" >/dev/null

mkdir -p "$units"
if $user_mode; then
  install -d -m 0700 "$data"
  unit="$(mktemp)"
  cat >"$unit" <<UNIT
# kith-central for $(id -un) on this machine (deploy/install-central.sh --user).
[Unit]
Description=kith central: transcript store and search

[Service]
Environment=KITH_DATA_DIR=$data
Environment=KITH_LISTEN=$listen
Environment=KITH_MODEL_DIR=$models
ExecStart=$prefix/kith-central serve
Restart=on-failure

[Install]
WantedBy=default.target
UNIT
  install -m 0644 "$unit" "$units/kith-central.service"
  rm -f "$unit"
  ctl=(systemctl --user)
else
  getent passwd kith >/dev/null ||
    useradd --system --user-group --home-dir "$data" --no-create-home --shell /usr/sbin/nologin kith
  install -d -m 0700 -o kith -g kith "$data"
  install -m 0644 deploy/kith-central.service "$units/kith-central.service"
  ctl=(systemctl)
fi
say "wrote $units/kith-central.service"

healthy() { curl -fsS "http://$listen/healthz" >/dev/null 2>&1; }
if "${ctl[@]}" daemon-reload 2>/dev/null; then
  "${ctl[@]}" enable kith-central.service >&2
  "${ctl[@]}" restart kith-central.service >&2
  say "enabled and (re)started kith-central.service"
elif $user_mode; then
  if ! healthy; then
    state="${KITH_STATE_DIR:-$HOME/.local/state/kith}"
    mkdir -p "$state"
    KITH_DATA_DIR="$data" KITH_LISTEN="$listen" KITH_MODEL_DIR="$models" \
      nohup "$prefix/kith-central" serve >>"$state/central.log" 2>&1 &
    say "no systemd user manager here: started kith-central in the background (log: $state/central.log);"
    say "it does not start again after a reboot: run '$prefix/kith-central serve' with KITH_DATA_DIR=$data then"
  fi
else
  say "systemd is not running: the unit is in place; start it with 'systemctl enable --now kith-central' once it runs"
  echo "http://$listen"
  exit 0
fi
for _ in $(seq 1 300); do
  healthy && break
  sleep 0.1
done
if ! healthy; then
  say "kith-central does not answer on $listen; see 'journalctl ${ctl[*]:1} -u kith-central' or its log"
  exit 1
fi
if $user_mode; then
  if command -v loginctl >/dev/null 2>&1 &&
    [[ "$(loginctl show-user "$(id -un)" --property=Linger --value 2>/dev/null)" == no ]]; then
    say "systemd stops this user's services when the last session ends; to keep central (and"
    say "kith watch) running after logout and starting at boot: loginctl enable-linger $(id -un)"
  fi
else
  say "manage it as its user, on its data: sudo -u kith kith-central --data-dir $data user add ..."
fi
echo "http://$listen"
