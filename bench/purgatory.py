"""Delayed-operation purgatory throughput, in the spirit of Kafka's purgatory performance test.

Simulated load: requests arrive at ``--rate`` per second (of simulated time) for ``--seconds``;
each is a delayed operation with a ``--timeout`` (200 ms) watched under one of ``--keys``
partition keys. A fraction ``--early`` of them is satisfied before its timeout, at a latency drawn
from an exponential distribution (mean ``--mean-latency``): the partition is then triggered with
``check_and_complete``. The rest expire through the timing wheel. Time is a ``task.Clock``
advanced in 1 ms steps, so the figures are the purgatory's own CPU cost, not sleeping.

A second, smaller figure compares the timer alone: add then cancel N timers in the timing wheel
versus one ``callLater``/``cancel`` pair per timer on a (never run) real reactor, the one-timer-
per-operation design the wheel replaces.

Usage: python bench/purgatory.py [--rate 20000] [--seconds 5] [--early 0.75]
Runs in a few seconds; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twisted.internet import task  # noqa: E402

from broker_core.purgatory import DelayedOperation, Purgatory  # noqa: E402
from broker_core.timing_wheel import CallbackTask, TimingWheel  # noqa: E402


class BenchOp(DelayedOperation):
    """Completes once the clock reaches ``ready_at`` (None: never, it expires)."""

    def __init__(self, timeout_s: float, clock: task.Clock, ready_at: float | None,
                 stats: dict) -> None:
        super().__init__(timeout_s)
        self.clock = clock
        self.ready_at = ready_at
        self.stats = stats

    def try_complete(self) -> bool:
        if self.ready_at is not None and self.clock.seconds() >= self.ready_at:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.stats["completed"] += 1

    def on_expiration(self) -> None:
        self.stats["expired"] += 1


def run_purgatory(rate: int, seconds: float, timeout: float, keys: int, early: float,
                  mean_latency: float, seed: int) -> None:
    rnd = random.Random(seed)
    clock = task.Clock()
    purgatory = Purgatory("bench", clock, purge_interval=1000)
    stats = {"completed": 0, "expired": 0}
    triggers: list[tuple[float, int]] = []  # (when, key) of pending early completions
    step = 0.001
    per_step = rate * step
    carry = 0.0
    added = peak = 0
    steps = int(seconds / step)
    start = time.perf_counter()
    for _ in range(steps):
        now = clock.seconds()
        carry += per_step
        n, carry = int(carry), carry - int(carry)
        for _ in range(n):
            key = rnd.randrange(keys)
            ready_at = None
            if rnd.random() < early:
                ready_at = now + min(rnd.expovariate(1 / mean_latency), timeout * 0.95)
                heapq.heappush(triggers, (ready_at, key))
            purgatory.try_complete_else_watch(BenchOp(timeout, clock, ready_at, stats), [key])
            added += 1
        while triggers and triggers[0][0] <= now:
            purgatory.check_and_complete(heapq.heappop(triggers)[1])
        peak = max(peak, purgatory.delayed)
        clock.advance(step)
    while purgatory.delayed:  # drain: let the rest complete or expire
        now = clock.seconds()
        while triggers and triggers[0][0] <= now:
            purgatory.check_and_complete(heapq.heappop(triggers)[1])
        clock.advance(step)
    elapsed = time.perf_counter() - start
    print(f"purgatory: {added} operations ({rate}/s simulated for {seconds:g} s, timeout "
          f"{timeout * 1000:g} ms, {keys} keys, {early:.0%} completed early)")
    print(f"  completed early {stats['completed'] - stats['expired']}, expired "
          f"{stats['expired']}, peak waiting {peak}, timer levels {purgatory.timer.levels}")
    print(f"  {elapsed:.2f} s of CPU for {seconds:g} s of traffic: "
          f"{added / elapsed:,.0f} operations/s (enqueue + complete or expire)")


def run_timers(n: int) -> None:
    from twisted.internet.selectreactor import SelectReactor

    rnd = random.Random(1)
    deadlines = [rnd.uniform(0.01, 30.0) for _ in range(n)]
    clock = task.Clock()
    wheel = TimingWheel(clock)
    tasks = [CallbackTask(lambda: None) for _ in range(n)]
    start = time.perf_counter()
    for t, d in zip(tasks, deadlines, strict=True):
        wheel.add(t, d)
    for t in tasks:
        t.cancel()
    wheel_s = time.perf_counter() - start

    reactor = SelectReactor()  # never run: only its timer heap is exercised
    try:
        start = time.perf_counter()
        calls = [reactor.callLater(d, lambda: None) for d in deadlines]
        for c in calls:
            c.cancel()
        reactor_s = time.perf_counter() - start
    finally:
        reactor.disconnectAll()
        for reader in list(reactor.getReaders()):
            reactor.removeReader(reader)
            reader.connectionLost(None)
    print(f"timers: {n} add+cancel pairs")
    print(f"  timing wheel:          {n / wheel_s:,.0f} pairs/s")
    print(f"  one callLater per op:  {n / reactor_s:,.0f} pairs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=20000, help="requests per simulated second")
    parser.add_argument("--seconds", type=float, default=5.0, help="simulated seconds of load")
    parser.add_argument("--timeout", type=float, default=0.2, help="operation timeout, seconds")
    parser.add_argument("--keys", type=int, default=100, help="distinct watch keys")
    parser.add_argument("--early", type=float, default=0.75,
                        help="fraction of operations completed before their timeout")
    parser.add_argument("--mean-latency", type=float, default=0.02,
                        help="mean time to early completion, seconds")
    parser.add_argument("--timers", type=int, default=200000, help="timers for the timer figure")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    run_purgatory(args.rate, args.seconds, args.timeout, args.keys, args.early,
                  args.mean_latency, args.seed)
    run_timers(args.timers)


if __name__ == "__main__":
    main()
