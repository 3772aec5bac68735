"""The Twisted driver of one quorum node: it feeds a sans-IO :class:`RaftNode` with messages,
timer ticks and proposals, and applies the :class:`Effects` of every step.

Theory of operation
-------------------
Every input is one *step*: :meth:`RaftDriver.receive` (a message from the transport), the
timer (one ``DelayedCall`` armed at :meth:`RaftNode.next_deadline`, re-armed after every step)
and :meth:`RaftDriver.propose`. Steps never nest: an input that arrives while steps are being
applied (a loopback transport delivering at once, a subscriber proposing from its callback)
waits in a queue and runs right after, so effects apply in exactly the order the node produced
them. Proposals wait for the end of the reactor turn (``callLater(0)``), so that all the
proposals of one turn form one *group* of steps.

A group's effects apply in the order ``effects.py`` fixes:

1. the newest quorum state of the group is written durably (temp file, fsync, rename, fsync
   of the directory); epochs and votes only move forward, so it covers every message of the
   group;
2. the log is flushed once if any step appended or truncated (group commit: a thousand
   proposals of one turn cost one fsync, not a thousand);
3. the messages go to the transport, in the order the steps produced them;
4. the layers above hear of it, step by step: proposals settle, committed entries are
   delivered, transitions are announced.

If step 1 or 2 fails the driver stops (fail-stop): the node's memory is ahead of its disk.

Where steps 1 and 2 run. By default on the reactor thread: it blocks for the two fsyncs of
a quorum-state write (a handful per election) and one log flush per group. With
``persist_thread=True`` they run on a dedicated writer thread (one thread, so writes never
overlap); while a group is being written no further step runs (inputs wait in the queue, and
become the next group), and steps 3 and 4 follow on the reactor once the write is done. The
reactor keeps reading, decoding and timing meanwhile. docs/raft.md has the measurements.

Invariants kept here:

- no message of a step reaches the transport before that step's quorum state is on disk and
  its log flushed;
- committed entries reach each subscriber once, in offset order, with no gaps, from the
  node's latest snapshot on (a subscriber that keeps state is given the snapshot first, see
  :meth:`RaftDriver.subscribe_committed`; without snapshots, from offset 0); a snapshot
  installed from the leader takes the place of the entries it covers;
- a :meth:`propose` Deferred fires with the entry's offset once the high watermark passes it,
  or fails with :class:`EntryTruncated` if the entry leaves the log, or with
  :class:`DriverStopped`; it never fires twice.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import defer, threads
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import Interface

from broker_core.config.quorum import RaftConfig
from broker_core.raft.effects import Effects, Transition
from broker_core.raft.entries import LogEntry, Payload
from broker_core.raft.log import IRaftLog
from broker_core.raft.messages import Envelope
from broker_core.raft.node import NotLeaderError, RaftNode
from broker_core.raft.quorum_state import (
    QuorumStateError,
    read_quorum_state,
    write_quorum_state,
)
from broker_core.raft.roles import Role
from broker_core.raft.snapshots import (
    DiskSnapshotStore,
    InMemorySnapshotStore,
    ISnapshotStore,
    Snapshot,
)

__all__ = ["DriverStopped", "EntryTruncated", "IRaftTransport", "NotLeaderError",
           "ProposalOutcomeUnknown", "RaftDriver"]

#: Committed entries are read from the log and delivered in chunks of at most this many.
DELIVERY_CHUNK = 1000


class IRaftTransport(Interface):
    """Carries a node's envelopes to their destinations (:mod:`broker_core.raft.transport`
    on TCP; the unit tests use a loopback). Delivery is best effort: a lost message is the
    core's to resend."""

    def send(envelope):
        """Hand ``envelope`` (from this node) to the network; must not block or raise."""


class EntryTruncated(Exception):
    """A proposed entry was removed from the log before it committed (a newer leader's log
    replaced it). It may or may not have been applied elsewhere: it was not, since it never
    committed, so proposing it again is safe for idempotent payloads."""

    def __init__(self, entry: LogEntry, truncated_to: int) -> None:
        super().__init__(f"entry at offset {entry.offset} (epoch {entry.epoch}) was truncated "
                         f"away (log cut back to offset {truncated_to}) before it committed")
        self.entry = entry


class ProposalOutcomeUnknown(Exception):
    """A snapshot installed from the leader covers the proposed entry's offset: the entry
    left this node's log without being seen committed here, so whether it committed is
    unknown."""


