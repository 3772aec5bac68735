"""How many consumers one coordinator shard holds: a capacity model from measured CPU costs.

Runs a real :class:`~coordinator.service.CoordinatorService` (the broker's code: registration,
failure detection's Pings, purgatories, rebalances with their StopFetcher / owner writes /
StartFetcher) in this process on an in-memory store (``tests.support.memory_store``) and
simulated time (:class:`HeapClock`), with ``--groups`` groups of ``--members`` members on one
topic of ``--partitions`` partitions. Each member's channel is the broker's real one; at its far
end a stand-in consumer answers every request on the clock's next turn, without offsets. What
is measured is the coordinator's own CPU (``time.process_time``) including the encoding of its
requests and the decoding of the answers, but not the sockets' system calls, the reactor's
polling, ZooKeeper's work or its client's (the in-memory store's own time is measured and taken
off: on a broker that work is ZooKeeper's) or the consumers'.

Measured:

- **per Ping**: the CPU of ``--ping-seconds`` of clock time in steady state (every member
  pinged every session timeout / 3, each answered), divided by the Pings sent: scheduling,
  the purgatory, the answer and the timer wheel turns;
- **per member per rebalance**: one new member joins every group (a rebalance of the whole
  group each), CPU until every group is stable again, the Pings meanwhile taken off at the
  measured cost, divided by the members rebalanced;
- **memory per member** (traced Python allocations of a smaller run's registrations and first
  rebalance).

The model: a consumer costs ``ping_cost * 3 / session_timeout`` plus ``rebalance_cost *
rebalances_per_hour / 3600`` seconds of CPU per second; a shard (and a broker: every shard a
broker holds runs on its one reactor, one core at most) at a budget of ``--budget`` of a core
holds ``budget / that`` consumers, and ``--target`` consumers need that many times fewer
brokers.

Usage: python bench/coordinator_capacity.py [--groups 100] [--members 100] [--partitions 100]
           [--session-timeout-ms 30000] [--ping-seconds 60] [--budget 0.5]
           [--rebalances-per-hour 6] [--target 1000000]
Runs in about a minute; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import math
import struct
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry  # noqa: E402
from twisted.internet.base import DelayedCall  # noqa: E402

from broker_core import metadata_paths as paths  # noqa: E402
from broker_core.metadata_cache import BrokerEndpoint  # noqa: E402
from broker_core.metrics import BrokerMetrics  # noqa: E402
from broker_core.wire import apis  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402
from coordinator.service import CoordinatorConfig, CoordinatorService  # noqa: E402
from tests.support.memory_store import MemoryStore  # noqa: E402

TOPIC = "t"
REQUEST_IDS = struct.Struct(">hhi")  # api key, version, correlation id
CORRELATION_ID = struct.Struct(">i")
#: Clock step while measuring: the timers of 10,000 members spread over a Ping interval fire
#: in every step, as on a busy reactor.
STEP_S = 0.05


class TimedStore(MemoryStore):
    """The in-memory store, timing its own work (transactions, child listings) in ``spent``
    (CPU seconds) to be taken off the coordinator's: on a broker that work is ZooKeeper's,
    in another process."""

    def __init__(self) -> None:
        super().__init__()
        self.spent = 0.0
        self._depth = 0

    def _timed(self, fn: Any, *args: Any) -> Any:
        self._depth += 1
        start = time.process_time() if self._depth == 1 else 0.0
        try:
            return fn(*args)
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.spent += time.process_time() - start

    def multi(self, ops: Any) -> Any:
        return self._timed(super().multi, ops)

    def _children(self, path: str) -> list[str]:
        return self._timed(super()._children, path)


class HeapClock:
    """Simulated time with ``task.Clock``'s interface, keeping its timers in a heap as the real
    reactor does. ``task.Clock`` sorts every pending call on each ``callLater``: with thousands
    of members' timers pending that sorting costs more than the coordinator's own work, which
    is what is measured. A cancelled or reset call's old heap entry is skipped when it comes
    up (as in the reactor)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, DelayedCall]] = []
        self._seq = itertools.count()

    def seconds(self) -> float:
        return self.now

    def callLater(self, delay: float, f: Any, *args: Any, **kw: Any  # noqa: N802 (Twisted API)
                  ) -> DelayedCall:
        call = DelayedCall(self.now + delay, f, args, kw, lambda _call: None, self._push,
                           seconds=self.seconds)
        self._push(call)
        return call

    def _push(self, call: DelayedCall) -> None:
        heapq.heappush(self._heap, (call.time, next(self._seq), call))

    def getDelayedCalls(self) -> list[DelayedCall]:  # noqa: N802 (Twisted API)
        return [c for t, _, c in self._heap if c.active() and c.time == t]

    def advance(self, amount: float) -> None:
        self.now += amount
        while self._heap and self._heap[0][0] <= self.now:
            t, _, call = heapq.heappop(self._heap)
            if call.cancelled or call.called or call.time != t:
                continue  # cancelled, or reset to another time (its new entry is in the heap)
            call.called = 1
            call.func(*call.args, **call.kw)


