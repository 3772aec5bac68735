"""Fenced writes: metadata-store multis that each begin with a check of the writer's epoch.

The controller and the consumer coordinator write only while they hold their seat
(:mod:`broker_core.leader_election`). Winning it bumped an epoch node (``/controller_epoch``,
``/consumers/coordinator_epoch``) to a version the winner remembers; every write of its term is
a ``multi`` whose first operation is a ``check`` of that node at that version (KAFKA-6082), so a
deposed writer's writes fail atomically and it learns it is deposed (:class:`EpochMoved`).
Operations of their own are usually conditional too (``SetData``/``Delete`` at a version).

Invariants:

- no multi holds more than :data:`MULTI_BATCH` of the caller's operations (plus the check);
- the operations are applied in the order given: chunk after chunk, each atomic, but the chunks
  are not one transaction. When one fails, the chunks before it committed and, with a window
  above 1, some sent after it may have too; no further chunk is sent;
- a failed epoch check is always reported as :class:`EpochMoved`, whichever chunk it was in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.internet import defer

from broker_core.metadata import Check, TransactionFailed

#: ZooKeeper caps a whole multi at jute.maxbuffer (~1 MB); our ops are small, so 500 ops per multi
#: stays far below it (python-zk/kazoo#630: ~3,200 creates already failed).
MULTI_BATCH = 500


class EpochMoved(Exception):
    """The epoch check of a fenced multi failed: a newer holder of the seat exists (or someone
    moved the epoch on). Nothing of that multi was applied."""


async def write_fenced(store: Any, epoch_path: str, epoch_version: int, ops: Sequence[Any], *,
                       window: int = 1) -> None:
    """Apply ``ops`` through ``store.multi`` in chunks of at most :data:`MULTI_BATCH`, each led
    by ``Check(epoch_path, epoch_version)``.

    Up to ``window`` multis are sent before the first answer is awaited: ZooKeeper (and the
    quorum) apply one session's requests in order, so pipelining changes no outcome; it saves a
    round trip per chunk. Raises :class:`EpochMoved` (chained to the store's
    :class:`TransactionFailed`) when the epoch check failed; any other failure of the first
    failing chunk is raised as it came (:class:`TransactionFailed` for an operation of the
    caller's, a ``MetadataStoreError`` when the store took nothing). Callers re-read what they
    meant to write on failure.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, not {window}")
    check = Check(epoch_path, epoch_version)
    chunks = [list(ops[i:i + MULTI_BATCH]) for i in range(0, len(ops), MULTI_BATCH)]
    for w in range(0, len(chunks), window):
        results = await defer.DeferredList(
            [store.multi([check, *chunk]) for chunk in chunks[w:w + window]],
            consumeErrors=True)
        failures = [r for ok, r in results if not ok]
        if not failures:
            continue
        for f in failures:
            if f.check(TransactionFailed) and f.value.failed_index == 0:
                raise EpochMoved(f"{epoch_path} is no longer at version {epoch_version}"
                                 ) from f.value
        failures[0].raiseException()
