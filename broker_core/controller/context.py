"""The controller's context (Kafka's ControllerContext): what the active controller knows of the
cluster, loaded from the metadata store when it is elected and kept up to date by its events.

It holds the registered brokers (``live``), each topic's replica assignment and the version of its
znode (``assignments``, ``topic_versions``), each partition's leader/ISR state (``states``), the
reassignment bookkeeping (``adding``, ``removing``, ``reassigning``), the brokers in a controlled
shutdown and the replicas on failed log directories.

Invariants, kept by every procedure that writes:

- ``states`` and ``assignments`` mirror what the metadata store holds at the versions recorded
  (a state's ``zk_version``, ``topic_versions``): a procedure updates them only after its fenced
  write succeeded, and re-reads them after a conflict;
- a state's ``replicas`` are its partition's assignment; ``adding`` / ``removing`` mirror the
  topic znodes' adding_replicas / removing_replicas;
- nothing here survives a resignation: :meth:`ControllerContext.reset` empties it, and a new
  controllership loads it afresh.

Only reads are made here; every write goes through the controller's fenced multis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.controller import log_dir_failure
from broker_core.controller.batch import LiveBroker, PartitionDecision
from broker_core.metadata import NoNode
from broker_core.wire.topic_partition import TopicPartition


class ControllerContext:
    """See the module docstring. ``store`` is the metadata store it reads from."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reset()

    def reset(self) -> None:
        """Forget everything (a resignation, or the start of a load)."""
        self.live: dict[int, LiveBroker] = {}
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_versions: dict[str, int] = {}
        self.states: dict[TopicPartition, PartitionDecision] = {}
        # Replicas a reassignment adds / will remove, per partition (mirrors the
        # topic znodes' adding_replicas / removing_replicas), and the reassignment agent's
        # in-memory map: partition -> RAR.
        self.adding: dict[TopicPartition, tuple[int, ...]] = {}
        self.removing: dict[TopicPartition, tuple[int, ...]] = {}
        self.reassigning: dict[TopicPartition, tuple[int, ...]] = {}
        # Brokers in a controlled shutdown: no leadership or ISR place is given to them.
        self.shutting_down: set[int] = set()
        # Replicas on failed log directories (KIP-112): see controller/log_dir_failure.py.
        self.offline_replicas = log_dir_failure.OfflineReplicaSet()

    async def read_brokers(self, ids: Iterable[str]) -> dict[int, LiveBroker]:
        async def one(bid: str) -> LiveBroker | None:
            try:
                data, stat = await self.store.get(paths.broker(int(bid)))
            except NoNode:
                return None
            reg = paths.BrokerRegistration.from_bytes(data)
            return LiveBroker(reg.id, reg.host, reg.port, reg.rack, stat.czxid,
                              _live_endpoints(reg))

        found = await gather([one(b) for b in ids if b.isdigit() and b.isascii()])
        return {b.id: b for b in found if b is not None}

    async def read_assignment(self, topic: str) -> tuple[paths.TopicAssignment, int] | None:
        try:
            data, stat = await self.store.get(paths.topic(topic))
        except NoNode:
            return None
        return paths.TopicAssignment.from_bytes(data), stat.version

    async def read_state(self, tp: TopicPartition) -> PartitionDecision | None:
        try:
            data, stat = await self.store.get(paths.leader_and_isr(*tp))
        except NoNode:
            return None
        return self.decision_from(tp, data, stat)

    def decision_from(self, tp: TopicPartition, data: bytes, stat: Any) -> PartitionDecision:
        """A leaderAndISR znode's value and stat as this controller's view of the partition."""
        v = paths.LeaderAndIsr.from_bytes(data)
        replicas = self.assignments.get(tp[0], {}).get(tp[1], ())
        return PartitionDecision(v.leader, v.leader_epoch, tuple(v.isr), tuple(replicas),
                                 stat.version, v.controller_epoch, v.leader_broker_epoch)

    async def load_topics(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Read assignments and leader states of ``topics``; return partitions with no state."""
        topics = list(topics)
        read = await gather([self.read_assignment(t) for t in topics])
        missing: list[TopicPartition] = []
        tps: list[TopicPartition] = []
        for t, r in zip(topics, read, strict=True):
            if r is None:
                continue
            value, self.topic_versions[t] = r
            self.assignments[t] = {int(p): tuple(rs) for p, rs in value.partitions.items()}
            for tp in [tp for tp in self.adding if tp[0] == t]:
                self.adding.pop(tp, None)
                self.removing.pop(tp, None)
            for p, rs in value.adding.items():
                self.adding[(t, p)] = tuple(rs)
            for p, rs in value.removing.items():
                self.removing[(t, p)] = tuple(rs)
            tps.extend((t, p) for p in sorted(self.assignments[t]))
        raw = await self.store.get_many([paths.leader_and_isr(*tp) for tp in tps])
        for tp, got in zip(tps, raw, strict=True):
            if got is None:
                missing.append(tp)
            else:
                self.states[tp] = self.decision_from(tp, *got)
        return missing

    async def children(self, path: str) -> list[str]:
        try:
            return sorted(await self.store.get_children(path))
        except NoNode:
            return []

    def topic_value(self, topic: str, assignment: dict[int, tuple[int, ...]]) -> bytes:
        """The ``/brokers/topics/[topic]`` value for ``assignment``, keeping the reassignment
        state (adding / removing replicas) the controller holds for the topic's partitions."""
        return paths.TopicAssignment(
            {p: list(r) for p, r in assignment.items()},
            {p: list(self.adding[(topic, p)]) for p in assignment if (topic, p) in self.adding},
            {p: list(self.removing[(topic, p)]) for p in assignment
             if (topic, p) in self.removing},
        ).to_bytes()


async def gather(aws: Sequence[Awaitable[Any]]) -> list[Any]:
    """Run awaitables concurrently (pipelined ZooKeeper requests) and return results in order."""
    ds = [defer.Deferred.fromCoroutine(a) if not isinstance(a, defer.Deferred) else a
          for a in aws]
    if not ds:
        return []
    return list(await defer.gatherResults(ds, consumeErrors=True))


def _live_endpoints(reg: paths.BrokerRegistration) -> tuple[tuple[str, str, int, int], ...]:
    """A registration's endpoints for UpdateMetadata, the inter-broker one (the one at the
    registration's ``host:port``) first."""
    protocols = dict(reg.protocol_map)
    found = [(e.listener, e.host, e.port, paths.SECURITY_PROTOCOL_IDS[protocols[e.listener]])
             for e in reg.endpoints]
    return tuple(sorted(found, key=lambda e: (e[1], e[2]) != (reg.host, reg.port)))
