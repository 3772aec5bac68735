"""Replica reassignment (docs/design.md#replica-reassignment): the controller's reassignment agent
for ``/admin/reassign_partitions`` (Kafka's KIP-455 steps over the ZooKeeper-mode znode).

The agent holds the requested target replicas (RAR) per partition in the context's
``reassigning`` map and moves each partition one step on whenever it wakes up (a request, a new
or returning broker, an ISR change of a partition it moves, or every ``wakeup_s`` seconds while
it has work): INIT writes AR = OAR ∪ RAR with the replicas being added and removed, IN_PROGRESS
waits for every RAR member to join the ISR, then AR = RAR and the replicas that left get
StopReplica (delete). Invariants:

- the step a partition is at is read off what ZooKeeper holds (OAR is AR minus the replicas
  being added), so a new controller resumes where the old one stopped;
- every write is conditional on the versions the context holds; a conflict reloads the topic and
  the partition is tried again at the next wake-up;
- a finished or rejected entry leaves ``/admin/reassign_partitions`` (conditionally: an entry an
  admin changed meanwhile stays); the znode is deleted when none remain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision, RequestBatch
from broker_core.controller.election import (
    next_leader_epoch,
    reassignment_complete,
    reassignment_leader,
    reassignment_replicas,
)
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import Delete, NoNode, SetData, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition

#: The reassignment agent wakes up when notified or after this many seconds.
REASSIGNMENT_WAKEUP_S = 30.0


class Reassignment(ControllerProcedure):
    """The reassignment agent of one controller. ``controller`` supplies ``active``, ``epoch``,
    ``store``, ``reactor``, ``events``, ``log``, ``_eligible``, ``_new_batch`` / ``_send``, and
    its ``context`` and ``writer``."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.wakeup_s = REASSIGNMENT_WAKEUP_S
        self.timer: Any = None  # the next timed wake-up, while there is work

    def cancel_timer(self) -> None:
        """No timed wake-up any more (the controller resigns)."""
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None

    async def read_reassignment(self) -> tuple[dict[TopicPartition, tuple[int, ...]] | None, int]:
        """``/admin/reassign_partitions`` and its version; ``(None, -1)`` when absent. An
        unreadable value is logged and deleted (nothing in it can be acted on)."""
        try:
            data, stat = await self.controller.store.get(paths.REASSIGN_PARTITIONS)
        except NoNode:
            return None, -1
        try:
            value = paths.PartitionReassignment.from_bytes(data)
        except ValueError as e:
            self.log.error("rejecting {p}: {e}; deleting it", p=paths.REASSIGN_PARTITIONS, e=e)
            try:
                await self.writer.fenced([Delete(paths.REASSIGN_PARTITIONS, stat.version)])
            except TransactionFailed:
                pass
            return None, -1
        return {tp: tuple(r) for tp, r in value.partitions.items()}, stat.version

    def reassignment_problem(self, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
        """Why RAR ``target`` for ``tp`` cannot be carried out, or None. A replication factor
        other than the current one is allowed, as in Kafka."""
        parts = self.ctx.assignments.get(tp[0])
        if parts is None:
            return f"topic {tp[0]!r} does not exist"
        if tp[1] not in parts:
            return f"topic {tp[0]!r} has no partition {tp[1]}"
        if not target:
            return "the replica list is empty"
        if len(set(target)) != len(target):
            return f"the replica list {list(target)} names a broker twice"
        # Only a reassignment that has not started yet needs every new replica alive; one that
        # is under way (after a failover, say) waits for a replica that died meanwhile.
        if tp not in self.ctx.adding:
            dead = [b for b in target if b not in self.ctx.live]
            if dead:
                return f"brokers {dead} are not alive"
        return None

    async def on_partitions_reassigned(self) -> None:
        """``on_partitions_reassigned`` and ``add_reassigned_partitions``: take the
        requested partitions into the agent's map (new ones in INIT), drop those the admin path
        no longer names, reject bad entries (removed from the path, with an error in the log),
        and wake the agent."""
        wanted, _ = await self.read_reassignment()
        wanted = wanted or {}
        rejected: dict[TopicPartition, tuple[int, ...]] = {}
        for tp, target in sorted(wanted.items()):
            if self.ctx.reassigning.get(tp) == target:
                continue
            problem = self.reassignment_problem(tp, target)
            if problem is not None:
                self.log.error("rejecting reassignment of {t}-{p} to {r}: {why}", t=tp[0],
                               p=tp[1], r=list(target), why=problem)
                rejected[tp] = target
                self.ctx.reassigning.pop(tp, None)
                continue
            self.log.info("reassignment of {t}-{p} to {r} requested", t=tp[0], p=tp[1],
                          r=list(target))
            self.ctx.reassigning[tp] = target
        for tp in [tp for tp in self.ctx.reassigning if tp not in wanted]:
            self.log.info("reassignment of {t}-{p} withdrawn from {path}", t=tp[0], p=tp[1],
                          path=paths.REASSIGN_PARTITIONS)
            del self.ctx.reassigning[tp]
        if rejected:
            await self.remove_reassignments(rejected)
        await self.wakeup()

    def arm_timer(self) -> None:
        """The reassignment agent also wakes up every ``wakeup_s`` seconds while it
        has work, through the event queue like every other controller action."""
        if self.timer is not None and self.timer.active():
            return
        if not self.controller.active or not self.ctx.reassigning:
            return

        def fire() -> None:
            self.timer = None
            if self.controller.active and self.ctx.reassigning:
                self.controller.events.enqueue("reassignment_wakeup", self.wakeup)

        self.timer = self.controller.reactor.callLater(self.wakeup_s, fire)

    async def wakeup(self) -> None:
        """The agent's ``on_wakeup``: move each partition in the map one step on; finished ones
        leave the map and the admin path."""
        done: dict[TopicPartition, tuple[int, ...]] = {}
        for tp in sorted(self.ctx.reassigning):
            target = self.ctx.reassigning[tp]
            try:
                finished = await self.reassign_step(tp, target)
            except TransactionFailed as e:
                # A znode moved under us (its version is not the one we hold): reload the
                # topic and try again at the next wake-up.
                self.log.warn("reassignment of {t}-{p}: conflicting write ({e}); will retry",
                              t=tp[0], p=tp[1], e=e.first_error)
                await self.ctx.load_topics([tp[0]])
                continue
            if finished:
                done[tp] = target
        for tp in done:
            self.ctx.reassigning.pop(tp, None)
        if done:
            await self.remove_reassignments(done)
        self.arm_timer()

    async def reassign_step(self, tp: TopicPartition, target: tuple[int, ...]) -> bool:
        """One step of the INIT → IN_PROGRESS → done machine of one partition; True when done.

        The state is not kept in memory but read off what ZooKeeper holds, so a new controller
        resumes where the old one stopped: OAR is AR minus the replicas being added. INIT: AR is
        not yet OAR ∪ RAR: write it (with adding/removing) and send LeaderAndIsr to every replica,
        so the new ones start following. IN_PROGRESS: wait until every RAR member is in the ISR
        (the leader's AlterIsr puts them there), then AR = RAR, ISR = ISR ∩ RAR, a new leader
        from RAR ∩ ISR if the old one is not in RAR, StopReplica (delete) to the rest.

        A cancellation is a target equal to OAR: the INIT step then shrinks AR back to OAR.
        """
        topic, index = tp
        ar = self.ctx.assignments.get(topic, {}).get(index)
        cur = self.ctx.states.get(tp)
        if ar is None or cur is None:
            return True  # the topic or partition went away: nothing left to move
        adding = self.ctx.adding.get(tp, ())
        original = tuple(b for b in ar if b not in adding)
        if ar == target and not adding:
            return True
        want_ar, want_adding, want_removing = reassignment_replicas(original, target)
        if ar != want_ar or adding != want_adding:
            batch = self.controller._new_batch()
            if not await self.move_replicas(tp, want_ar, want_adding, want_removing, batch):
                return False
            self.controller._send(batch)
            self.log.info("reassignment of {t}-{p}: replicas {ar} (adding {add}, removing "
                          "{rm})", t=topic, p=index, ar=list(want_ar), add=list(want_adding),
                          rm=list(want_removing))
            if want_ar == target and not want_adding:
                return True  # nothing to add (a cancellation, or a reorder of the same set)
        cur = self.ctx.states[tp]
        if not reassignment_complete(target, cur.isr):
            return False
        batch = self.controller._new_batch()
        if not await self.move_replicas(tp, target, (), (), batch):
            return False
        self.controller._send(batch)
        d = self.ctx.states[tp]
        self.log.info("reassignment of {t}-{p} to {r} completed (leader {l}, epoch {e})",
                      t=topic, p=index, r=list(target), l=d.leader, e=d.leader_epoch)
        return True

    async def move_replicas(self, tp: TopicPartition, new_ar: Sequence[int],
                            adding: Sequence[int], removing: Sequence[int],
                            batch: RequestBatch) -> bool:
        """Make ``new_ar`` the partition's AR: one fenced multi writes the topic znode
        (conditional on its version) and, when a replica leaves that leads or is in the ISR,
        the new leader/ISR (conditional on the state's version). Queues LeaderAndIsr to the
        live replicas of ``new_ar``, StopReplica (delete) to the live ones that leave, and
        UpdateMetadata to everyone. False (nothing written) when no live ISR member of
        ``new_ar`` could lead. Raises TransactionFailed on a version conflict."""
        topic, index = tp
        cur = self.ctx.states[tp]
        new_ar = tuple(new_ar)
        dropped = tuple(b for b in self.ctx.assignments[topic][index] if b not in new_ar)
        decision = replace(cur, replicas=new_ar)
        ops: list[Any] = []
        if cur.leader not in new_ar or any(b in dropped for b in cur.isr):
            el = reassignment_leader(new_ar, cur.isr, cur.leader, self.controller._eligible())
            if el is None:
                self.log.warn("reassignment of {t}-{p}: no live in-sync replica among {r} to "
                              "lead yet; waiting", t=topic, p=index, r=list(new_ar))
                return False
            epoch = next_leader_epoch(cur.leader, cur.leader_epoch, el)
            decision = PartitionDecision(
                el.leader, epoch, el.isr, new_ar, cur.zk_version + 1, self.controller.epoch,
                self.writer.leader_broker_epoch(cur, el.leader, epoch))
            ops.append(SetData(paths.leader_and_isr(*tp), self.writer.state_value(decision),
                               cur.zk_version))
        assignment = {**self.ctx.assignments[topic], index: new_ar}
        old_meta = (self.ctx.adding.get(tp), self.ctx.removing.get(tp))
        self.set_reassignment_meta(tp, adding, removing)
        version = self.ctx.topic_versions[topic]
        ops.append(SetData(paths.topic(topic), self.ctx.topic_value(topic, assignment), version))
        try:
            await self.writer.fenced(ops)
        except BaseException:
            self.set_reassignment_meta(tp, old_meta[0] or (), old_meta[1] or ())
            raise
        self.ctx.assignments[topic] = assignment
        self.ctx.topic_versions[topic] = version + 1
        self.ctx.states[tp] = decision
        batch.leader_and_isr([b for b in new_ar if b in self.ctx.live], tp, decision)
        batch.stop_replica([b for b in dropped if b in self.ctx.live], tp,
                           leader_epoch=decision.leader_epoch, delete=True)
        batch.update_metadata(self.ctx.live, tp, decision)
        return True

    def set_reassignment_meta(self, tp: TopicPartition, adding: Sequence[int],
                              removing: Sequence[int]) -> None:
        for table, value in ((self.ctx.adding, tuple(adding)), (self.ctx.removing, tuple(removing))):
            if value:
                table[tp] = value
            else:
                table.pop(tp, None)

    async def remove_reassignments(self, done: dict[TopicPartition, tuple[int, ...]]) -> None:
        """Take finished (or rejected) partitions out of ``/admin/reassign_partitions``, deleting
        it when none remain. Conditional on the znode's version; an entry an admin has changed
        since (a cancellation, a new target) stays for the agent to act on."""
        for _ in range(5):
            wanted, version = await self.read_reassignment()
            if wanted is None:
                return
            remaining = {tp: r for tp, r in wanted.items() if done.get(tp) != r}
            if len(remaining) == len(wanted):
                return
            if remaining:
                op: Any = SetData(paths.REASSIGN_PARTITIONS, paths.PartitionReassignment(
                    {tp: list(r) for tp, r in remaining.items()}).to_bytes(), version)
            else:
                op = Delete(paths.REASSIGN_PARTITIONS, version)
            try:
                await self.writer.fenced([op])
                return
            except TransactionFailed:
                continue  # an admin wrote the znode meanwhile: read it again
