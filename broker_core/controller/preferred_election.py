"""Preferred-leader election: Kafka's ``/admin/preferred_replica_election``.

Each named partition is given to its preferred replica (the first in its assignment) when that
replica is alive, eligible (not shutting down, not fenced) and in the ISR, with a new leader
epoch (:func:`~broker_core.controller.election.preferred_leader`); the request znode is then
deleted (conditionally: one rewritten meanwhile brings its watch back). Partitions that are
unknown, already led by their preferred replica, or whose preferred replica cannot lead are left
as they are. An unreadable request is logged and deleted like a handled one.

The same znode marked ``"election":"unclean"`` is ElectLeaders' UNCLEAN type (KIP-460): each
named partition without a live leader gets one
(:func:`~broker_core.controller.election.unclean_leader_on_request`), a live ISR member if there
is one, else the first live replica even outside the ISR, whatever the topic's
``unclean.leader.election.enable``; every change is a fenced, version-conditional write with a
new leader epoch, like every controller write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import (
    Election,
    preferred_leader,
    unclean_leader_on_request,
)
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import Delete, NoNode, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition


class PreferredElection(ControllerProcedure):
    """Preferred-leader elections for one controller. ``controller`` supplies ``store``,
    ``log``, ``_eligible``, ``_new_batch`` / ``_send``, and its ``context`` and ``writer``."""

    async def on_preferred_election(self) -> None:
        """Kafka's ``/admin/preferred_replica_election``: give each named partition to its
        preferred replica (first in AR) when that replica is alive and in the ISR, with a new
        leader epoch; then delete the znode. Partitions that are unknown, already led by their
        preferred replica, or whose preferred replica cannot lead are left as they are."""
        try:
            data, stat = await self.controller.store.get(paths.PREFERRED_REPLICA_ELECTION)
        except NoNode:
            return
        try:
            request = paths.PreferredReplicaElection.from_bytes(data)
        except ValueError as e:
            self.log.error("rejecting {p}: {e}", p=paths.PREFERRED_REPLICA_ELECTION, e=e)
            request = paths.PreferredReplicaElection([])
        if request.unclean:
            await self.elect_unclean(request.partitions)
        else:
            await self.elect_preferred(request.partitions)
        try:
            await self.writer.fenced([Delete(paths.PREFERRED_REPLICA_ELECTION, stat.version)])
        except TransactionFailed:
            pass  # rewritten meanwhile (its data watch brings us back) or already gone

    async def elect_preferred(self, tps: Iterable[TopicPartition]
                              ) -> dict[TopicPartition, PartitionDecision]:
        """Move leadership of ``tps`` to their preferred replicas where it is possible (see
        :func:`~broker_core.controller.election.preferred_leader`); returns what was written.
        Runs inside a controller event."""

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            return preferred_leader(d.replicas, d.isr, d.leader, self.controller._eligible())

        return await self._elect(tps, decide, "preferred election")

    async def elect_unclean(self, tps: Iterable[TopicPartition]
                            ) -> dict[TopicPartition, PartitionDecision]:
        """Give each of ``tps`` that has no live leader a live replica as leader, outside the
        ISR if need be (see :func:`~broker_core.controller.election.unclean_leader_on_request`);
        returns what was written. Runs inside a controller event."""

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            return unclean_leader_on_request(d.replicas, d.isr, d.leader,
                                             self.controller._eligible())

        return await self._elect(tps, decide, "unclean election")

    async def _elect(self, tps: Iterable[TopicPartition],
                     decide: Callable[[TopicPartition, PartitionDecision], Election | None],
                     what: str) -> dict[TopicPartition, PartitionDecision]:
        """Write ``decide``'s elections of the known partitions of ``tps`` (fenced, each
        conditional on its state's version) and tell the replicas and every live broker."""
        changes: list[TopicPartition] = []
        for tp in tps:
            d = self.ctx.states.get(tp)
            if d is None:
                self.log.info("{what}: unknown partition {t}-{p}", what=what, t=tp[0], p=tp[1])
            elif decide(tp, d) is not None:
                changes.append(tp)
        if not changes:
            return {}
        written = await self.writer.write_decisions(changes, decide, what)
        batch = self.controller._new_batch()
        for tp, d in written.items():
            self.log.info("{what}: {t}-{p} now led by {l} (epoch {e})", what=what, t=tp[0],
                          p=tp[1], l=d.leader, e=d.leader_epoch)
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        self.controller._send(batch)
        return written
