#!/usr/bin/env bash
# Builds both Debian packages with cargo-deb (pinned; installed once when
# missing) from the binaries already in target/debug (tests/run.sh builds
# them; a release package is `cargo deb -p kith-agent`), installs the agent's
# package with dpkg into a temporary root, and checks the files each package
# holds and that its binaries run from there. Any difference fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
  echo "installing cargo-deb $CARGO_DEB_VERSION (once)"
  cargo install --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {
  echo "deb: FAILED: $*" >&2
  exit 1
}

# build PACKAGE: the .deb's path. The dev profile reuses the test build
# (cargo-deb warns that it is meant for releases).
build() {
  cargo deb -p "$1" --profile dev --no-build --locked --output "$work/" 2>"$work/$1.log" | tail -n 1 ||
    { cat "$work/$1.log" >&2; fail "cargo deb -p $1"; }
}

# expect DEB FILE...: exactly these files (directories aside) in DEB.
expect() {
  local deb=$1
  shift
  diff <(printf '%s\n' "$@" | sort) \
    <(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort) ||
    fail "$(basename "$deb") holds other files than expected (diff above: < expected, > in the package)"
}

agent="$(build kith-agent)"
expect "$agent" /usr/bin/kith /usr/lib/systemd/user/kith-watch.service \
  /usr/share/doc/kith/README.md /usr/share/doc/kith/copyright

# Installed for real, by dpkg, into an empty root.
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# Its own database knows no libc6, which the package depends on.
dpkg --root="$root" --log=/dev/null --force-depends -i "$agent" >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log" >&2; fail "dpkg -i $(basename "$agent")"; }
dpkg --root="$root" -s kith | grep -qx 'Status: install ok installed' || fail "dpkg does not list kith as installed"
version="$("$root/usr/bin/kith" --version)" || fail "kith --version did not run from the package"
[[ "$version" == "kith $(cargo pkgid -p kith-agent | sed 's/.*[#@]//')" ]] || fail "kith --version said: $version"
grep -qx 'ExecStart=/usr/bin/kith watch' "$root/usr/lib/systemd/user/kith-watch.service" ||
  fail "the packaged user unit does not run /usr/bin/kith watch"

central="$(build kith-central)"
expect "$central" /usr/bin/kith-central /usr/lib/systemd/system/kith-central.service \
  /usr/share/kith-central/install-model.sh /usr/share/kith-central/need.sh \
  /usr/share/doc/kith-central/README.md \
  /usr/share/doc/kith-central/copyright
dpkg-deb -x "$central" "$work/central"
"$work/central/usr/bin/kith-central" --version | grep -q '^kith-central ' ||
  fail "kith-central --version did not run from the package"
cmp -s deploy/kith-central.service "$work/central/usr/lib/systemd/system/kith-central.service" ||
  fail "the packaged central unit differs from deploy/kith-central.service"
dpkg-deb -e "$central" "$work/central-control"
grep -q 'useradd --system' "$work/central-control/postinst" || fail "kith-central's postinst does not create the kith user"

echo "deb: $(basename "$agent") installs and runs $version; $(basename "$central") holds central, its unit and the model installer"
