# Sourced by kith's scripts: what they need from the machine, installed
# from Debian's packages when run as root, else named with the command that
# installs them.
#
#   need CHECK PACKAGE...   # CHECK: a shell command that succeeds when present

need() {
  local check=$1
  shift
  if bash -c "$check" >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $* (Debian packages)" >&2
    apt-get install -y "$@" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y "$@" >/dev/null; } || true
    if bash -c "$check" >/dev/null 2>&1; then
      return 0
    fi
  fi
  echo "kith needs $* here: sudo apt-get install -y $*" >&2
  return 1
}
