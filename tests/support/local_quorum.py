"""Real metadata quorums in this process: the :class:`IQuorumClient` the ``QuorumMetadataStore``
tests run on until the network driver exists. :class:`LocalQuorum` is one voter;
:class:`LocalQuorumCluster` is several voters joined by an in-memory network.

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

:class:`LocalQuorumCluster` runs one :class:`QuorumMember` (node, log, tree, tracker) per voter.
Raft's messages go through :class:`InMemoryNetwork`, delivered on the next reactor turn and
dropped across a cut link. What the network driver will carry as requests, a client's command
and heartbeat, is a direct call to the member its node knows as leader, when the two are
connected and that member leads; otherwise the call fails with ``ConnectionLost``, as a request
to an unreachable leader would. A command's Deferred fires when the entry is applied to the
*requesting* member's tree (so its store reads its own write), or fails if the entry committed
at that offset is another one (lost in a leader change).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
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
class QuorumMember:
    """One voter: a node, its log, its applied tree and its session tracker, driven by
    ``clock``. Without a ``network`` it is a whole quorum of one. ``stop()`` cancels its timer
    and fails what is pending."""

    log = Logger(namespace="sluice.quorum.local")

    def __init__(self, clock: Any, node_id: int = 1, voters: frozenset[int] = frozenset({1}),
                 *, config: RaftConfig = FAST, seed: int = 0, cluster_id: str = "local",
                 network: InMemoryNetwork | None = None) -> None:
        self.clock = clock
        self.network = network
        self.raft_log = InMemoryRaftLog()
        self.tree = MetadataTree()
        self.sessions = SessionTracker()
        self.persisted: QuorumState | None = None
        self.voters = f"{', '.join(map(str, sorted(voters)))} (in-process)"
        self.node = RaftNode(node_id, cluster_id, frozenset(voters), self.raft_log, config,
                             random.Random(seed * 1000 + node_id), self._now())
        self._pending: dict[int, tuple[int, defer.Deferred]] = {}
        self._listeners: list[Callable[[int, ApplyResult], None]] = []
        self._leader_listeners: list[Callable[[], None]] = []
        self._leader_known = False  # a transition named a new leader: tell the listeners
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
            if self.network is None:
                raise RuntimeError(f"a one-voter quorum has no peer, yet sent {fx.messages}")
            for envelope in fx.messages:
                self.network.send(envelope)
        for t in fx.transitions:
            if t.to_role is Role.LEADER:
                self.sessions.lead(self.tree.sessions, self._now())
            elif t.from_role is Role.LEADER:
                self.sessions.stop_leading()
            # The network client's rule: this node became leader, or it learnt of another
            # node's leadership (a leader stepping down to nobody tells no one).
            if t.to_role is Role.LEADER or (
                    t.leader_id >= 0 and t.leader_id != self.node.node_id
                    and (t.to_epoch != t.from_epoch or t.from_role is not t.to_role)):
                self._leader_known = True
        if fx.truncated_to is not None:
            for offset in sorted(o for o in self._pending if o >= fx.truncated_to):
                _, d = self._pending.pop(offset)
                d.errback(ConnectionLost(f"entry {offset} was truncated by a leader change"))
        self._apply_committed()
        if self._leader_known:  # after the node's state is settled, as the network client
            self._leader_known = False
            for callback in list(self._leader_listeners):
                try:
                    callback()
                except Exception:
                    self.log.failure("leader listener {c} failed", c=callback)

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

    def receive(self, envelope: Any) -> None:
        """A Raft message from the network."""
        if self._stopped:
            return
        self._effects(self.node.receive(envelope, self._now()))
        self._schedule()

    def _propose(self, payload: bytes, requester: QuorumMember | None = None) -> defer.Deferred:
        """Append ``payload`` (this member leads); the Deferred is the requester's: it fires
        when the entry is applied to the requester's tree."""
        requester = requester or self
        fx = self.node.propose(payload, self._now())
        entry = fx.proposed
        d: defer.Deferred = defer.Deferred()
        requester._pending[entry.offset] = (entry.epoch, d)
        self._effects(fx)
        self._schedule()
        return d

    def _leader(self) -> QuorumMember | None:
        """The member that takes this member's requests: itself when leading, else the leader
        its node knows, if reachable and leading."""
        if self._stopped:
            return None
        if self.leading:
            return self
        return self.network.leader_for(self) if self.network is not None else None

    # -- IQuorumClient ---------------------------------------------------------------------------

    def submit(self, command: bytes) -> defer.Deferred:
        leader = self._leader()
        if leader is None:
            return defer.fail(ConnectionLost(
                f"no leader: node {self.node.node_id} is {self.node.role.value} in epoch "
                f"{self.node.epoch} and knows no reachable leader"))
        return leader._propose(command, requester=self)

    def heartbeat(self, session_id: int) -> defer.Deferred:
        leader = self._leader()
        if leader is None:
            return defer.fail(ConnectionLost("no leader to take the heartbeat"))
        if leader.sessions.heartbeat(session_id, leader._now()):
            return defer.succeed(None)
        return defer.fail(SessionExpired(f"session {session_id} is not live"))

    def add_apply_listener(self, callback: Callable[[int, ApplyResult], None]) -> None:
        self._listeners.append(callback)

    def remove_apply_listener(self, callback: Callable[[int, ApplyResult], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def add_leader_listener(self, callback: Callable[[], None]) -> None:
        self._leader_listeners.append(callback)

    def remove_leader_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._leader_listeners:
            self._leader_listeners.remove(callback)

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


class LocalQuorum(QuorumMember):
    """A metadata quorum of one voter (node 1); see the module docstring."""

    def __init__(self, clock: Any, *, config: RaftConfig = FAST, seed: int = 0,
                 cluster_id: str = "local") -> None:
        super().__init__(clock, config=config, seed=seed, cluster_id=cluster_id)


class InMemoryNetwork:
    """Delivers Raft envelopes between members on the next turn of ``clock``; a cut member
    neither sends nor receives (messages in flight when it is cut are dropped too)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.members: dict[int, QuorumMember] = {}
        self.cut: set[int] = set()

    def connected(self, a: int, b: int) -> bool:
        return a == b or (a not in self.cut and b not in self.cut)

    def send(self, envelope: Any) -> None:
        self.clock.callLater(0, self._deliver, envelope)

    def _deliver(self, envelope: Any) -> None:
        member = self.members.get(envelope.destination)
        if member is not None and self.connected(envelope.source, envelope.destination):
            member.receive(envelope)

    def leader_for(self, member: QuorumMember) -> QuorumMember | None:
        leader = self.members.get(member.node.leader_id)
        if (leader is None or not leader.leading or leader._stopped
                or not self.connected(member.node.node_id, leader.node.node_id)):
            return None
        return leader


class LocalQuorumCluster:
    """``size`` voters (ids 1..size) in this process; ``members[i]`` is voter ``i + 1``, each an
    :class:`IQuorumClient` for a store of its own."""

    def __init__(self, clock: Any, size: int = 3, *, config: RaftConfig = FAST,
                 seed: int = 0) -> None:
        self.clock = clock
        self.network = InMemoryNetwork(clock)
        voters = frozenset(range(1, size + 1))
        self.members = [QuorumMember(clock, i, voters, config=config, seed=seed,
                                     network=self.network) for i in sorted(voters)]
        self.network.members = {m.node.node_id: m for m in self.members}

    def leader(self) -> QuorumMember | None:
        """The member leading in the highest epoch, if any."""
        leading = [m for m in self.members if m.leading]
        return max(leading, key=lambda m: m.node.epoch) if leading else None

    def isolate(self, node_id: int) -> None:
        self.network.cut.add(node_id)

    def heal(self) -> None:
        self.network.cut.clear()

    def stop(self) -> None:
        for m in self.members:
            m.stop()


def run(clock: Any, work: Any, step: float = 0.01, limit: float = 30.0) -> Any:
    """Advance the ``task.Clock`` ``clock`` in ``step``s until ``work`` (a Deferred or a
    coroutine) is done, at most ``limit`` seconds of it; its result, or raise its error."""
    d = work if isinstance(work, defer.Deferred) else defer.Deferred.fromCoroutine(work)
    out: list = []
    d.addBoth(out.append)
    start = clock.seconds()
    while not out:
        if clock.seconds() - start > limit:
            raise AssertionError(f"not done after {limit}s of clock time")
        clock.advance(step)
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]
