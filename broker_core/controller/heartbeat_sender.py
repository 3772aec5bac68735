"""The broker's side of broker liveness: heartbeats to the active controller, and what a broker
does when it cannot reach the controller but can reach the metadata store.

Every ``broker.heartbeat.interval.ms`` the broker sends BrokerHeartbeat (key 63) to the active
controller, found through ``/controller`` and the controller's registration in the metadata store
(not through UpdateMetadata, which a broker cut off from the controller no longer receives). The
controller fences a broker it has not heard from for ``broker.session.timeout.ms``
(:mod:`broker_core.controller.broker_liveness`).

:class:`ControllerLease` is the sans-IO core: the broker's mirror of that session. When no
heartbeat has been answered for a whole session while the metadata-store session is connected,
the lease *expires*: the controller has fenced this broker, or is itself cut off from it.
The broker then

- records ``/controller_unreachable/[id]`` (ephemeral, naming the controller and its epoch): a
  controller that most brokers cannot reach resigns (see ``should_resign``), and its successor
  fences it at once (``unreachable_predecessor``);
- reads the published state of the partitions it leads from the metadata store and applies any
  newer leadership (:func:`adopt_published_leadership`), so it stops acting as their leader and
  tells clients the new leader, instead of waiting for a LeaderAndIsr that cannot reach it.

When a heartbeat is answered again (by this controller or a new one) the record is deleted; a
broker that became controller itself deletes its own a session later.

Invariants: the lease never expires while the store session is not connected (a broker that lost
the store too is handled by the ordinary death procedure: its registration expires); at most one
heartbeat is in flight; the controller broker itself sends none (it hears itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller.broker_liveness import UnreachableVote
from broker_core.metadata import MetadataStoreError, NodeExists, NoNode, SessionState
from broker_core.rpc import ClientConnection, connect_client, request_with_timeout
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

BROKER_HEARTBEAT_VERSION = 0


class ControllerLease:
    """Whether this broker has reached the controller within a session (sans-IO).

    States: *valid* (an answer within ``session_timeout_s``, or the session since the current
    controller became known has not run out) and *expired*. Transitions are reported to the
    caller: :meth:`check` returns True once when the lease expires, :meth:`answered` and
    :meth:`controller_changed` return True once when an expired lease becomes valid again.
    """

    def __init__(self, session_timeout_s: float, now: float) -> None:
        self.session_timeout_s = session_timeout_s
        self.last_answer = now
        self.expired = False

    def answered(self, now: float) -> bool:
        """A heartbeat was answered (the controller is reachable); True if it had expired."""
        self.last_answer = now
        was, self.expired = self.expired, False
        return was

    def controller_changed(self, now: float) -> bool:
        """Another broker became controller: a full session to reach it. True if the lease had
        expired (the record against the previous controller is withdrawn)."""
        return self.answered(now)

    def credit(self, seconds: float) -> None:
        """This broker's process did not run for ``seconds``: answers it could not read then do
        not count as missing."""
        if seconds > 0:
            self.last_answer += seconds

    def check(self, now: float, store_connected: bool) -> bool:
        """True exactly when the lease expires now: no answer for a whole session while the
        metadata-store session is connected."""
        if self.expired or not store_connected:
            return False
        if now - self.last_answer >= self.session_timeout_s:
            self.expired = True
            return True
        return False


class ControllerHeartbeatSender:
    """Sends heartbeats and acts on the lease; see the module docstring.

    ``adopt`` is called (and awaited) on every tick while the lease is expired: it applies the
    leadership published in the store (the broker wires it to
    :func:`adopt_published_leadership`). ``is_controller`` says whether this broker is the
    active controller now.
    """

    log = Logger(namespace="sluice.broker.heartbeat")

    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        store: Any,
        *,
        reactor: Any,
        clock: Any,
        interval_s: float,
        session_timeout_s: float,
        is_controller: Callable[[], bool],
        adopt: Callable[[], Any],
        metrics: Any = None,
        connect: Callable[[str, int], defer.Deferred] | None = None,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        self.broker_id = broker_id
        #: The cluster login every connection to the controller starts with.
        self.credential = credential
        self.tls = tls
        self.broker_epoch = broker_epoch
        self.store = store
        self.reactor = reactor
        self.clock = clock
        self.interval_s = interval_s
        self.session_timeout_s = session_timeout_s
        # A lost connection is noticed within two beats, and never later than half a session.
        self.timeout_s = min(2 * interval_s, session_timeout_s / 2)
        self.is_controller = is_controller
        self.adopt = adopt
        self.metrics = metrics
        self.lease = ControllerLease(session_timeout_s, clock.seconds())
        self._conn = ClientConnection(connect or self._tcp_connect)
        self._controller: tuple[int, str, int] | None = None
        self._controller_id = -1
        self._watch: Any = None
        self._loop: task.LoopingCall | None = None
        self._in_flight = False
        self._adopting = False
        self._voted = False
        self._controller_since = clock.seconds()
        self._store_connected = False
        self._last_tick = clock.seconds()
        self._last_adopt = float("-inf")
        #: Past this long without an answer the broker looks in the store for leaderships the
        #: controller moved away (safe at any time: it applies only the controller's decisions).
        self.adopt_after_s = self.timeout_s

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start beating; call it once the store session is connected."""
        self._store_connected = True
        self._last_tick = self.clock.seconds()
        self.store.add_state_listener(self._on_session_state)
        self._watch = self.store.watch_data(paths.CONTROLLER, self._on_controller_node)
        self._loop = task.LoopingCall(self.tick)
        self._loop.clock = self.clock
        self._loop.start(self.interval_s, now=False)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
            self.store.remove_state_listener(self._on_session_state)
        self._conn.close()

    def _on_session_state(self, state: SessionState) -> None:
        self._store_connected = state is SessionState.CONNECTED

    # -- the controller's address ----------------------------------------------------------------

    def _on_controller_node(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            self._controller, self._controller_id = None, -1
            return
        try:
            cid = paths.ControllerRegistration.from_bytes(data).broker_id
        except ValueError:
            self.log.warn("unreadable /controller value {v!r}", v=data)
            return
        if cid != self._controller_id:
            self._controller_id = cid
            self._controller = None
            self._conn.drop()
            # A full session to reach the new controller. The record against the old one stays
            # until a heartbeat is answered: the new controller reads it when it takes over.
            self.lease.controller_changed(self.clock.seconds())
            self._controller_since = self.clock.seconds()
        d = defer.Deferred.fromCoroutine(self._resolve(cid))
        d.addErrback(lambda f: self.log.debug("controller {c} address not read: {e}", c=cid,
                                              e=f.getErrorMessage()))

    async def _resolve(self, cid: int) -> None:
        data, _ = await self.store.get(paths.broker(cid))
        reg = paths.BrokerRegistration.from_bytes(data, cid)
        if cid == self._controller_id:
            self._controller = (cid, reg.host, reg.port)

    # -- beats -----------------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.seconds()
        stalled = now - self._last_tick - self.interval_s
        self._last_tick = now
        if stalled > self.interval_s:
            self.lease.credit(stalled)
        if self.is_controller():
            self.lease.answered(now)
            # Its own record against its predecessor is kept for a session: it read it when it
            # took over, and the records are all another new controller has to go by.
            if self._voted and now - self._controller_since >= self.session_timeout_s:
                self._withdraw_vote()
            return
        connected = self._store_connected
        if self.lease.check(now, connected):
            self.log.warn("broker {b} has had no heartbeat answer from controller {c} for {s}s "
                          "while its metadata session is alive: it considers itself fenced",
                          b=self.broker_id, c=self._controller_id, s=self.session_timeout_s)
            if self.metrics is not None:
                self.metrics.controller_unreachable.set(1)
            self._cast_vote()
        silent = self.lease.expired or now - self.lease.last_answer >= self.adopt_after_s
        due = now - self._last_adopt >= self.adopt_after_s  # one store read per period
        if silent and due and connected and not self._adopting:
            self._adopting = True
            self._last_adopt = now
            d = defer.maybeDeferred(self.adopt)
            d.addErrback(lambda f: self.log.warn("adopting the published leadership failed: "
                                                 "{e}", e=f.getErrorMessage()))
            d.addBoth(lambda _: setattr(self, "_adopting", False))
        if not self._in_flight and self._controller is not None and self.broker_epoch() >= 0:
            self._in_flight = True
            d = defer.Deferred.fromCoroutine(self._beat(self._controller))
            d.addBoth(lambda _: setattr(self, "_in_flight", False))

    async def _beat(self, target: tuple[int, str, int]) -> None:
        cid, host, port = target
        try:
            connecting = defer.Deferred.fromCoroutine(self._conn.to(host, port))
            connecting.addTimeout(self.timeout_s, self.clock)
            proto = await connecting
            resp = await request_with_timeout(
                proto, self.clock, ApiKey.BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION,
                {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch(),
                 "current_metadata_offset": -1, "want_fence": False, "want_shut_down": False},
                self.timeout_s, f"controller {cid}")
        except Exception as e:  # refused, lost, timed out: the controller is not reachable
            self.log.debug("heartbeat to controller {c} failed: {e}", c=cid, e=e)
            self._conn.drop()
            return
        if resp.error_code == ErrorCode.NOT_CONTROLLER:
            return  # it was deposed; the /controller watch names its successor
        if resp.error_code and resp.error_code != ErrorCode.STALE_BROKER_EPOCH:
            self.log.info("controller {c} answered the heartbeat with error {e}", c=cid,
                          e=resp.error_code)
        # Any other answer proves the path to the controller works (STALE_BROKER_EPOCH: it has
        # not yet seen this registration).
        if self.metrics is not None:
            self.metrics.controller_unreachable.set(0)
        if self.lease.answered(self.clock.seconds()) or self._voted:
            self.log.info("broker {b} reaches controller {c} again", b=self.broker_id, c=cid)
            self._withdraw_vote()

    # -- the "cannot reach the controller" record ------------------------------------------------

    def _cast_vote(self) -> None:
        d = defer.Deferred.fromCoroutine(self._write_vote(self._controller_id))
        d.addErrback(lambda f: self.log.warn("could not record that the controller is "
                                             "unreachable: {e}", e=f.getErrorMessage()))

    async def _write_vote(self, cid: int) -> None:
        if cid < 0:
            return
        data, _ = await self.store.get(paths.CONTROLLER_EPOCH)
        vote = UnreachableVote(self.broker_id, cid, int(data.decode() or 0))
        path = paths.controller_unreachable(self.broker_id)
        try:
            await self.store.create(path, vote.to_bytes(), ephemeral=True, makepath=True)
        except NodeExists:
            await self.store.set(path, vote.to_bytes())
        self._voted = True
        if not self.lease.expired:  # answered meanwhile: take it back
            await self._delete_vote()

    def _withdraw_vote(self) -> None:
        if self.metrics is not None:
            self.metrics.controller_unreachable.set(0)
        d = defer.Deferred.fromCoroutine(self._delete_vote())
        d.addErrback(lambda f: self.log.debug("could not delete the unreachable record: {e}",
                                              e=f.getErrorMessage()))

    async def _delete_vote(self) -> None:
        if not self._voted:
            return
        self._voted = False
        try:
            await self.store.delete(paths.controller_unreachable(self.broker_id))
        except NoNode:
            pass
        except MetadataStoreError:
            self._voted = True
            raise

    def _tcp_connect(self, host: str, port: int) -> defer.Deferred:
        return connect_client(self.reactor, host, port, f"sluice-heartbeat-{self.broker_id}",
                              timeout_s=self.timeout_s, credential=self.credential, tls=self.tls,
                              peer_name="the controller")
