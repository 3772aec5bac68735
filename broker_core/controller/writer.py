"""The controller's writes: fenced multis, and leader/ISR decisions written conditionally.

Every write the controller makes goes through :meth:`ControllerWriter.fenced`, the shared fenced
writer (:func:`broker_core.fenced_writer.write_fenced`) over ``/controller_epoch`` at the version
this controller set when it was elected, so a deposed controller's writes fail atomically and it
resigns (:class:`~broker_core.controller.event_manager.NotController`).

Leader/ISR decisions go through :meth:`ControllerWriter.write_decisions`: each znode is written
conditional on the version the context holds; on a conflict the partitions are re-read and
decided again (:mod:`broker_core.controller.decisions`). Invariant: the context's ``states`` are
updated only with what was written, or with what was read back after a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision
from broker_core.controller.context import ControllerContext, gather
from broker_core.controller.decisions import GONE, Decide, DecisionRounds
from broker_core.controller.election import Election, next_leader_epoch
from broker_core.controller.event_manager import CONFLICT_RETRY_S, NotController
from broker_core.fenced_writer import EpochMoved, write_fenced
from broker_core.metadata import SetData, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition

#: Fenced multis sent before waiting for the first answer. ZooKeeper applies one session's
#: requests in order, so pipelining changes no outcome; it saves a round trip (and a turn of a
#: busy reactor) per 500 partitions: a failover of 10,000 partitions writes 20 multis.
FENCED_PIPELINE = 8


class ControllerWriter:
    """The writes of one controller. ``controller`` supplies its fencing (``active``, ``epoch``,
    ``epoch_zk_version``), ``store``, ``log``, ``metrics``, ``events`` (retries) and
    ``_new_batch`` / ``_send`` (a retry sends what it wrote); ``ctx`` is its context."""

    def __init__(self, controller: Any, ctx: ControllerContext) -> None:
        self.controller = controller
        self.ctx = ctx

    @property
    def log(self) -> Logger:
        """The controller's logger (read when used: tests replace it)."""
        return self.controller.log

    async def fenced(self, ops: Sequence[Any]) -> None:
        """Apply ``ops`` in multis of :data:`~broker_core.fenced_writer.MULTI_BATCH` operations
        that each begin with the controller-epoch check.

        Up to :data:`FENCED_PIPELINE` multis are sent before the first answer is awaited. Each
        multi is atomic, but they are not one transaction: when one fails, the ones before it
        committed and some after it (already sent) may have too; no further window is sent.
        Callers re-read what they meant to write on failure.

        A failed epoch check means the epoch moved on: resign (vacating ``/controller`` if it
        still names this broker, so that an election runs even when whoever moved the epoch
        did not take the seat) and raise :class:`NotController`. Other failures are raised as
        :class:`TransactionFailed` for the caller to handle.
        """
        if not self.controller.active:
            raise NotController()
        try:
            await write_fenced(self.controller.store, paths.CONTROLLER_EPOCH,
                               self.controller.epoch_zk_version, ops, window=FENCED_PIPELINE)
        except EpochMoved as e:
            self.controller.log.warn("controller epoch check failed: the epoch moved on; "
                                     "resigning")
            self.controller.election.resign_soon()
            raise NotController() from e

    def state_value(self, d: PartitionDecision) -> bytes:
        return paths.LeaderAndIsr(d.leader, d.leader_epoch, list(d.isr),
                                  d.controller_epoch, d.leader_broker_epoch).to_bytes()

    def leader_broker_epoch(self, cur: PartitionDecision, leader: int, epoch: int) -> int:
        """The ``leader_broker_epoch`` to write: the leader's registration when it was made
        leader at ``epoch``. An ISR-only change keeps the recorded one, so a restart of the
        leader nobody has seen yet (docs/design.md#leader-epochs) is still detected later."""
        if leader == cur.leader and epoch == cur.leader_epoch:
            return cur.leader_broker_epoch
        return self.broker_epoch_of(leader)

    def broker_epoch_of(self, broker: int) -> int:
        b = self.ctx.live.get(broker)
        return -1 if b is None else b.epoch

    def decision(self, cur: PartitionDecision, el: Election) -> PartitionDecision:
        """The state to write for election ``el`` over the current state ``cur``."""
        epoch = next_leader_epoch(cur.leader, cur.leader_epoch, el)
        return PartitionDecision(el.leader, epoch, el.isr, cur.replicas, cur.zk_version + 1,
                                 self.controller.epoch, self.leader_broker_epoch(cur, el.leader, epoch))

    async def write_decisions(self, tps: Iterable[TopicPartition], decide: Decide, what: str
                               ) -> dict[TopicPartition, PartitionDecision]:
        """Write what ``decide`` makes of each partition of ``tps``, each conditional on its
        state's version; after a conflict, re-read the round's partitions and
        decide again from what was read (:mod:`broker_core.controller.decisions`). Returns what
        was written. Unclean elections are logged and counted once written. Every partition
        left out is logged with the reason (``what`` names the caller's job); those that
        conflicted in every round are decided and written again by a new event after
        :data:`CONFLICT_RETRY_S`, those whose state is gone are not (nothing is left to
        decide)."""
        rounds = DecisionRounds(tps, decide, self.decision)
        while writes := rounds.next_writes(self.ctx.states):
            ops = [SetData(paths.leader_and_isr(*tp), self.state_value(d),
                           rounds.planned[tp].base.zk_version) for tp, d in writes.items()]
            try:
                await self.fenced(ops)
            except TransactionFailed:
                # Someone changed a state under us (or a chunk before the failing one
                # committed): re-read every partition of the round.
                fresh = dict(zip(writes, await gather([self.ctx.read_state(tp) for tp in writes]),
                                 strict=True))
                for tp, st in fresh.items():
                    if st is None:
                        self.ctx.states.pop(tp, None)
                    else:
                        self.ctx.states[tp] = st
                rounds.conflicted(fresh)
                continue
            self.ctx.states.update(writes)
            rounds.succeeded()
        written: dict[TopicPartition, PartitionDecision] = {}
        for tp, planned in rounds.written.items():
            written[tp] = planned.decision
            if planned.election.unclean:
                self.log.warn("UNCLEAN leader election for {t}-{p}: broker {l} was not in the "
                              "ISR {isr}; committed messages may be lost", t=tp[0], p=tp[1],
                              l=planned.election.leader, isr=list(planned.base.isr))
                if self.controller.metrics is not None:
                    self.controller.metrics.unclean_leader_elections_total.inc()
        retry = []
        for tp, why in rounds.dropped.items():
            if why == GONE:
                self.log.info("{what}: {t}-{p} left out: {why}", what=what, t=tp[0], p=tp[1],
                              why=why)
            else:
                self.log.warn("{what}: {t}-{p} not written: {why}; deciding again in {s}s",
                              what=what, t=tp[0], p=tp[1], why=why, s=CONFLICT_RETRY_S)
                retry.append(tp)
        if retry:
            self.controller.events.later(f"{what} (retry)",
                                         lambda: self.retry_decisions(retry, decide, what))
        return written

    async def retry_decisions(self, tps: list[TopicPartition], decide: Decide,
                              what: str) -> None:
        """Decide ``tps`` again, by the rule of the job that could not write them, from the
        state held now, and send what is written (LeaderAndIsr to the live replicas,
        UpdateMetadata to every live broker)."""
        written = await self.write_decisions(tps, decide, what)
        if written:
            self.log.info("{what}: {n} partitions written on a retry", what=what,
                          n=len(written))
        batch = self.controller._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        self.controller._send(batch)
