"""A real metadata quorum of one voter, in this process: the :class:`IQuorumClient` the
``QuorumMetadataStore`` tests run on until the network driver exists.

It is the real Raft code, not a stand-in: one :class:`~broker_core.raft.RaftNode` (node 1, the
only voter) on an :class:`~broker_core.raft.InMemoryRaftLog`, driven by a Twisted clock (the
reactor, or a ``task.Clock`` in tests), with the real :class:`MetadataTree` and
:class:`SessionTracker`. What a one-voter quorum cannot show is replication: its own log end is
a majority, so an entry commits as soon as it is appended. Elections still happen (the node
stands when its election timer fires, and again after :meth:`LocalQuorum.resign`), so the
store's "no leader" path is exercised for real.

The driver applies each step's ``Effects`` in the documented order (``docs/raft.md``):

1. ``quorum_state``: kept in :attr:`LocalQuorum.persisted` (the log is in memory too, so there
   is no restart to survive);
2. ``flush_log``: ``log.flush()``;
3. ``messages``: a single voter has no peer to send to; any message is a bug and raises;
4. ``transitions`` (leadership starts or stops session tracking), ``truncated_to`` (proposals
   at or above it fail), then ``high_watermark``: committed entries are applied to the tree in
   order, the apply listeners are called, and the proposer's Deferred fires.

On becoming leader the node grants every open session of its tree a full timeout from then
(:meth:`SessionTracker.lead`); while leading it proposes ``expire_session`` for every session
whose heartbeats stopped.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from broker_core.metadata import ConnectionLost, SessionExpired
from broker_core.raft import Effects, InMemoryRaftLog, RaftConfig, RaftNode, Role
from broker_core.raft.metadata_commands import ExpireSession, encode
from broker_core.raft.metadata_sessions import SessionTracker
from broker_core.raft.metadata_store import IQuorumClient
from broker_core.raft.metadata_tree import ApplyResult, MetadataTree
from broker_core.raft.quorum_state import QuorumState

#: Short timers: a test waits one election (50-100 ms) for the first leader.
FAST = RaftConfig(election_timeout_ms=50, fetch_timeout_ms=1000, election_backoff_max_ms=100,
                  request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=500,
                  fetch_max_entries=500)


@implementer(IQuorumClient)
class LocalQuorum:
    """See the module docstring. ``stop()`` cancels its timer and fails what is pending."""

    log = Logger(namespace="sluice.quorum.local")

    def __init__(self, clock: Any, *, config: RaftConfig = FAST, seed: int = 0,
                 cluster_id: str = "local") -> None:
        self.clock = clock
        self.raft_log = InMemoryRaftLog()
        self.tree = MetadataTree()
        self.sessions = SessionTracker()
        self.persisted: QuorumState | None = None
        self.voters = "1 (in-process)"
        self.node = RaftNode(1, cluster_id, frozenset({1}), self.raft_log, config,
                             random.Random(seed), self._now())
        self._pending: dict[int, tuple[int, defer.Deferred]] = {}
        self._listeners: list[Callable[[int, ApplyResult], None]] = []
        self._timer: Any = None
        self._applying = False
        self._stopped = False
        self._schedule()

    # -- driving the node ------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.seconds() * 1000.0

    @property
    def leading(self) -> bool:
        return self.node.role is Role.LEADER

    def _schedule(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._stopped:
            return
        due = [t for t in (self.node.next_deadline(),
                           self.sessions.next_deadline() if self.leading else None)
               if t is not None]
        if due:
            delay = max(0.0, (min(due) - self._now()) / 1000.0)
            self._timer = self.clock.callLater(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self._now()
        self._effects(self.node.tick(now))
        if self.leading:
            for sid in self.sessions.expired(now):
                self.log.info("session {s} missed its heartbeats: expiring it", s=sid)
                self._propose(encode(ExpireSession(sid), int(now)))
        self._schedule()

    def _effects(self, fx: Effects) -> None:
        if fx.quorum_state is not None:
            self.persisted = fx.quorum_state
        if fx.flush_log:
            self.raft_log.flush()
        if fx.messages:
            raise RuntimeError(f"a one-voter quorum has no peer, yet sent {fx.messages}")
        for t in fx.transitions:
            if t.to_role is Role.LEADER:
                self.sessions.lead(self.tree.sessions, self._now())
            elif t.from_role is Role.LEADER:
                self.sessions.stop_leading()
        if fx.truncated_to is not None:
            for offset in sorted(o for o in self._pending if o >= fx.truncated_to):
                _, d = self._pending.pop(offset)
                d.errback(ConnectionLost(f"entry {offset} was truncated by a leader change"))
        self._apply_committed()

    def _apply_committed(self) -> None:
        """Apply every committed entry not applied yet, in order. Re-entrant calls (a callback
        that submits) return at once: the loop below picks their entries up."""
        if self._applying:
            return
        self._applying = True
        try:
            while self.tree.applied_offset + 1 < self.node.high_watermark:
                offset = self.tree.applied_offset + 1
                (entry,) = self.raft_log.read(offset, 1)
                if entry.is_control:
                    self.tree.skip(offset)
                    continue
                applied = self.tree.apply(offset, entry.payload)
                if self.leading:
                    if applied.opened_session is not None:
                        sid = applied.opened_session
                        self.sessions.opened(sid, self.tree.sessions[sid], self._now())
                    if applied.ended_session is not None:
                        self.sessions.ended(applied.ended_session)
                for listener in list(self._listeners):
                    try:
                        listener(offset, applied)
                    except Exception:
                        self.log.failure("apply listener failed")
                pending = self._pending.pop(offset, None)
                if pending is not None:
                    epoch, d = pending
                    if entry.epoch != epoch:
                        d.errback(ConnectionLost(f"entry {offset} was replaced in a leader "
                                                 "change"))
                    elif applied.failed:
                        d.errback(applied.result)
                    else:
                        d.callback(applied.result)
        finally:
            self._applying = False

    def _propose(self, payload: bytes) -> defer.Deferred:
        fx = self.node.propose(payload, self._now())
        entry = fx.proposed
        d: defer.Deferred = defer.Deferred()
        self._pending[entry.offset] = (entry.epoch, d)
        self._effects(fx)
        return d

    # -- IQuorumClient ---------------------------------------------------------------------------

    def submit(self, command: bytes) -> defer.Deferred:
        if self._stopped or not self.leading:
            return defer.fail(ConnectionLost(f"no leader: node 1 is {self.node.role.value} in "
                                             f"epoch {self.node.epoch}"))
        d = self._propose(command)
        self._schedule()
        return d

    def heartbeat(self, session_id: int) -> defer.Deferred:
        if self._stopped or not self.leading:
            return defer.fail(ConnectionLost("no leader to take the heartbeat"))
        if self.sessions.heartbeat(session_id, self._now()):
            return defer.succeed(None)
        return defer.fail(SessionExpired(f"session {session_id} is not live"))

    def add_apply_listener(self, callback: Callable[[int, ApplyResult], None]) -> None:
        self._listeners.append(callback)

    def remove_apply_listener(self, callback: Callable[[int, ApplyResult], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    # -- test controls ---------------------------------------------------------------------------

    def resign(self) -> None:
        """The leader steps down (as at a graceful shutdown); it stands again, and wins, when
        its election timer fires."""
        self._effects(self.node.resign(self._now()))
        self._schedule()

    async def wait_for_leader(self) -> None:
        """Until the node leads (polling the clock it runs on)."""
        while not self.leading:
            d: defer.Deferred = defer.Deferred()
            self.clock.callLater(0.01, d.callback, None)
            await d

    def stop(self) -> None:
        self._stopped = True
        self._schedule()
        pending, self._pending = self._pending, {}
        for _, d in pending.values():
            d.errback(ConnectionLost("the local quorum stopped"))
