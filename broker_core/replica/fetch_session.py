"""Incremental fetch sessions between a follower and its leader (KIP-227), both sides, sans-IO.

A follower fetches every partition it follows from one leader in each Fetch. Without sessions
every request names all of them and every answer carries all of them, though in a round
usually one or two moved: most of a fetch's cost is encoding and decoding partitions that did
not change. With a session, the leader remembers the partitions and their fetch offsets; the
follower's next requests name only partitions whose fetch state changed (and *forget* the ones
it stopped fetching), and the leader answers only partitions with records, an error, or a new
high watermark or log start offset.

The protocol (``session_id``, ``session_epoch`` in FetchRequest v7+):

==============  ==========  ===============================================================
session_id      epoch       meaning
==============  ==========  ===============================================================
0               0           full fetch; open a session (the answer carries its id, or 0)
0               -1          full fetch, no session
id              0           full fetch; close ``id`` and open a new session
id              -1          full fetch; close ``id``, no session
id              n > 0       incremental fetch in session ``id``; ``n`` must be its next epoch
==============  ==========  ===============================================================

An unknown id answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH;
the client then starts over with a full fetch. Epochs run 1, 2, ... and wrap to 1 after
2**31 - 1.

Sluice opens sessions for followers only (``replica_id >= 0``): a consumer asking for one gets
session id 0 and keeps sending full requests, which the protocol allows. A follower broker runs
one fetcher per leader, so a new session from a replica replaces that replica's older one; the
cache therefore holds at most one session per other broker, and ``max_sessions`` bounds it
anyway (the least recently used goes first).

Invariants:

- leader: a session's partitions are exactly those of its last full request plus the
  incremental additions minus the forgotten ones; each records the fetch offset last asked for
  and the high watermark and log start offset last answered;
- follower: ``FetchSessionHandler`` holds what the leader's session holds once a response has
  arrived; any failure (an error code, a lost connection, a timeout) resets it, so the next
  request is full and the two sides agree again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from broker_core.wire.topic_partition import TopicPartition

#: ``(topic, partition, fetch_offset, partition_max_bytes, current_leader_epoch)``, the replica
#: manager's fetch request entry.
FetchEntry = tuple[str, int, int, int, int]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 0x7FFFFFFF

#: Kafka's ``max.incremental.fetch.session.cache.slots`` default.
DEFAULT_MAX_SESSIONS = 1000


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (1 after the largest int32: 0 and -1 have their own meaning)."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


# -- the leader's side ---------------------------------------------------------------------------

@dataclass(slots=True)
class _CachedPartition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    #: As last answered in this session (-1: never answered, so the next answer includes it).
    high_watermark: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    """One follower's session on this leader."""

    id: int
    replica_id: int
    next_epoch: int
    partitions: dict[TopicPartition, _CachedPartition] = field(default_factory=dict)


