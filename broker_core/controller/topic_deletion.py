"""Topic deletion (Kafka's TopicDeletionManager, much simplified): ``/admin/delete_topics``.

A topic marked for deletion is forgotten by the controller at once (StopReplica with delete to
its live replicas, UpdateMetadata marking its partitions deleted), then its znodes are deleted,
children before parents, in one fenced multi (one by one if that fails: a previous controller
may have got part of the way). Invariants: the marker is deleted last, so a controller that
stops half-way leaves it for its successor, which finishes the job (every step is idempotent);
a forgotten topic leaves nothing behind in the context (assignment, version, states,
reassignment bookkeeping).
"""

from __future__ import annotations

from typing import Any

from broker_core import metadata_paths as paths
from broker_core.controller.batch import RequestBatch
from broker_core.controller.context import gather
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import Delete, TransactionFailed


class TopicDeletion(ControllerProcedure):
    """Topic deletion for one controller. ``controller`` supplies ``store``, ``log``,
    ``_new_batch`` / ``_send``, and its ``context`` and ``writer``."""

    def forget_topic(self, topic: str, batch: RequestBatch) -> None:
        parts = self.ctx.assignments.pop(topic, {})
        self.ctx.topic_versions.pop(topic, None)
        for p, replicas in parts.items():
            tp = (topic, p)
            self.ctx.adding.pop(tp, None)
            self.ctx.removing.pop(tp, None)
            self.ctx.reassigning.pop(tp, None)
            d = self.ctx.states.pop(tp, None)
            batch.stop_replica([r for r in replicas if r in self.ctx.live], tp,
                               leader_epoch=-2 if d is None else d.leader_epoch, delete=True)
            batch.update_metadata(self.ctx.live, tp, None)

    async def on_delete_topics(self) -> None:
        marked = await self.ctx.children(paths.DELETE_TOPICS)
        for topic in marked:
            batch = self.controller._new_batch()
            parts = dict(self.ctx.assignments.get(topic, {}))
            self.forget_topic(topic, batch)
            self.controller._send(batch)
            # Children before parents; only what exists (a previous controller may have got
            # part of the way).
            candidates = []
            for p in sorted(parts):
                candidates += [paths.leader_and_isr(topic, p), paths.partition(topic, p)]
            found = await gather([self.controller.store.exists(c) for c in candidates])
            ops: list[Any] = [Delete(c) for c, st in zip(candidates, found, strict=True)
                              if st is not None]
            for path in (paths.topic(topic), paths.topic_config(topic)):
                if await self.controller.store.exists(path) is not None:
                    ops.append(Delete(path))
            ops.append(Delete(paths.delete_topic(topic)))
            try:
                await self.writer.fenced(ops)
            except TransactionFailed as e:
                self.log.warn("could not delete the znodes of topic {t} in one step ({e}); "
                              "deleting them one by one", t=topic, e=e.first_error)
                for op in ops:
                    try:
                        await self.writer.fenced([op])
                    except TransactionFailed:
                        pass
            self.log.info("deleted topic {t}", t=topic)
