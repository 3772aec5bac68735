"""Kafka consumer groups: join and rebalance time of a confluent-kafka group, commit throughput.

Starts three broker processes on 127.0.0.1 (``--metadata quorum``, the default: every broker a
voter of the metadata quorum, no ZooKeeper; or ``--metadata zookeeper`` on a real ZooKeeper)
with ``group.initial.rebalance.delay.ms`` = ``--initial-delay-ms`` (default 3000, the broker's
default), and one topic of ``--partitions`` partitions (default 200, replication factor 3, no
messages: what is measured is the group protocol, not the data path). Then:

**Join** (per assignor in ``--assignors``, default ``range`` (eager) and
``cooperative-sticky``, and per round of ``--rounds``): ``--members`` (default 100)
confluent-kafka consumers, each polling in its own thread of this process, call ``subscribe()``
together on a fresh group. Timed from the first ``subscribe()`` to the moment every member holds
its assignment, as the members' own rebalance callbacks say: the partitions they hold are
disjoint, cover the topic, and each member holds some. Reported with the generations the
coordinator formed meanwhile and when the last one formed (the brokers log as JSON, so the
coordinator's ``classic group G generation N: M members`` events carry their time), and the
time past the configured initial delay (which the coordinator extends by one delay each time a
member arrived during the last one, KIP-134, so a group whose members arrive within a delay
waits two delays).

**Rebalance** (``--rebalances`` per join round, default 3): with the group settled, one member
closes (LeaveGroup) and, once its ``close()`` returned, a new consumer (created and polling
beforehand) subscribes. Timed from the start of the ``close()`` until every member of the new
set holds its new assignment, with when the coordinator started the rebalance and when it formed
the last generation. The others learn of a rebalance from a heartbeat's answer
(``heartbeat.interval.ms`` 3000), and all their heartbeat cycles restart when a generation
forms; so that the leave does not fall at the same point of that cycle every time, the script
waits a random 0-3 s (``--seed``) before each leave.

**Commits**: for each count in ``--commit-clients`` (default ``1,8``), that many
confluent-kafka consumers, each in its own group and thread, each with its own connection,
commit explicit offsets synchronously in a loop (``commit(offsets=..., asynchronous=False)``:
one OffsetCommit, answered, before the next) for ``--commit-seconds`` (default 10) per round,
with ``--commit-partitions`` partitions per commit
(default ``1,20``). Reported: OffsetCommit requests per second at the coordinator, partitions
per second, the coordinator broker's CPU (``/proc/PID/stat``) during the run and this process's
(the clients'), which shares the two cores.

Rounds repeat and medians are printed; the machine is shared, so the load average is printed
before and after. Asserts nothing beyond every wait ending; every broker process, every
consumer and the temp dir are gone at the end.

Usage: python bench/kafka_groups.py [--metadata quorum|zookeeper] [--members 100]
           [--partitions 200] [--rounds 3] [--rebalances 3] [--initial-delay-ms 3000]
           [--assignors range,cooperative-sticky] [--commit-clients 1,8]
           [--commit-partitions 1,20] [--commit-seconds 10] [--phases groups,commits]
           [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import confluent_kafka  # noqa: E402
from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.common import log_events, process_cpu, wait_full_isr  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

TOPIC = "groups"
#: The members' heartbeat interval (librdkafka's default, set explicitly): a member learns that
#: its group rebalances from a heartbeat's answer.
HEARTBEAT_MS = 3000
#: The longest any wait of the benchmark may take; reaching the condition ends it.
WAIT_S = 300.0


class Holdings:
    """What each member of a group holds, as its rebalance callbacks said, and when the group
    last became *settled*: the members in ``expected`` hold disjoint sets of partitions that
    cover the topic, and each holds at least one (when there are no more members than
    partitions). Callbacks run on the members' threads; everything is under one lock."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._lock = threading.Lock()
        self._held: dict[str, set[int]] = {}
        self._expected: set[str] = set()
        self._settled_at: float | None = None
        self._changed = threading.Condition(self._lock)

    def expect(self, members: set[str]) -> None:
        """From now on the group is settled only over ``members``."""
        with self._lock:
            self._expected = set(members)
            self._update()

    def assign(self, member: str, parts: list[int], incremental: bool) -> None:
        with self._lock:
            held = self._held.setdefault(member, set())
            if not incremental:
                held.clear()
            held.update(parts)
            self._update()

    def revoke(self, member: str, parts: list[int], incremental: bool) -> None:
        with self._lock:
            held = self._held.setdefault(member, set())
            if incremental:
                held.difference_update(parts)
            else:
                held.clear()
            self._update()

    def _update(self) -> None:
        holds = [self._held.get(m, set()) for m in self._expected]
        ok = (bool(holds) and sum(map(len, holds)) == self.partitions
              and len(set().union(*holds)) == self.partitions
              and (len(holds) > self.partitions or all(holds)))
        if ok and self._settled_at is None:
            self._settled_at = time.time()
            self._changed.notify_all()
        elif not ok:
            self._settled_at = None

    def wait_settled(self, timeout: float) -> float:
        """The ``time.time()`` the group became settled (waiting for it)."""
        with self._lock:
            if not self._changed.wait_for(lambda: self._settled_at is not None, timeout):
                counts = sorted(len(self._held.get(m, ())) for m in self._expected)
                raise RuntimeError(f"group not settled in {timeout:.0f} s; partitions held "
                                   f"per member: {counts}")
            assert self._settled_at is not None
            return self._settled_at


