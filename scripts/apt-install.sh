#!/usr/bin/env bash
# Installs Debian packages by name (apt-get update, then apt-get install), as root or through
# sudo, waiting while another package manager holds the dpkg or apt lock (an unattended
# upgrade, another apt in a second terminal) instead of failing at once.
#   scripts/apt-install.sh PACKAGE...
# The wait is bounded: SLUICE_APT_LOCK_WAIT seconds in all (default 600), then it fails naming
# the lock and the process holding it, as apt does.
set -Eeuo pipefail
trap 'echo "apt-install: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
[ $# -gt 0 ] || { echo "apt-install: usage: scripts/apt-install.sh PACKAGE..." >&2; exit 2; }
wait_s=${SLUICE_APT_LOCK_WAIT:-600}
deadline=$(( $(date +%s) + wait_s ))

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "apt-install: need root (or sudo) to run: $*" >&2; exit 1; fi
}

# Runs one apt-get command; while it fails only because a lock is held, waits and runs it
# again. `apt-get install` can wait by itself (DPkg::Lock::Timeout) but `apt-get update`
# cannot (its lists lock has no timeout), so both go through the same loop.
apt_locked() {
    local err rc said=no
    err=$(mktemp)
    trap 'rm -f "$err"' RETURN
    while true; do
        rc=0
        as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" 2>"$err" >/dev/null || rc=$?
        if [ $rc = 0 ]; then return 0; fi
        if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg' "$err" \
                || [ "$(date +%s)" -ge "$deadline" ]; then
            cat "$err" >&2
            echo "apt-install: apt-get $1 failed (exit $rc)" >&2
            return $rc
        fi
        if [ $said = no ]; then
            echo "apt-install: another package manager holds the lock; waiting up to ${wait_s} s:" >&2
            grep -m1 -E 'Could not get lock' "$err" >&2 || true
            said=yes
        fi
        sleep 3
    done
}

apt_locked update -qq
apt_locked install -y -qq "$@"
