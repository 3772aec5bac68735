#!/usr/bin/env bash
# Sluice quickstart: installs what is missing, starts three brokers on this machine, creates a
# topic, produces and consumes 100,000 messages with kcat, describes the topic, then consumes
# the topic with a Sluice consumer group of three members and shows the group's ownership,
# offsets and lag.
#
#   scripts/quickstart.sh              quorum mode (the default): three brokers, each a voter of
#                                      Sluice's metadata quorum; no ZooKeeper, no Java
#   scripts/quickstart.sh --zookeeper  ZooKeeper mode: ZooKeeper and three brokers
#   scripts/quickstart.sh --secure     (with either mode) the same over TLS and SCRAM: see below
#   scripts/quickstart.sh --stop       stop the brokers (and ZooKeeper) started here
#
# State and logs in ./run/: each mode keeps its brokers' data in its own directory
# (run/quorum-mode/, run/zookeeper-mode/), since a broker refuses a log directory of another
# cluster (meta.properties).
#
# Ports: brokers 9092-9094, metrics 9404-9406, ZooKeeper 2181 or quorum 9192-9194 (127.0.0.1).
# --secure: clients on SASL_SSL listeners 9292-9294 as the SCRAM-SHA-512 user "quickstart"
# (development certificates in run/tls/, client settings in run/client-secure.properties);
# 9092-9094 become SASL_PLAINTEXT listeners for the brokers' own login (the cluster secret);
# in quorum mode the quorum listeners 9192-9194 are SSL (the same development certificates).
set -Eeuo pipefail
# Every failure says what failed: a command that fails under `set -e` names itself.
trap 'echo "quickstart: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
RUN="$PWD/run"
ZK_PORT=${ZK_PORT:-2181}
TOPIC=${TOPIC:-quickstart}
COUNT=${COUNT:-100000}
BOOTSTRAP=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094
VOTERS=1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194
SECURE_BOOTSTRAP=127.0.0.1:9292,127.0.0.1:9293,127.0.0.1:9294

stop_all() {
    # All at once: in quorum mode a broker stopping after the others have gone gives its last
    # metadata writes (offsets, resignations, closing its session) a few seconds. A session the
    # quorum could no longer close is closed by the broker's next start (docs/operations.md).
    pids=()
    still=0
    for id in 1 2 3; do
        pidfile="$RUN/broker-$id.pid"
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "stopping broker $id"
            pids+=("$(cat "$pidfile")")
            kill -TERM "${pids[-1]}"
        fi
    done
    for pid in ${pids[@]+"${pids[@]}"}; do
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "quickstart: broker pid $pid is still stopping after 60 s; see run/broker-*.log" >&2
            still=1
        fi
    done
    if [ -f "$RUN/zookeeper.pid" ]; then
        scripts/zookeeper-stop.sh --pid-file "$RUN/zookeeper.pid"
    fi
    [ "$still" = 0 ] || { echo "quickstart: the stop is not complete" >&2; exit 1; }
    echo "stopped"
}

MODE=quorum
SECURE=""
[ "${1:-}" = --stop ] && { stop_all; exit 0; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quorum) MODE=quorum; shift ;;
        --zookeeper) MODE=zookeeper; shift ;;
        --secure) SECURE=yes; shift ;;
        *) echo "quickstart: unknown argument: $1" >&2; sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
done

mkdir -p "$RUN"
# A running cluster keeps the listeners it was started with: say so now rather than fail later.
started_as=$([ -n "$SECURE" ] && echo secure || echo plain)
for id in 1 2 3; do
    pidfile="$RUN/broker-$id.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null &&
            [ "$(cat "$RUN/broker-listeners" 2>/dev/null || echo plain)" != "$started_as" ]; then
        echo "quickstart: the brokers are running $([ -n "$SECURE" ] && echo without ||
            echo with) --secure; stop them first: scripts/quickstart.sh --stop" >&2
        exit 1
    fi
done

if [ "$MODE" = zookeeper ]; then
    scripts/bootstrap.sh
    scripts/zookeeper-start.sh --port "$ZK_PORT" --data-dir "$RUN/zookeeper" \
        --pid-file "$RUN/zookeeper.pid" --log-file "$RUN/zookeeper.log"
    metadata=(--zookeeper "127.0.0.1:$ZK_PORT")
else
    scripts/bootstrap.sh --no-zookeeper
    # Every broker is a voter; they start together (a broker waits for a quorum leader).
    metadata=(--metadata quorum --quorum-voters "$VOTERS")
fi

# Brokers authenticate each other with the cluster secret (cluster.secret.file): made once,
# private to this user, and kept across restarts (every broker of the cluster needs the same).
SECRET="$RUN/cluster.secret"
[ -f "$SECRET" ] || .venv/bin/sluice secret create "$SECRET" >/dev/null

