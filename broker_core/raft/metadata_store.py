"""``IMetadataStore`` on the metadata quorum: :class:`QuorumMetadataStore`.

The store talks to its local quorum node through one small seam, :class:`IQuorumClient`:

- **writes** are commands (:mod:`broker_core.raft.metadata_commands`) submitted to the quorum;
  the Deferred fires once the entry is committed *and* applied to the local tree, with the
  apply result (or fails with its typed error), so a caller that wrote something reads it back
  from the local tree at once (read-your-writes);
- **reads** (``get``, ``get_many``, ``exists``, ``get_children``) are served from the local
  applied tree without a round trip, like a ZooKeeper follower's: possibly behind the leader,
  never going back (entries are applied once, in order);
- **watches** fire from the apply events of the local tree, on the reactor thread, with the
  ZooKeeper store's contract: ``watch_data`` calls ``callback(data, stat)`` now and after every
  entry that creates, changes or deletes the node (``None, None`` while absent),
  ``watch_children`` calls ``callback(children)`` likewise (``None`` while absent). Since every
  entry is applied locally, a watch never misses a change and needs no re-arming after a
  reconnect (ZooKeeper's do); consecutive changes are reported one by one, never coalesced;
- **the session**: ``start`` opens one (its ephemeral nodes belong to it), heartbeats keep it
  alive at the quorum leader (:mod:`broker_core.raft.metadata_sessions`). The state listeners
  get ``SUSPENDED`` when a heartbeat fails because no leader answers, ``CONNECTED`` when one
  succeeds again, and ``LOST`` when the session expired (the leader refused a heartbeat, or the
  expiry entry was applied); the store then opens a new session by itself and reports
  ``CONNECTED`` again, as kazoo does after ZooKeeper expires a session, so the broker's
  re-registration on ``LOST`` → ``CONNECTED`` works unchanged.
- **a session left open at a stop**: ``stop`` closes the session, but the close needs a quorum
  leader, and when the voters stop together (the brokers are the voters and stop at once, or
  one after another) the last ones find none and their sessions stay open in the log until the
  next leader expires them, a whole session timeout after the restarted quorum elects it; the
  restarted broker would wait that long for its own ``/brokers/ids/[id]``. So a stop whose
  close fails records the session id in ``left_open_record`` (a file in the node's quorum data
  directory), and the next ``start`` of the same store, once its new session is open, closes
  that session itself (its ephemeral nodes go) and removes the record. This is safe because
  only the previous run of this node can have written the record, a session id (the offset of
  its ``open_session`` entry) is never reused, and one node id runs in one process at a time
  (its quorum listener and its data directory are its own). A crash writes no record: its
  session expires as on ZooKeeper.

Everything runs on the reactor thread; nothing here blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Attribute, Interface, implementer

from broker_core.interfaces import IMetadataStore
from broker_core.log.checkpoints import write_atomically
from broker_core.metadata import (
    Check,
    ConnectionLost,
    Create,
    Delete,
    NodeExists,
    NoNode,
    SessionExpired,
    SessionState,
    SessionStateListeners,
    SetData,
    Stat,
)
from broker_core.raft.metadata_commands import (
    MAX_MULTI_OPS,
    CheckNode,
    CloseSession,
    Command,
    CreateNode,
    DeleteNode,
    Multi,
    NodeOp,
    OpenSession,
    SetNode,
    check_path,
    encode,
)
from broker_core.raft.metadata_tree import ApplyResult, EventKind, parent_of


class IQuorumClient(Interface):
    """What the store needs of its local quorum node (the seam the network driver fills).

    All calls and callbacks happen on the reactor thread.
    """

    voters = Attribute("The quorum's voters as text, for error messages.")
    tree = Attribute("The local MetadataTree, applied in order up to the local high watermark; "
                     "read it, never change it.")

    def submit(command):
        """Propose ``command`` (payload bytes). The Deferred fires with the apply result once
        the entry is committed and applied to :attr:`tree` (after the apply listeners ran for
        it), fails with the result when the result is an error, fails with MalformedCommand
        (nothing proposed) when ``command`` does not validate or the leader refuses it, and
        fails with ConnectionLost when no leader takes it or the entry is lost in a leader
        change."""

    def heartbeat(session_id):
        """Tell the leader ``session_id`` is alive. Fires with None; fails with SessionExpired
        when the leader does not know the session as live, ConnectionLost when no leader
        answers."""

    def add_apply_listener(callback):
        """``callback(offset, ApplyResult)`` after each metadata command is applied to
        :attr:`tree`, in offset order."""

    def remove_apply_listener(callback):
        """Stop calling ``callback``."""

    def add_leader_listener(callback):
        """``callback()`` each time the local node learns of a new leader: another node, or
        itself when it wins an election (the store heartbeats it at once)."""

    def remove_leader_listener(callback):
        """Stop calling ``callback``."""


class _Watch:
    """A live watch; ``cancel()`` stops further callbacks."""

    def __init__(self, store: QuorumMetadataStore, path: str, kind: str,
                 callback: Callable[..., None]) -> None:
        self.store = store
        self.path = path
        self.kind = kind
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            watches = self.store._watches.get((self.kind, self.path), [])
            if self in watches:
                watches.remove(self)


def _checked(path: str) -> str:
    problem = check_path(path)
    if problem is not None:
        raise ValueError(problem)
    return path


def _node_op(op: Check | Create | SetData | Delete, owner: int) -> NodeOp:
    if isinstance(op, Check):
        return CheckNode(_checked(op.path), op.version)
    if isinstance(op, Create):
        _checked(op.path + "0000000000" if op.sequence else op.path)
        return CreateNode(op.path, op.value, owner if op.ephemeral else 0, op.sequence)
    if isinstance(op, SetData):
        return SetNode(_checked(op.path), op.value, op.version)
    if isinstance(op, Delete):
        return DeleteNode(_checked(op.path), op.version)
    raise TypeError(f"not a multi operation: {op!r}")


@implementer(IMetadataStore)
class QuorumMetadataStore:
    """See the module docstring.

    :param client: the local quorum node.
    :param reactor: the reactor (or a ``task.Clock`` in tests) for timers and the commands'
        timestamps.
    :param session_timeout: seconds without a heartbeat after which the leader expires the
        session; heartbeats go every third of it.
    :param connect_timeout: how long ``start`` waits for the session to open.
    :param left_open_record: where a stop that could not close its session records it, for the
        next start to close (see the module docstring); ``None``: nothing is recorded.
    """

    log = Logger(namespace="sluice.quorum.store")

    def __init__(self, client: IQuorumClient, *, reactor: Any, session_timeout: float = 18.0,
                 connect_timeout: float = 10.0, left_open_record: Path | None = None) -> None:
        self.client = client
        self.left_open_record = left_open_record
        self.reactor = reactor
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.state = SessionState.LOST
        self.session_id: int | None = None
        self._listeners = SessionStateListeners()
        self._watches: dict[tuple[str, str], list[_Watch]] = {}
        self._heartbeat_call: Any = None
        self._heartbeat_in_flight: defer.Deferred | None = None
        self._heartbeat_soon = False  # a new leader came while a heartbeat was in flight
        self._renewing = False
        self._running = False

    # -- lifecycle -----------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def _submit(self, command: Command) -> defer.Deferred:
        return self.client.submit(encode(command, self._now_ms()))

    async def _open_session(self) -> int:
        """Open a session, retrying while no leader takes it, for up to ``connect_timeout``;
        then :class:`ConnectionLost` naming the voters.

        An ``open_session`` whose answer was lost (the leader died with it in flight) may
        still commit without this store learning its id; the next attempt opens another. The
        unknown one does not leak: every node's tracker gives an opened session a full
        timeout from its entry, nobody heartbeats it, so whichever node leads expires it
        through the log a session timeout later; it owns no node, so its expiry changes
        nothing else."""
        deadline = self.reactor.seconds() + self.connect_timeout
        delay = 0.05
        why = "no answer"
        while True:
            remaining = deadline - self.reactor.seconds()
            if remaining > 0:
                d = self._submit(OpenSession(int(self.session_timeout * 1000)))
                timer = self.reactor.callLater(remaining, d.cancel)
                try:
                    return await d
                except defer.CancelledError:
                    why = "no answer"
                except ConnectionLost as e:
                    why = str(e)
                finally:
                    if timer.active():
                        timer.cancel()
            if self.reactor.seconds() >= deadline:
                raise ConnectionLost(f"could not reach the metadata quorum (voters "
                                     f"{self.client.voters}) within {self.connect_timeout:g}s: "
                                     f"{why}")
            await _sleep(self.reactor, min(delay, deadline - self.reactor.seconds()))
            delay = min(delay * 2, 1.0)

    async def start(self) -> None:
        """Open a session; raises :class:`ConnectionLost` naming the voters if the quorum does
        not commit it within ``connect_timeout``."""
        self.client.add_apply_listener(self._on_apply)
        self.client.add_leader_listener(self._on_new_leader)
        try:
            self.session_id = await self._open_session()
        except BaseException:
            self.client.remove_apply_listener(self._on_apply)
            self.client.remove_leader_listener(self._on_new_leader)
            raise
        self._running = True
        self._set_state(SessionState.CONNECTED)
        self._schedule_heartbeat()
        await self._close_left_open()

    async def _close_left_open(self) -> None:
        """Close the session the previous stop of this store recorded as left open, if it is
        still open; the record goes once the session is known to be closed. A close that does
        not get through leaves the record (the session then expires on its own)."""
        path = self.left_open_record
        if path is None:
            return
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as e:
            self.log.warn("cannot read {p} ({e}); ignoring it", p=str(path), e=e)
            return
        try:
            sid = int(raw[:32].decode("ascii").strip())
            if sid <= 0:
                raise ValueError(f"session ids are positive, not {sid}")
        except ValueError as e:
            self.log.warn("{p} does not hold a session id ({e}); removing it", p=str(path), e=e)
            path.unlink(missing_ok=True)
            return
        if sid != self.session_id and sid not in self.client.tree.sessions:
            # A close whose answer was lost (the quorum stopped after committing it) or a
            # session the quorum expired meanwhile: nothing is left to close.
            self.log.info("session {s}, left open by this broker's last stop, had already "
                          "ended", s=sid)
        elif sid != self.session_id:
            owned = self.client.tree.ephemerals(sid)
            d = self._submit(CloseSession(sid))
            timer = self.reactor.callLater(self.connect_timeout, d.cancel)
            try:
                await d
                self.log.info("closed session {s}, left open by this broker's last stop (its "
                              "ephemeral nodes went: {paths})", s=sid,
                              paths=", ".join(owned) or "none")
            except SessionExpired:
                pass  # it ended meanwhile
            except Exception as e:
                self.log.warn("could not close session {s}, left open by this broker's last "
                              "stop ({e}); it will expire", s=sid, e=e)
                return
            finally:
                if timer.active():
                    timer.cancel()
        path.unlink(missing_ok=True)

    def _record_left_open(self, sid: int) -> None:
        path = self.left_open_record
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, f"{sid}\n")
        except OSError as e:
            self.log.warn("cannot record session {s} as left open in {p}: {e}", s=sid,
                          p=str(path), e=e)

    async def stop(self) -> None:
        """Close the session (its ephemeral nodes go) and stop every watch and timer."""
        self._running = False
        for watches in list(self._watches.values()):
            for w in list(watches):
                w.cancel()
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.cancel()
        sid, self.session_id = self.session_id, None
        if sid is not None:
            d = self._submit(CloseSession(sid))
            timer = self.reactor.callLater(self.connect_timeout, d.cancel)
            try:
                await d
            except SessionExpired:
                pass  # expired meanwhile: nothing left to close
            except Exception as e:
                # Typically the rest of the quorum stopped first. The next start closes it;
                # should none come, the quorum expires it.
                self.log.info("closing session {s} failed ({e}); the next start of this "
                              "broker closes it, or it expires", s=sid, e=e)
                self._record_left_open(sid)
            finally:
                if timer.active():
                    timer.cancel()
        self.client.remove_apply_listener(self._on_apply)
        self.client.remove_leader_listener(self._on_new_leader)

    # -- requests ------------------------------------------------------------------------------

    def get(self, path: str) -> defer.Deferred:
        got = self.client.tree.get(_checked(path))
        return defer.fail(NoNode(path)) if got is None else defer.succeed(got)

    def get_many(self, paths: Sequence[str]) -> defer.Deferred:
        tree = self.client.tree
        return defer.succeed([tree.get(_checked(p)) for p in paths])

    def exists(self, path: str) -> defer.Deferred:
        return defer.succeed(self.client.tree.exists(_checked(path)))

    def get_children(self, path: str) -> defer.Deferred:
        children = self.client.tree.children(_checked(path))
        return defer.fail(NoNode(path)) if children is None else defer.succeed(children)

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> defer.Deferred:
        try:
            _checked(path + "0000000000" if sequence else path)
        except ValueError as e:
            return defer.fail(e)
        return defer.Deferred.fromCoroutine(
            self._create(path, value, ephemeral, sequence, makepath))

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequence: bool,
                      makepath: bool) -> str:
        owner = 0
        if ephemeral:
            if self.session_id is None:
                raise SessionExpired("no session: an ephemeral node needs one")
            owner = self.session_id
        command = CreateNode(path, value, owner, sequence)
        try:
            return await self._submit(command)
        except NoNode:
            # As kazoo's makepath: create the parents, then try once more.
            if not makepath:
                raise
        await self._ensure_path(parent_of(path))
        return await self._submit(command)

    def set(self, path: str, value: bytes, version: int = -1) -> defer.Deferred:
        return self._submit(SetNode(_checked(path), value, version))

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> defer.Deferred:
        """``recursive`` deletes the subtree in one entry (atomically, unlike kazoo's walk)
        and, like kazoo's, succeeds when the node is already absent."""
        return self._submit(DeleteNode(_checked(path), version, recursive))

    def ensure_path(self, path: str) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._ensure_path(_checked(path)))

    async def _ensure_path(self, path: str) -> None:
        tree = self.client.tree
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if tree.exists(prefix) is not None:
                continue
            try:
                await self._submit(CreateNode(prefix))
            except NodeExists:
                pass  # another client made it first

    def multi(self, ops: Sequence[Check | Create | SetData | Delete]) -> defer.Deferred:
        if len(ops) > MAX_MULTI_OPS:
            return defer.fail(ValueError(
                f"multi of {len(ops)} operations exceeds the limit of {MAX_MULTI_OPS}; "
                "split it (a multi is one entry of the quorum's log)"))
        try:
            node_ops = tuple(_node_op(op, self.session_id or 0) for op in ops)
        except (TypeError, ValueError) as e:
            return defer.fail(e)
        return self._submit(Multi(node_ops))

    # -- watches -------------------------------------------------------------------------------

    def watch_data(self, path: str, callback: Callable[[bytes | None, Stat | None], None]
                   ) -> _Watch:
        return self._watch(_checked(path), "data", callback)

    def watch_children(self, path: str, callback: Callable[[list[str] | None], None]) -> _Watch:
        return self._watch(_checked(path), "children", callback)

    def _watch(self, path: str, kind: str, callback: Callable[..., None]) -> _Watch:
        w = _Watch(self, path, kind, callback)
        self._watches.setdefault((kind, path), []).append(w)
        # The first call comes on the next reactor turn, as the ZooKeeper store's does, so a
        # caller can keep the returned watch before its callback runs.
        self.reactor.callLater(0, self._deliver, w)
        return w

    def _deliver(self, w: _Watch) -> None:
        if w.cancelled:
            return
        tree = self.client.tree
        try:
            if w.kind == "data":
                got = tree.get(w.path)
                w.callback(*(got if got is not None else (None, None)))
            else:
                w.callback(tree.children(w.path))
        except Exception:
            self.log.failure("watch callback for {p} failed", p=w.path)

    def _on_apply(self, offset: int, applied: ApplyResult) -> None:
        if applied.ended_session is not None and applied.ended_session == self.session_id:
            self._session_lost(f"session {self.session_id} ended at offset {offset}")
        if not applied.events or not self._watches:
            return
        due: dict[int, _Watch] = {}
        for event in applied.events:
            keys = [("children", event.path)] if event.kind is EventKind.CHILDREN else [
                ("data", event.path)]
            if event.kind in (EventKind.CREATED, EventKind.DELETED):
                keys.append(("children", event.path))  # absent <-> present
            for key in keys:
                for w in self._watches.get(key, ()):
                    due.setdefault(id(w), w)
        for w in due.values():
            self._deliver(w)

    # -- session -------------------------------------------------------------------------------

    def add_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.add(callback)

    def remove_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.remove(callback)

    def _set_state(self, state: SessionState) -> None:
        if state is self.state:
            return
        previous, self.state = self.state, state
        self.log.info("metadata quorum session {prev} -> {state}", prev=previous.name,
                      state=state.name)
        self._listeners.notify(state, self.log)

    def _schedule_heartbeat(self, delay: float | None = None) -> None:
        if self._running:
            self._heartbeat_call = self.reactor.callLater(
                self.session_timeout / 3 if delay is None else delay, self._heartbeat)

    def _on_new_leader(self) -> None:
        """A new leader is known: heartbeat it now, not at the next heartbeat (up to a third of
        the timeout away). A session SUSPENDED by the leader change is CONNECTED again as soon
        as the new leader answers; until then its controller and coordinators stay paused, and
        a coordinator that sends no Ping for a consumer's session timeout makes its consumers
        leave (every group then rebalances for an election it could have ridden out)."""
        if not self._running:
            return
        if self._heartbeat_in_flight is not None:
            # It went to the old leader and may hang there until its timeout: abandon it (its
            # end, not a failure of the session, schedules the next heartbeat at once).
            self._heartbeat_soon = True
            self._heartbeat_in_flight.cancel()
            return
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.cancel()
        self._heartbeat()

    def _heartbeat(self) -> None:
        """One heartbeat; the next is scheduled once it is answered or has timed out (a third
        of the session timeout), so at most one is in flight."""
        self._heartbeat_call = None
        if not self._running:
            return
        if self._renewing or self.session_id is None:
            self._schedule_heartbeat()
            return
        sid = self.session_id
        d = self.client.heartbeat(sid)
        self._heartbeat_in_flight = d
        timer = self.reactor.callLater(self.session_timeout / 3, d.cancel)

        def ok(_: Any) -> None:
            if sid == self.session_id:
                self._set_state(SessionState.CONNECTED)

        def failed(f: Failure) -> None:
            if sid != self.session_id:
                return
            if f.check(defer.CancelledError) and self._heartbeat_soon:
                return  # abandoned for a new leader, which is heartbeated next: no verdict
            if f.check(SessionExpired):
                self._session_lost(f"the leader expired session {sid}")
            elif f.check(ConnectionLost, defer.CancelledError):
                self._set_state(SessionState.SUSPENDED)
            else:
                self.log.failure("heartbeat failed", f)

        def done(_: Any) -> None:
            if timer.active():
                timer.cancel()
            self._heartbeat_in_flight = None
            soon, self._heartbeat_soon = self._heartbeat_soon, False
            self._schedule_heartbeat(0.0 if soon else None)

        d.addCallbacks(ok, failed)
        d.addBoth(done)

    def _session_lost(self, why: str) -> None:
        if self._renewing or not self._running:
            return
        self.log.warn("metadata quorum session lost: {why}", why=why)
        self._renewing = True
        self.session_id = None
        self._set_state(SessionState.LOST)
        defer.Deferred.fromCoroutine(self._renew())

    async def _renew(self) -> None:
        """Open a new session, for as long as it takes (the quorum may be electing)."""
        try:
            while self._running:
                try:
                    sid = await self._open_session()
                except ConnectionLost as e:
                    self.log.info("no new session yet ({e}); retrying", e=e)
                    continue
                if not self._running:
                    return
                self.session_id = sid
                self._set_state(SessionState.CONNECTED)
                return
        finally:
            self._renewing = False


def _sleep(reactor: Any, seconds: float) -> defer.Deferred:
    d: defer.Deferred = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d
