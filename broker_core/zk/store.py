"""``IMetadataStore`` on ZooKeeper through kazoo, bridged onto the Twisted reactor.

The bridge (twisted-kazoo notes §10):

- requests use kazoo's ``*_async`` calls; the completion callback (on kazoo's thread) only reads
  the result and hands it to the reactor with ``callFromThread`` — no thread hop per request;
- watches are re-armed by this module, not by kazoo's recipes, whose constructors block on a
  ZooKeeper round trip: a watch is an async read with a watcher, re-issued when the watcher fires,
  switching to an ``exists`` watch while the node is absent, and re-issued for every live watch
  when a new session starts (ZooKeeper keeps watches across reconnects of one session, not across
  sessions);
- session-state changes are re-dispatched on the reactor; nothing calls ZooKeeper from kazoo's
  listener thread;
- ``start``/``stop`` and recursive deletes block, so they run on this store's own one-thread
  pool, never the reactor's shared pool.

ACLs (``broker_core.zk.acl_policy``): the store's :class:`AclPolicy` authenticates the session
with the brokers' credential (a SASL DIGEST-MD5 login, or the ``digest`` scheme) and chooses
the ACL of every node this store creates, in one place:
:meth:`ZooKeeperStore.create` (and its ``makepath`` parents), :meth:`ZooKeeperStore.ensure_path`
and the creates of :meth:`ZooKeeperStore.multi`. Each missing parent gets its own path's ACL,
not its child's (kazoo's ``makepath`` would give a secret leaf's ACL to every parent).

This is the only module of the project that imports kazoo.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import (
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Id
from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from broker_core.interfaces import IMetadataStore
from broker_core.metadata import (
    AuthFailed,
    BadVersion,
    Check,
    ConnectionLost,
    Create,
    Delete,
    MetadataStoreError,
    NodeExists,
    NoNode,
    NotAuthorized,
    NotEmpty,
    RolledBack,
    SessionExpired,
    SessionState,
    SessionStateListeners,
    SetData,
    Stat,
    TransactionFailed,
)
from broker_core.zk.acl_policy import READ, AclEntry, AclPolicy, ZkCredential

#: A whole multi must fit in jute.maxbuffer (1 MB); callers batch far below this.
MAX_MULTI_OPS = 1000

#: Paths per multi-read request of :meth:`ZooKeeperStore.get_many`. The answer must fit in
#: jute.maxbuffer (1 MB) too: a leaderAndISR value is about 100 bytes plus a 68-byte stat, so
#: 500 of them are under 100 KB, leaving room for larger values.
MULTI_READ_BATCH = 500


class MultiRead:
    """ZooKeeper's multiRead (3.6+, opcode 22) of getData operations, which kazoo 2.x does not
    offer: one request and one answer for many reads. Unlike a ``multi`` it is not atomic, and
    one failed read (a missing node) fails only itself: its result is the exception, the
    others are ``(data, ZnodeStat)``. Shaped like kazoo's request tuples (``type``,
    ``serialize``, ``deserialize``), so ``KazooClient._call`` queues it like any other."""

    type = 22

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths

    def serialize(self) -> bytes:
        b = bytearray()
        for path in self.paths:
            b += MultiHeader(GetData.type, False, -1).serialize()
            b += write_string(path)
            b.append(0)  # no watch
        return bytes(b + multiheader_struct.pack(-1, True, -1))

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            kind, done, err = multiheader_struct.unpack_from(data, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if kind == GetData.type:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value, stat))
            elif kind == -1:
                code = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"unexpected multiRead result type {kind}")

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths)"

_ERRORS: list[tuple[type, type]] = [
    (NoNodeError, NoNode),
    (NodeExistsError, NodeExists),
    (BadVersionError, BadVersion),
    (NotEmptyError, NotEmpty),
    (SessionExpiredError, SessionExpired),
    (ConnectionLoss, ConnectionLost),
    (RolledBackError, RolledBack),
    (RuntimeInconsistency, RolledBack),
    (NoAuthError, NotAuthorized),
]


def translate(e: BaseException) -> BaseException:
    """A kazoo exception as one of ours (others pass through)."""
    if isinstance(e, MetadataStoreError):
        return e
    for theirs, ours in _ERRORS:
        if isinstance(e, theirs):
            return ours(str(e) or theirs.__name__)
    return e


def kazoo_auth(credential: ZkCredential | None) -> dict[str, Any]:
    """KazooClient's arguments that log in as ``credential`` (none: anonymous). kazoo runs
    the login again on every reconnect, before any request: a SASL exchange (``pure-sasl``
    does the DIGEST-MD5 side), or an ``addauth digest``."""
    if credential is None:
        return {}
    if credential.is_sasl:
        return {"sasl_options": {"mechanism": credential.mechanism,
                                 "username": credential.username,
                                 "password": credential.password}}
    return {"auth_data": [("digest", credential.auth)]}


def to_stat(s: Any) -> Stat | None:
    if s is None:
        return None
    return Stat(version=s.version, czxid=s.czxid, mzxid=s.mzxid, ctime=s.ctime, mtime=s.mtime,
                ephemeral_owner=s.ephemeralOwner, num_children=s.numChildren,
                cversion=s.cversion)


class _Watch:
    """A live watch; ``cancel()`` stops further callbacks."""

    def __init__(self, store: ZooKeeperStore, path: str, kind: str,
                 callback: Callable[..., None]) -> None:
        self.store = store
        self.path = path
        self.kind = kind
        self.callback = callback
        self.cancelled = False
        self.generation = 0

    def cancel(self) -> None:
        self.cancelled = True
        self.store._watches.discard(self)


class _DaemonThreadPool(ThreadPool):
    """A ThreadPool whose worker is a daemon thread.

    Twisted's pool threads are not daemons, so a store that was never stopped (a test that
    failed half-way, an embedding app that forgot ``stop()``) would keep the interpreter from
    exiting: ``threading._shutdown`` joins every non-daemon thread. The work on this pool is
    kazoo's connect/close, which is safe to abandon at exit.
    """

    def threadFactory(self, *args: Any, **kw: Any) -> threading.Thread:  # noqa: N802 (Twisted's name)
        thread = threading.Thread(*args, **kw)
        thread.daemon = True
        return thread


class _Gather:
    """The results of ``calls`` kazoo async calls into one list of ``size`` slots. Kazoo's
    completion threads fill ``out`` and ``failures``; each call ends with :meth:`completed`,
    and the last one hands the whole list to the reactor in one hop (a hop per result would
    wait for the GIL, up to a switch interval each when the reactor is busy). ``deferred``
    fires with ``out`` or fails with the first failure."""

    def __init__(self, reactor: Any, size: int, calls: int) -> None:
        self.out: list[tuple[bytes, Stat | None] | None] = [None] * size
        self.failures: list[BaseException] = []
        self.deferred: defer.Deferred = defer.Deferred()
        self._reactor = reactor
        self._remaining = calls
        self._lock = threading.Lock()  # completions may run on more than one kazoo thread

    def completed(self) -> None:
        with self._lock:
            self._remaining -= 1
            last = self._remaining == 0
        if last:
            self._reactor.callFromThread(self._finish)

    def _finish(self) -> None:
        if self.failures:
            self.deferred.errback(Failure(translate(self.failures[0])))
        else:
            self.deferred.callback(self.out)


@implementer(IMetadataStore)
class ZooKeeperStore:
    """See the module docstring."""

    log = Logger(namespace="sluice.zookeeper")

    def __init__(self, hosts: str, *, reactor: Any, session_timeout: float = 18.0,
                 connect_timeout: float = 10.0, acl_policy: AclPolicy | None = None) -> None:
        self.hosts = hosts
        self.reactor = reactor
        self.connect_timeout = connect_timeout
        #: No credential and open ACLs unless given (``zookeeper.auth.file``/``.set.acl``).
        self.acl_policy = acl_policy or AclPolicy()
        self._client = KazooClient(
            hosts=hosts, timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, max_delay=2.0),
            **kazoo_auth(self.acl_policy.credential),
        )
        #: Set (on kazoo's thread) when ZooKeeper refused the login: kazoo then closes the
        #: session for good and never reconnects.
        self._auth_failed = False
        self._started = False
        self._client.add_listener(self._on_kazoo_state)
        self._pool = _DaemonThreadPool(minthreads=0, maxthreads=1, name="sluice-zookeeper")
        self._listeners = SessionStateListeners()
        self._watches: set[_Watch] = set()
        self.state = SessionState.LOST
        self._lost_since_connect = False

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def chroot(self) -> str:
        """The chroot of ``hosts`` (``""``: none, the store sees ZooKeeper's whole tree)."""
        return self._client.chroot or ""

    @property
    def session_id(self) -> int | None:
        sid = self._client.client_id
        return sid[0] if sid else None

    def _blocking(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> defer.Deferred:
        return threads.deferToThreadPool(self.reactor, self._pool, fn, *args, **kw)

    def _connect(self) -> None:
        """Blocking: start the session, then one round trip. kazoo reports a session as
        connected before its SASL login, and sends no request before the login ends, so the
        answer to this ``exists`` proves ZooKeeper accepted the login (AuthFailedError if it
        did not)."""
        self._client.start(self.connect_timeout)
        self._client.exists("/")

    async def start(self) -> None:
        """Connect and log in; raises :class:`ConnectionLost` if ZooKeeper does not answer in
        ``connect_timeout``, :class:`AuthFailed` if it refuses the credential. A failed start
        leaves nothing running (no kazoo threads, no pool thread), so the caller need not
        call :meth:`stop`."""
        self._pool.start()
        try:
            await self._blocking(self._connect)
        except BaseException as e:
            try:  # the session may be up (the round trip failed): end it with the start
                await self._blocking(self._client.stop)
                await self._blocking(self._client.close)
            finally:
                self._pool.stop()
            # kazoo's start reports a login refused before it looked as a timeout.
            if isinstance(e, AuthFailedError) or self._auth_failed:
                raise AuthFailed(self._auth_failed_message()) from None
            if isinstance(e, KazooTimeoutError):
                raise ConnectionLost(f"could not reach ZooKeeper at {self.hosts} within "
                                     f"{self.connect_timeout:g}s") from None
            if isinstance(e, ConnectionLoss):
                raise ConnectionLost(f"ZooKeeper at {self.hosts} dropped the connection "
                                     "while the session started") from None
            raise
        self.state = SessionState.CONNECTED
        self._started = True

    def _auth_failed_message(self) -> str:
        credential = self.acl_policy.credential
        if credential is None or not credential.is_sasl:
            return f"ZooKeeper at {self.hosts} refused this session's login (AUTH_FAILED)"
        return (f"ZooKeeper at {self.hosts} refused the SASL DIGEST-MD5 login of user "
                f"{credential.username!r} (AUTH_FAILED): a wrong password, a user missing "
                "from the ZooKeeper servers' JAAS Server section, or servers without SASL "
                "set up (docs/zookeeper.md#acls); zookeeper.auth.mechanism=digest needs no "
                "server setup")

    async def secure_chroot(self) -> None:
        """A broker with ``zookeeper.set.acl=true`` calls this at start. With a chroot, give
        the chroot node (``/`` to us) the secure ACL: its children (``/controller``,
        ``/cluster``...) could otherwise be deleted or created by anyone, whatever their own
        ACLs. The operator created it, usually open to all; changing it needs ADMIN on it,
        which an open node grants (:class:`NotAuthorized` if it is secured for another
        credential). Without a chroot the root is shared with other applications and left
        alone: a warning says so if it is open."""
        if not self.acl_policy.set_acl:
            return
        current = tuple(await self.get_acl("/"))
        wanted = self.acl_policy.acl_for("/")
        if not self._client.chroot:
            if any(e.scheme == "world" and e.perms & ~READ for e in current):
                self.log.warn("zookeeper.set.acl is on but ZooKeeper's root is writable by "
                              "anyone, so anyone can create or delete Sluice's top-level "
                              "nodes (/controller...): give zookeeper.connect a chroot")
            return
        if set(current) != set(wanted):  # ZooKeeper gives no meaning to the order
            await self.set_acl("/", wanted)
            self.log.info("secured the chroot {c}: {acl}", c=self._client.chroot,
                          acl=", ".join(str(e) for e in wanted))

    async def stop(self) -> None:
        """Close the session. Safe on a store that never started or whose start failed: its
        pool is not running then, and work handed to it would wait forever (a broker whose
        start failed is still stopped, and its process must exit)."""
        for w in list(self._watches):
            w.cancel()
        if not self._pool.started:
            return
        try:
            await self._blocking(self._client.stop)
            await self._blocking(self._client.close)
        finally:
            self._pool.stop()

    # -- requests ------------------------------------------------------------------------------

    def _async(self, ar: Any, convert: Callable[[Any], Any] = lambda v: v) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        reactor = self.reactor

        def done(result: Any) -> None:
            try:
                value = convert(result.get_nowait())
            except BaseException as e:
                reactor.callFromThread(d.errback, Failure(translate(e)))
            else:
                reactor.callFromThread(d.callback, value)

        ar.rawlink(done)
        return d

    def get(self, path: str) -> defer.Deferred:
        return self._async(self._client.get_async(path), lambda v: (v[0], to_stat(v[1])))

    def get_many(self, paths: Sequence[str]) -> defer.Deferred:
        """Reads go in multiRead requests of :data:`MULTI_READ_BATCH` paths, all sent before
        the first answer (pipelined on the one connection); the answer of the last one hands
        the whole list to the reactor. 10,000 partition states are 20 requests and one hop to
        the reactor, where one get per path cost an AsyncResult (with its Condition) and a
        request each: a quarter of a new controller's time in a failover. A server without
        multiRead (before 3.6) gets one read per path instead."""
        n = len(paths)
        if n == 0:
            return defer.succeed([])
        d: defer.Deferred = defer.Deferred()

        def fallback(f: Failure) -> Any:
            if f.check(UnimplementedError):
                return self._get_each(paths)
            return f

        self._get_batched(paths).chainDeferred(d)
        d.addErrback(fallback)
        return d

    def _get_batched(self, paths: Sequence[str]) -> defer.Deferred:
        batches = [(i, paths[i:i + MULTI_READ_BATCH])
                   for i in range(0, len(paths), MULTI_READ_BATCH)]
        gather = _Gather(self.reactor, len(paths), len(batches))

        def one(start: int, result: Any) -> None:
            try:
                values = result.get_nowait()
            except BaseException as e:
                gather.failures.append(e)
            else:
                for i, value in enumerate(values, start):
                    if isinstance(value, NoNodeError):
                        continue  # stays None
                    if isinstance(value, BaseException):
                        gather.failures.append(value)
                    else:
                        gather.out[i] = (value[0], to_stat(value[1]))
            gather.completed()

        client = self._client
        chroot = client.chroot
        for start, chunk in batches:
            ar = client.handler.async_result()
            ar.rawlink(functools.partial(one, start))
            client._call(MultiRead([_prefix_root(chroot, p) for p in chunk]), ar)
        return gather.deferred

    def _get_each(self, paths: Sequence[str]) -> defer.Deferred:
        """One pipelined get per path (servers without multiRead)."""
        gather = _Gather(self.reactor, len(paths), len(paths))

        def one(i: int, result: Any) -> None:
            try:
                value, zstat = result.get_nowait()
            except NoNodeError:
                pass  # stays None
            except BaseException as e:
                gather.failures.append(e)
            else:
                gather.out[i] = (value, to_stat(zstat))
            gather.completed()

        for i, path in enumerate(paths):
            self._client.get_async(path).rawlink(functools.partial(one, i))
        return gather.deferred

    def exists(self, path: str) -> defer.Deferred:
        return self._async(self._client.exists_async(path), to_stat)

    def get_children(self, path: str) -> defer.Deferred:
        return self._async(self._client.get_children_async(path), list)

    def _acl(self, path: str) -> list[ACL] | None:
        """kazoo's form of the ACL a node created at ``path`` gets (None: kazoo's default,
        open to all, when this store does not set ACLs)."""
        if not self.acl_policy.set_acl:
            return None
        return [ACL(e.perms, Id(e.scheme, e.id)) for e in self.acl_policy.acl_for(path)]

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> defer.Deferred:
        def once() -> defer.Deferred:
            return self._async(self._client.create_async(
                path, value, acl=self._acl(path), ephemeral=ephemeral, sequence=sequence))

        d = once()
        if makepath:
            def make_parents(f: Failure) -> defer.Deferred:
                f.trap(NoNode)
                parent = path.rstrip("/") if sequence and path.endswith("/") else \
                    path.rsplit("/", 1)[0]
                made = self._create_missing(parent)
                made.addCallback(lambda _: once())
                return made
            d.addErrback(make_parents)
        return d

    def set(self, path: str, value: bytes, version: int = -1) -> defer.Deferred:
        return self._async(self._client.set_async(path, value, version), to_stat)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> defer.Deferred:
        if recursive:
            d = self._blocking(self._client.delete, path, version, recursive=True)
            d.addErrback(lambda f: Failure(translate(f.value)))
            return d
        return self._async(self._client.delete_async(path, version), lambda v: None)

    def ensure_path(self, path: str) -> defer.Deferred:
        """Create ``path`` and its missing parents, each with its own ACL. An existing path
        costs one ``exists`` (no create, which would need CREATE on the parent)."""
        d = self.exists(path)
        d.addCallback(lambda stat: None if stat is not None else self._create_missing(path))
        return d

    def _create_missing(self, path: str) -> defer.Deferred:
        """Create every component of ``path`` that does not exist: one create per component,
        all sent at once (ZooKeeper runs one session's requests in order, so each parent
        exists before its child's create), an existing one not an error."""
        parts = [p for p in path.split("/") if p]
        creates = []
        for i in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:i])
            d = self._async(self._client.create_async(node, b"", acl=self._acl(node)))
            d.addErrback(lambda f: f.trap(NodeExists) and None)
            creates.append(d)
        done = defer.DeferredList(creates, fireOnOneErrback=True, consumeErrors=True)
        done.addCallbacks(lambda _: None, lambda f: f.value.subFailure)
        return done

    # -- ACLs (``sluice zookeeper secure``, and :meth:`secure_chroot` at a broker's start) ---

    def get_acl(self, path: str) -> defer.Deferred:
        """``path``'s ACL as a list of :class:`AclEntry`."""
        return self._async(self._client.get_acls_async(path), lambda v: [
            AclEntry(a.perms, a.id.scheme, a.id.id) for a in v[0]])

    def set_acl(self, path: str, acl: Sequence[AclEntry], version: int = -1) -> defer.Deferred:
        """Replace ``path``'s ACL (needs ADMIN on it)."""
        return self._async(self._client.set_acls_async(
            path, [ACL(e.perms, Id(e.scheme, e.id)) for e in acl], version), to_stat)

    def multi(self, ops: Sequence[Check | Create | SetData | Delete]) -> defer.Deferred:
        if len(ops) > MAX_MULTI_OPS:
            return defer.fail(ValueError(
                f"multi of {len(ops)} operations exceeds the limit of {MAX_MULTI_OPS}; "
                "split it (ZooKeeper caps a transaction at 1 MB)"))
        t = self._client.transaction()
        for op in ops:
            if isinstance(op, Check):
                t.check(op.path, op.version)
            elif isinstance(op, Create):
                t.create(op.path, op.value, acl=self._acl(op.path), ephemeral=op.ephemeral,
                         sequence=op.sequence)
            elif isinstance(op, SetData):
                t.set_data(op.path, op.value, op.version)
            elif isinstance(op, Delete):
                t.delete(op.path, op.version)
            else:
                return defer.fail(TypeError(f"not a multi operation: {op!r}"))

        def check(results: list) -> list:
            translated = [translate(r) if isinstance(r, BaseException) else r for r in results]
            if any(isinstance(r, BaseException) for r in translated):
                raise TransactionFailed(translated)
            return translated

        return self._async(t.commit_async(), check)

    # -- watches -------------------------------------------------------------------------------

    def watch_data(self, path: str, callback: Callable[[bytes | None, Stat | None], None]
                   ) -> _Watch:
        w = _Watch(self, path, "data", callback)
        self._watches.add(w)
        self._arm(w)
        return w

    def watch_children(self, path: str, callback: Callable[[list[str] | None], None]) -> _Watch:
        w = _Watch(self, path, "children", callback)
        self._watches.add(w)
        self._arm(w)
        return w

    def _deliver(self, w: _Watch, generation: int, *args: Any) -> None:
        if not w.cancelled and generation == w.generation:
            try:
                w.callback(*args)
            except Exception:
                self.log.failure("watch callback for {p} failed", p=w.path)

    def _arm(self, w: _Watch) -> None:
        """Issue the read-with-watcher for ``w`` (any thread)."""
        if w.cancelled:
            return
        w.generation += 1
        gen = w.generation
        client = self._client
        reactor = self.reactor

        def fired(event: Any) -> None:
            if gen == w.generation:
                self._arm(w)

        if w.kind == "data":
            ar = client.get_async(w.path, watch=fired)
        else:
            ar = client.get_children_async(w.path, watch=fired)

        def created_meanwhile(result: Any) -> None:
            try:
                stat = result.get_nowait()
            except BaseException:
                return  # connection trouble: re-armed when the session is back
            if stat is not None and gen == w.generation:
                self._arm(w)

        def done(result: Any) -> None:
            try:
                value = result.get_nowait()
            except NoNodeError:
                # Absent: watch for its creation, report absence. If it was created between
                # the read and the exists call, the exists watch fires only on its *next*
                # change: read it again now, or the watcher would believe it absent until then
                # (a broker missed a newly elected coordinator that way).
                client.exists_async(w.path, watch=fired).rawlink(created_meanwhile)
                if w.kind == "data":
                    reactor.callFromThread(self._deliver, w, gen, None, None)
                else:
                    reactor.callFromThread(self._deliver, w, gen, None)
                return
            except (ConnectionLoss, SessionExpiredError):
                return  # re-armed when the session is connected again
            except BaseException:
                self.log.failure("watch on {p} failed", p=w.path)
                return
            if w.kind == "data":
                reactor.callFromThread(self._deliver, w, gen, value[0], to_stat(value[1]))
            else:
                reactor.callFromThread(self._deliver, w, gen, sorted(value))

        ar.rawlink(done)

    # -- session state -------------------------------------------------------------------------

    def add_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.add(callback)

    def remove_state_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.remove(callback)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: never call ZooKeeper here, only hand over.
        ours = {KazooState.CONNECTED: SessionState.CONNECTED,
                KazooState.SUSPENDED: SessionState.SUSPENDED,
                KazooState.LOST: SessionState.LOST}[state]
        if state == KazooState.LOST and self._client.client_state == KeeperState.AUTH_FAILED:
            self._auth_failed = True  # read by start(), which may be waiting on kazoo
            self.reactor.callFromThread(self._login_refused)
        self.reactor.callFromThread(self._set_state, ours)

    def _login_refused(self) -> None:
        # A refusal during start() is start()'s error; later (a reconnect after the password
        # changed on the servers) nothing else would say why the session is gone for good.
        if self._started:
            self.log.error("{why}; kazoo does not reconnect after this: restart once the "
                           "credential is fixed", why=self._auth_failed_message())

    def _set_state(self, state: SessionState) -> None:
        if state is self.state:
            return
        previous = self.state
        self.state = state
        self.log.info("ZooKeeper session {prev} -> {state}", prev=previous.name,
                      state=state.name)
        if state is SessionState.CONNECTED:
            # After LOST the server forgot our watches; after SUSPENDED a read may have failed.
            for w in list(self._watches):
                self._arm(w)
        self._listeners.notify(state, self.log)
