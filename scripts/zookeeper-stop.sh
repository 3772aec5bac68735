#!/usr/bin/env bash
# Stop a ZooKeeper started by scripts/zookeeper-start.sh.
#   scripts/zookeeper-stop.sh [--pid-file ./run/zookeeper.pid]
set -Eeuo pipefail
trap 'echo "zookeeper-stop: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
pid_file=./run/zookeeper.pid
while [ $# -gt 0 ]; do
    case "$1" in
        --pid-file) pid_file="$2"; shift 2 ;;
        -h|--help) sed -n '2,3p' "$0"; exit 0 ;;
        *) echo "zookeeper-stop: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ ! -f "$pid_file" ] || ! kill -0 "$(cat "$pid_file")" 2>/dev/null; then
    echo "ZooKeeper is not running (no live pid in $pid_file)"
    rm -f "$pid_file"
    exit 0
fi
pid=$(cat "$pid_file")
kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
rm -f "$pid_file"
echo "ZooKeeper stopped"