class Member:
    """One confluent-kafka consumer, made, subscribed, polled and closed on its own thread
    (a confluent-kafka consumer is not to be closed while another thread polls it)."""

    def __init__(self, name: str, config: dict[str, Any], holdings: Holdings) -> None:
        self.name = name
        self.subscribed_at: float | None = None
        self.close_s: float | None = None
        self.error: BaseException | None = None
        self._config = config
        self._holdings = holdings
        self._ready = threading.Event()
        self._subscribe = threading.Event()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wait_ready(self) -> None:
        if not self._ready.wait(60) or self.error is not None:
            raise RuntimeError(f"member {self.name} not made: {self.error}")

    def subscribe(self) -> None:
        self._subscribe.set()

    def close(self) -> None:
        """Ask the member to close; :meth:`wait_closed` waits for it."""
        self._stop.set()
        self._subscribe.set()

    def wait_closed(self, timeout: float = WAIT_S) -> None:
        if not self._closed.wait(timeout):
            raise RuntimeError(f"member {self.name} did not close in {timeout:.0f} s")
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"member {self.name} failed: {self.error!r}")

    def _run(self) -> None:
        consumer = None
        try:
            consumer = Consumer(self._config)
            self._ready.set()
            self._subscribe.wait()
            if self._stop.is_set():
                return
            cooperative = self._config["partition.assignment.strategy"] == "cooperative-sticky"
            h = self._holdings

            def assigned(_c: Any, parts: list[TopicPartition]) -> None:
                h.assign(self.name, [p.partition for p in parts], cooperative)

            def revoked(_c: Any, parts: list[TopicPartition]) -> None:
                h.revoke(self.name, [p.partition for p in parts], cooperative)

            self.subscribed_at = time.time()
            consumer.subscribe([TOPIC], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
            while not self._stop.is_set():
                consumer.poll(0.1)  # serves the rebalance callbacks; the topic is empty
            t = time.perf_counter()
            consumer.close()
            consumer = None
            self.close_s = time.perf_counter() - t
        except BaseException as e:  # reported by wait_ready / wait_closed
            self.error = e
        finally:
            if consumer is not None:
                consumer.close()
            self._ready.set()
            self._closed.set()


class CoordinatorLog:
    """What the coordinator logged about one group (the brokers log as JSON, so each event has
    its ``log_time`` on this process's ``time.time()`` clock)."""

    def __init__(self, cluster: ProcessCluster, group: str) -> None:
        self._cluster = cluster
        self._group = group

    def _events(self, since: float, prefix: str) -> list[dict[str, Any]]:
        found = [e for b in self._cluster.brokers.values() for e in log_events(b.log_file)
                 if e.get("log_namespace") == "sluice.coordinator.classic"
                 and e.get("g") == self._group and e.get("log_time", 0) >= since
                 and str(e.get("log_format", "")).startswith(prefix)]
        return sorted(found, key=lambda e: e["log_time"])

    def generations(self, since: float) -> list[tuple[float, int]]:
        """``(time, members)`` of each generation formed since ``since``, in order."""
        return [(e["log_time"], int(e["n"]))
                for e in self._events(since, "classic group {g} generation {gen}:")]

    def first_prepare(self, since: float) -> float | None:
        """When the group first started preparing a rebalance since ``since``."""
        events = self._events(since, "classic group {g} preparing to rebalance")
        return events[0]["log_time"] if events else None


def member_config(bootstrap: str, group: str, assignor: str, n: int) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"m{n}",
            "partition.assignment.strategy": assignor, "enable.auto.commit": False,
            "heartbeat.interval.ms": HEARTBEAT_MS, "log_level": 3}