@dataclass(slots=True)
class FetchContext:
    """One Fetch request resolved against the session cache.

    ``error`` is a session-level error name (the request is answered with it and no
    partitions); otherwise ``entries`` are the partitions to read and ``session_id`` goes in
    the response. :meth:`select` picks what the response carries. In an incremental fetch
    ``named`` are the partitions the request itself names (their fetch state changed); the
    others are the session's, at the state last asked for, and :meth:`quiet` tells the
    reader which of those it may leave unread.
    """

    error: str | None
    session_id: int
    entries: list[FetchEntry]
    session: FetchSession | None = None
    incremental: bool = False
    named: AbstractSet[TopicPartition] = frozenset()

    def quiet(self, tp: TopicPartition, log_end_offset: int, high_watermark: int,
              log_start_offset: int) -> bool:
        """Whether partition ``tp`` of an incremental fetch, found on the leader with these
        offsets, has nothing for this request: not named by it, its fetch offset already at
        the log end, and the high watermark and log start offset as last answered. Reading
        it would give a row :meth:`select` leaves out (no records, no error, nothing
        changed), so the reader may skip it; whatever else it checks (leadership, the
        follower's own state) is the reader's to check."""
        if not self.incremental or tp in self.named:
            return False
        c = self.session.partitions.get(tp)  # type: ignore[union-attr]
        return (c is not None and c.fetch_offset == log_end_offset
                and c.high_watermark == high_watermark
                and c.log_start_offset == log_start_offset)

    def select(self, results: list[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
        """The ``(topic, partition, FetchResult)`` rows the response carries, remembering what
        was answered. A full response carries every row; an incremental one only rows with
        records or an error, or whose high watermark or log start offset changed since this
        session last answered them."""
        session = self.session
        if session is None:
            return results
        out = []
        cached = session.partitions
        for row in results:
            topic, index, r = row
            c = cached.get((topic, index))
            if c is None:  # forgotten meanwhile: answer it anyway, the client ignores it
                out.append(row)
                continue
            if (not self.incremental or r.error is not None or r.records
                    or r.high_watermark != c.high_watermark
                    or r.log_start_offset != c.log_start_offset):
                c.high_watermark = r.high_watermark
                c.log_start_offset = r.log_start_offset
                out.append(row)
        return out


class FetchSessionCache:
    """The leader's fetch sessions; see the module docstring.

    ``new_id`` makes session ids (random non-zero int31 by default; tests pass their own).
    """

    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 new_id: Callable[[], int] | None = None) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions!r}")
        self.max_sessions = max_sessions
        rng = random.Random()
        self._new_id = new_id or (lambda: rng.randint(1, MAX_EPOCH))
        #: Least recently used first (an entry moves to the end when used).
        self._sessions: dict[int, FetchSession] = {}
        self._by_replica: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def context(self, replica_id: int, session_id: int, epoch: int,
                entries: Iterable[FetchEntry],
                forgotten: Iterable[TopicPartition] = ()) -> FetchContext:
        """Resolve one request: its session fields, the partitions it names and those it
        forgets. See the module docstring for the cases."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._remove(session_id)
            entries = list(entries)
            if epoch == FINAL_EPOCH or replica_id < 0:
                return FetchContext(None, INVALID_SESSION_ID, entries)
            session = self._open(replica_id)
            for topic, index, offset, max_bytes, leader_epoch in entries:
                session.partitions[(topic, index)] = _CachedPartition(offset, max_bytes,
                                                                      leader_epoch)
            return FetchContext(None, session.id, entries, session)
        session = self._sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            return FetchContext("FETCH_SESSION_ID_NOT_FOUND", INVALID_SESSION_ID, [])
        if epoch != session.next_epoch:
            return FetchContext("INVALID_FETCH_SESSION_EPOCH", INVALID_SESSION_ID, [])
        session.next_epoch = next_epoch(epoch)
        self._sessions[session_id] = self._sessions.pop(session_id)  # most recently used
        cached = session.partitions
        for tp in forgotten:
            cached.pop(tp, None)
        named: set[TopicPartition] = set()
        for topic, index, offset, max_bytes, leader_epoch in entries:
            c = cached.get((topic, index))
            if c is None:
                cached[(topic, index)] = _CachedPartition(offset, max_bytes, leader_epoch)
            else:
                c.fetch_offset, c.max_bytes, c.leader_epoch = offset, max_bytes, leader_epoch
            named.add((topic, index))
        full = [(topic, index, c.fetch_offset, c.max_bytes, c.leader_epoch)
                for (topic, index), c in cached.items()]
        return FetchContext(None, session.id, full, session, incremental=True, named=named)

    def _open(self, replica_id: int) -> FetchSession:
        # One fetcher per leader on a follower: its new session supersedes the old one.
        old = self._by_replica.get(replica_id)
        if old is not None:
            self._remove(old)
        while len(self._sessions) >= self.max_sessions:
            self._remove(next(iter(self._sessions)))
        session_id = self._new_id()
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._new_id()
        session = FetchSession(session_id, replica_id, next_epoch(INITIAL_EPOCH))
        self._sessions[session_id] = session
        self._by_replica[replica_id] = session_id
        return session

    def _remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and self._by_replica.get(session.replica_id) == session_id:
            del self._by_replica[session.replica_id]


# -- the follower's side -------------------------------------------------------------------------

#: What a follower tells the leader about one partition: ``(fetch_offset, log_start_offset,
#: partition_max_bytes, current_leader_epoch)``; a partition is sent again when this changes.
PartitionFetchState = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One request's session fields and partitions, built by :class:`FetchSessionHandler`."""

    session_id: int
    epoch: int
    #: Every partition the request fetches, with its state (the leader's session after it).
    partitions: dict[TopicPartition, PartitionFetchState]
    #: The partitions the request names (all of them in a full request).
    to_send: list[TopicPartition]
    forgotten: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """The follower's half of a session with one leader (Kafka's ``FetchSessionHandler``).

    Call :meth:`build` for each request, then :meth:`handle_response` with its answer's
    ``error_code`` and ``session_id``, or :meth:`reset` if no answer came (the connection
    dropped, the request timed out).
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, PartitionFetchState] = {}

    def build(self, partitions: dict[TopicPartition, PartitionFetchState]) -> FetchRequestData:
        if self.session_id == INVALID_SESSION_ID:
            return FetchRequestData(INVALID_SESSION_ID, INITIAL_EPOCH, partitions,
                                    list(partitions), [])
        sent = self._sent
        to_send = [tp for tp, state in partitions.items() if sent.get(tp) != state]
        # Nothing is forgotten when every sent partition is still here, which the counts tell
        # without a second walk: the partitions here that were sent number len(sent) exactly
        # when none was dropped.
        new = sum(1 for tp in to_send if tp not in sent)
        forgotten = ([] if len(partitions) - new == len(sent)
                     else [tp for tp in sent if tp not in partitions])
        return FetchRequestData(self.session_id, self.next_epoch, partitions, to_send, forgotten)

    def handle_response(self, request: FetchRequestData, error_code: int, session_id: int
                        ) -> bool:
        """Take the answer to ``request``; returns False if it carries a session error (then
        its partitions are not to be used and the next request is full)."""
        if error_code:
            self.reset()
            return False
        if request.full:
            self.session_id = session_id
            self.next_epoch = (next_epoch(INITIAL_EPOCH) if session_id != INVALID_SESSION_ID
                               else INITIAL_EPOCH)
        else:
            self.next_epoch = next_epoch(self.next_epoch)
        self._sent = request.partitions if self.session_id != INVALID_SESSION_ID else {}
        return True

    def reset(self) -> None:
        """Forget the session: the next request is full and opens a new one."""
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self._sent = {}
