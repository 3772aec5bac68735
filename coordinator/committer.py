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
the write was in flight stays dirty); a thin group's offset is never written below the one
ZooKeeper is known to hold (:meth:`GroupRegistry.note_committed` and ``record_offsets`` only
move forward), while a Kafka client's explicit commit, a seek back included, is written as
given and no re-read of the stored value replaces it before it is.

Group commit (:meth:`OffsetCommitter.commit_soon`, the path of OffsetCommit, CommitOffsets and a
leave's final offsets): one write is in flight at a time, behind :attr:`OffsetCommitter.lock`
(which the periodic round and group deletion take too); requests that arrive meanwhile, from
any group, queue, and when the write completes the queued ones go out together in the next
fenced multi, at most :data:`MULTI_BATCH` operations and :data:`MULTI_BYTES` bytes (a request
larger than that goes alone, in as many multis as it needs). So a commit usually waits for one
write before its own (for every multi of the periodic round, a rebalance's commit or a stop
when one of those holds the lock), and throughput grows with the number of clients committing instead of
being one over the time of a single write.

- A request is answered when the multi holding its partitions succeeded, never before; one
  whose partitions are all clean when its batch forms was written by an earlier multi that
  has completed (values are read from the registry when the batch forms, after the previous
  write released the lock), so it is answered at once.
- Per partition the last value wins: the registry holds one value, which the batch reads when
  it forms, and batches are written one after the other, so an earlier commit never
  overwrites a later one.
- A failed multi fails exactly the requests it held, each with the error it would have got
  alone: losing the fence or the store fails them all; a multi that failed on one operation
  (a znode another writer created or deleted) fails the requests naming that partition, and the
  others go back to the head of the queue for the next multi.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from broker_core import metadata_paths as paths
from broker_core.fenced_writer import MULTI_BATCH
from broker_core.metadata import Create, MetadataStoreError, SetData, TransactionFailed
from coordinator.registry import NO_EXTRAS, GroupRegistry, OffsetExtras

log = Logger(namespace="sluice.coordinator.committer")

#: Bytes of paths and values per multi: half ZooKeeper's default 1 MB request limit
#: (``jute.maxbuffer``), leaving room for the framing; 500 offsets (``MULTI_BATCH``) with the
#: largest default metadata (``offset.metadata.max.bytes``, 4 KiB) would be over 2 MB.
MULTI_BYTES = 512 * 1024


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


def _entry_path(e: Entry) -> str:
    return paths.consumer_offset(e[0].group_id, *e[1])


def _entry_value(e: Entry) -> bytes:
    return paths.CommittedOffset(e[2], *e[3]).to_bytes()


def _entry_bytes(e: Entry) -> int:
    """What an entry weighs in a multi: its path and value (the per-operation framing is
    covered by the slack :data:`MULTI_BYTES` leaves)."""
    return len(_entry_path(e).encode()) + len(_entry_value(e))


def chunks(entries: Sequence[Entry]) -> Iterator[list[Entry]]:
    """``entries`` in order, cut into multis of at most :data:`MULTI_BATCH` entries and
    :data:`MULTI_BYTES` bytes (an entry heavier than that alone is a multi of its own)."""
    batch: list[Entry] = []
    size = 0
    for e in entries:
        weight = _entry_bytes(e)
        if batch and (len(batch) >= MULTI_BATCH or size + weight > MULTI_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(e)
        size += weight
    if batch:
        yield batch


@dataclass(eq=False)
class _Request:
    """One request's partitions of one group, waiting to be written (group commit)."""

    group: GroupRegistry
    tps: frozenset[tuple[str, int]]
    done: defer.Deferred = field(default_factory=defer.Deferred)


class OffsetCommitter:
    """Writes dirty offsets; see the module docstring.

    ``fenced(ops)`` applies ops in one multi behind the epoch check (raising NotCoordinator
    when fenced off); ``ensure_path(path)`` creates a parent znode (cached by the caller);
    ``reload(group, tps)`` re-reads which offset znodes exist after a failed multi. ``lock``
    is held around every write of offsets (shared with whoever else must not race them to
    the same znodes, e.g. group deletion).
    """

    def __init__(self, clock: IReactorTime, interval_s: float, *,
                 groups: Callable[[], Iterable[GroupRegistry]],
                 fenced: Callable[[Sequence[Any]], Awaitable[None]],
                 ensure_path: Callable[[str], Awaitable[None]],
                 reload: Callable[[GroupRegistry, Sequence[tuple[str, int]]], Awaitable[None]],
                 can_act: Callable[[], bool], metrics: Any = None,
                 lock: defer.DeferredLock | None = None) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.groups = groups
        self.fenced = fenced
        self.ensure_path = ensure_path
        self.reload = reload
        self.can_act = can_act
        self.metrics = metrics
        self.lock = lock if lock is not None else defer.DeferredLock()
        self._loop: task.LoopingCall | None = None
        self._busy = False
        self._queue: deque[_Request] = deque()
        self._draining = False

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
        given), under :attr:`lock`; returns how many partitions were written. Raises
        NotCoordinator when fenced, TransactionFailed/MetadataStoreError for other failures
        (after marking the failed partitions for a reload)."""
        await self.lock.acquire()
        try:
            entries: list[Entry] = []
            for g in groups:
                want = only.get(g.group_id) if only is not None else None
                entries.extend(self._dirty(g, want))
            written = 0
            for batch in chunks(entries):
                await self._write(batch)
                written += len(batch)
            return written
        finally:
            self.lock.release()

    # -- group commit ------------------------------------------------------------------------------

    def commit_soon(self, group: GroupRegistry, tps: Iterable[tuple[str, int]]
                    ) -> defer.Deferred:
        """Write ``tps`` of ``group`` (those still dirty) in the next multi: a Deferred that
        fires (None) once they are durable, or fails with the error of the multi that held
        them (NotCoordinator, TransactionFailed, MetadataStoreError)."""
        r = _Request(group, frozenset(tps))
        if not r.tps:
            r.done.callback(None)
            return r.done
        self._queue.append(r)
        if not self._draining:
            self._draining = True
            defer.ensureDeferred(self._drain()).addErrback(
                lambda f: log.failure("group commit stopped", f))
        return r.done

    async def _drain(self) -> None:
        try:
            while self._queue:
                await self.lock.acquire()
                try:
                    await self._write_queued()
                finally:
                    self.lock.release()
        finally:
            self._draining = False

    async def _write_queued(self) -> None:
        """Take queued requests in order while they fit one multi (at least one), write their
        dirty partitions, answer them. Runs under :attr:`lock`."""
        taken: list[_Request] = []
        entries: list[Entry] = []
        batch: list[Entry] = []
        try:
            seen: set[tuple[int, tuple[str, int]]] = set()
            size = 0
            while self._queue:
                r = self._queue.popleft()
                taken.append(r)  # before anything can fail: every request popped is answered
                new = [e for e in self._dirty(r.group, r.tps) if (id(e[0]), e[1]) not in seen]
                weight = sum(_entry_bytes(e) for e in new)
                if len(taken) > 1 and (len(entries) + len(new) > MULTI_BATCH
                                       or size + weight > MULTI_BYTES):
                    self._queue.appendleft(taken.pop())  # first of the next multi
                    break
                entries.extend(new)
                seen.update((id(e[0]), e[1]) for e in new)
                size += weight
            # More than one multi only for a single request larger than one (taken == [r]).
            for batch in chunks(entries):
                await self._write(batch)
        except Exception as e:
            culprit = _culprit(batch, e)
            guilty = taken if culprit is None else [
                r for r in taken if r.group is culprit[0] and culprit[1] in r.tps]
            innocent = [r for r in taken if r not in guilty]
            # Alone, the others' multi would not have held the failed operation: retry them.
            self._queue.extendleft(reversed(innocent))
            failure = Failure(e)
            for r in guilty:
                r.done.errback(failure)
            return
        for r in taken:
            r.done.callback(None)

    # -- writing -----------------------------------------------------------------------------------

    @staticmethod
    def _dirty(g: GroupRegistry, want: Iterable[tuple[str, int]] | None) -> list[Entry]:
        """The group's dirty partitions (of ``want``, when given) with their current values."""
        tps = sorted(g.dirty if want is None else g.dirty.intersection(want))
        return [(g, tp, g.offsets[tp], g.extras.get(tp, NO_EXTRAS)) for tp in tps]

    async def _write(self, batch: list[Entry]) -> None:
        """One fenced multi of ``batch`` (at most one multi's worth, see :func:`chunks`)."""
        parents = {paths.consumer_offsets_topic(g.group_id, tp[0]) for g, tp, _, _ in batch
                   if tp not in g.committed}
        for parent in sorted(parents):
            await self.ensure_path(parent)
        ops = [(SetData if e[1] in e[0].committed else Create)(_entry_path(e), _entry_value(e))
               for e in batch]
        try:
            await self.fenced(ops)
        except (TransactionFailed, MetadataStoreError) as e:
            # Our idea of which znodes exist was wrong (another writer, a deleted group):
            # re-read them so the next round uses the right operation. When the store names
            # the operation that failed, only that one: the others were not checked, and a
            # re-read would replace a value still to be written (a seek back) by the stored one.
            culprit = _culprit(batch, e)
            suspects = batch if culprit is None else [culprit]
            by_group: dict[int, tuple[GroupRegistry, list[tuple[str, int]]]] = {}
            for g, tp, _, _ in suspects:
                by_group.setdefault(id(g), (g, []))[1].append(tp)
            for g, tps in by_group.values():
                await self.reload(g, tps)
            raise
        for g, tp, v, extras in batch:
            g.note_written(tp, v, extras)
        if self.metrics is not None:
            self.metrics.coordinator_offset_commits_total.inc(len(batch))


def _culprit(batch: Sequence[Entry], error: BaseException) -> Entry | None:
    """The entry whose operation failed ``batch``'s multi, when the store says which (the
    multi is the epoch check then ``batch``; a failed check is NotCoordinator, not this)."""
    if not isinstance(error, TransactionFailed):
        return None
    i = error.failed_index
    if i is None or not 1 <= i <= len(batch):
        return None
    return batch[i - 1]