class ConsumerEnd:
    """The consumer's end of one member's coordinator channel (the broker's real
    :class:`~broker_core.server.channel.ServerChannel`): it takes the request frames the
    channel writes and, on the clock's next turn, hands the channel the consumer's answer as
    a response frame (error 0, no offsets). The answers are encoded once per API and version
    and only their correlation id is set per request: the consumer's costs stay out of the
    measurement, the coordinator's encoding and decoding stay in. Counts the requests it was
    sent by API in ``sent``."""

    peer = "127.0.0.1:5555"
    _answers: dict[tuple[int, int], bytes] = {}

    def __init__(self, clock: HeapClock, sent: Counter) -> None:
        self.clock = clock
        self.sent = sent
        self.transport: Any = self
        self.channel: Any = None

    def attach_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.bind(self)
        channel.opened()

    def writeSequence(self, chunks: list[bytes]) -> None:  # noqa: N802 (Twisted API)
        frame = b"".join(chunks)
        api_key, version, correlation_id = REQUEST_IDS.unpack_from(frame, 4)  # after the size
        self.sent[api_key] += 1
        answer = self._answers.get((api_key, version))
        if answer is None:
            body: dict[str, Any] = {"error_code": 0, "consumer_id": ""}
            if api_key != ApiKey.START_FETCHER:  # Ping and StopFetcher answers carry offsets
                body["offsets"] = None
            answer = b"".join(apis.encode_response(api_key, version, 0, body))
            self._answers[(api_key, version)] = answer
        self.clock.callLater(0, self.channel.frame_received,
                             CORRELATION_ID.pack(correlation_id) + answer[4:])

    def lose_connection(self) -> None:
        self.transport = None
        self.channel.connection_lost()