class DriverStopped(Exception):
    """The driver stopped before the proposal committed; whether it will commit is unknown."""


CommittedCallback = Callable[[tuple[LogEntry, ...]], Any]
SnapshotLoader = Callable[[Snapshot], Any]
TransitionCallback = Callable[[Transition], Any]


class RaftDriver:
    """Runs one :class:`RaftNode` on a reactor. See the module docstring.

    :param node_id: this node's id.
    :param cluster_id: the quorum's cluster id.
    :param voters: the bootstrap voters (``quorum.voters``); a persisted state's voters win.
    :param log: the node's log (:class:`IRaftLog`).
    :param data_dir: where the ``quorum-state`` file lives (created if missing).
    :param config: the quorum's timeouts.
    :param clock: the reactor's :class:`IReactorTime` (``task.Clock`` in tests).
    :param transport: sends envelopes (:class:`IRaftTransport`); may be set after
        construction (:attr:`transport`) but before :meth:`start`.
    :param rng: the random source for election timeouts.
    :param persist_thread: write the quorum state and flush the log on a dedicated writer
        thread instead of the reactor thread (``clock`` must then be the reactor).
    :param snapshots: the node's snapshot store; by default a :class:`DiskSnapshotStore` in
        the log's own directory for a log on disk, an in-memory one otherwise.
    """

    log = Logger(namespace="sluice.raft")

    def __init__(self, node_id: int, cluster_id: str, voters: frozenset[int] | set[int],
                 log: IRaftLog, data_dir: Path | str, config: RaftConfig,
                 clock: IReactorTime, transport: Any = None,
                 rng: random.Random | None = None, persist_thread: bool = False,
                 snapshots: ISnapshotStore | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.voters = frozenset(voters)
        self.raft_log = log
        self.data_dir = Path(data_dir)
        self.config = config
        self.clock = clock
        self.transport = transport
        self._rng = rng or random.Random()
        self.node: RaftNode | None = None
        self._timer: IDelayedCall | None = None
        self._inbox: deque[Callable[[], Effects | None]] = deque()
        self._stepping = False
        self._stopped = False
        self._delivered = 0  # entries below this offset went to every subscriber
        self._on_committed: list[CommittedCallback] = []
        self._loaders: list[SnapshotLoader] = []  # subscribers that keep state
        directory = getattr(log, "directory", None)
        self.snapshots: ISnapshotStore = snapshots if snapshots is not None else (
            DiskSnapshotStore(directory) if directory is not None else InMemorySnapshotStore())
        self._on_transition: list[TransitionCallback] = []
        self._pending: dict[int, tuple[LogEntry, defer.Deferred]] = {}  # offset -> proposal
        self._last_ms = 0.0
        self._drain_call: IDelayedCall | None = None
        self._persisting = False  # a group is being written on the writer thread
        self._pool: ThreadPool | None = (ThreadPool(1, 1, f"raft-writer-{node_id}")
                                         if persist_thread else None)
        self.steps = 0  # steps run (for tests and the benchmark)
        self.flushes = 0  # log flushes (one per group that appended or truncated)
        self.persist_seconds = 0.0  # time spent writing the quorum state and flushing

    # ------------------------------------------------------------------ lifecycle

    def now_ms(self) -> float:
        return self.clock.seconds() * 1000.0

    def start(self) -> None:
        """Read the quorum state (if any), build the node and arm its timer. BLOCKING (reads a
        small file). Raises :class:`~broker_core.raft.quorum_state.QuorumStateError` for a
        state file that cannot be trusted."""
        if self.node is not None:
            raise RuntimeError("driver already started")
        if self.transport is None:
            raise RuntimeError("driver has no transport")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        persisted = read_quorum_state(self.data_dir)
        if persisted is not None and persisted.cluster_id != self.cluster_id:
            raise QuorumStateError(f"{self.data_dir}: the quorum state belongs to cluster "
                                   f"{persisted.cluster_id!r}, not {self.cluster_id!r}")
        self.node = RaftNode(self.node_id, self.cluster_id, self.voters, self.raft_log,
                             self.config, self._rng, self._now(), persisted,
                             snapshots=self.snapshots)
        # What the snapshot covers is committed and is given to subscribers as the snapshot.
        self._delivered = self.node.high_watermark
        if self._pool is not None:
            self._pool.start()
        for problem in getattr(self.snapshots, "problems", ()):
            self.log.warn("quorum node {node}: skipped a damaged snapshot: {problem}",
                          node=self.node_id, problem=problem)
        snapshot = self.node.latest_snapshot
        self.log.info("quorum node {node} starts as {role} in epoch {epoch} (log {start} to "
                      "{end}, snapshot {snapshot})", node=self.node_id,
                      role=self.node.role.value, epoch=self.node.epoch,
                      start=self.raft_log.start_offset(), end=self.raft_log.end_offset(),
                      snapshot=None if snapshot is None else snapshot.snapshot_id)
        self._arm()

    def stop(self, graceful: bool = True) -> None:
        """Stop stepping the node. ``graceful``: a leader first resigns and its
        EndQuorumEpoch requests are handed to the transport (best effort; the transport must
        still be up). Pending proposals fail with :class:`DriverStopped`."""
        if self._stopped:
            return
        if (graceful and self.node is not None and self.node.role is Role.LEADER
                and not self._stepping and not self._persisting):
            # Best effort, on this thread whatever the mode (the writer is idle): skipped
            # while a step or a write is in progress.
            group = [self._node().resign(self._now())]
            try:
                self._persist(group)
            except Exception:
                self.log.failure("quorum node {node}: persisting the resignation failed",
                                 node=self.node_id)
            else:
                self._release(group)
        self._stopped = True
        if self._pool is not None:
            self._pool.stop()  # waits for a write in progress
        self._inbox.clear()
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        pending, self._pending = self._pending, {}
        for entry, d in pending.values():
            d.errback(Failure(DriverStopped(
                f"quorum node {self.node_id} stopped before offset {entry.offset} committed")))

    # ------------------------------------------------------------------ views

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self.node is not None and not self._stopped

    @property
    def role(self) -> Role | None:
        return None if self.node is None else self.node.role

    @property
    def leader_id(self) -> int:
        return -1 if self.node is None else self.node.leader_id

    @property
    def high_watermark(self) -> int:
        """Every entry below this offset is committed and has been delivered to the
        subscribers. It can trail the node's own (``node.high_watermark``) while a group is
        being written on the writer thread."""
        return self._delivered

    # ------------------------------------------------------------------ subscriptions

    def subscribe_committed(self, callback: CommittedCallback,
                            load_snapshot: SnapshotLoader | None = None) -> None:
        """Call ``callback(entries)`` with committed entries, in order, each exactly once: at
        once with every entry already delivered, then as the high watermark advances.

        The node's latest snapshot stands for the entries below its end: a subscriber that
        keeps state passes ``load_snapshot``, which is called with it first, and gets the
        entries from its end on. One without a loader (views, counters) only gets the entries
        from the snapshot's end. Without a snapshot both start at offset 0.

        A snapshot installed later from the leader (FetchSnapshot: the node was too far
        behind for entries) is given to ``load_snapshot`` again, in the place of the entries it
        covers: the subscriber replaces its state with it, and entries continue from its end.
        A subscriber without a loader skips from where it was to the snapshot's end."""
        snapshot = self._node().latest_snapshot
        start = 0
        if snapshot is not None:
            start = snapshot.end_offset
            if load_snapshot is not None:
                load_snapshot(snapshot)
        for chunk in self._read(start, self._delivered):
            callback(chunk)
        self._on_committed.append(callback)
        if load_snapshot is not None:
            self._loaders.append(load_snapshot)

    def take_snapshot(self, end_offset: int, state: bytes) -> None:
        """The state machine's ``state`` after every committed entry below ``end_offset``:
        keep it as the node's snapshot (written durably in the step; BLOCKING), after which
        the log's prefix may go (``RaftNode.create_snapshot``). The state machine's owner
        calls this, typically every ``snapshot_interval_entries`` / ``_bytes``; from a
        committed-entries callback it runs right after the current step."""
        if self._stopped or self.node is None:
            return
        self._run(lambda: self._node().create_snapshot(end_offset, state, self._now()))

    def subscribe_transitions(self, callback: TransitionCallback) -> None:
        """Call ``callback(transition)`` for every role change from now on."""
        self._on_transition.append(callback)

    # ------------------------------------------------------------------ inputs

    def receive(self, envelope: Envelope) -> None:
        """A message for this node arrived (the transport calls this)."""
        if envelope.destination != self.node_id:
            self.log.warn("quorum node {node} dropped a message for node {dest}",
                          node=self.node_id, dest=envelope.destination)
            return
        self._run(lambda: self._node().receive(envelope, self._now()))

    def propose(self, payload: Payload) -> defer.Deferred:
        """Append ``payload`` if this node leads; the Deferred fires with the entry's offset
        once it is committed. Fails with :class:`NotLeaderError` (naming the leader this node
        knows) when it does not lead, :class:`EntryTruncated` when the entry is cut from the
        log before committing, :class:`DriverStopped` on :meth:`stop`."""
        d: defer.Deferred = defer.Deferred()

        def step() -> Effects | None:
            try:
                fx = self._node().propose(payload, self._now())
            except Exception:
                d.errback()
                return None
            assert fx.proposed is not None
            self._pending[fx.proposed.offset] = (fx.proposed, d)
            return fx

        if self._stopped or self.node is None:
            return defer.fail(DriverStopped(f"quorum node {self.node_id} is not running"))
        # Proposals wait for the end of the reactor turn, so that all those made in one turn
        # share one log flush (group commit) instead of one fsync each.
        self._inbox.append(step)
        if not self._stepping and self._drain_call is None:
            self._drain_call = self.clock.callLater(0, self._drain_soon)
        return d

    # ------------------------------------------------------------------ stepping

    def _node(self) -> RaftNode:
        assert self.node is not None, "driver not started"
        return self.node

    def _now(self) -> float:
        # The node refuses time going backwards; a wall clock stepped back must not crash it.
        self._last_ms = max(self.now_ms(), self._last_ms)
        return self._last_ms

    def _drain_soon(self) -> None:
        self._drain_call = None
        self._run(None)

    def _run(self, step: Callable[[], Effects | None] | None) -> None:
        """Run ``step`` (and whatever waits in the inbox) now, or after the steps in progress:
        steps never nest, and none runs while a group is being persisted on the writer
        thread. The steps run together apply their effects as one group."""
        if self._stopped:
            return
        if step is not None:
            self._inbox.append(step)
        if self._stepping or self._persisting:
            return
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None
        self._stepping = True
        try:
            while self._inbox and not self._stopped and not self._persisting:
                group: list[Effects] = []
                while self._inbox:
                    work = self._inbox.popleft()
                    try:
                        fx = work()
                    except Exception:
                        self.log.failure("quorum node {node}: step failed", node=self.node_id)
                        continue
                    self.steps += 1
                    if fx is not None:
                        group.append(fx)
                if self._pool is None:
                    try:
                        self._persist(group)
                    except Exception:
                        self._persist_failed()
                        return
                    self._release(group)
                elif any(fx.quorum_state is not None or fx.flush_log for fx in group):
                    self._persisting = True
                    d = threads.deferToThreadPool(self.clock, self._pool, self._persist, group)
                    d.addCallbacks(self._persisted, lambda f: self._persist_failed(f),
                                   callbackArgs=(group,))
                else:
                    self._release(group)  # nothing to write: no need to wait for the thread
        finally:
            self._stepping = False
        self._arm()

    def _persisted(self, _: object, group: list[Effects]) -> None:
        """The writer thread finished the group's writes: release it, then run what waited."""
        self._persisting = False
        if self._stopped:
            return
        self._stepping = True
        try:
            self._release(group)
        finally:
            self._stepping = False
        self._run(None)
        self._arm()

    def _persist_failed(self, failure: Failure | None = None) -> None:
        # A write or flush that failed leaves the node's state ahead of its disk; going on
        # could reveal a vote or entries a restart would not remember.
        self.log.failure("quorum node {node}: persisting failed; the node stops", failure,
                         node=self.node_id)
        self._persisting = False
        self._stepping = False
        self.stop(graceful=False)

    def _persist(self, group: list[Effects]) -> None:
        """Steps 1 and 2 of the contract for a group: one quorum-state write (the newest state:
        epochs and votes only move forward, so it covers every message of the group) and one
        log flush. BLOCKING; on the reactor thread or the writer thread."""
        started = time.perf_counter()
        states = [fx.quorum_state for fx in group if fx.quorum_state is not None]
        if states:
            write_quorum_state(self.data_dir, states[-1])
        if any(fx.flush_log for fx in group):
            self.raft_log.flush()
            self.flushes += 1
        # Measured, not scheduled by: how long the disk held the group back.
        self.persist_seconds += time.perf_counter() - started

    def _release(self, group: list[Effects]) -> None:
        """Steps 3 and 4, once the group is durable: send, then tell the layers above."""
        for fx in group:
            for envelope in fx.messages:
                try:
                    self.transport.send(envelope)
                except Exception:
                    self.log.failure("quorum node {node}: sending to {dest} failed",
                                     node=self.node_id, dest=envelope.destination)
        for fx in group:
            if fx.truncated_to is not None:
                self._fail_truncated(fx.truncated_to)
            if fx.installed_snapshot is not None:
                self._install(fx.installed_snapshot)
            if fx.high_watermark is not None:
                self._deliver(fx.high_watermark)
            for transition in fx.transitions:
                self._announce(transition)

    def _install(self, snapshot: Snapshot) -> None:
        """A snapshot from the leader now stands for every entry below its end: the
        subscribers that keep state load it, and delivery goes on from its end. Proposals
        below its end cannot be told apart any more (their entries are gone from this log):
        they fail with :class:`ProposalOutcomeUnknown`."""
        self.log.info("quorum node {node} installed snapshot {id} from the leader",
                      node=self.node_id, id=snapshot.snapshot_id)
        self._delivered = max(self._delivered, snapshot.end_offset)
        lost = [self._pending.pop(at) for at in sorted(o for o in self._pending
                                                       if o < snapshot.end_offset)]
        for entry, d in lost:
            d.errback(Failure(ProposalOutcomeUnknown(
                f"entry at offset {entry.offset} is covered by snapshot "
                f"{snapshot.snapshot_id} installed from the leader; whether it committed "
                "is unknown")))
        for load in list(self._loaders):
            try:
                load(snapshot)
            except Exception:
                self.log.failure("snapshot subscriber failed")

    def _fail_truncated(self, offset: int) -> None:
        # Popped before any errback runs: a callback may stop the driver or propose again.
        cut = [self._pending.pop(at) for at in sorted(o for o in self._pending if o >= offset)]
        for entry, d in cut:
            d.errback(Failure(EntryTruncated(entry, offset)))

    def _read(self, start: int, end: int):
        offset = start
        while offset < end:
            chunk = self.raft_log.read(offset, min(DELIVERY_CHUNK, end - offset))
            if not chunk:
                raise RuntimeError(f"committed entries from offset {offset} are missing from "
                                   f"the log (high watermark {end})")
            yield chunk
            offset += len(chunk)

    def _deliver(self, high_watermark: int) -> None:
        start, self._delivered = self._delivered, max(self._delivered, high_watermark)
        for chunk in self._read(start, self._delivered):
            for callback in list(self._on_committed):
                try:
                    callback(chunk)
                except Exception:
                    self.log.failure("committed-entries subscriber failed")
            for entry in chunk:
                pending = self._pending.pop(entry.offset, None)
                if pending is None:
                    continue
                proposed, d = pending
                if proposed == entry:
                    d.callback(entry.offset)
                else:  # a truncation this driver did not see (cannot happen; be safe)
                    d.errback(Failure(EntryTruncated(proposed, entry.offset)))

    def _announce(self, transition: Transition) -> None:
        if transition.to_role is Role.LEADER:
            self.log.info("quorum node {node} leads epoch {epoch}", node=self.node_id,
                          epoch=transition.to_epoch)
        elif transition.to_epoch != transition.from_epoch or transition.leader_id >= 0:
            self.log.info("quorum node {node}: {from_role} -> {to_role} in epoch {epoch} "
                          "(leader {leader})", node=self.node_id,
                          from_role=transition.from_role.value,
                          to_role=transition.to_role.value, epoch=transition.to_epoch,
                          leader=transition.leader_id)
        for callback in list(self._on_transition):
            try:
                callback(transition)
            except Exception:
                self.log.failure("transition subscriber failed")

    # ------------------------------------------------------------------ the timer

    def _arm(self) -> None:
        """Re-arm the one DelayedCall at the node's next deadline (or cancel it)."""
        if self._stopped or self.node is None:
            return
        deadline = self.node.next_deadline()
        timer = self._timer
        if deadline is None:
            if timer is not None and timer.active():
                timer.cancel()
            self._timer = None
            return
        delay = max(0.0, deadline / 1000.0 - self.clock.seconds())
        if timer is not None and timer.active():
            if abs(timer.getTime() - (self.clock.seconds() + delay)) > 1e-6:
                timer.reset(delay)
            return
        self._timer = self.clock.callLater(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._run(lambda: self._node().tick(self._now()))
