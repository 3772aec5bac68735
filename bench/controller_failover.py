"""CPU time of a new controller's failover work, in memory: load, elect, build and encode.

The controller of ``bench/failover.py``'s controller kill, without ZooKeeper, sockets or
brokers: ``--partitions`` partitions (default 10,000) on brokers 1-3 (RF 3, preferred leaders
spread evenly), broker 3 (the old controller) gone, and broker 1 wins the election and runs
``_on_controller_failover``: load every assignment and leaderAndISR value, elect new leaders for
broker 3's partitions, write them, send them, send the full state (INIT), shrink the ISRs and
send those. The store is the unit tests' in-memory one; each broker channel encodes every
request body with the project's codec (as the real channel does before writing it to the
socket) and answers at once.

Prints the process CPU time of the whole failover (best of ``--rounds``) and, with
``--profile``, the top functions by cumulative time of one more round (cProfile). Asserts
nothing.

Usage: python bench/controller_failover.py [--partitions 10000] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from twisted.internet import defer, task  # noqa: E402

from broker_core import metadata_paths as paths  # noqa: E402
from broker_core.controller.controller import Controller  # noqa: E402
from broker_core.tap import BROKER_GC_THRESHOLDS  # noqa: E402
from broker_core.wire.apis import ApiKey, encode_request  # noqa: E402
from broker_core.wire.messages import leader_and_isr, stop_replica, update_metadata  # noqa: E402
from tests.unit.test_coordinator_service import MemoryStore  # noqa: E402

_MESSAGES = {ApiKey.LEADER_AND_ISR: leader_and_isr.REQUEST,
             ApiKey.UPDATE_METADATA: update_metadata.REQUEST,
             ApiKey.STOP_REPLICA: stop_replica.REQUEST}


class EncodingChannel:
    """A channel that encodes each request as the real one does and answers it at once. With
    ``keep``, it also keeps each request as the broker would receive it: ``(api_key, frame)``,
    the frame being header plus body (without the size prefix), in the order sent."""

    def __init__(self, keep: bool = False) -> None:
        self.sent_bytes = 0
        self.frames: list[tuple[int, bytes]] | None = [] if keep else None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def send(self, api_key: int, version: int, body: Any) -> defer.Deferred:
        if self.frames is not None:
            frame = b"".join(encode_request(api_key, version, len(self.frames), "controller",
                                            body))
            self.frames.append((api_key, frame))
        self.sent_bytes += len(_MESSAGES[api_key].to_bytes(body, version))
        return defer.succeed(None)


def cluster(partitions: int, topics: int, alive: tuple[int, ...] = (1, 2),
            controller_epoch: int = 6, *, as_registered: bool = False,
            spread_followers: bool = False) -> MemoryStore:
    """Brokers ``alive`` registered (by default 1 and 2: 3 is gone), ``topics`` topics of equal
    size on brokers 1-3, every ISR full, preferred leaders round-robin, leaderAndISR values
    written by controller epoch 5.

    ``as_registered``: each value names its leader's registration (the czxid of
    ``/brokers/ids/N``), as in a cluster; otherwise it names epoch 0, which the in-memory store
    gives no registration, so the controller's broker change sees every live leader as
    restarted unseen and gives each of their partitions a new generation (LeaderAndIsr and
    UpdateMetadata for all of them). ``spread_followers``: the two followers of every other
    partition swap places (as Kafka's assignment shifts them), so the successors of a dead
    leader are both other brokers in turn; otherwise the next broker round-robin always."""
    store = MemoryStore()
    store.ensure_path(paths.BROKER_IDS)
    store.ensure_path(paths.TOPICS)
    registered: dict[int, int] = {}
    for b in alive:
        store.create(paths.broker(b), paths.BrokerRegistration(b, "h", 9000 + b).to_bytes())
        store.get(paths.broker(b)).addCallback(
            lambda got, b=b: registered.__setitem__(b, got[1].czxid))
    store.create(paths.CONTROLLER_EPOCH, str(controller_epoch).encode())
    per_topic = partitions // topics
    for t in range(topics):
        name = f"t{t}"
        replicas = {p: [1 + (p + t + i) % 3 for i in range(3)] for p in range(per_topic)}
        if spread_followers:
            for p, rs in replicas.items():
                if (p // 3) % 2:
                    rs[1], rs[2] = rs[2], rs[1]
        store.create(paths.topic(name), paths.TopicAssignment(replicas).to_bytes())
        for p, rs in replicas.items():
            store.create(paths.partition(name, p))
            store.create(paths.leader_and_isr(name, p),
                         paths.LeaderAndIsr(rs[0], 1, rs, 5,
                                            registered.get(rs[0], 0) if as_registered else 0
                                            ).to_bytes())
    return store


def one_failover(partitions: int, topics: int, profile: cProfile.Profile | None = None
                 ) -> tuple[float, int]:
    """CPU seconds of one controller failover (store set-up excluded) and the bytes sent."""
    cpu, channels = run_failover(cluster(partitions, topics), 1, 6, profile=profile)
    return cpu, sum(c.sent_bytes for c in channels.values())


def run_failover(store: MemoryStore, controller_id: int, epoch: int, *,
                 profile: cProfile.Profile | None = None, keep: bool = False
                 ) -> tuple[float, dict[int, EncodingChannel]]:
    """Broker ``controller_id`` becomes controller of ``epoch`` over ``store`` and runs its
    failover: the CPU seconds it took and each live broker's channel (``keep``: with the
    requests it was sent)."""
    channels: dict[int, EncodingChannel] = {}

    def channel(b: Any) -> EncodingChannel:
        channels[b.id] = EncodingChannel(keep)
        return channels[b.id]

    ctl = Controller(controller_id, store, reactor=task.Clock(), channel_factory=channel)
    ctl.active, ctl.epoch, ctl.epoch_zk_version = True, epoch, 0
    gc.collect()
    if profile is not None:
        profile.enable()
    t0 = time.process_time()
    done = defer.Deferred.fromCoroutine(ctl._on_controller_failover())
    cpu = time.process_time() - t0
    if profile is not None:
        profile.disable()
    if not done.called:
        raise RuntimeError("the failover waited for something: the bench's channels answer at once")
    moved = sum(1 for d in ctl.context.states.values() if d.leader not in channels)
    if moved:
        raise RuntimeError(f"{moved} partitions still led by a dead broker")
    return cpu, channels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=0,
                    help="number of topics (default: one per 1,000 partitions)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    topics = args.topics or max(1, (args.partitions + 999) // 1000)
    gc.set_threshold(*BROKER_GC_THRESHOLDS)  # as in a broker process
    runs = [one_failover(args.partitions, topics) for _ in range(args.rounds)]
    best = min(cpu for cpu, _ in runs)
    print(f"controller failover of {args.partitions:,} partitions ({topics} topics): "
          f"CPU best {best * 1000:.0f} ms of {args.rounds} "
          f"(all: {', '.join(f'{c * 1000:.0f}' for c, _ in runs)}); "
          f"{runs[0][1]:,} request bytes sent")
    if args.profile:
        prof = cProfile.Profile()
        one_failover(args.partitions, topics, prof)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
