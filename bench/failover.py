"""Controller failover of many partitions: how long until a dead broker's partitions are led again.

Starts a real ZooKeeper and three broker processes on 127.0.0.1 (``zookeeper.session.timeout.ms``
= ``--session-timeout-ms``, default 10000: with 4000, brokers busy with thousands of
partitions lost their own sessions without being killed), creates
``--partitions`` partitions (default 10,000) with replication factor 3 through CreateTopics
(confluent-kafka's AdminClient; ``--topics`` topics of equal size, default one per 1,000
partitions; the broker's round-robin assignment spreads preferred leaders evenly over the three
brokers), and waits until every partition has a leader and an ISR of three. Then:

1. **follower broker**: ``kill -9`` a broker that is *not* the controller;
2. **controller** (unless ``--no-controller-kill``): restart that broker, wait for full ISRs
   again, then ``kill -9`` the controller itself.

How each failover is timed (external, ``time.monotonic`` in this process; broker logs have
whole-second timestamps only, so they are not used):

- ``t_expire``: this process holds its own kazoo session with a data watch on the victim's
  ``/brokers/ids/N`` znode. ZooKeeper deletes that ephemeral znode when the victim's session
  expires, and notifies every watcher at that moment, so the watch fires at (within a network
  round trip of) the same instant as the controller's own ``/brokers/ids`` child watch (and, for
  the controller kill, the other brokers' ``/controller`` watch). The session timeout itself
  (time from the kill to ``t_expire``) is printed but is not part of the failover figure.
- ``t_accept`` (the headline): from ``t_expire`` the script runs a *produce probe* on the moved
  partitions: each round (one every ``--poll-ms``, default 50) reads Metadata from a survivor
  (the project's blocking client), then sends each live leader ONE ``acks=1`` Produce request
  naming every still-pending partition it leads, one tiny batch each, built with the project's
  codec (``broker_core/wire``) over a kept-open socket; the requests to the leaders go out
  before any answer is read. Partitions answered ``NOT_LEADER_OR_FOLLOWER``,
  ``UNKNOWN_TOPIC_OR_PARTITION`` or ``LEADER_NOT_AVAILABLE``, or with no live leader in
  Metadata yet, wait for the next round. ``t_accept`` is when the last one accepted: what the
  brokers need, plus at most one polling interval, the Metadata read and this process's
  encoding of ~3,000-5,000 partitions (tens of ms); no client bootstrap, no per-partition
  batching.
- ``t_leaders``: the first of the probe's Metadata reads in which every partition still pending
  shows a live leader (the ones already accepted had one): new leaders visible to clients.
- ``librdkafka round`` (secondary, the headline of earlier runs): after the probe, one
  ``acks=1`` message to each moved partition from a new confluent-kafka producer
  (bootstrapped from the survivors; one created before the kill would wait for its periodic
  metadata refresh to forget the dead leader), until every delivery report. Printed alone: it
  is dominated by a fresh client's start-up and its batching of thousands of partitions.
- ``baseline``: before the kill, both the probe and the librdkafka round on the healthy
  cluster, for the partitions about to move: what each measurement costs by itself.
- ``controller busy``: the increase of ``sluice_controller_event_duration_seconds_sum`` (scraped
  from each survivor's ``--metrics`` endpoint before the kill and after the librdkafka round):
  the time the controller's event loop spent handling the events of the failover (for the
  controller kill: winning the election, reloading every partition from ZooKeeper, sending
  everything to every broker, handling the broker change).

Each broker hosts every partition and keeps about one file open per replica (the active
segment's ``.log``; docs/storage.md), so the script raises its open-files soft limit to the hard
limit (the brokers inherit it) and, if the hard limit cannot hold ``--partitions``, runs with the
largest round number that fits and says so (on the standard machine, limit 20,000: 13,000).

Usage: python bench/failover.py [--partitions 10000] [--topics N] [--session-timeout-ms 10000]
       [--no-controller-kill] [--poll-ms 50] [--profile DIR]
Everything runs in a temp dir that is removed afterwards. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

from bench.common import produce_round, watch_deletion  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402
from broker_core.wire.errors import ErrorCode  # noqa: E402
from broker_core.wire.records import Record, build_batch  # noqa: E402
from consumer_client.connection import BrokerConnection  # noqa: E402
from tests.support.cluster import free_port  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

# Answers that mean "not led here (yet)": re-read Metadata and try again.
RETRY_ERRORS = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.LEADER_NOT_AVAILABLE}
PROBE_BATCH = build_batch([Record(None, b"probe", [], int(time.time() * 1000))])  # reused

EVENT_SUM = re.compile(rb"^sluice_controller_event_duration_seconds_sum (\S+)$", re.M)
EVENT_COUNT = re.compile(rb"^sluice_controller_event_duration_seconds_count (\S+)$", re.M)


def scrape_events(port: int) -> tuple[float, float]:
    """(sum of seconds, count) of the controller-event histogram at ``port``; (0, 0) if down."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read()
    except OSError:
        return 0.0, 0.0
    s, c = EVENT_SUM.search(body), EVENT_COUNT.search(body)
    return (float(s.group(1)) if s else 0.0), (float(c.group(1)) if c else 0.0)


