#!/usr/bin/env bash
# Installs what Sluice needs on a fresh Debian/Ubuntu machine, only where it is missing:
# Java + ZooKeeper and kcat from the distribution, and a virtualenv at .venv with Sluice
# installed (editable, in "compat" mode so twistd finds the broker plugin from any directory).
# Usage: scripts/bootstrap.sh [--extras test[,spark]] [--no-zookeeper]  (run from anywhere;
# idempotent). --no-zookeeper skips Java and ZooKeeper (brokers in quorum mode need neither).
set -Eeuo pipefail
trap 'echo "bootstrap: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."

extras=""
zookeeper=yes
while [ $# -gt 0 ]; do
    case "$1" in
        --extras) extras="$2"; shift 2 ;;
        --no-zookeeper) zookeeper=no; shift ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "bootstrap: unknown option $1" >&2; exit 2 ;;
    esac
done

need=()
if [ "$zookeeper" = yes ]; then
    command -v java >/dev/null || need+=(default-jre-headless)
    [ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
fi
command -v kcat >/dev/null || need+=(kcat)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
    echo "bootstrap: installing ${need[*]} from the distribution"
    scripts/apt-install.sh "${need[@]}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
stamp=".venv/.sluice-installed-${extras:-base}"
if [ ! -e "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
    echo "bootstrap: installing sluice${extras:+[$extras]} into .venv"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # pip's deprecation chatter about compat mode is noise; show its output only on failure.
    if ! .venv/bin/python -m pip install -q -e "$spec" --config-settings editable_mode=compat \
            >.venv/pip-install.log 2>&1; then
        cat .venv/pip-install.log >&2
        echo "bootstrap: pip install failed" >&2
        exit 1
    fi
    touch "$stamp"
fi
