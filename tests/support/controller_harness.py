"""A controller on task.Clock over the in-memory store, with channels that hold each request
until the test answers it: what the controller unit tests drive.
"""

from __future__ import annotations

from twisted.internet import defer, task
from twisted.python.failure import Failure

from broker_core import metadata_paths as paths
from broker_core.controller.controller import (
    Controller,
)
from broker_core.wire.apis import ApiKey
from broker_core.wire.messages import leader_and_isr
from tests.support.memory_store import MemoryStore


class HeldChannel:
    """A channel to one broker whose answers the test gives (test-only: ``sent``, ``answer``)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, dict, defer.Deferred]] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def send(self, api_key: int, version: int, body: dict) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.sent.append((api_key, body, d))
        return d

    def answer(self) -> None:
        for _, _, d in self.sent:
            if not d.called:
                d.callback(None)

    def leader_and_isr(self) -> list[set[tuple[str, int]]]:
        """The partitions named by each LeaderAndIsr sent so far."""
        out = []
        for key, body, _ in self.sent:
            if key == ApiKey.LEADER_AND_ISR:
                msg = leader_and_isr.REQUEST
                decoded = msg.from_bytes(msg.to_bytes(body, 5), 5)
                out.append({(t.topic_name, s.partition_index)
                            for t in decoded.topic_states for s in t.partition_states})
        return out


def make(partitions: int = 9, store: MemoryStore | None = None, **controller_kwargs):
    """(store, clock, channels, controller): brokers 1-3 live, topic ``t`` with ``partitions``
    partitions on all three, partition p led by broker 1 + p % 3, every ISR full; the
    controller (broker 1, epoch 5) has loaded it all. ``store``: an empty store to use;
    ``controller_kwargs`` go to the Controller (e.g. its fencing timings)."""
    store = MemoryStore() if store is None else store
    store.ensure_path(paths.BROKER_IDS)
    store.ensure_path(paths.TOPICS)
    for b in (1, 2, 3):
        store.create(paths.broker(b), paths.BrokerRegistration(b, "h", 9000 + b).to_bytes())
    store.create(paths.CONTROLLER_EPOCH, b"5")
    replicas = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(partitions)}
    store.create(paths.topic("t"), paths.TopicAssignment(replicas).to_bytes())
    for p, rs in replicas.items():
        store.create(paths.partition("t", p))
        store.create(paths.leader_and_isr("t", p),
                     paths.LeaderAndIsr(rs[0], 1, rs, 5).to_bytes())
    clock = task.Clock()
    channels: dict[int, HeldChannel] = {}

    def channel(b):
        channels[b.id] = HeldChannel()
        return channels[b.id]

    ctl = Controller(1, store, reactor=clock, channel_factory=channel, **controller_kwargs)
    ctl.active, ctl.epoch, ctl.epoch_zk_version = True, 5, 0
    defer.Deferred.fromCoroutine(ctl._load_context())
    return store, clock, channels, ctl


def run(coro):
    """Run a coroutine that completes without waiting on the network; return its result."""
    d = defer.Deferred.fromCoroutine(coro)
    out: list = []
    d.addBoth(out.append)
    assert out, "did not complete"
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]