class Probe(NamedTuple):
    """What :meth:`Bench.produce_probe` measured, seconds from its start."""

    accepted: float  # every partition has accepted a produce
    leaders: float  # the first Metadata read showing a live leader for every pending partition
    rounds: int  # Metadata reads (each followed by one Produce per leader with pending work)
    retried: dict[str, int]  # retriable error name -> partition answers with it


class Bench:
    def __init__(self, args: argparse.Namespace, zk: ZooKeeperServer, tmp: Path) -> None:
        self.args = args
        self.cluster = ProcessCluster(zk.hosts, tmp, 3, extra={
            "zookeeper.session.timeout.ms": str(args.session_timeout_ms)})
        self.metrics_port: dict[int, int] = {}
        for bid, b in self.cluster.brokers.items():
            self.metrics_port[bid] = free_port()
            b.extra = {**b.extra,
                       "metrics.listener": f"tcp:{self.metrics_port[bid]}:interface=127.0.0.1"}
        self.kz = KazooClient(hosts=self.cluster.zk_hosts)
        self.topics = [f"failover-{i}" for i in range(args.topics)]

    def bootstrap(self, exclude: int | None = None) -> str:
        return ",".join(b.address for bid, b in self.cluster.brokers.items()
                        if bid != exclude and b.proc is not None and b.proc.poll() is None)

    def admin(self, exclude: int | None = None) -> AdminClient:
        # CreateTopics of 10,000 partitions x 3 replicas is answered once every broker has
        # created its logs: 17-56 s on this machine's disk. librdkafka's socket timeout (60 s
        # by default) cut a third of the runs short; the request timeout below bounds it.
        return AdminClient({"bootstrap.servers": self.bootstrap(exclude), "log_level": 2,
                            "socket.timeout.ms": 300_000})

    def create_topics(self) -> None:
        n, k = self.args.partitions, self.args.topics
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        admin = self.admin()
        start = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(t, s, 3) for t, s in zip(self.topics, sizes, strict=True)],
            request_timeout=300, operation_timeout=300)
        for f in futures.values():
            f.result()
        print(f"created {k} topics, {n:,} partitions x 3 replicas in "
              f"{time.monotonic() - start:.1f} s (CreateTopics answered)")

    def metadata(self, exclude: int | None = None) -> Any:
        """Metadata for our topics from the first live broker (the project's blocking client;
        librdkafka 2.16's all-topics MetadataRequest v12 is refused by the broker, see
        docs/benchmarks.md)."""
        last: Exception | None = None
        for bid, b in self.cluster.brokers.items():
            if bid == exclude or b.proc is None or b.proc.poll() is not None:
                continue
            try:
                with BrokerConnection("127.0.0.1", b.port, timeout=30) as c:
                    return c.request(ApiKey.METADATA, {
                        "topics": [{"name": t} for t in self.topics],
                        "allow_auto_topic_creation": False})
            except OSError as e:
                last = e
        raise OSError(f"no broker answered Metadata: {last}")

    def wait_full_isr(self, what: str, timeout: float = 600.0) -> None:
        start = time.monotonic()
        deadline = start + timeout
        while True:
            try:
                md = self.metadata()
                parts = [p for t in md.topics for p in t.partitions]
                bad = sum(1 for p in parts if p.leader_id < 0 or len(p.isr_nodes) < 3)
                if len(parts) == self.args.partitions and bad == 0:
                    print(f"{what}: every partition has a leader and 3 in-sync replicas after "
                          f"{time.monotonic() - start:.1f} s")
                    return
            except OSError as e:
                parts, bad = [], str(e)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not fully replicated after {timeout}s "
                                   f"({bad} partitions short)")
            if self.args.verbose:
                print(f"  {what}: {len(parts)} partitions in Metadata, {bad} short")
            time.sleep(1.0)

    def leaders(self, exclude: int | None = None) -> tuple[dict[tuple[str, int], int], int]:
        md = self.metadata(exclude)
        out = {(t.name, p.partition_index): p.leader_id for t in md.topics for p in t.partitions}
        return out, md.controller_id

    def failover(self, label: str, victim: int) -> None:
        survivors = [b for b in self.cluster.brokers if b != victim]
        before, controller = self.leaders(exclude=victim)
        moved = sorted(tp for tp, leader in before.items() if leader == victim)
        events_before = {b: scrape_events(self.metrics_port[b]) for b in survivors}
        # The same measurements on the healthy cluster, before the kill: what each costs by
        # itself, failover or not.
        base = self.produce_probe(moved, exclude=None)
        t_base, base_ok, base_errors = self.produce_round(moved, exclude=victim)
        print(f"\nbaseline, healthy cluster, the {len(moved):,} partitions to be moved: probe "
              f"(one Produce per leader) {base.accepted:.2f} s; librdkafka round {t_base:.2f} s "
              f"({base_ok:,} delivered, {len(base_errors)} failed)")

        expired, t_expire = watch_deletion(self.kz, f"/brokers/ids/{victim}", time.monotonic)
        spies = self.start_profiles(label, survivors)
        print(f"\n== {label}: kill -9 broker {victim} (controller: {controller}); it leads "
              f"{len(moved):,} of {len(before):,} partitions")
        t_kill = time.monotonic()
        self.cluster.brokers[victim].kill(signal.SIGKILL)
        if not expired.wait(self.args.session_timeout_ms / 1000 * 5 + 30):
            raise RuntimeError("the victim's registration never disappeared")
        t0 = t_expire[0]
        if t0 < t_kill:
            print("WARNING: the victim's registration vanished BEFORE the kill (its session "
                  "expired under load): this run's figures are not a clean failover")
        print(f"session expired {t0 - t_kill:.2f} s after the kill (session timeout "
              f"{self.args.session_timeout_ms} ms)")

        t_controller = None
        if label == "controller":
            while t_controller is None and time.monotonic() - t0 < 120:
                try:
                    data, _ = self.kz.get("/controller")
                    t_controller = time.monotonic()
                    print(f"new controller registered {t_controller - t0:.2f} s after expiry: "
                          f"{data.decode()}")
                except Exception:  # NoNodeError until someone wins
                    time.sleep(0.02)

        probe = self.produce_probe(moved, exclude=victim, t0=t0)
        self.stop_profiles(spies)
        produce_s, delivered, errors = self.produce_round(moved, exclude=victim)
        time.sleep(0.5)  # let the controller's last sends finish before scraping
        busy = {}
        for b in survivors:
            s1, c1 = scrape_events(self.metrics_port[b])
            s0, c0 = events_before[b]
            if c1 > c0:
                busy[b] = (s1 - s0, int(c1 - c0))
        print(f"partitions moved: {len(moved):,}")
        print(f"  expiry -> Metadata shows a live leader for all: {probe.leaders:6.2f} s "
              f"(Metadata read every {self.args.poll_ms} ms)")
        print(f"  expiry -> every moved partition accepted (probe): {probe.accepted:6.2f} s "
              f"({probe.rounds} rounds; retried answers: {probe.retried or 'none'})")
        print(f"  then a fresh librdkafka producer, one acks=1 message to each: "
              f"{produce_s:6.2f} s ({delivered:,} delivered, {len(errors)} failed"
              f"{': ' + errors[0] if errors else ''})")
        for b, (s, c) in busy.items():
            print(f"  broker {b} controller event loop busy: {s:.2f} s in {c} events")
        self.results.append((label, len(moved), probe.leaders, probe.accepted,
                             sum(s for s, _ in busy.values()), base.accepted, produce_s, t_base))

    def produce_probe(self, partitions: list[tuple[str, int]], exclude: int | None,
                      t0: float | None = None) -> Probe:
        """Until every one of ``partitions`` has accepted one ``acks=1`` produce: read Metadata
        from a live broker, send each live leader ONE Produce request naming every pending
        partition it leads (one tiny batch each; the requests to the leaders are all sent
        before any answer is read, so leaders work in parallel), and keep the partitions
        answered ``NOT_LEADER_OR_FOLLOWER`` / ``UNKNOWN_TOPIC_OR_PARTITION`` /
        ``LEADER_NOT_AVAILABLE`` (or with no live leader in Metadata yet) for the next round,
        one round every ``--poll-ms``. The project's codec over blocking sockets, connections kept
        across rounds: no client bootstrap, no per-partition batching, so the time is the
        brokers' (plus the Metadata reads and this process's encoding). Times are from ``t0``
        (default: the call). ``exclude``: a dead broker, neither asked nor produced to."""
        start = time.monotonic() if t0 is None else t0
        pending = set(partitions)
        conns: dict[int, BrokerConnection] = {}
        rounds = 0
        t_leaders: float | None = None
        errors: dict[str, int] = {}
        try:
            while True:
                t_round = time.monotonic()
                try:
                    leaders, _ = self.leaders(exclude=exclude)
                except OSError:
                    leaders = {}
                live = {b for b, br in self.cluster.brokers.items()
                        if b != exclude and br.proc is not None and br.proc.poll() is None}
                by_leader: dict[int, list[tuple[str, int]]] = {}
                for tp in pending:
                    leader = leaders.get(tp, -1)
                    if leader in live:
                        by_leader.setdefault(leader, []).append(tp)
                if t_leaders is None and sum(map(len, by_leader.values())) == len(pending):
                    t_leaders = time.monotonic()
                bodies = {}
                for leader, tps in by_leader.items():
                    topics: dict[str, list[dict]] = {}
                    for t, p in tps:
                        topics.setdefault(t, []).append({"index": p, "records": PROBE_BATCH})
                    bodies[leader] = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
                                      "topic_data": [{"name": t, "partition_data": ps}
                                                     for t, ps in topics.items()]}
                answers = produce_round(
                    conns, lambda b: self.cluster.brokers[b].port, bodies, timeout=60,
                    on_error=lambda b, e: print(f"  probe: broker {b}: {e}"))
                for resp in answers.values():
                    for t in resp.responses:
                        for pr in t.partition_responses:
                            if pr.error_code == 0:
                                pending.discard((t.name, pr.index))
                            else:
                                name = ErrorCode(pr.error_code).name
                                errors[name] = errors.get(name, 0) + 1
                                if pr.error_code not in RETRY_ERRORS:
                                    raise RuntimeError(f"produce to {t.name}-{pr.index} "
                                                       f"failed: {name}")
                rounds += 1
                if not pending:
                    done = time.monotonic()
                    return Probe(done - start, (t_leaders or done) - start, rounds, errors)
                if time.monotonic() - start > 300:
                    raise RuntimeError(f"{len(pending)} partitions never accepted a produce")
                time.sleep(max(0.0, self.args.poll_ms / 1000 - (time.monotonic() - t_round)))
        finally:
            for c in conns.values():
                c.close()

    def produce_round(self, partitions: list[tuple[str, int]], exclude: int
                      ) -> tuple[float, int, list[str]]:
        """(seconds, delivered, errors) for one ``acks=1`` message to each of ``partitions``
        from a fresh producer bootstrapped from every broker but ``exclude``, until every
        delivery report. Fresh because a producer connected before a kill caches the dead
        leader until its next periodic metadata refresh (up to a second of client-side
        waiting); librdkafka retries NOT_LEADER_OR_FOLLOWER after a metadata refresh."""
        errors: list[str] = []
        delivered = [0]

        def report(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered[0] += 1

        start = time.monotonic()
        producer = Producer({"bootstrap.servers": self.bootstrap(exclude=exclude), "acks": 1,
                             "linger.ms": 5, "retry.backoff.ms": 20,
                             "retry.backoff.max.ms": 100, "message.timeout.ms": 120000,
                             "log_level": 2})
        for t, p in partitions:
            producer.produce(t, b"after-failover", partition=p, on_delivery=report)
        producer.flush(180)
        return time.monotonic() - start, delivered[0], errors

    def start_profiles(self, label: str, brokers: list[int]) -> list[subprocess.Popen]:
        """``--profile DIR``: py-spy (collapsed stacks) on each survivor, from just before the
        kill until every moved partition accepted a produce."""
        if not self.args.profile:
            return []
        out = Path(self.args.profile)
        out.mkdir(parents=True, exist_ok=True)
        spies = []
        for b in brokers:
            f = out / f"{label.replace(' ', '-')}-broker-{b}.txt"
            spies.append(subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
                 "--format", "raw", "--rate", "200", "-o", str(f),
                 "--pid", str(self.cluster.brokers[b].proc.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # let py-spy attach
        return spies

    @staticmethod
    def stop_profiles(spies: list[subprocess.Popen]) -> None:
        for s in spies:
            s.send_signal(signal.SIGINT)
        for s in spies:
            try:
                s.wait(30)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()

    def run(self) -> None:
        self.results: list[tuple[str, int, float, float, float, float, float, float]] = []
        self.cluster.start()
        self.cluster.wait_registered()
        self.kz.start(timeout=15)
        self.create_topics()
        self.wait_full_isr("after create")
        _, controller = self.leaders()
        victim = max(b for b in self.cluster.brokers if b != controller)
        self.failover("follower broker", victim)
        if not self.args.no_controller_kill:
            b = self.cluster.brokers[victim]
            b.start()
            b.wait_listening()
            print(f"\nrestarted broker {victim}")
            self.wait_full_isr(f"broker {victim} back in every ISR")
            _, controller = self.leaders()
            self.failover("controller", controller)
        print("\nsummary (seconds from the victim's session expiry):")
        for label, n, lead, acc, busy, base, rdk, rdk_base in self.results:
            print(f"  kill {label:16s} {n:6,} partitions moved: leaders in Metadata "
                  f"{lead:5.2f} s, all accepted a produce (probe) {acc:5.2f} s, controller "
                  f"busy {busy:5.2f} s; probe on the healthy cluster {base:.2f} s; librdkafka "
                  f"round after / before the kill {rdk:.2f} / {rdk_base:.2f} s")

    def close(self) -> None:
        try:
            self.kz.stop()
            self.kz.close()
        except Exception:
            pass
        self.cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=0,
                    help="number of topics (default: one per 1,000 partitions)")
    ap.add_argument("--session-timeout-ms", type=int, default=10000)
    ap.add_argument("--poll-ms", type=int, default=50)
    ap.add_argument("--no-controller-kill", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy record (raw collapsed stacks) each survivor during failover")
    args = ap.parse_args()
    # Every broker hosts every partition (3 brokers, RF 3). A replica keeps one file open (its
    # active segment's .log; indexes are written in batches, rolled segments go through an LRU
    # of log.open.segments.max, docs/storage.md), plus sockets and the LRU's share: 1.3 per
    # replica keeps a broker inside the open-files limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the brokers
    fit = int((hard - 3000) / 1.3) // 1000 * 1000
    if hard != resource.RLIM_INFINITY and args.partitions > fit:
        print(f"NOTE: open-files limit {hard:,} fits about {fit:,} partitions per broker "
              f"(~1.3 files per replica); running {fit:,} instead of {args.partitions:,}")
        args.partitions = fit
    if args.topics <= 0:
        args.topics = max(1, (args.partitions + 999) // 1000)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-failover-"))
    zk = ZooKeeperServer()
    bench = None
    try:
        zk.start()
        bench = Bench(args, zk, tmp)
        bench.run()
    finally:
        if bench is not None:
            bench.close()
        zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
