"""ISR changes from partition leaders (docs/design.md#isr-changes-through-the-controller): the
controller's side of AlterIsr (KIP-497).

A leader asks to change the ISR of its partitions; the request runs as a controller event, so it
is judged against the state that broker and topic changes left
(:func:`~broker_core.controller.election.judge_isr_change`). Invariants:

- only a registered leader of the current incarnation that is not fenced may change an ISR
  (STALE_BROKER_EPOCH otherwise), and only from the znode version it names;
- an ISR change moves only the ISR and the znode version: no new leader epoch;
- a broker in a controlled shutdown, or a replica on a failed log directory, does not (re)join
  an ISR; an isolated controller shrinks none;
- every caller is answered once, NOT_CONTROLLER if the controller resigns first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision
from broker_core.controller.context import gather
from broker_core.controller.election import judge_isr_change
from broker_core.controller.event_manager import NotController
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import SetData, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition

#: One partition of an AlterIsr request: (topic, partition, leader_epoch, new_isr,
#: partition_epoch), the last being the leaderAndISR znode version the leader holds.
AlterIsrItem = tuple[str, int, int, tuple[int, ...], int]
#: One partition's answer: an error name, or None and the state now in force.
Answer = tuple[str | None, PartitionDecision | None]
#: A top-level error name (or None) and, per partition, an error name or the state now in force.
AlterIsrResult = tuple[str | None, dict[TopicPartition, Answer]]

#: Rounds of "write, and on a version conflict re-read and judge again" for one AlterIsr request.
ALTER_ISR_ROUNDS = 3


class IsrChanges(ControllerProcedure):
    """AlterIsr for one controller. ``controller`` supplies ``active``, ``epoch``, ``events``,
    ``fencing``, the waiting callers (``_alter_waiters``, ``_answer``), the leadership rules
    (``_eligible``, ``_fenced_brokers``), ``_new_batch`` / ``_send``, the reassignment agent,
    and its ``context`` and ``writer``."""

    async def alter_isr(self, broker_id: int, broker_epoch: int, items: Sequence[AlterIsrItem]
                        ) -> AlterIsrResult:
        """AlterIsr: leader ``broker_id`` asks to change the ISR of the partitions in ``items``.

        Returns a top-level error name (NOT_CONTROLLER, STALE_BROKER_EPOCH: ``broker_epoch`` is
        not the czxid we hold for that broker's registration) and no partitions, or ``None`` and
        per partition an error name (see :func:`~broker_core.controller.election.judge_isr_change`)
        or the state now in force: the leader epoch is unchanged and ``zk_version`` is the
        partition epoch the leader must name next time.

        The change runs as an event on the controller's queue, so it is ordered with broker and
        topic changes and judged against the state they left. Accepted changes are written in
        fenced multis, conditional on each znode's version; then UpdateMetadata goes to every
        live broker and LeaderAndIsr to the partition's live replicas.
        """
        if not self.controller.active:
            return "NOT_CONTROLLER", {}
        done: defer.Deferred = defer.Deferred()
        self.controller._alter_waiters.add(done)

        async def event() -> None:
            if done.called:  # answered NOT_CONTROLLER when we resigned
                return
            try:
                result = await self.apply_isr_changes(broker_id, broker_epoch, items)
            except NotController:
                self.controller._answer(done, ("NOT_CONTROLLER", {}))
                raise  # the event loop resigns
            except Exception:
                self.log.failure("AlterIsr from broker {b} failed", b=broker_id)
                result = ("UNKNOWN_SERVER_ERROR", {})
            self.controller._answer(done, result)

        self.controller.events.enqueue("alter_isr", event)
        return await done

    async def apply_isr_changes(self, broker_id: int, broker_epoch: int,
                                items: Sequence[AlterIsrItem]) -> AlterIsrResult:
        if not self.controller.active:
            return "NOT_CONTROLLER", {}
        registered = self.ctx.live.get(broker_id)
        if registered is None or registered.epoch != broker_epoch:
            # A dead broker, or a request from a previous incarnation of it (KIP-380).
            return "STALE_BROKER_EPOCH", {}
        if broker_id in self.controller._fenced_brokers():
            # A fenced leader may not shrink its ISR to itself and commit alone: its partitions
            # are being (or were) given to other replicas. It retries until it is unfenced, by
            # which time a LeaderAndIsr has told it its new place.
            return "STALE_BROKER_EPOCH", {}
        pending, results = requested(items)
        fencing = self.controller.fencing
        written: dict[TopicPartition, PartitionDecision] = {}
        refreshed: set[TopicPartition] = set()
        for _ in range(ALTER_ISR_ROUNDS):
            ops: list[Any] = []
            new: dict[TopicPartition, PartitionDecision] = {}
            for tp, (leader_epoch, new_isr, partition_epoch) in pending.items():
                cur = self.ctx.states.get(tp)
                # A broker in controlled shutdown may not (re)join an ISR (Kafka, KIP-841).
                # Nor may a replica on a failed log directory (KIP-112).
                verdict = judge_isr_change(broker_id, leader_epoch, partition_epoch, new_isr,
                                           cur, self.ctx.offline_replicas.usable(
                                               tp, self.controller._eligible()))
                if verdict.error is not None or cur is None:
                    results[tp] = (verdict.error, None)
                elif not verdict.write:
                    results[tp] = (None, cur)
                elif (fencing is not None and not fencing.may_shrink_isr()
                      and not set(cur.isr) <= set(new_isr)):
                    # Isolated: the followers dropped may be fine and this controller cut off
                    # (broker_core.controller.broker_liveness). The leader asks again later.
                    results[tp] = ("OPERATION_NOT_ATTEMPTED", None)
                else:
                    # Only the ISR and the znode version move: an ISR change is no new leader
                    # generation (docs/design.md#isr-changes-through-the-controller).
                    d = replace(cur, isr=new_isr, zk_version=cur.zk_version + 1,
                                controller_epoch=self.controller.epoch)
                    new[tp] = d
                    ops.append(SetData(paths.leader_and_isr(*tp), self.writer.state_value(d),
                                       cur.zk_version))
            if not ops:
                pending = {}
                break
            try:
                await self.writer.fenced(ops)  # chunked under the multi limit, each chunk fenced
            except TransactionFailed:
                # A znode is not at the version we hold (or vanished). One multi is all or
                # nothing, but chunks before the failing one committed: re-read every partition
                # of this round and judge them again. A partition that moved answers
                # INVALID_UPDATE_VERSION, or succeeds if what it holds is what was asked.
                fresh = await gather([self.ctx.read_state(tp) for tp in new])
                for tp, st in zip(list(new), fresh, strict=True):
                    if st is None:
                        self.ctx.states.pop(tp, None)
                    else:
                        self.ctx.states[tp] = st
                        refreshed.add(tp)
                pending = {tp: pending[tp] for tp in new}
                continue
            for tp, d in new.items():
                self.ctx.states[tp] = d
                written[tp] = d
                results[tp] = (None, d)
            pending = {}
            break
        for tp in pending:  # still conflicting after every round
            results[tp] = ("INVALID_UPDATE_VERSION", None)
        self.announce(broker_id, written, refreshed, results)
        return None, results

    def announce(self, broker_id: int, written: dict[TopicPartition, PartitionDecision],
                 refreshed: set[TopicPartition], results: dict[TopicPartition, Answer]) -> None:
        """Send what an AlterIsr request wrote (or re-read after a conflict), tell a leader
        that named an old znode version the state again, and wake the reassignment agent when a
        partition it moves changed."""
        if written or refreshed:
            self.log.info(
                "ISR change from broker {b}: {n} partitions written{extra}", b=broker_id,
                n=len(written),
                extra=f", {len(refreshed)} re-read after a conflict" if refreshed else "")
        batch = self.controller._new_batch()
        for tp in sorted(written.keys() | refreshed):
            d = self.ctx.states.get(tp)
            if d is None:
                continue
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        # A leader that named an old znode version missed a decision (a lost LeaderAndIsr, or one
        # still on its way): tell it the state again so it stops asking from a stale base.
        for tp, (error, _) in results.items():
            d = self.ctx.states.get(tp)
            if error == "INVALID_UPDATE_VERSION" and d is not None and d.leader == broker_id:
                batch.leader_and_isr([broker_id], tp, d)
        self.controller._send(batch)
        if any(tp in self.ctx.reassigning for tp in written):
            # Reassignment: a new replica may just have joined the ISR; do not wait for the timer.
            self.controller.events.enqueue("reassignment_wakeup",
                                           self.controller.reassignment.wakeup)


#: Per partition of an AlterIsr request: (leader_epoch, new_isr, partition_epoch).
Pending = dict[TopicPartition, tuple[int, tuple[int, ...], int]]


def requested(items: Sequence[AlterIsrItem]) -> tuple[Pending, dict[TopicPartition, Answer]]:
    """The partitions of an AlterIsr request to judge, and the answers already known: a
    partition named twice is refused (INVALID_REQUEST)."""
    results: dict[TopicPartition, Answer] = {}
    pending: Pending = {}
    for topic, index, leader_epoch, new_isr, partition_epoch in items:
        tp = (topic, index)
        if tp in pending or tp in results:
            # Two answers for one partition cannot both hold: refuse both.
            pending.pop(tp, None)
            results[tp] = ("INVALID_REQUEST", None)
            continue
        pending[tp] = (leader_epoch, tuple(new_isr), partition_epoch)
    return pending, results