class Coordinator:
    """One coordinator (shard) on the in-memory store, with its members."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.clock = HeapClock()
        self.sent: Counter = Counter()
        self.store = store = TimedStore()
        store.ensure_path(paths.CONSUMERS)
        store.ensure_path(paths.TOPICS)
        store.nodes[paths.topic(TOPIC)] = (paths.TopicAssignment(
            {p: [1] for p in range(args.partitions)}).to_bytes(), 0)
        cfg = CoordinatorConfig(max_group_size=args.members + 10)
        self.svc = CoordinatorService(
            1, store, clock=self.clock, config=cfg, metrics=BrokerMetrics(CollectorRegistry()),
            brokers=lambda: [BrokerEndpoint(1, "h", 9)])
        self.svc.start()  # elected at once: the store answers synchronously
        self.n = 0

    def register(self, group: str) -> None:
        body = SimpleNamespace(
            group_id=group, consumer_id=f"c{self.n}",
            topic_count=json.dumps({"subscription": {TOPIC: 1}}), auto_commit=True,
            auto_offset_reset="largest", session_timeout_ms=self.args.session_timeout_ms)
        self.n += 1
        resp = self.svc.register_consumer(None, body, ConsumerEnd(self.clock, self.sent))
        if resp["error_code"]:
            raise SystemExit(f"registration refused: {resp}")

    def generations(self) -> dict[str, int]:
        return {gid: g.generation for gid, g in self.svc.registries.groups.items()}

    def stable(self) -> bool:
        return all(g.state == "stable" for g in self.svc.registries.groups.values())

    def settle(self, after: dict[str, int], limit_s: float = 120.0) -> float:
        """Advance the clock until every group is stable past generation ``after[group]``;
        returns the clock time it took."""
        start = self.clock.seconds()
        while not (self.stable() and all(gen > after.get(gid, -1)
                                         for gid, gen in self.generations().items())):
            if self.clock.seconds() - start > limit_s:
                raise SystemExit("the groups did not settle: not a steady state to measure")
            self.clock.advance(0)
            self.clock.advance(STEP_S)
        return self.clock.seconds() - start

    def populate(self) -> None:
        """Register every member, group by group spread over one Ping interval (so the
        groups' Pings are spread over it too, as consumers that started at different times),
        and settle."""
        gap = self.args.session_timeout_ms / 1000.0 / 3 / self.args.groups
        for g in range(self.args.groups):
            for _ in range(self.args.members):
                self.register(f"g{g}")
            self.clock.advance(0)
            self.clock.advance(gap)
        self.settle({})


def measure_pings(c: Coordinator, seconds: float) -> tuple[float, int]:
    """CPU seconds (the store's own taken off) and Pings of ``seconds`` of steady state."""
    sent = c.sent[ApiKey.PING]
    gc.collect()
    cpu, store = time.process_time(), c.store.spent
    steps = round(seconds / STEP_S)
    for _ in range(steps):
        c.clock.advance(STEP_S)
    used = time.process_time() - cpu - (c.store.spent - store)
    return used, c.sent[ApiKey.PING] - sent


def measure_rebalance(c: Coordinator) -> tuple[float, int, int]:
    """CPU seconds (the store's own taken off) of one rebalance of every group (a member joins
    each), the members rebalanced and the Pings sent meanwhile."""
    before = c.generations()
    pings = c.sent[ApiKey.PING]
    gc.collect()
    cpu, store = time.process_time(), c.store.spent
    for gid in sorted(before):
        c.register(gid)
    c.settle(before)
    used = time.process_time() - cpu - (c.store.spent - store)
    members = sum(len(g.members) for g in c.svc.registries.groups.values())
    return used, members, c.sent[ApiKey.PING] - pings


def memory_per_member(args: argparse.Namespace, members: int) -> float:
    """Traced bytes per member of a coordinator holding ``members`` (in groups of
    ``--members``), registered and through its first rebalance."""
    small = argparse.Namespace(**{**vars(args), "groups": max(1, members // args.members)})
    gc.collect()
    tracemalloc.start()
    c = Coordinator(small)
    base = tracemalloc.get_traced_memory()[0]
    c.populate()
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / c.n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--members", type=int, default=100, help="members per group")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--session-timeout-ms", type=int, default=30000)
    ap.add_argument("--ping-seconds", type=float, default=60.0,
                    help="clock seconds of steady state measured")
    ap.add_argument("--budget", type=float, default=0.5, help="share of one core a shard may "
                    "use for coordination (default 0.5)")
    ap.add_argument("--rebalances-per-hour", type=float, default=6.0,
                    help="rebalances of each group per hour in the model (default 6)")
    ap.add_argument("--target", type=int, default=1_000_000, help="consumers to place")
    args = ap.parse_args()

    c = Coordinator(args)
    t0 = time.process_time()
    c.populate()
    consumers = c.n
    print(f"coordinator with {consumers:,} members ({args.groups} groups of {args.members}, "
          f"{args.partitions} partitions), session timeout {args.session_timeout_ms} ms: "
          f"registered and rebalanced in {time.process_time() - t0:.1f} s of CPU")
    measure_pings(c, args.session_timeout_ms / 1000.0)  # warm up: every member pinging
    ping_cpu, pings = measure_pings(c, args.ping_seconds)
    if not pings:
        raise SystemExit("no Pings were sent: measure over a longer --ping-seconds")
    ping_cost = ping_cpu / pings
    reb_cpu, rebalanced, reb_pings = measure_rebalance(c)
    reb_cost = max(0.0, reb_cpu - reb_pings * ping_cost) / rebalanced
    mem = memory_per_member(args, min(consumers, 5000))

    session_s = args.session_timeout_ms / 1000.0
    per_consumer = ping_cost * 3 / session_s + reb_cost * args.rebalances_per_hour / 3600
    per_shard = args.budget / per_consumer
    brokers = math.ceil(args.target / per_shard)
    print(f"per Ping: {ping_cost * 1e6:.1f} µs of CPU ({pings:,} Pings in "
          f"{args.ping_seconds:.0f} s of clock, {ping_cpu:.2f} s of CPU; "
          f"{pings / args.ping_seconds:,.0f} Pings/s, "
          f"{100 * ping_cpu / args.ping_seconds:.1f}% of a core for {consumers:,} members)")
    print(f"per member per rebalance: {reb_cost * 1e6:.1f} µs of CPU ({args.groups} groups "
          f"of {args.members + 1} rebalanced, {rebalanced:,} members, {reb_cpu:.2f} s of "
          f"CPU, {reb_pings:,} Pings meanwhile taken off)")
    print(f"memory per member: {mem / 1024:.1f} KiB (traced Python allocations)")
    print(f"model: Ping every {session_s / 3:.0f} s, each group rebalanced "
          f"{args.rebalances_per_hour:g} times an hour: {per_consumer * 1e6:.2f} µs of CPU "
          "per consumer per second")
    print(f"one shard at {100 * args.budget:.0f}% of a core holds {per_shard:,.0f} consumers "
          f"({per_shard * mem / 2**20:,.0f} MiB of coordinator state)")
    print(f"{args.target:,} consumers need {brokers} brokers (a broker's shards share its "
          "one reactor: at most one core between them)")


if __name__ == "__main__":
    main()
