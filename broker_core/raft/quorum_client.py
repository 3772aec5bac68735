"""The network :class:`IQuorumClient`: a quorum node's metadata tree, and its writes and
heartbeats carried to the leader (:class:`NetworkQuorumClient`).

The client sits on a :class:`~broker_core.raft.driver.RaftDriver` (voter or observer) and

- **applies** the driver's committed entries to its own :class:`MetadataTree`, in offset order,
  each once (the driver's ``subscribe_committed`` contract), calling the apply listeners;
- **submits** a command: on the leader it proposes it itself; on any other node it forwards it
  to the leader it knows with **MetadataWrite** (api 1020, on the leader's quorum listener).
  The leader proposes it and answers with the entry's offset once committed; the forwarding
  node waits until its own tree has applied that offset and fires with *its* apply result
  (the tree is deterministic, so it is the leader's too): read-your-writes on every node;
- **heartbeats** a session: on the leader it refreshes its :class:`SessionTracker`; elsewhere
  it sends **SessionHeartbeat** (api 1021) to the leader. The leader proposes
  ``expire_session`` for every session whose heartbeats stopped. Its answer carries the
  leader's liveness table, which the follower keeps as its view for when it leads itself (a
  new leader then expires a dead session about when the old one would have, instead of a
  whole timeout after its takeover: :mod:`broker_core.raft.metadata_sessions`). When the node
  learns of a new leader it tells its leader listeners (the store, which heartbeats it at once;
  becoming leader, the node first refreshes its own sessions itself), so a live client is heard
  by a new leader well within the grace it is given.

Retries, and why a write is never resent once it may have been proposed. A write is retried
(until ``submit_timeout_s``) only when it certainly was **not** proposed: no leader known yet,
the connection to the leader could not be opened, the node asked answered
NOT_LEADER_OR_FOLLOWER, or the entry was cut from the log (a truncated entry never commits).
When the request was sent and no answer came (connection lost, timeout, the leader stopped) or
the leader's commit timed out, the entry may still commit under the next leader, and resending
it could apply it twice. So it is not resent: the client watches its applied entries for the
exact payload until the deadline and, if it appears, answers with that entry's result (the
payload carries the proposer's clock in ms, so equal bytes are the same command); otherwise it
fails with :class:`~broker_core.metadata.ConnectionLost`, as a ZooKeeper client's operation
fails with ConnectionLoss, and the caller sees on its retry what it would see on ZooKeeper
(``NodeExists`` for a create that committed late, ``BadVersion`` for a conditional set). The
tree needs no idempotency keys.

Validation. A command is validated (decoded: :func:`~broker_core.raft.metadata_commands.decode`)
before it is proposed: ``submit`` refuses one that does not validate with its
:class:`~broker_core.raft.metadata_commands.MalformedCommand`, and the leader checks every
MetadataWrite again (its writer may be another version, or hostile) and refuses one that does
not validate with ``INVALID_REQUEST`` (``UNSUPPORTED_VERSION`` for another encoding version),
the reason in the error message and nothing appended; the forwarding node fails the write with
the same error at once (certainly not proposed, never retried). A committed entry that does not
validate anyway (damaged, or written past the leader's check by another version) is skipped by
the tree alike on every node (:mod:`broker_core.raft.metadata_tree`); the client counts it
(:attr:`NetworkQuorumClient.skipped`, the ``on_skip`` hook the broker's metric hangs on) and logs
its offset and reason, and goes on with the next entry. Apply listeners see it as a result
whose ``skipped`` is set.

Snapshots. At start the client is given the node's latest snapshot (the tree as of its end)
and then only the entries after it, instead of the whole log. It asks the driver for a new
snapshot of its tree once ``quorum.snapshot.interval.entries`` entries or
``quorum.snapshot.interval.bytes`` payload bytes were applied since the last one. A node too
far behind its leader for entries installs the leader's snapshot (FetchSnapshot) while it
runs: the tree is replaced, and the apply listeners (the store's watches) are told what
changed as if one entry had made every change at the snapshot's last offset
(:meth:`MetadataTree.changes_to`: a watch fires if its node changed, as on ZooKeeper), plus
one result per session the new tree no longer has (ended). Writes waiting for an entry the
snapshot covers fail with ConnectionLost, since their results are not in a snapshot.

Invariants: every ``submit`` Deferred fires exactly once, within ``submit_timeout_s`` plus one
request timeout; a successful one fires after the entry is applied to :attr:`tree` and the
apply listeners ran for it. Everything runs on the reactor thread.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import implementer

from broker_core.config.quorum import VoterAddress
from broker_core.metadata import ConnectionLost, SessionExpired, StoreStopping
from broker_core.raft.driver import DriverStopped, EntryTruncated, RaftDriver
from broker_core.raft.effects import Transition
from broker_core.raft.entries import LogEntry
from broker_core.raft.listener import QuorumRequestHandler
from broker_core.raft.metadata_commands import (
    ExpireSession,
    MalformedCommand,
    UnsupportedCommandVersion,
    decode,
    encode,
)
from broker_core.raft.metadata_sessions import SessionTracker
from broker_core.raft.metadata_store import IQuorumClient
from broker_core.raft.metadata_tree import ApplyResult, MetadataTree, SnapshotError
from broker_core.raft.node import NotLeaderError
from broker_core.raft.roles import Role
from broker_core.raft.snapshots import Snapshot
from broker_core.rpc import ClientConnection, connect_client, request_with_timeout
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

#: Apply results kept for offsets already applied, so a write whose commit is reported after
#: its entry was applied (the usual order on the leader) still finds its result. Far more than
#: the entries that can apply between a commit and its report.
RECENT_RESULTS = 65_536
#: Skipped entries remembered (offset, reason, why) for operators and tests; the count of all
#: is in :attr:`NetworkQuorumClient.skipped`.
RECENT_SKIPPED = 100


class _NotSent(Exception):
    """The request certainly did not reach the leader (safe to retry)."""


class _Ambiguous(ConnectionLost):
    """The write may or may not commit (sent, and the answer lost); never retried."""


class _PayloadWatch:
    """A submitted payload whose fate is unknown: set when an entry with exactly these bytes
    is applied locally (the commands carry the proposer's clock, so two commands of one node
    are the same bytes only if they are the same command issued in the same millisecond)."""

    def __init__(self) -> None:
        self.applied: ApplyResult | None = None
        self.waiting: defer.Deferred | None = None


@implementer(IQuorumClient)
class NetworkQuorumClient:
    """See the module docstring.

    :param node_id: this node.
    :param voters: the voters' quorum listeners (``quorum.voters``), where the leader is; the
        node adds the addresses it learns (:meth:`learn_address`).
    :param reactor: the reactor (``IReactorTCP`` and ``IReactorTime``).
    :param request_timeout_s: one forwarded request's timeout; the leader gives a write's commit
        the same time.
    :param submit_timeout_s: how long a write may wait for a leader (retries included).
    :param credential: the cluster login every forwarding connection starts with.
    :param tls: TLS on those connections (the quorum listener is SSL or SASL_SSL).
    """

    log = Logger(namespace="sluice.quorum.client")

    def __init__(self, node_id: int, voters: dict[int, VoterAddress], reactor: Any, *,
                 request_timeout_s: float = 2.0, submit_timeout_s: float = 10.0,
                 credential: ClientCredential | None = None,
                 tls: PeerTls | None = None) -> None:
        self.node_id = node_id
        self.addresses = dict(voters)
        self.voters = ",".join(str(v) for _, v in sorted(voters.items()))
        self.reactor = reactor
        self.request_timeout_s = request_timeout_s
        self.submit_timeout_s = submit_timeout_s
        self.tree = MetadataTree()
        self.sessions = SessionTracker()
        self.driver: RaftDriver | None = None
        self._listeners: list[Callable[[int, ApplyResult], None]] = []
        self._leader_listeners: list[Callable[[], None]] = []
        self._results: OrderedDict[int, ApplyResult] = OrderedDict()
        self._waiters: dict[int, list[defer.Deferred]] = {}
        self._expiry_call: Any = None
        # Sessions heartbeated through this node (its own broker's): alive while this process
        # runs, so a node that takes over as leader counts them as heard at its takeover.
        self._own_sessions: set[int] = set()
        self._stopped = False
        self._leader_seen = False  # see leader_seen
        self.shutting_down = False  # see begin_shutdown
        self._shutdown_deadline = float("inf")
        # Why a write made while stopping failed for want of a quorum (see begin_shutdown).
        self._shutdown_failure: str | None = None
        self._shutdown_call: Any = None
        self._watched: dict[bytes, list[_PayloadWatch]] = {}
        # Entries applied since this client started (what a start replayed, for tests and
        # operators), and since the last snapshot (the trigger).
        self.entries_applied = 0
        self.loaded_snapshot: Any = None  # the SnapshotId the tree was loaded from, if any
        self.snapshots_installed = 0  # leader's snapshots that replaced the tree at run time
        self._attached = False
        self._since_snapshot_entries = 0
        self._since_snapshot_bytes = 0
        # Committed entries the tree could not apply and skipped, by reason (a SKIP_* of
        # metadata_tree), the latest ones, and the hook the broker's metric hangs on:
        # ``on_skip(offset, reason)``.
        self.skipped: Counter[str] = Counter()
        self.recent_skipped: deque[tuple[int, str, str]] = deque(maxlen=RECENT_SKIPPED)
        self.on_skip: Callable[[int, str], None] | None = None
        # Forwarding to the leader logs in with the cluster login (``credential``) first.
        self._conn = ClientConnection(lambda host, port: connect_client(
            reactor, host, port, f"sluice-quorum-client-{node_id}", request_timeout_s,
            credential=credential, peer_name=f"the quorum leader at {host}:{port}", tls=tls))

    # -- wiring --------------------------------------------------------------------------------

    def serve_on(self, handler: QuorumRequestHandler) -> None:
        """Answer MetadataWrite and SessionHeartbeat on this node's quorum listener (before it
        starts listening: a peer may forward as soon as it can connect)."""
        handler.serve(ApiKey.METADATA_WRITE, self._serve_write)
        handler.serve(ApiKey.SESSION_HEARTBEAT, self._serve_heartbeat)

    @property
    def leader_seen(self) -> bool:
        """A leader was known to this node at some point since it started: the quorum is
        reachable and takes this node (its login, its cluster id), so a write failing after
        that failed in a leader change, not for a configuration error (a broker's start
        retries through the one and ends on the other: broker_core/raft/start_retry.py)."""
        if not self._leader_seen and self.driver is not None and self.driver.leader_id >= 0:
            self._leader_seen = True
        return self._leader_seen

    @property
    def running(self) -> bool:
        """This node's quorum driver runs and the client is not stopped: a write that fails
        while it is not (a stopped client, a driver that stopped on a disk error) will fail
        the same way every time, so a start must not wait for it to pass."""
        return not self._stopped and self.driver is not None and self.driver.running

    def learn_address(self, address: VoterAddress) -> None:
        """Reach node ``address.node_id`` there from now on: the quorum node learned it
        (configured, or through DiscoverBrokers; a newer address replaces an older one)."""
        self.addresses[address.node_id] = address

    def attach(self, driver: RaftDriver) -> None:
        """Follow ``driver`` (started): apply its committed entries, lead sessions with it."""
        self.driver = driver
        driver.subscribe_transitions(self._on_transition)
        driver.subscribe_committed(self._on_committed, load_snapshot=self._load_snapshot)
        self._attached = True  # a snapshot loaded from now on replaces a tree in use

    def _load_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the tree with ``snapshot``'s (its state is :meth:`MetadataTree.to_snapshot`'s):
        at start, or when the node installs its leader's snapshot (see the module docstring
        for what the listeners and waiting writes are told)."""
        tree = MetadataTree.from_snapshot(snapshot.state)
        if tree.applied_offset != snapshot.end_offset - 1:
            raise SnapshotError(f"snapshot {snapshot.snapshot_id} holds a tree applied up to "
                                f"{tree.applied_offset}, not {snapshot.end_offset - 1}")
        old, self.tree = self.tree, tree
        self.loaded_snapshot = snapshot.snapshot_id
        self._results.clear()
        self._since_snapshot_entries = self._since_snapshot_bytes = 0
        self.log.info("quorum node {node}: metadata tree loaded from snapshot {id} "
                      "({n} nodes)", node=self.node_id, id=snapshot.snapshot_id, n=len(tree))
        if not self._attached:
            return  # the start (attach): nobody has read the tree yet
        self.snapshots_installed += 1
        offset = tree.applied_offset
        results = [ApplyResult(None, ended_session=sid)
                   for sid in sorted(old.sessions.keys() - tree.sessions.keys())]
        results.append(ApplyResult(None, events=old.changes_to(tree)))
        for applied in results:
            for listener in list(self._listeners):
                try:
                    listener(offset, applied)
                except Exception:
                    self.log.failure("apply listener failed")
        for waiting_offset in sorted(o for o in self._waiters if o <= offset):
            for d in self._waiters.pop(waiting_offset):
                d.errback(ConnectionLost(f"entry {waiting_offset} is covered by snapshot "
                                         f"{snapshot.snapshot_id} installed from the leader; "
                                         "its result is not known here"))

    def stop(self) -> None:
        """Fail what waits, close the connection to the leader, stop expiring sessions."""
        self._stopped = True
        if self._expiry_call is not None and self._expiry_call.active():
            self._expiry_call.cancel()
        self._expiry_call = None
        if self._shutdown_call is not None and self._shutdown_call.active():
            self._shutdown_call.cancel()
        self._conn.close()
        self._fail_waiting("the quorum client stopped")

    def _fail_waiting(self, why: str) -> None:
        """Fail every write waiting for its entry to apply or for its unknown outcome."""
        waiters, self._waiters = self._waiters, {}
        for ds in waiters.values():
            for d in ds:
                d.errback(ConnectionLost(why))
        for watches in list(self._watched.values()):
            for watch in watches:
                waiting, watch.waiting = watch.waiting, None
                if waiting is not None and not waiting.called:
                    waiting.errback(defer.TimeoutError(why))

    @property
    def leading(self) -> bool:
        return self.driver is not None and self.driver.running and \
            self.driver.role is Role.LEADER

    def _now_ms(self) -> float:
        return self.reactor.seconds() * 1000.0

    # -- applying committed entries ------------------------------------------------------------

    def _on_committed(self, entries: tuple[LogEntry, ...]) -> None:
        self._apply_entries(entries)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        driver = self.driver
        if driver is None or not driver.running:
            return
        config = driver.config
        by_entries = config.snapshot_interval_entries
        by_bytes = config.snapshot_interval_bytes
        if (by_entries and self._since_snapshot_entries >= by_entries) or (
                by_bytes and self._since_snapshot_bytes >= by_bytes):
            self._since_snapshot_entries = self._since_snapshot_bytes = 0
            # Every entry up to the tree's applied offset is committed: the tree is the state
            # at the end of that offset. The driver writes it right after this step.
            driver.take_snapshot(self.tree.applied_offset + 1, self.tree.to_snapshot())

    def _apply_entries(self, entries: tuple[LogEntry, ...]) -> None:
        for entry in entries:
            if entry.offset <= self.tree.applied_offset:
                continue  # already in the tree (a snapshot or an earlier delivery)
            self.entries_applied += 1
            self._since_snapshot_entries += 1
            if entry.is_control:
                self.tree.skip(entry.offset)
                continue
            applied = self.tree.apply(entry.offset, entry.payload)  # type: ignore[arg-type]
            self._since_snapshot_bytes += len(entry.payload)  # type: ignore[arg-type]
            if applied.skipped is not None:
                self._record_skip(entry.offset, applied)
            if self.leading:
                if applied.opened_session is not None:
                    sid = applied.opened_session
                    self.sessions.opened(sid, self.tree.sessions[sid], self._now_ms())
                    self._arm_expiry()
                if applied.ended_session is not None:
                    self.sessions.ended(applied.ended_session)
            elif applied.opened_session is not None:
                self.sessions.saw_opened(applied.opened_session, self._now_ms())
            if applied.ended_session is not None:
                self._own_sessions.discard(applied.ended_session)
            for listener in list(self._listeners):
                try:
                    listener(entry.offset, applied)
                except Exception:
                    self.log.failure("apply listener failed")
            # Only writes with an unknown outcome are watched; skip hashing every payload.
            watched = self._watched.get(entry.payload, ()) if self._watched else ()  # type: ignore[call-overload]
            for watch in watched:
                if watch.applied is None:
                    watch.applied = applied
                    if watch.waiting is not None:
                        watch.waiting.callback(applied)
            self._results[entry.offset] = applied
            while len(self._results) > RECENT_RESULTS:
                self._results.popitem(last=False)
            for d in self._waiters.pop(entry.offset, []):
                d.callback(applied)

    def _record_skip(self, offset: int, applied: ApplyResult) -> None:
        """The committed entry at ``offset`` could not be applied and was skipped (by every
        node alike): count it, remember it, log its offset and reason."""
        reason = applied.skipped
        assert reason is not None
        self.skipped[reason] += 1
        self.recent_skipped.append((offset, reason, str(applied.result)))
        self.log.error("quorum node {node}: skipped the metadata entry at offset {offset} "
                       "({reason}): {why}; nothing was changed, later entries apply",
                       node=self.node_id, offset=offset, reason=reason, why=applied.result)
        if self.on_skip is not None:
            try:
                self.on_skip(offset, reason)
            except Exception:
                self.log.failure("skipped-entry hook failed")

    def _applied(self, offset: int, timeout_s: float) -> defer.Deferred:
        """Fires with the apply result of ``offset`` once the local tree applied it; fails with
        ConnectionLost when it has not within ``timeout_s`` (this node is cut off)."""
        if offset <= self.tree.applied_offset:
            result = self._results.get(offset)
            if result is None:
                return defer.fail(ConnectionLost(f"the result of entry {offset} is gone"))
            return defer.succeed(result)
        d: defer.Deferred = defer.Deferred()
        self._waiters.setdefault(offset, []).append(d)

        def timed_out(result: Any, timeout: float) -> Any:
            waiting = self._waiters.get(offset, [])
            if d in waiting:
                waiting.remove(d)
            raise ConnectionLost(f"entry {offset} committed but did not reach node "
                                 f"{self.node_id} within {timeout:g}s")

        d.addTimeout(max(timeout_s, 0.001), self.reactor, onTimeoutCancel=timed_out)
        return d

    # -- session liveness (the leader's job) ---------------------------------------------------

    def _on_transition(self, t: Transition) -> None:
        if t.leader_id >= 0:
            self._leader_seen = True
        if t.to_role is Role.LEADER:
            now = self._now_ms()
            sessions = self.tree.sessions
            known = self.sessions.lead(sessions, now)
            self.log.info("quorum node {node} tracks {n} metadata sessions, {k} with their "
                          "deadlines from the previous leader's table", node=self.node_id,
                          n=len(sessions), k=known)
            for sid in sorted(self._own_sessions):  # this process runs: they are alive
                self.sessions.heartbeat(sid, now)
            self._arm_expiry()
            self._new_leader()
            return
        if t.from_role is Role.LEADER:
            self.sessions.stop_leading()
        if t.leader_id >= 0 and t.leader_id != self.node_id and (
                t.to_epoch != t.from_epoch or t.from_role is not t.to_role):
            self._new_leader()

    def _new_leader(self) -> None:
        """Tell the leader listeners (the store, which heartbeats the new leader at once
        rather than at its next heartbeat, up to a third of the timeout away)."""
        for callback in list(self._leader_listeners):
            try:
                callback()
            except Exception:
                self.log.failure("leader listener {c} failed", c=callback)

    def _arm_expiry(self) -> None:
        if self._stopped:
            return
        if self._expiry_call is not None and self._expiry_call.active():
            self._expiry_call.cancel()
        self._expiry_call = None
        deadline = self.sessions.next_deadline() if self.leading else None
        if deadline is not None:
            delay = max(0.0, (deadline - self._now_ms()) / 1000.0)
            self._expiry_call = self.reactor.callLater(delay, self._expire)

    def _expire(self) -> None:
        self._expiry_call = None
        if self.leading and self.driver is not None:
            now = self._now_ms()
            for sid in self.sessions.expired(now):
                self.log.info("metadata session {s} missed its heartbeats: expiring it", s=sid)
                d = self.driver.propose(encode(ExpireSession(sid), int(now)))
                d.addErrback(lambda f, sid=sid: self.log.info(
                    "expiring session {s} did not commit here: {e}", s=sid,
                    e=f.getErrorMessage()))
        self._arm_expiry()

    # -- IQuorumClient -------------------------------------------------------------------------

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

    def submit(self, command: bytes) -> defer.Deferred:
        try:
            decode(command)  # validated before it is proposed or forwarded
        except MalformedCommand as e:
            return defer.fail(e)
        if self.shutting_down and self._shutdown_failure is not None:
            return defer.fail(StoreStopping(
                f"the node is stopping and the quorum did not take an earlier write "
                f"({self._shutdown_failure}); not waiting again"))

        async def run() -> Any:
            try:
                applied = await self._submit(command)
            except ConnectionLost as e:
                if self.shutting_down or self._stopped:
                    # Abandoned for the stop (its short wait ran out), not a lost quorum.
                    if self.shutting_down and self._shutdown_failure is None:
                        self._shutdown_failure = str(e)
                        self.log.info("quorum node {node} is stopping and a write found no "
                                      "quorum ({e}); its later writes are not attempted",
                                      node=self.node_id, e=e)
                    raise StoreStopping(str(e)) from None
                raise
            if applied.failed:
                raise applied.result
            return applied.result
        return defer.Deferred.fromCoroutine(run())

    def begin_shutdown(self) -> None:
        """The node's owner is stopping: its last writes (a coordinator's offsets and
        resignation, the controller's, closing the session) are worth a short wait, not
        ``submit_timeout_s`` each. From now on a write waits at most ``request_timeout_s``,
        and none waits for a leader while this node knows none: the rest of the quorum may be
        stopping too, and what is not written then (a session, its ephemeral nodes) expires
        on its own. A stopping broker after the others left took 32 s without this.

        Once one write made while stopping has failed that way, the later ones fail at once
        (StoreStopping) instead of each waiting its own request timeout: a node that still
        leads but has lost its majority would otherwise spend that timeout on every one of a
        stopping broker's last writes (coordinator offsets and resignations, the controller's,
        the session's close) one after another, enough to outlast a supervisor's grace. A
        write abandoned so is what a stop without a quorum leaves anyway: the session is
        recorded as left open and closed by the next start, or expires."""
        if self.shutting_down:
            return
        self.shutting_down = True
        # Writes already waiting keep no longer budget than new ones.
        self._shutdown_deadline = self.reactor.seconds() + self.request_timeout_s
        self._shutdown_call = self.reactor.callLater(
            self.request_timeout_s, self._fail_waiting,
            f"the node is stopping and the write did not finish within "
            f"{self.request_timeout_s:g}s")

    async def _submit(self, command: bytes) -> ApplyResult:
        budget = self.request_timeout_s if self.shutting_down else self.submit_timeout_s
        deadline = self.reactor.seconds() + budget
        delay = 0.02
        why = "no leader known"
        while not self._stopped:
            if self.shutting_down:
                deadline = min(deadline, self._shutdown_deadline)
            driver = self.driver
            if driver is None or not driver.running:
                raise ConnectionLost(f"quorum node {self.node_id} is not running")
            watch = _PayloadWatch()
            self._watched.setdefault(command, []).append(watch)
            try:
                if driver.role is Role.LEADER:
                    offset = await self._propose_here(driver, command)
                else:
                    offset = await self._forward(driver.leader_id, command)
                return await self._applied(offset, deadline - self.reactor.seconds()
                                           + self.request_timeout_s)
            except _NotSent as e:
                why = str(e)
                if self.shutting_down and driver.leader_id < 0:
                    break
            except _Ambiguous as e:
                # Sent, answer lost: it may still commit (an old leader's entry that the next
                # leader holds). Never resent (it could apply twice); if it shows up in the
                # log by the deadline, that is its result. A stopping node waits no longer
                # than its shutdown budget (begin_shutdown).
                grace = 0.0 if self.shutting_down else self.request_timeout_s
                return await self._await_watch(watch, e, deadline + grace)
            finally:
                watches = self._watched.get(command, [])
                if watch in watches:
                    watches.remove(watch)
                if not watches:
                    self._watched.pop(command, None)
            if self.shutting_down:
                deadline = min(deadline, self._shutdown_deadline)
            remaining = deadline - self.reactor.seconds()
            if remaining <= 0:
                break
            await task.deferLater(self.reactor, min(delay, remaining), lambda: None)
            delay = min(delay * 2, 0.5)
        raise ConnectionLost(f"no metadata quorum leader took the write within "
                             f"{budget:g}s (voters {self.voters}): {why}")

    async def _await_watch(self, watch: _PayloadWatch, why: Exception,
                           deadline: float) -> ApplyResult:
        if watch.applied is not None:
            return watch.applied
        remaining = deadline - self.reactor.seconds()
        if remaining > 0 and not self._stopped:
            watch.waiting = defer.Deferred()
            watch.waiting.addTimeout(remaining, self.reactor)
            try:
                return await watch.waiting
            except defer.TimeoutError:
                pass
        raise ConnectionLost(f"{why}; it did not appear in the metadata log within "
                             f"{self.submit_timeout_s:g}s (it may still)")

    async def _propose_here(self, driver: RaftDriver, command: bytes) -> int:
        d = driver.propose(command)
        d.addTimeout(self.request_timeout_s, self.reactor)
        try:
            return await d
        except NotLeaderError as e:
            raise _NotSent(str(e)) from None
        except EntryTruncated as e:
            raise _NotSent(f"the entry was replaced in a leader change ({e})") from None
        except (defer.TimeoutError, DriverStopped):
            raise _Ambiguous(f"the write did not commit within {self.request_timeout_s:g}s "
                             "here") from None

    async def _forward(self, leader_id: int, command: bytes) -> int:
        body = await self._request(leader_id, ApiKey.METADATA_WRITE,
                                   {"node_id": self.node_id, "command": command})
        code = body.error_code
        if code == ErrorCode.NONE:
            return int(body.offset)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise _NotSent(f"node {leader_id} does not lead (it knows leader {body.leader_id})")
        # The leader refused the command without proposing it: final, never retried.
        if code == ErrorCode.UNSUPPORTED_VERSION:
            raise UnsupportedCommandVersion(f"quorum leader {leader_id} refused the command: "
                                            f"{body.error_message or ''}")
        if code == ErrorCode.INVALID_REQUEST:
            raise MalformedCommand(f"quorum leader {leader_id} refused the command: "
                                   f"{body.error_message or ''}")
        raise _Ambiguous(f"quorum leader {leader_id}: {ErrorCode(code).name}: "
                         f"{body.error_message or ''}")

    async def _request(self, leader_id: int, api_key: ApiKey, body: dict) -> Any:
        """One request to node ``leader_id``'s quorum listener. Raises :class:`_NotSent` when it
        certainly did not get there, ConnectionLost when it may have."""
        address = self.addresses.get(leader_id)
        if address is None:
            raise _NotSent("no leader known" if leader_id < 0
                           else f"leader {leader_id} has no address in quorum.voters")
        try:
            proto = await self._conn.to(address.host, address.port)
        except Exception as e:
            raise _NotSent(f"cannot connect to quorum leader {address}: {e}") from None
        try:
            return await request_with_timeout(proto, self.reactor, api_key, 0, body,
                                              self.request_timeout_s, f"quorum node {address}")
        except Exception as e:
            self._conn.drop()
            raise _Ambiguous(f"no answer from quorum leader {address}: {e}") from None

    def heartbeat(self, session_id: int) -> defer.Deferred:
        async def run() -> None:
            driver = self.driver
            if driver is None or not driver.running:
                raise ConnectionLost(f"quorum node {self.node_id} is not running")
            self._own_sessions.add(session_id)
            if driver.role is Role.LEADER:
                if not self.sessions.heartbeat(session_id, self._now_ms()):
                    self._own_sessions.discard(session_id)
                    raise SessionExpired(f"session {session_id} is not live")
                return
            try:
                body = await self._request(driver.leader_id, ApiKey.SESSION_HEARTBEAT,
                                           {"node_id": self.node_id, "session_id": session_id})
            except _NotSent as e:
                raise ConnectionLost(str(e)) from None
            if body.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self._own_sessions.discard(session_id)
                raise SessionExpired(body.error_message or f"session {session_id} is not live")
            if body.error_code != ErrorCode.NONE:
                raise ConnectionLost(f"heartbeat refused by node {driver.leader_id}: "
                                     f"{ErrorCode(body.error_code).name}")
            self.sessions.remember({int(s.session_id): int(s.age_ms) for s in body.sessions},
                                   self._now_ms())
        return defer.Deferred.fromCoroutine(run())

    # -- the leader's side of the two APIs -----------------------------------------------------

    def _not_leader(self) -> dict:
        leader = self.driver.leader_id if self.driver is not None else -1
        return {"error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                "error_message": f"node {self.node_id} does not lead", "leader_id": leader}

    def _serve_write(self, request: Any, proto: Any) -> Any:
        driver = self.driver
        if not self.leading or driver is None:
            return {**self._not_leader(), "offset": -1}
        command = bytes(request.body.command)
        try:
            decode(command)  # the writer may be another version, or hostile
        except MalformedCommand as e:
            code = (ErrorCode.UNSUPPORTED_VERSION if isinstance(e, UnsupportedCommandVersion)
                    else ErrorCode.INVALID_REQUEST)
            self.log.warn("quorum node {node} refused a metadata write from node {source} "
                          "({peer}): {why}", node=self.node_id, source=request.body.node_id,
                          peer=getattr(proto, "peer", None), why=e)
            return {"error_code": int(code), "error_message": str(e)[:1000],
                    "leader_id": self.node_id, "offset": -1}
        d = driver.propose(command)
        d.addTimeout(self.request_timeout_s, self.reactor)

        def committed(offset: int) -> dict:
            return {"error_code": 0, "error_message": None, "leader_id": self.node_id,
                    "offset": offset}

        def failed(f: Any) -> dict:
            if f.check(NotLeaderError, EntryTruncated):
                # Certainly not committed (never appended, or cut from the log): safe to retry.
                return {**self._not_leader(), "offset": -1}
            return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT),
                    "error_message": f"not committed: {f.getErrorMessage()}",
                    "leader_id": self.node_id, "offset": -1}

        d.addCallbacks(committed, failed)
        return d

    def _serve_heartbeat(self, request: Any, proto: Any) -> dict:
        if not self.leading or not self.sessions.leading:
            # Not leading, or the node leads but its tracker has not taken over yet (the
            # transition is announced after the step that made it leader is written): "not
            # live" from here would cost a live client its session.
            return self._not_leader()
        sid = int(request.body.session_id)
        now = self._now_ms()
        if not self.sessions.heartbeat(sid, now):
            return {"error_code": int(ErrorCode.UNKNOWN_MEMBER_ID),
                    "error_message": f"session {sid} is not live", "leader_id": self.node_id}
        # The liveness table, for the follower's view (ages: the clocks need not agree).
        table = [{"session_id": s, "age_ms": min(int(age), 2**31 - 1)}
                 for s, age in sorted(self.sessions.ages(now).items())]
        return {"error_code": 0, "error_message": None, "leader_id": self.node_id,
                "sessions": table}
