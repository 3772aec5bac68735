"""One Produce request naming thousands of partitions, in one process: what each partition costs.

After a failover every moved partition gets its first produce at once, and a client batching by
leader sends one request naming thousands of them (``bench/failover.py``'s probe does exactly
that). This builds the leader and two followers of ``bench/replica_hot_path.py`` in memory (real
``ReplicaManager``, ``RequestHandler``, server protocol and fetchers; no sockets, a
``task.Clock``), with ``--partitions`` partitions, and times rounds of:

1. one ``acks=1`` Produce of one small batch to every partition, answered by the leader
   (framing, decoding, the appends, the answer's encoding): *produce*;
2. the followers' fetches that copy those batches (the leader's reads and answer, the
   followers' appends), pumped until both followers are parked again: *replicate*.

With ``--acks all`` the Produce is acks=all: *produce* is then the whole round (the leader's
append, both followers' fetches of the batches, the fetches that move the high watermarks and
the answer), each partition's wait being one operation watched under all the request's
partitions, as in a cluster fed by a batching producer; *replicate* is then only the check.

Then, on the leader alone, an *idle session fetch*: a follower's incremental fetch in a session
holding every partition, all at the leader's log end and answered once (what the leader does
for each fetch of a follower with nothing to copy), answered at once (``max_wait_ms`` 0) and
parked (500).

Figures are process CPU time (``time.process_time``) per partition; ``--profile`` prints where
the produce step goes (cProfile, own time). Logs live in a temp dir removed afterwards.

Usage: python bench/wide_produce.py [--partitions 3334] [--rounds 5] [--acks 1|all] [--profile]
Prints figures; asserts only that every produce succeeded.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.replica_hot_path import TOPIC, InMemoryCluster  # noqa: E402
from broker_core.tap import BROKER_GC_THRESHOLDS  # noqa: E402
from broker_core.wire.apis import ApiKey  # noqa: E402
from broker_core.wire.records import Record, build_batch  # noqa: E402

PRODUCE_VERSION = 8


def idle_session_fetch(leader: Any, n: int, wait_ms: int, reps: int = 30) -> float:
    """Best CPU seconds of ``reps`` incremental fetches by a follower (id 2, a session of its
    own) naming nothing new, on ``leader`` directly (no framing). Parked ones stay parked."""
    sessions = leader.fetch_sessions
    entries = []
    for p in range(n):
        part = leader.get_partition(TOPIC, p)
        entries.append((TOPIC, p, part.log.log_end_offset, 1 << 20, part.leader_epoch))
    # The session's full fetch, answered: what a follower's session is after its first fetch.
    first = sessions.context(2, 0, 0, entries)
    leader.fetch(first.entries, max_wait_ms=0, min_bytes=1, max_bytes=10 << 20, replica_id=2,
                 session=first).addCallback(first.select)
    session = first.session
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        ctx = sessions.context(2, session.id, session.next_epoch, [], [])
        d = leader.fetch(ctx.entries, max_wait_ms=wait_ms, min_bytes=1, max_bytes=10 << 20,
                         replica_id=2, session=ctx)
        d.addCallback(ctx.select)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=3334)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--acks", choices=("1", "all"), default="1")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="tottime", help="cProfile order: tottime, cumtime, ...")
    args = ap.parse_args()
    gc.set_threshold(*BROKER_GC_THRESHOLDS)  # as in a broker process
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-wide-produce-"))
    try:
        cluster = InMemoryCluster(tmp, args.partitions)
        cluster.settle()
        producer = cluster.client("bench-producer")
        producer_pump = cluster.pumps[-1]
        leader = cluster.managers[1]
        followers = [cluster.managers[b] for b in (2, 3)]
        batch = build_batch([Record(None, b"after-failover", [],
                                    int(cluster.clock.seconds() * 1000))])
        acks = -1 if args.acks == "all" else 1
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": p, "records": batch}
                                               for p in range(args.partitions)]}]}
        profiler = cProfile.Profile() if args.profile else None
        produce_s: list[float] = []
        replicate_s: list[float] = []
        for _ in range(args.rounds):
            start = time.process_time()
            if profiler is not None:
                profiler.enable()
            got: list = []
            producer.request(ApiKey.PRODUCE, PRODUCE_VERSION, body).addBoth(got.append)
            while not got:
                if acks == 1:  # only the producer's connection: the followers wait
                    producer_pump.pump(advanceClock=False)
                else:  # the answer needs the followers' fetches
                    cluster.pump_all()
            resp = got[0]
            if profiler is not None:
                profiler.disable()
            produce_s.append(time.process_time() - start)
            bad = [p.error_code for t in resp.responses for p in t.partition_responses
                   if p.error_code]
            if bad:
                raise RuntimeError(f"{len(bad)} partitions refused the produce: {bad[:5]}")
            start = time.process_time()
            pumps = 0
            while any(f.get_partition(TOPIC, p).log.log_end_offset
                      != leader.get_partition(TOPIC, p).log.log_end_offset
                      for f in followers for p in range(args.partitions)):
                cluster.pump_all()
                pumps += 1
            replicate_s.append(time.process_time() - start)
        n = args.partitions
        hws = sum(leader.get_partition(TOPIC, p).high_watermark for p in range(n))
        print(f"one acks={args.acks} Produce naming {n:,} partitions "
              f"(one {len(batch)} B batch each), RF 3 in memory, {args.rounds} rounds "
              f"(leader HW sum {hws:,}):")
        print(f"  produce:   best {min(produce_s) * 1e3:7.1f} ms CPU = "
              f"{min(produce_s) / n * 1e6:5.1f} us a partition "
              f"(rounds: {', '.join(f'{s * 1e3:.0f}' for s in produce_s)} ms)")
        print(f"  replicate: best {min(replicate_s) * 1e3:7.1f} ms CPU = "
              f"{min(replicate_s) / n * 1e6:5.1f} us a partition (two followers' fetches, "
              f"both sides, and this script's check of every log end after each pump)")
        for wait_ms in (0, 500):
            best = idle_session_fetch(leader, n, wait_ms)
            print(f"  idle session fetch, max_wait_ms {wait_ms:3d}: best {best * 1e3:5.1f} ms "
                  f"CPU = {best / n * 1e6:4.2f} us a partition (leader side)")
        if profiler is not None:
            pstats.Stats(profiler).sort_stats(args.sort).print_stats(30)
        # The measurement replaced follower 2's session (one per replica): let its fetcher
        # start a new one before stopping, or its retries meet a stopped leader.
        cluster.settle()
        cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
