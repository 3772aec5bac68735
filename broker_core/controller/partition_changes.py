"""New topics, and partitions added and removed (docs/design.md#adding-and-removing-partitions).

- A new topic (a child of ``/brokers/topics`` the controller does not know) is loaded; its
  partitions that have no state yet get their first leaders (:meth:`PartitionChanges.init_leaders`),
  those a previous controller started are sent as they are. A topic znode that vanished without
  going through ``/admin/delete_topics`` is forgotten.
- ``/admin/partitions_add/[topic]/[p]`` requests are validated (the next partition ids, a list of
  distinct brokers); the new partitions' leaders, the request's deletion and the new topic znode
  are written in one fenced multi.
- ``/admin/partitions_remove/[topic]/[p]`` requests remove the highest-numbered partitions (a topic
  keeps at least one): see :meth:`PartitionChanges.remove_partitions` for the order that leaves
  nothing behind.

Invariants: a request's znodes are deleted only in the write that carries it out (or refuses it);
a refused request changes nothing, except that partitions stopped for a removal that is then
refused are served again (:meth:`PartitionChanges.restore_stopped`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision, RequestBatch, first_of
from broker_core.controller.context import gather
from broker_core.controller.election import init_leader
from broker_core.controller.event_manager import CONFLICT_RETRY_S, NotController
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import Create, Delete, NoNode, SetData, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition

#: Longest a partition removal waits for the replicas to answer StopReplica before it writes the
#: removal to ZooKeeper (a replica that does not answer deletes the partition when it next gets
#: its full state, which no longer names it).
STOP_REPLICA_WAIT_S = 5.0


class PartitionChanges(ControllerProcedure):
    """New topics and partition changes for one controller. ``controller`` supplies
    ``active``, ``epoch``, ``store``, ``reactor``, ``events``, ``log``, ``_active_only``
    (watches), ``_new_batch`` / ``_send``, topic deletion (a vanished topic is forgotten), and
    its ``context`` and ``writer``."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        #: Partitions a removal sent StopReplica for whose removal is not written yet.
        self.stopped_for_removal: dict[str, set[int]] = {}
        self.forget_watches()

    def forget_watches(self) -> None:
        """Start a new record of the per-topic request watches (the context is reset)."""
        self.add_watched: dict[str, Any] = {}
        self.remove_watched: dict[str, Any] = {}

    def cancel_watches(self) -> None:
        """Cancel the per-topic request watches (the controller resigns)."""
        for w in list(self.add_watched.values()) + list(self.remove_watched.values()):
            w.cancel()

    async def on_topic_change(self) -> None:
        children = set(await self.ctx.children(paths.TOPICS))
        known = set(self.ctx.assignments)
        new, gone = children - known, known - children
        if not (new or gone):
            return
        batch = self.controller._new_batch()
        if new:
            missing = await self.ctx.load_topics(sorted(new))
            for t in sorted(new):
                if t in self.ctx.assignments:
                    self.log.info("new topic {t} with {n} partitions", t=t,
                                  n=len(self.ctx.assignments[t]))
            # Partitions that already had a state (created by a previous controller) are sent as is.
            for tp, d in self.ctx.states.items():
                if tp[0] in new:
                    batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
                    batch.update_metadata(self.ctx.live, tp, d)
            await self.init_leaders(missing, batch)
        for t in sorted(gone):
            # The topic's znode vanished without going through /admin/delete_topics.
            self.log.info("topic {t} removed from ZooKeeper", t=t)
            self.controller.topic_deletion.forget_topic(t, batch)
        self.controller._send(batch)

    async def init_leaders(self, tps: Sequence[TopicPartition], batch: RequestBatch,
                           extra_ops: Sequence[Any] = ()) -> None:
        """``init_leaders``: elect among live AR, create the partition and
        LeaderAndISR znodes in fenced multis, then queue LeaderAndIsr (is_new) and metadata."""
        decisions: dict[TopicPartition, PartitionDecision] = {}
        ops: list[Any] = []
        existing = await gather([self.controller.store.exists(paths.partition(*tp)) for tp in tps])
        for tp, st in zip(tps, existing, strict=True):
            replicas = self.ctx.assignments[tp[0]][tp[1]]
            el = init_leader(replicas, self.ctx.live)
            d = PartitionDecision(el.leader, 0, el.isr, replicas, 0, self.controller.epoch,
                                  self.writer.broker_epoch_of(el.leader))
            decisions[tp] = d
            if st is None:
                ops.append(Create(paths.partition(*tp)))
            ops.append(Create(paths.leader_and_isr(*tp), self.writer.state_value(d)))
        ops.extend(extra_ops)
        try:
            await self.writer.fenced(ops)
        except TransactionFailed:
            # A previous controller got part of the way: take what ZooKeeper has.
            for tp in tps:
                st = await self.ctx.read_state(tp)
                if st is not None:
                    decisions[tp] = st
                else:
                    await self.writer.fenced([Create(paths.leader_and_isr(*tp),
                                                     self.writer.state_value(decisions[tp]))])
            if extra_ops:
                await self.writer.fenced(list(extra_ops))
        for tp, d in decisions.items():
            self.ctx.states[tp] = d
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d, is_new=True)
            batch.update_metadata(self.ctx.live, tp, d)

    def watch_admin_topics(self, root: str, watched: dict[str, Any], topics: Iterable[str],
                           name: str, fn: Callable[[], Awaitable[None]]) -> None:
        # New children under an already-existing /admin/partitions_*/[topic] do not fire the
        # root's child watch, so each topic node gets a watch of its own.
        for t in topics:
            if t not in watched:
                watched[t] = self.controller.store.watch_children(
                    f"{root}/{t}", self.controller._active_only(name, fn))

    async def admin_requests(self, root: str) -> dict[str, dict[int, bytes]]:
        out: dict[str, dict[int, bytes]] = {}
        for topic in await self.ctx.children(root):
            parts: dict[int, bytes] = {}
            for child in await self.ctx.children(f"{root}/{topic}"):
                if not (child.isdigit() and child.isascii()):
                    continue
                try:
                    data, _ = await self.controller.store.get(f"{root}/{topic}/{child}")
                except NoNode:
                    continue
                parts[int(child)] = data
            out[topic] = parts
        return out

    async def on_partitions_add(self) -> None:
        requests = await self.admin_requests(paths.PARTITIONS_ADD)
        self.watch_admin_topics(paths.PARTITIONS_ADD, self.add_watched, requests,
                                "partitions_add", self.on_partitions_add)
        for topic, parts in requests.items():
            cleanup = [Delete(paths.partition_add(topic, p)) for p in sorted(parts)]
            cleanup.append(Delete(paths.partitions_add_topic(topic)))
            current = self.ctx.assignments.get(topic)
            new: dict[int, tuple[int, ...]] = {}
            problem = None
            if current is None:
                problem = "unknown topic"
            else:
                for p, data in sorted(parts.items()):
                    if p in current:
                        continue
                    try:
                        replicas = tuple(int(b) for b in _json_list(data))
                    except ValueError:
                        problem = f"partition {p}: replicas are not a JSON list of broker ids"
                        break
                    if not replicas or len(set(replicas)) != len(replicas):
                        problem = f"partition {p}: bad replica list {list(replicas)}"
                        break
                    new[p] = replicas
                expected = list(range(len(current), len(current) + len(new)))
                if problem is None and sorted(new) != expected:
                    problem = f"new partitions {sorted(new)} are not the next ids {expected}"
            if problem is not None:
                self.log.error("rejecting partitions_add for {t}: {why}", t=topic, why=problem)
                await self.writer.fenced(cleanup)
                continue
            if not new:
                await self.writer.fenced(cleanup)
                continue
            assignment = {**current, **new}
            version = self.ctx.topic_versions[topic]
            update = SetData(paths.topic(topic), self.ctx.topic_value(topic, assignment), version)
            self.ctx.assignments[topic] = assignment
            batch = self.controller._new_batch()
            # Init leaders, remove the admin path, update the topic path; one fenced
            # multi makes the three steps atomic.
            await self.init_leaders([(topic, p) for p in sorted(new)], batch,
                                    extra_ops=[*cleanup, update])
            self.ctx.topic_versions[topic] = version + 1
            self.log.info("added partitions {ps} to topic {t}", ps=sorted(new), t=topic)
            self.controller._send(batch)

    async def on_partitions_remove(self) -> None:
        """Partition removal requests: for each requested topic, validate, then
        :meth:`remove_partitions`. A request whose write conflicts is logged and taken up again
        (re-read, re-validated) by a new event after
        :data:`~broker_core.controller.event_manager.CONFLICT_RETRY_S`: its request znodes are
        deleted only in the write that carries it out."""
        requests = await self.admin_requests(paths.PARTITIONS_REMOVE)
        self.watch_admin_topics(paths.PARTITIONS_REMOVE, self.remove_watched, requests,
                                "partitions_remove", self.on_partitions_remove)
        retry = False
        for topic, parts in requests.items():
            cleanup = [Delete(paths.partition_remove(topic, p)) for p in sorted(parts)]
            cleanup.append(Delete(paths.partitions_remove_topic(topic)))
            current = self.ctx.assignments.get(topic)
            remove = sorted(p for p in parts if current is not None and p in current)
            problem = None
            if current is None:
                problem = "unknown topic"
            elif remove and remove != list(range(len(current) - len(remove), len(current))):
                problem = f"only the highest-numbered partitions can be removed, not {remove}"
            elif len(remove) >= len(current):
                problem = "a topic must keep at least one partition (delete the topic instead)"
            try:
                if problem is not None or not remove:
                    if problem:
                        self.log.error("rejecting partitions_remove for {t}: {why}", t=topic,
                                       why=problem)
                    await self.writer.fenced(cleanup)
                    self.restore_stopped(topic)
                    continue
                await self.remove_partitions(topic, remove, cleanup)
            except TransactionFailed as e:
                # The topic znode is not at the version we hold, or a request znode changed:
                # nothing was written. Reload the topic (its assignment, version and states)
                # and carry the request out again from there.
                self.log.warn("partitions_remove for {t}: conflicting write ({e}); nothing "
                              "removed, trying again in {s}s", t=topic, e=e.first_error,
                              s=CONFLICT_RETRY_S)
                await self.ctx.load_topics([topic])
                retry = True
        if retry:
            self.controller.events.later("partitions_remove (retry)", self.on_partitions_remove)

    async def remove_partitions(self, topic: str, remove: Sequence[int],
                                cleanup: Sequence[Any]) -> None:
        """Remove partitions ``remove`` (the highest-numbered ones) of ``topic``, in the order
        that leaves nothing behind if the controller stops at any point:

        1. StopReplica (delete) to their live replicas and UpdateMetadata marking them deleted,
           waiting for the answers (at most :data:`STOP_REPLICA_WAIT_S`): no replica serves or
           keeps them once ZooKeeper no longer names them;
        2. one fenced multi deletes their ``leaderAndISR`` and partition znodes (those that
           exist), replaces the topic znode at its known version and deletes the request
           (``cleanup``);
        3. only then is the controller's state of them dropped.

        A failed write (TransactionFailed) changes no state here; the request stays and is
        carried out again (step 1 is idempotent on the brokers)."""
        current = self.ctx.assignments[topic]
        batch = self.controller._new_batch()
        self.stopped_for_removal.setdefault(topic, set()).update(remove)
        for p in remove:
            tp = (topic, p)
            d = self.ctx.states.get(tp)
            batch.stop_replica([r for r in current[p] if r in self.ctx.live], tp,
                               leader_epoch=-2 if d is None else d.leader_epoch, delete=True)
            batch.update_metadata(self.ctx.live, tp, None)
        await first_of(self.controller._send(batch), STOP_REPLICA_WAIT_S, self.controller.reactor)
        if not self.controller.active:
            raise NotController()
        candidates = [path for p in remove
                      for path in (paths.leader_and_isr(topic, p), paths.partition(topic, p))]
        found = await gather([self.controller.store.exists(c) for c in candidates])
        ops: list[Any] = [Delete(c) for c, st in zip(candidates, found, strict=True)
                          if st is not None]
        assignment = {p: r for p, r in current.items() if p not in remove}
        version = self.ctx.topic_versions[topic]
        ops.append(SetData(paths.topic(topic), self.ctx.topic_value(topic, assignment), version))
        await self.writer.fenced([*ops, *cleanup])
        for p in remove:
            tp = (topic, p)
            self.ctx.states.pop(tp, None)
            self.ctx.adding.pop(tp, None)
            self.ctx.removing.pop(tp, None)
        self.ctx.assignments[topic] = assignment
        self.ctx.topic_versions[topic] = version + 1
        self.stopped_for_removal.pop(topic, None)
        self.log.info("removed partitions {ps} from topic {t}", ps=list(remove), t=topic)

    def restore_stopped(self, topic: str) -> None:
        """A removal whose StopReplica went out but whose write then conflicted, and that is
        now refused (the topic changed under it, or the request was withdrawn): its partitions
        are still in the metadata but no replica holds them any more. Send their state again so
        that the replicas serve them (empty: what they held was deleted) rather than leave
        them unavailable."""
        stopped = self.stopped_for_removal.pop(topic, set())
        tps = [(topic, p) for p in sorted(stopped) if (topic, p) in self.ctx.states]
        if not tps:
            return
        self.log.error("partitions {ps} of topic {t} were stopped for a removal that was then "
                       "refused: serving them again, empty (their data was deleted)",
                       ps=[p for _, p in tps], t=topic)
        batch = self.controller._new_batch()
        for tp in tps:
            d = self.ctx.states[tp]
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        self.controller._send(batch)


def _json_list(data: bytes) -> list[Any]:
    try:
        value = json.loads(data.decode() or "[]")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(str(e)) from e
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value
