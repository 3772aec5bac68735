#!/usr/bin/env bash
# Sluice quickstart: installs what is missing, starts ZooKeeper and three brokers on this machine,
# creates a topic, produces and consumes 100,000 messages with kcat, and describes the topic.
#
#   scripts/quickstart.sh            start everything and run the demo (state in ./run/)
#   scripts/quickstart.sh --stop     stop the brokers and ZooKeeper started here
#
# Ports: ZooKeeper 2181, brokers 9092-9094, metrics 9404-9406 (all on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="$PWD/run"
ZK_PORT=${ZK_PORT:-2181}
TOPIC=${TOPIC:-quickstart}
COUNT=${COUNT:-100000}
BOOTSTRAP=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094

stop_all() {
    for id in 1 2 3; do
        pidfile="$RUN/broker-$id.pid"
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "stopping broker $id"
            pid=$(cat "$pidfile")
            kill -TERM "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        fi
    done
    scripts/zookeeper-stop.sh --pid-file "$RUN/zookeeper.pid" || true
}

if [ "${1:-}" = "--stop" ]; then stop_all; exit 0; fi
if [ $# -gt 0 ]; then sed -n '2,8p' "$0"; exit 2; fi

scripts/bootstrap.sh
mkdir -p "$RUN"
scripts/zookeeper-start.sh --port "$ZK_PORT" --data-dir "$RUN/zookeeper" \
    --pid-file "$RUN/zookeeper.pid" --log-file "$RUN/zookeeper.log"

for id in 1 2 3; do
    pidfile="$RUN/broker-$id.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "broker $id already running (pid $(cat "$pidfile"))"; continue
    fi
    .venv/bin/twistd --pidfile "$pidfile" --logfile "$RUN/broker-$id.log" broker \
        --broker-id "$id" --listen "tcp:909$((id + 1)):interface=127.0.0.1" \
        --zookeeper "127.0.0.1:$ZK_PORT" --log-dir "$RUN/broker-$id" \
        --metrics "tcp:940$((id + 3)):interface=127.0.0.1"
    echo "started broker $id on 127.0.0.1:909$((id + 1)) (log: run/broker-$id.log)"
done

echo "waiting for the three brokers to register..."
for _ in $(seq 60); do
    n=$(kcat -b "$BOOTSTRAP" -L -m 2 2>/dev/null | grep -c 'at 127.0.0.1:909' || true)
    [ "$n" -ge 3 ] && break
    sleep 0.5
done
[ "${n:-0}" -ge 3 ] || { echo "brokers did not come up; see run/broker-*.log" >&2; exit 1; }

if ! .venv/bin/sluice topics describe --bootstrap-server "$BOOTSTRAP" --topic "$TOPIC" >/dev/null 2>&1; then
    .venv/bin/sluice topics create --bootstrap-server "$BOOTSTRAP" --topic "$TOPIC" \
        --partitions 6 --replication-factor 3 --config min.insync.replicas=2
fi

before=$(kcat -b "$BOOTSTRAP" -C -t "$TOPIC" -o beginning -e -q -f '.\n' 2>/dev/null | wc -l)
echo "producing $COUNT messages with kcat..."
seq -f "quickstart message %08g" 1 "$COUNT" > "$RUN/messages.txt"
start=$(date +%s%N)
# acks=all: each batch is acknowledged once the in-sync replicas hold it.
kcat -b "$BOOTSTRAP" -P -t "$TOPIC" -z lz4 -X linger.ms=5 -X acks=all -l "$RUN/messages.txt"
end=$(date +%s%N)
echo "produced $COUNT messages in $(( (end - start) / 1000000 )) ms"

echo "consuming with kcat..."
got=$(kcat -b "$BOOTSTRAP" -C -t "$TOPIC" -o beginning -e -q 2>/dev/null | grep -c '^quickstart message' || true)
expected=$((before + COUNT))
echo "read back $got messages (expected $expected)"
[ "$got" -eq "$expected" ] || { echo "quickstart FAILED: message count mismatch" >&2; exit 1; }

.venv/bin/sluice topics describe --bootstrap-server "$BOOTSTRAP" --topic "$TOPIC"
echo
echo "Cluster is running. Stop it with: scripts/quickstart.sh --stop"
