"""Delayed produce (acks=all) and delayed fetch (long poll), parked in the shared purgatory.

Both keep Kafka's contract (``DelayedProduce.scala``, ``DelayedFetch.scala``): ``try_complete``
checks the condition and calls ``force_complete``; ``on_complete`` runs exactly once, either
because the condition held or because the operation expired, and answers the request.
Watch keys are ``(topic, partition)`` tuples; the replica manager calls ``check_and_complete`` on
them after an append (fetch) or a high-watermark move (produce and fetch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from broker_core.purgatory import DelayedOperation
from broker_core.wire.topic_partition import TopicPartition


class DelayedProduce(DelayedOperation):
    """Waits until the high watermark of every partition passes the offset its append reached;
    then a partition whose ISR is below ``min.insync.replicas`` answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (``enough_replicas(tp)`` is False).

    ``pending`` maps a partition to the offset the HW must reach (last appended offset + 1).
    ``hw_of(tp)`` returns the current HW or ``None`` if this broker no longer leads the partition
    (then the partition completes with NOT_LEADER_OR_FOLLOWER).

    A try settles partitions in request order and stops at the first still short of its
    offset: the request cannot complete before that one does, and a batching producer's
    request names hundreds of partitions, re-tried at every follower fetch that moves any of
    them. Each partition is settled once, so a request costs O(partitions) over all its tries.
    On expiry the partitions not settled yet are checked once more, so one whose HW passed
    behind a waiting one answers as it would have if it had been checked.
    """

    def __init__(
        self,
        timeout_s: float,
        pending: dict[TopicPartition, int],
        hw_of: Callable[[TopicPartition], int | None],
        respond: Callable[[dict[TopicPartition, str | None]], None],
        enough_replicas: Callable[[TopicPartition], bool] = lambda tp: True,
    ) -> None:
        super().__init__(timeout_s)
        self.pending = pending
        self.hw_of = hw_of
        self.respond = respond
        self.enough_replicas = enough_replicas
        self.outcome: dict[TopicPartition, str | None] = {}
        self._unsettled: deque[tuple[TopicPartition, int]] = deque(pending.items())

    def _settle(self, tp: TopicPartition, needed: int) -> bool:
        """Record ``tp``'s outcome if it has one now; whether it had."""
        hw = self.hw_of(tp)
        if hw is None:
            self.outcome[tp] = "NOT_LEADER_OR_FOLLOWER"
        elif hw >= needed:
            # Kafka's checkEnoughReplicasReachOffset: written everywhere the ISR says, but
            # the ISR is below min.insync.replicas, so the write is not as durable as asked.
            self.outcome[tp] = (None if self.enough_replicas(tp)
                                else "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
        else:
            return False
        return True

    def try_complete(self) -> bool:
        unsettled = self._unsettled
        while unsettled:
            tp, needed = unsettled[0]
            if not self._settle(tp, needed):
                return False
            unsettled.popleft()
        return self.force_complete()

    def on_complete(self) -> None:
        for tp, needed in self._unsettled:  # only on expiry: a completed try settled them all
            self._settle(tp, needed)
        self._unsettled.clear()
        result = {tp: self.outcome.get(tp, "REQUEST_TIMED_OUT") for tp in self.pending}
        self.respond(result)

    def on_expiration(self) -> None:
        pass  # on_complete already answered the partitions still waiting with REQUEST_TIMED_OUT


class DelayedDeleteRecords(DelayedOperation):
    """Waits until the low watermark of every partition (the lowest log start offset of its
    live replicas, :meth:`Partition.low_watermark`) reaches the offset its DeleteRecords asked
    for (Kafka's ``DelayedDeleteRecords``).

    ``pending`` maps a partition to that offset; ``low_watermark_of(tp)`` returns the current
    low watermark or ``None`` if this broker no longer leads the partition (then it completes
    with NOT_LEADER_OR_FOLLOWER). On expiry the partitions still short of it answer
    REQUEST_TIMED_OUT (with low watermark -1, as Kafka's)."""

    def __init__(self, timeout_s: float, pending: dict[TopicPartition, int],
                 low_watermark_of: Callable[[TopicPartition], int | None],
                 respond: Callable[[dict[TopicPartition, tuple[str | None, int]]], None]
                 ) -> None:
        super().__init__(timeout_s)
        self.pending = pending
        self.low_watermark_of = low_watermark_of
        self.respond = respond
        self.outcome: dict[TopicPartition, tuple[str | None, int]] = {}

    def try_complete(self) -> bool:
        for tp, needed in self.pending.items():
            if tp in self.outcome:
                continue
            low = self.low_watermark_of(tp)
            if low is None:
                self.outcome[tp] = ("NOT_LEADER_OR_FOLLOWER", -1)
            elif low >= needed:
                self.outcome[tp] = (None, low)
        if len(self.outcome) == len(self.pending):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond({tp: self.outcome.get(tp, ("REQUEST_TIMED_OUT", -1))
                      for tp in self.pending})

    def on_expiration(self) -> None:
        pass  # on_complete already answered the partitions still waiting with REQUEST_TIMED_OUT


class DelayedFetch(DelayedOperation):
    """Waits until ``min_bytes`` are available to read or the wait expires (long poll).

    ``available()`` returns how many bytes the fetch would now return; ``respond()`` re-reads and
    answers. Both run on the reactor thread.

    ``just_checked``: the caller has just found fewer than ``min_bytes`` available, in this
    reactor turn, so the purgatory's first try (before watching) is answered False without
    calling ``available()`` again; the try after watching always checks. A follower's fetch
    names thousands of partitions after a failover, and each ``available()`` walks them all.
    """

    def __init__(
        self,
        timeout_s: float,
        min_bytes: int,
        available: Callable[[], int],
        respond: Callable[[], Any],
        *,
        just_checked: bool = False,
    ) -> None:
        super().__init__(timeout_s)
        self.min_bytes = min_bytes
        self.available = available
        self.respond = respond
        self._skip_next_try = just_checked

    def try_complete(self) -> bool:
        if self._skip_next_try:
            self._skip_next_try = False
            return False
        if self.available() >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond()

    def on_expiration(self) -> None:
        pass