def group_rounds(cluster: ProcessCluster, args: argparse.Namespace, assignor: str,
                 phase: random.Random) -> dict[str, list[float]]:
    """``--rounds`` joins of a fresh group, each followed by ``--rebalances`` leave-and-join
    rebalances; per-round figures printed, all returned (seconds, and generation counts)."""
    out: dict[str, list[float]] = {k: [] for k in (
        "join", "join_formed", "join_sync", "join_gens",
        "rebalance", "rebalance_noticed", "rebalance_formed", "rebalance_sync",
        "rebalance_gens")}
    for r in range(args.rounds):
        group = f"bench-{assignor}-{uuid.uuid4().hex[:8]}"
        holdings = Holdings(args.partitions)
        coordinator = CoordinatorLog(cluster, group)
        members: list[Member] = []
        try:
            for n in range(args.members):
                members.append(Member(f"m{n}", member_config(cluster.bootstrap, group,
                                                              assignor, n), holdings))
            for m in members:
                m.wait_ready()
            holdings.expect({m.name for m in members})
            for m in members:
                m.subscribe()
            settled = holdings.wait_settled(WAIT_S)
            starts = [m.subscribed_at for m in members if m.subscribed_at is not None]
            first = min(starts)
            gens = coordinator.generations(first)
            formed = gens[-1][0] if gens else settled
            out["join"].append(settled - first)
            out["join_formed"].append(formed - first)
            out["join_sync"].append(settled - formed)
            out["join_gens"].append(len(gens))
            print(f"  {assignor} round {r + 1}: join {settled - first:.2f} s "
                  f"({settled - first - args.delay_s:+.2f} s past the {args.delay_s:.1f} s "
                  f"delay; subscribes over {max(starts) - first:.2f} s, last generation formed "
                  f"at {formed - first:.2f} s, all assigned {settled - formed:.2f} s later); "
                  f"generations {len(gens)} (members: {', '.join(str(n) for _, n in gens)})",
                  flush=True)
            for k in range(args.rebalances):
                n = args.members + k
                joiner = Member(f"m{n}", member_config(cluster.bootstrap, group, assignor, n),
                                holdings)
                joiner.wait_ready()
                # A member leaves at any moment of the others' heartbeat cycle, which all
                # restarted when the last generation formed: pick the moment at random.
                time.sleep(phase.uniform(0, HEARTBEAT_MS / 1000))
                leaver = members.pop(0)
                holdings.expect({m.name for m in members} | {joiner.name})
                t0 = time.time()
                leaver.close()
                leaver.wait_closed()
                joiner.subscribe()
                members.append(joiner)
                settled = holdings.wait_settled(WAIT_S)
                gens = coordinator.generations(t0)
                noticed = coordinator.first_prepare(t0)
                formed = gens[-1][0] if gens else settled
                out["rebalance"].append(settled - t0)
                out["rebalance_noticed"].append((noticed or settled) - t0)
                out["rebalance_formed"].append(formed - t0)
                out["rebalance_sync"].append(settled - formed)
                out["rebalance_gens"].append(len(gens))
                print(f"    rebalance {k + 1}: {settled - t0:.2f} s (the leaver's close "
                      f"{(leaver.close_s or 0.0) * 1000:.0f} ms; rebalance started at "
                      f"{(noticed or settled) - t0:.2f} s, last generation formed at "
                      f"{formed - t0:.2f} s, all assigned {settled - formed:.2f} s later); "
                      f"generations {len(gens)} (members: {', '.join(str(n) for _, n in gens)})",
                      flush=True)
        finally:
            for m in members:
                m.close()
            for m in members:
                try:
                    m.wait_closed()
                except RuntimeError as e:  # the others are still closed
                    print(f"  {e}", file=sys.stderr)
    return out


