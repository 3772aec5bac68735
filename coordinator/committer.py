"""The offset committer (docs/design.md#the-consumer-coordinator): group offsets to ZooKeeper.

Every ``offsets.commit.interval.ms`` the committer collects the partitions whose offsets changed
since they were last written (the groups' ``dirty`` sets: the design's ``offsetUpdated`` bit, kept
per partition so only changed offsets are written), and writes them to
``/consumers/[group]/offsets/[topic]/[partition]`` in multis of at most
:data:`~broker_core.fenced_writer.MULTI_BATCH` operations, each fenced by the coordinator epoch
(one chunk of the shared fenced writer per call, so a partition is marked clean with the multi
that wrote it). Many groups share a multi; a 1,000-partition group is two multis.

Each value is a :class:`~broker_core.metadata_paths.CommittedOffset`: the offset with the leader epoch
and metadata a Kafka client committed alongside it (a plain decimal when there are none).

Invariants: a partition is marked clean only after the multi that wrote its value succeeded,
and only if the registry still holds that value, extras included (an offset reported while
the write was in flight stays dirty); an offset is never written below the one ZooKeeper is
known to hold (:meth:`GroupRegistry.note_committed` and ``record_offsets`` only move forward).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from twisted.internet import task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.fenced_writer import MULTI_BATCH
from broker_core.metadata import Create, MetadataStoreError, SetData, TransactionFailed
from coordinator.registry import NO_EXTRAS, GroupRegistry, OffsetExtras

log = Logger(namespace="sluice.coordinator.committer")


def read_committed_offset(group_id: str, tp: tuple[str, int], data: bytes | None
                          ) -> paths.CommittedOffset:
    """An offsets znode's value; an unreadable one (damaged, or not written by a coordinator)
    is logged and counts as no offset (-1, no extras), so nothing downstream sees it."""
    try:
        return paths.CommittedOffset.from_bytes(data)
    except ValueError as e:
        log.warn("ignoring the unreadable committed offset of {t}-{p} of group {g}: {e}",
                 t=tp[0], p=tp[1], g=group_id, e=e)
        return paths.CommittedOffset(-1)


Entry = tuple[GroupRegistry, tuple[str, int], int, OffsetExtras]


class OffsetCommitter:
    """Writes dirty offsets; see the module docstring.

    ``fenced(ops)`` applies ops in one multi behind the epoch check (raising NotCoordinator
    when fenced off); ``ensure_path(path)`` creates a parent znode (cached by the caller);
    ``reload(group, tps)`` re-reads which offset znodes exist after a failed multi.
    """

    def __init__(self, clock: IReactorTime, interval_s: float, *,
                 groups: Callable[[], Iterable[GroupRegistry]],
                 fenced: Callable[[Sequence[Any]], Awaitable[None]],
                 ensure_path: Callable[[str], Awaitable[None]],
                 reload: Callable[[GroupRegistry, Sequence[tuple[str, int]]], Awaitable[None]],
                 can_act: Callable[[], bool], metrics: Any = None) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.groups = groups
        self.fenced = fenced
        self.ensure_path = ensure_path
        self.reload = reload
        self.can_act = can_act
        self.metrics = metrics
        self._loop: task.LoopingCall | None = None
        self._busy = False

    def start(self) -> None:
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.clock
        d = self._loop.start(self.interval_s, now=False)
        d.addErrback(lambda f: log.failure("offset committer stopped", f))

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    async def _tick(self) -> None:
        # LoopingCall stops for good when its callable fails: never let it.
        if self._busy or not self.can_act():
            return
        self._busy = True
        try:
            await self.commit([g for g in self.groups() if g.dirty])
        except Exception as e:
            log.warn("periodic offset commit failed: {e}", e=e)
        finally:
            self._busy = False

    async def commit(self, groups: Iterable[GroupRegistry],
                     only: dict[str, set[tuple[str, int]]] | None = None) -> int:
        """Write the dirty offsets of ``groups`` (restricted per group id to ``only``, when
        given); returns how many partitions were written. Raises NotCoordinator when fenced,
        TransactionFailed/MetadataStoreError for other failures (after marking the batch's
        partitions for a reload)."""
        entries: list[Entry] = []
        for g in groups:
            want = only.get(g.group_id) if only is not None else None
            for tp in sorted(g.dirty):
                if want is not None and tp not in want:
                    continue
                entries.append((g, tp, g.offsets[tp], g.extras.get(tp, NO_EXTRAS)))
        written = 0
        for i in range(0, len(entries), MULTI_BATCH):
            batch = entries[i:i + MULTI_BATCH]
            parents = {paths.consumer_offsets_topic(g.group_id, tp[0]) for g, tp, _, _ in batch
                       if tp not in g.committed}
            for parent in sorted(parents):
                await self.ensure_path(parent)
            ops = [(SetData if tp in g.committed else Create)(
                       paths.consumer_offset(g.group_id, *tp),
                       paths.CommittedOffset(v, *extras).to_bytes())
                   for g, tp, v, extras in batch]
            try:
                await self.fenced(ops)
            except (TransactionFailed, MetadataStoreError):
                # Our idea of which znodes exist was wrong (another writer, a deleted group):
                # re-read them so the next round uses the right operation.
                by_group: dict[int, tuple[GroupRegistry, list[tuple[str, int]]]] = {}
                for g, tp, _, _ in batch:
                    by_group.setdefault(id(g), (g, []))[1].append(tp)
                for g, tps in by_group.values():
                    await self.reload(g, tps)
                raise
            for g, tp, v, extras in batch:
                g.note_written(tp, v, extras)
            written += len(batch)
        if self.metrics is not None and written:
            self.metrics.coordinator_offset_commits_total.inc(written)
        return written