# Where clients connect: the plain listeners, or with --secure the SASL_SSL ones, every client
# command below then reading the settings file (kcat -F, sluice --command-config).
CLIENTS=$BOOTSTRAP
kcat_security=()
sluice_security=()
PROPS="$RUN/client-secure.properties"
if [ -n "$SECURE" ]; then
    # Development certificates for 127.0.0.1 and localhost, made once (a new CA would make
    # every client's copy of ca.pem stale). For this machine only: never use them elsewhere.
    [ -f "$RUN/tls/broker.pem" ] || .venv/bin/sluice certs create-dev --out "$RUN/tls" \
        --host 127.0.0.1 --host localhost >/dev/null
    # The user's password, made once; it and the client settings are private to this user.
    if [ ! -f "$RUN/quickstart.password" ]; then
        (umask 077 && .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(24))' \
            > "$RUN/quickstart.password")
    fi
    (umask 077 && printf '%s\n' "security.protocol=SASL_SSL" "sasl.mechanism=SCRAM-SHA-512" \
        "sasl.username=quickstart" "sasl.password=$(head -n 1 "$RUN/quickstart.password")" \
        "ssl.ca.location=$RUN/tls/ca.pem" > "$PROPS")
    chmod 600 "$PROPS"
    CLIENTS=$SECURE_BOOTSTRAP
    kcat_security=(-F "$PROPS")
    sluice_security=(--command-config "$PROPS")
fi

# The brokers' own login, for what only a broker may do here (make the first user) and to reach
# the SASL_PLAINTEXT broker listeners: read from the secret file at each use and handed over
# through a pipe, so the secret is in no other file and on no command line.
cluster_login() {
    printf 'security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n'
    printf 'sasl.username=__sluice_broker\nsasl.password=%s\n' "$(head -n 1 "$SECRET")"
}

for id in 1 2 3; do
    pidfile="$RUN/broker-$id.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "broker $id already running (pid $(cat "$pidfile"))"; continue
    fi
    if [ -n "$SECURE" ]; then
        protocols=BROKER:SASL_PLAINTEXT,CLIENT:SASL_SSL
        quorum_tls=()
        if [ "$MODE" = quorum ]; then
            # The quorum listener on TLS too: the brokers check each other's certificate
            # against the development CA there (and still log in with the cluster secret).
            protocols=$protocols,QUORUM:SSL
            quorum_tls=(--set "listener.name.quorum.ssl.cafile=$RUN/tls/ca.pem")
        fi
        listeners=(--listen "BROKER://127.0.0.1:909$((id + 1)),CLIENT://127.0.0.1:929$((id + 1))"
                   --set "listener.security.protocol.map=$protocols"
                   --set inter.broker.listener.name=BROKER
                   --set "ssl.certfile=$RUN/tls/broker.pem" --set "ssl.keyfile=$RUN/tls/broker.key"
                   "${quorum_tls[@]}")
    else
        listeners=(--listen "tcp:909$((id + 1)):interface=127.0.0.1")
    fi
    .venv/bin/twistd --pidfile "$pidfile" --logfile "$RUN/broker-$id.log" broker \
        --broker-id "$id" "${listeners[@]}" \
        "${metadata[@]}" --log-dir "$RUN/$MODE-mode/broker-$id" \
        --set "cluster.secret.file=$SECRET" \
        --metrics "tcp:940$((id + 3)):interface=127.0.0.1"
    echo "$started_as" > "$RUN/broker-listeners"
    if [ -n "$SECURE" ]; then
        echo "started broker $id: clients on 127.0.0.1:929$((id + 1)) (SASL_SSL), brokers on" \
            "127.0.0.1:909$((id + 1)) (log: run/broker-$id.log)"
    else
        echo "started broker $id on 127.0.0.1:909$((id + 1)) (log: run/broker-$id.log)"
    fi
done

echo "waiting for the three brokers to register..."
for _ in $(seq 60); do
    if [ -n "$SECURE" ]; then
        n=$(kcat -F <(cluster_login) -b "$BOOTSTRAP" -L -m 2 2>/dev/null |
            grep -c 'at 127.0.0.1:909' || true)
    else
        n=$(kcat -b "$BOOTSTRAP" -L -m 2 2>/dev/null | grep -c 'at 127.0.0.1:909' || true)
    fi
    [ "$n" -ge 3 ] && break
    sleep 0.5
done
[ "${n:-0}" -ge 3 ] || { echo "quickstart FAILED: the brokers did not come up; see run/broker-*.log" >&2; exit 1; }

if [ -n "$SECURE" ]; then
    # User management is served to brokers (and super.users) only: the first user is made over
    # the cluster login. Setting the same password again on a restart changes nothing.
    .venv/bin/sluice users add quickstart --bootstrap-server "$BOOTSTRAP" \
        --command-config <(cluster_login) --password-file "$RUN/quickstart.password"
    # Each broker learns of the user through its watch on the metadata store: wait until every
    # one of them accepts the login.
    for id in 1 2 3; do
        ok=""
        for _ in $(seq 60); do
            if kcat "${kcat_security[@]}" -b "127.0.0.1:929$((id + 1))" -L -m 2 >/dev/null 2>&1
            then ok=yes; break; fi
            sleep 0.5
        done
        [ -n "$ok" ] || { echo "quickstart FAILED: broker $id does not accept user 'quickstart'" \
            "over SASL_SSL after 30 s; see run/broker-$id.log" >&2; exit 1; }
    done
    echo "user 'quickstart' logs in to every broker over SASL_SSL with SCRAM-SHA-512"
