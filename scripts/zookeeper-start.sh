#!/usr/bin/env bash
# Start a standalone ZooKeeper server (Debian's zookeeper package) in the background.
#   scripts/zookeeper-start.sh [--port 2181] [--data-dir ./run/zookeeper]
#                              [--pid-file ./run/zookeeper.pid] [--log-file ./run/zookeeper.log]
# Installs Java and ZooKeeper first when they are missing. Idempotent: a server already running
# from the pid file is left alone. Stop it with scripts/zookeeper-stop.sh.
set -Eeuo pipefail
trap 'echo "zookeeper-start: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
port=2181
data_dir=./run/zookeeper
pid_file=./run/zookeeper.pid
log_file=./run/zookeeper.log
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --data-dir) data_dir="$2"; shift 2 ;;
        --pid-file) pid_file="$2"; shift 2 ;;
        --log-file) log_file="$2"; shift 2 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "zookeeper-start: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if ! command -v java >/dev/null || [ ! -e /usr/share/java/zookeeper.jar ]; then
    echo "zookeeper-start: installing Java and ZooKeeper from the distribution"
    "$(dirname "$0")/apt-install.sh" default-jre-headless zookeeper
fi

if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
    echo "ZooKeeper already running (pid $(cat "$pid_file"))"
    exit 0
fi
mkdir -p "$data_dir" "$(dirname "$pid_file")" "$(dirname "$log_file")"
nohup java -Xmx512m -Dzookeeper.admin.enableServer=false \
    -Dzookeeper.4lw.commands.whitelist=srvr,ruok \
    -cp '/usr/share/java/*:/usr/share/zookeeper/*' \
    org.apache.zookeeper.server.ZooKeeperServerMain "$port" "$data_dir" >>"$log_file" 2>&1 &
echo $! > "$pid_file"

for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf srvr >&3 && grep -q Zookeeper <&3) 2>/dev/null; then
        echo "ZooKeeper running on 127.0.0.1:$port (pid $(cat "$pid_file"), log $log_file)"
        echo "stop it with: scripts/zookeeper-stop.sh --pid-file $pid_file"
        exit 0
    fi
    if ! kill -0 "$(cat "$pid_file")" 2>/dev/null; then
        echo "zookeeper-start: ZooKeeper exited; last lines of $log_file:" >&2
        tail -n 20 "$log_file" >&2
        exit 1
    fi
    sleep 0.2
done
echo "zookeeper-start: ZooKeeper did not answer on port $port within 20 s (see $log_file)" >&2
exit 1
