"""The leader's acks=all path, in one process: what one replicated produce costs in Python.

Builds a leader and two followers from the real components (``ReplicaManager``,
``RequestHandler``, ``KafkaServerProtocol``, the followers' ``ReplicaFetcher``s and the
``KafkaClientProtocol`` they speak) and connects them in memory (``twisted.test.iosim``: no
sockets, no reactor, a ``task.Clock``), so the figure is the brokers' CPU cost per request without
the scheduling noise of three processes on two cores. The followers' fetchers long-poll the
leader exactly as in a cluster; a producer client sends acks=all Produce requests of
``--records`` records of ``--size`` bytes, round robin over ``--partitions`` partitions, one at a
time, and each is answered only after both followers fetched the batch and fetched again
(their next fetch offset advances the high watermark). One *commit* below is one such round:

    producer --Produce--> leader (append, park in the produce purgatory, answer the parked
    follower fetches) --Fetch response--> each follower (append) --next Fetch--> leader (record
    the follower's offset, advance the HW, complete the produce) --Produce response--> producer

so it includes framing, decoding and encoding on both sides, the leader's and the followers'
work. The time is wall time of the whole round divided by the rounds, and next to it the
process's CPU time per round, the figure to compare on a machine shared with other work (wall
time there includes the time the scheduler gave to others); ``--profile`` prints
where it goes (cProfile, sorted by own time). Logs live in a temp dir removed afterwards.

With ``--together N`` a round writes N such requests at once (to N successive partitions)
and ends when all are answered: the leader reads them in one go, as it reads the small
requests of a ``linger.ms=0`` producer that is ahead of it; figures are then per request.

Usage: python bench/replica_hot_path.py [--rounds 20000] [--partitions 6] [--records 1]
       [--size 100] [--together 1] [--profile]
Prints figures; asserts only that every produce succeeded.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from twisted.internet import defer, task  # noqa: E402
from twisted.test import iosim  # noqa: E402

from broker_core.log import LogConfig, LogManager  # noqa: E402
from broker_core.metadata_cache import MetadataCache  # noqa: E402
from broker_core.metrics import BrokerMetrics  # noqa: E402
from broker_core.replica.fetcher import FetcherConfig  # noqa: E402
from broker_core.replica.manager import ReplicaManager  # noqa: E402
from broker_core.replica.partition import LeaderAndIsrState  # noqa: E402
from broker_core.rpc import KafkaClientProtocol  # noqa: E402
from broker_core.server.handlers import RequestHandler  # noqa: E402
from broker_core.server.protocol import KafkaServerFactory  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402
from broker_core.wire.records import Record, build_batch  # noqa: E402
from tests.support.inline_pool import InlinePool  # noqa: E402

TOPIC = "hot"
LEADER = 1
FOLLOWERS = (2, 3)
PRODUCE_VERSION = 8


class InMemoryCluster:
    """A leader and two followers wired in memory; ``pump()`` moves every connection's bytes."""

    def __init__(self, base: Path, partitions: int) -> None:
        self.clock = task.Clock()
        self.pumps: list[iosim.IOPump] = []
        self.managers = {b: self._manager(b, base / str(b)) for b in (LEADER, *FOLLOWERS)}
        leader = self.managers[LEADER]
        handler = RequestHandler(broker_id=LEADER, config=None, cache=leader.metadata_cache,
                                 replicas=leader, store=None, clock=self.clock,
                                 broker_epoch=lambda: 1)
        self.factory = KafkaServerFactory(handler, clock=self.clock, metrics=leader.metrics)
        replicas = (LEADER, *FOLLOWERS)
        for rm in self.managers.values():
            states = [(TOPIC, p, LeaderAndIsrState(LEADER, 1, replicas, replicas, 1, 0))
                      for p in range(partitions)]
            rm.apply_leader_and_isr(1, states, full=False, leaders={LEADER: ("leader", 9092)})

    def _manager(self, broker_id: int, path: Path) -> ReplicaManager:
        path.mkdir(parents=True)
        logs = LogManager(path, LogConfig(), time_ms=lambda: int(self.clock.seconds() * 1000))
        pool = InlinePool()  # the leader-epoch file writes, at once on this thread
        return ReplicaManager(
            broker_id, logs, clock=self.clock, io_pool=pool, reactor=pool,
            topic_log_config=lambda topic: LogConfig(), metadata_cache=MetadataCache(),
            metrics=BrokerMetrics(), fetcher_config=FetcherConfig(),
            min_insync_replicas=lambda topic: 2, connect=self.connect)

    def client(self, client_id: str) -> KafkaClientProtocol:
        """A client connection to the leader's server protocol, in memory."""
        client = KafkaClientProtocol(client_id)
        server = self.factory.buildProtocol(None)
        self.pumps.append(iosim.connect(server, iosim.FakeTransport(server, True), client,
                                        iosim.FakeTransport(client, False)))
        return client

    def connect(self, host: str, port: int) -> defer.Deferred:
        """The followers' fetchers connect to the leader here."""
        return defer.succeed(self.client("fetcher"))

    def pump_until(self, d: defer.Deferred, limit: int = 1000) -> Any:
        result: list = []
        d.addBoth(result.append)
        for _ in range(limit):
            if result:
                break
            self.pump_all()
        if not result:
            raise RuntimeError("no answer after pumping")
        return result[0]

    def settle(self) -> None:
        """Pump until the followers are parked in long polls at the leader's log end."""
        for _ in range(50):
            self.pump_all()

    def stop(self) -> None:
        for rm in self.managers.values():
            defer.Deferred.fromCoroutine(rm.stop()).addErrback(lambda f: None)
            self.pump_all()
            rm.log_manager.shutdown()

    def pump_all(self) -> None:
        for p in self.pumps:
            p.pump(advanceClock=False)
        # The end of a reactor turn: what was put off to it runs (the leader wakes the
        # followers' parked fetches once per turn); no timer is due, time does not move.
        self.clock.advance(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--records", type=int, default=1, help="records per produce request")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--together", type=int, default=1,
                    help="produce requests written at once per round (each to the next "
                         "partition); a round ends when all are answered")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="tottime", help="cProfile order: tottime, cumtime, ...")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-hot-path-"))
    try:
        cluster = InMemoryCluster(tmp, args.partitions)
        producer = cluster.client("bench-producer")
        cluster.settle()
        batch = build_batch([Record(None, b"v" * args.size)] * args.records)

        def produce(first: int) -> None:
            # ``--together`` requests written at once: the leader reads them in one go, as
            # it does the small requests of a producer with linger.ms=0 that is ahead of it.
            sent = []
            for k in range(args.together):
                p = (first + k) % args.partitions
                body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                        "topic_data": [{"name": TOPIC, "partition_data": [
                            {"index": p, "records": batch}]}]}
                sent.append((p, producer.request(ApiKey.PRODUCE, PRODUCE_VERSION, body)))
            answers = cluster.pump_until(defer.gatherResults([d for _, d in sent]))
            for (p, _), resp in zip(sent, answers, strict=True):
                code = resp.responses[0].partition_responses[0].error_code
                if code:
                    raise RuntimeError(f"produce to {TOPIC}-{p} failed with error {code}")

        for i in range(200):  # warm up: connections, truncation, first fetches
            produce(i)
        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        start, cpu_start = time.perf_counter(), time.process_time()
        for i in range(args.rounds):
            produce(i * args.together)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        requests = args.rounds * args.together
        if profiler is not None:
            profiler.disable()
        leader = cluster.managers[LEADER]
        hws = sum(leader.get_partition(TOPIC, p).high_watermark for p in range(args.partitions))
        print(f"replicated produce, in memory: {args.rounds:,} acks=all rounds of "
              f"{args.together} request(s) of {args.records} x {args.size} B over "
              f"{args.partitions} partitions, RF 3, in {elapsed:.2f} s = "
              f"{elapsed / requests * 1e6:.1f} us a request "
              f"({requests / elapsed:,.0f} requests/s on one core; leader HW sum {hws:,}); "
              f"CPU {cpu / requests * 1e6:.1f} us a request")
        if profiler is not None:
            pstats.Stats(profiler).sort_stats(args.sort).print_stats(40)
        cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