fi

if ! .venv/bin/sluice topics describe --bootstrap-server "$CLIENTS" "${sluice_security[@]}" \
        --topic "$TOPIC" >/dev/null 2>&1; then
    .venv/bin/sluice topics create --bootstrap-server "$CLIENTS" "${sluice_security[@]}" \
        --topic "$TOPIC" --partitions 6 --replication-factor 3 --config min.insync.replicas=2
fi

# A restarted cluster lists its brokers before the controller has given every partition a
# leader again; produce and read only once it has.
leaders=""
for _ in $(seq 120); do
    desc=$(.venv/bin/sluice topics describe --bootstrap-server "$CLIENTS" "${sluice_security[@]}" \
           --topic "$TOPIC" 2>/dev/null || true)
    total=$(printf '%s\n' "$desc" | grep -c 'Partition: ' || true)
    led=$(printf '%s\n' "$desc" | grep -cE 'Leader: [0-9]+' || true)
    if [ "$total" -gt 0 ] && [ "$led" -eq "$total" ]; then leaders=yes; break; fi
    sleep 0.5
done
[ -n "$leaders" ] || { echo "quickstart FAILED: not every partition of $TOPIC has a leader" \
    "after 60 s; see run/broker-*.log" >&2; exit 1; }

before=$(kcat "${kcat_security[@]}" -b "$CLIENTS" -C -t "$TOPIC" -o beginning -e -q -f '.\n' \
         2>/dev/null | wc -l)
echo "producing $COUNT messages with kcat..."
seq -f "quickstart message %08g" 1 "$COUNT" > "$RUN/messages.txt"
start=$(date +%s%N)
# acks=all: each batch is acknowledged once the in-sync replicas hold it.
kcat "${kcat_security[@]}" -b "$CLIENTS" -P -t "$TOPIC" -z lz4 -X linger.ms=5 -X acks=all \
    -l "$RUN/messages.txt"
end=$(date +%s%N)
echo "produced $COUNT messages in $(( (end - start) / 1000000 )) ms"

echo "consuming with kcat..."
got=$(kcat "${kcat_security[@]}" -b "$CLIENTS" -C -t "$TOPIC" -o beginning -e -q 2>/dev/null |
      grep -c '^quickstart message' || true)
expected=$((before + COUNT))
echo "read back $got messages (expected $expected)"
[ "$got" -eq "$expected" ] || { echo "quickstart FAILED: message count mismatch" >&2; exit 1; }

.venv/bin/sluice topics describe --bootstrap-server "$CLIENTS" "${sluice_security[@]}" \
    --topic "$TOPIC"

GROUP=${GROUP:-quickstart-group}
echo
echo "consuming with a Sluice consumer group '$GROUP' of 3 members..."
.venv/bin/sluice consume --bootstrap-server "$CLIENTS" "${sluice_security[@]}" --topic "$TOPIC" \
    --group "$GROUP" --members 3 --from-beginning --quiet > "$RUN/consumer-group.log" 2>&1 &
group_pid=$!
# Done when every partition is owned and its lag is 0 (the members report their positions to
# the coordinator with every ping, a third of the session timeout).
caught_up=""
for _ in $(seq 120); do
    sleep 1
    out=$(.venv/bin/sluice groups describe --bootstrap-server "$CLIENTS" "${sluice_security[@]}" \
          --group "$GROUP" 2>/dev/null || true)
    rows=$(printf '%s\n' "$out" | awk -F'\t' -v t="$TOPIC" '$1 == t' || true)
    owned=$(printf '%s\n' "$rows" | awk -F'\t' '$6 != "-" && $6 != ""' | wc -l)
    behind=$(printf '%s\n' "$rows" | awk -F'\t' '$5 != "0"' | grep -c . || true)
    if [ "$owned" -eq 6 ] && [ "$behind" -eq 0 ]; then caught_up=yes; break; fi
done
printf '%s\n' "$out"
kill -TERM "$group_pid" 2>/dev/null || true
wait "$group_pid" || true
tail -n 1 "$RUN/consumer-group.log"
[ -n "$caught_up" ] || { echo "quickstart FAILED: the consumer group did not catch up" >&2; exit 1; }
echo
if [ -n "$SECURE" ]; then
    echo "Clients connect over SASL_SSL with the settings in run/client-secure.properties" \
        "(user 'quickstart', its password in run/quickstart.password, CA run/tls/ca.pem):"
    echo "  kcat -F run/client-secure.properties -b $SECURE_BOOTSTRAP -C -t $TOPIC -o beginning -e"
    echo "  .venv/bin/sluice topics list --bootstrap-server $SECURE_BOOTSTRAP" \
        "--command-config run/client-secure.properties"
fi
echo "Cluster is running. Stop it with: scripts/quickstart.sh --stop"