def coordinator_pid(cluster: ProcessCluster, admin: AdminClient, group: str) -> tuple[int, int]:
    """``(broker id, pid)`` of the broker coordinating ``group`` (DescribeGroups)."""
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
    broker = cluster.brokers[desc.coordinator.id]
    assert broker.proc is not None
    return desc.coordinator.id, broker.proc.pid


def commit_round(cluster: ProcessCluster, args: argparse.Namespace, n_clients: int,
                 per_commit: int) -> dict[str, float]:
    """``n_clients`` threads committing ``per_commit`` partitions per OffsetCommit for
    ``--commit-seconds``; returns commits/s, partitions/s and the CPU figures."""
    tag = uuid.uuid4().hex[:8]
    groups = [f"bench-commit-{tag}-{i}" for i in range(n_clients)]
    clients = [Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": g,
                         "enable.auto.commit": False, "log_level": 3}) for g in groups]
    counts = [0] * len(clients)
    failed: list[BaseException] = []
    start = threading.Barrier(len(clients) + 1)
    stop = threading.Event()

    def offsets(i: int, n: int) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, (i * per_commit + j) % args.partitions, n)
                for j in range(per_commit)]

    def commit(i: int, n: int) -> None:
        for tp in clients[i].commit(offsets=offsets(i, n), asynchronous=False):
            if tp.error is not None:
                raise KafkaException(tp.error)

    def loop(i: int) -> None:
        try:
            start.wait()
            n = 1
            while not stop.is_set():
                commit(i, n)
                counts[i] += 1
                n += 1
        except BaseException as e:  # reported after the round
            failed.append(e)

    try:
        for i in range(len(clients)):
            commit(i, 0)  # each client has found the coordinator before the clock starts
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        broker_id, pid = coordinator_pid(cluster, admin, groups[0])
        threads = [threading.Thread(target=loop, args=(i,), daemon=True)
                   for i in range(len(clients))]
        for t in threads:
            t.start()
        cpu0, own0 = process_cpu([pid]), process_cpu([os.getpid()])
        start.wait()
        t0 = time.perf_counter()
        time.sleep(args.commit_seconds)  # the measured window: the clients run meanwhile
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        cpu, own = process_cpu([pid]) - cpu0, process_cpu([os.getpid()]) - own0
    finally:
        for c in clients:
            c.close()
    if failed:
        raise RuntimeError(f"{len(failed)} committing clients failed: {failed[0]!r}")
    total = sum(counts)
    return {"commits_s": total / elapsed, "partitions_s": total * per_commit / elapsed,
            "coordinator_cpu": cpu / elapsed, "clients_cpu": own / elapsed,
            "coordinator": broker_id}


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def create_topic(cluster: ProcessCluster, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            admin.create_topics([NewTopic(TOPIC, num_partitions=partitions,
                                          replication_factor=3)],
                                request_timeout=30)[TOPIC].result(timeout=60)
            break
        except KafkaException as e:  # the controller may not be ready yet
            if time.monotonic() > deadline:
                raise
            if "TOPIC_ALREADY_EXISTS" in str(e):
                break
            time.sleep(1)
    wait_full_isr(cluster, [TOPIC], timeout=WAIT_S)


def main() -> None:
    # Long on purpose: the benchmark as one script read top to bottom (arguments, cluster
    # set-up, the measured steps in order, the report, teardown in one finally); split up, the
    # order of what is measured would be scattered over helpers used once.
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metadata", choices=["quorum", "zookeeper"], default="quorum")
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rebalances", type=int, default=3)
    ap.add_argument("--initial-delay-ms", type=int, default=3000)
    ap.add_argument("--assignors", default="range,cooperative-sticky")
    ap.add_argument("--commit-clients", default="1,8")
    ap.add_argument("--commit-partitions", default="1,20")
    ap.add_argument("--commit-seconds", type=float, default=10.0)
    ap.add_argument("--phases", default="groups,commits")
    ap.add_argument("--seed", type=int, default=1, help="of the leaves' random moments")
    args = ap.parse_args()
    args.delay_s = args.initial_delay_ms / 1000.0
    phases = set(args.phases.split(","))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    print(f"load average at the start: {load()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-groups-"))
    zk = ZooKeeperServer() if args.metadata == "zookeeper" else None
    cluster = None
    try:
        if zk is not None:
            zk.start()
        cluster = ProcessCluster(zk.hosts if zk else None, tmp, 3,
                                 quorum=zk is None,
                                 extra={"group.initial.rebalance.delay.ms":
                                        str(args.initial_delay_ms)})
        for b in cluster.brokers.values():
            b.log_format = "json"  # CoordinatorLog reads each event's time
        cluster.start()
        cluster.wait_registered(timeout=90)
        create_topic(cluster, args.partitions)
        print(f"3 brokers ({args.metadata} mode), topic of {args.partitions} partitions (RF 3), "
              f"group.initial.rebalance.delay.ms={args.initial_delay_ms}; {args.members} "
              f"confluent-kafka {confluent_kafka.version()} members (librdkafka "
              f"defaults: heartbeat.interval.ms {HEARTBEAT_MS}, session.timeout.ms 45000)", flush=True)
        if "groups" in phases:
            phase = random.Random(args.seed)
            results = {a: group_rounds(cluster, args, a, phase)
                       for a in args.assignors.split(",")}
            med = statistics.median
            print(f"\nmedians (max) over {args.rounds} joins and {args.rounds * args.rebalances}"
                  f" rebalances per assignor, seconds; gens: generations formed (median)")
            print(f"{'assignor':20s} {'join':>13s} {'past delay':>11s} {'formed':>7s} "
                  f"{'synced':>7s} {'gens':>5s} {'rebalance':>13s} {'started':>8s} "
                  f"{'formed':>7s} {'synced':>7s} {'gens':>5s}")
            for a, res in results.items():
                reb = res["rebalance"] or [float("nan")]
                print(f"{a:20s} {med(res['join']):>6.2f} ({max(res['join']):>5.2f}) "
                      f"{med(res['join']) - args.delay_s:>11.2f} {med(res['join_formed']):>7.2f} "
                      f"{med(res['join_sync']):>7.2f} {med(res['join_gens']):>5.0f} "
                      f"{med(reb):>6.2f} ({max(reb):>5.2f}) "
                      f"{med(res['rebalance_noticed'] or [0]):>8.2f} "
                      f"{med(res['rebalance_formed'] or [0]):>7.2f} "
                      f"{med(res['rebalance_sync'] or [0]):>7.2f} "
                      f"{med(res['rebalance_gens'] or [0]):>5.0f}", flush=True)
        if "commits" in phases:
            print(f"\ncommits: synchronous, one group per client, {args.commit_seconds:.0f} s "
                  f"per round", flush=True)
            for per in (int(x) for x in args.commit_partitions.split(",")):
                for n_clients in (int(x) for x in args.commit_clients.split(",")):
                    runs = []
                    for r in range(args.rounds):
                        runs.append(commit_round(cluster, args, n_clients, per))
                        x = runs[-1]
                        print(f"  {n_clients} client(s), {per} partition(s) per commit, round "
                              f"{r + 1}: {x['commits_s']:,.0f} commits/s, "
                              f"{x['partitions_s']:,.0f} partitions/s; CPU: coordinator "
                              f"(broker {x['coordinator']}) {x['coordinator_cpu'] * 100:.0f}%, "
                              f"clients {x['clients_cpu'] * 100:.0f}%", flush=True)
                    med = {k: statistics.median(x[k] for x in runs) for k in
                           ("commits_s", "partitions_s", "coordinator_cpu", "clients_cpu")}
                    print(f"{n_clients} client(s), {per} partition(s) per commit, median: "
                          f"{med['commits_s']:,.0f} commits/s, {med['partitions_s']:,.0f} "
                          f"partitions/s; CPU (% of a core): coordinator "
                          f"{med['coordinator_cpu'] * 100:.0f}%, clients "
                          f"{med['clients_cpu'] * 100:.0f}%", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        if zk is not None:
            zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"load average at the end: {load()}", flush=True)


if __name__ == "__main__":
    main()
