"""The thin, coordinator-driven consumer (docs/design.md#the-consumer-coordinator), Twisted-native.

The group logic lives in the pure state machine :mod:`consumer_client.membership`; this module
is its shell: it finds the coordinator (ClusterMetadata to the bootstrap servers, round robin),
registers on a connection that then turns into the coordinator channel (docs/design.md), answers
the coordinator's Ping / StopFetcher / StartFetcher, runs the fetchers
(:mod:`consumer_client.consumer_fetcher`) and hands messages to the application through bounded
streams (:mod:`consumer_client.consumer_streams`). Its collaborators, each in its own module:
:class:`~consumer_client.consumer_problems.ProblemWatch` (no coordinator, missing topics:
warnings, the health timer, errors raised to readers) and
:class:`~consumer_client.consumer_leave.Leave` (the closing consumer's UnregisterConsumer); its
errors and snapshots are in :mod:`consumer_client.consumer_errors`, re-exported here.

Example::

    consumer = Consumer(ConsumerConfig.create(bootstrap_servers="h:9092", group_id="g",
                                              topics={"events": 1}), reactor=reactor)
    consumer.start()
    async for message in consumer.messages:
        print(message.offset, message.value)

What the coordinator can rely on:

- every request is answered, in order, as soon as it is handled (no I/O in between except an
  assignment listener's Deferred); offsets are the next offset to consume, i.e. one past the
  last message the application got (``null`` offsets when ``auto.commit.enable`` is false);
- after StopFetcher nothing more is fetched and queued data is dropped; after StartFetcher the
  consumer fetches exactly the given partitions from the given offsets (-1: per
  ``auto.offset.reset``);
- a consumer that hears nothing for ``session.timeout.ms`` stops fetching, closes the channel
  and registers again; one whose partition keeps failing does the same, so the
  coordinator rebalances;
- ``close()`` stops the fetchers, tells the listener the partitions are revoked, then leaves
  with UnregisterConsumer carrying the final offsets (with auto-commit): the coordinator writes
  them, removes the member and rebalances the group before it answers, so a close takes one
  round trip. Only when that answer does not come within one Ping interval (bounded by
  ``request.timeout.ms`` and ``shutdown.timeout.ms``), or is a refusal, does the consumer fall
  back to handing the offsets over on its channel: it answers the next Ping with them and waits
  for the Ping after it (or ``shutdown.timeout.ms``) before closing (docs/coordinator.md, "Leaving").

What the application can rely on: a consumer that cannot register (no broker, no coordinator)
or whose subscribed topic does not exist says so in a warning (once per reason, then as a
reminder) and in :attr:`Consumer.health`; once that lasts ``default.api.timeout.ms`` its readers
fail with :class:`ConsumerUnavailable` / :class:`TopicNotFound` until it is over (the consumer
keeps retrying; :mod:`consumer_client.consumer_health` decides when).

Per-consumer cost: no threads; timers only from the injected clock (one silence timer, reset by
each request, the fetch loops' backoff timers, and one health timer while the consumer is not
registered or a subscribed topic is missing).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectionClosed
from twisted.logger import Logger

from broker_core.rpc import KafkaClientProtocol, request_with_timeout
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client import secure_connect
from consumer_client.cluster import ClusterClient
from consumer_client.consumer_config import ConsumerConfig
from consumer_client.consumer_errors import (
    RETRIABLE_REGISTRATION,
    AuthenticationFailed,
    CommitFailed,
    ConsumerError,
    ConsumerUnavailable,
    Health,
    MemberInfo,
    NotRegistered,
    RegistrationRejected,
    TopicNotFound,
    known_code,
)
from consumer_client.consumer_fetcher import NETWORK_ERRORS, FetcherManager
from consumer_client.consumer_leave import Leave
from consumer_client.consumer_problems import ProblemWatch
from consumer_client.consumer_records import Message
from consumer_client.consumer_streams import (
    AllStreams,
    MessageStream,
    PartitionState,
    StreamClosed,
)
from consumer_client.membership import Action, Input, Membership, State
from consumer_client.security import AUTHENTICATION_ERRORS

__all__ = ["Consumer", "ConsumerConfig", "Message", "MemberInfo", "Health", "State",
           "ConsumerError", "RegistrationRejected", "AuthenticationFailed", "ConsumerUnavailable",
           "TopicNotFound", "CommitFailed", "NotRegistered", "StreamClosed"]


class Consumer:
    """A Twisted-native consumer; see the module docstring.

    ``listener`` (optional) has ``assigned(partitions)`` and/or ``revoked(partitions)``
    (lists of ``(topic, partition)``); either may return a Deferred, which the consumer waits
    for before it answers the coordinator (keep it well below ``session.timeout.ms * 2/3``).
    """

    log = Logger(namespace="sluice.consumer")

    def __init__(self, config: ConsumerConfig | Mapping[str, Any], *, reactor: Any = None,
                 clock: Any = None, listener: Any = None,
                 cluster: ClusterClient | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as _reactor
            reactor = _reactor
        self.config = config if isinstance(config, ConsumerConfig) else \
            ConsumerConfig.from_mapping(config)
        self.reactor = reactor
        self.clock = clock or reactor
        self.listener = listener
        cfg = self.config
        self.cluster = cluster or ClusterClient(
            cfg.bootstrap_servers, reactor=reactor, client_id=cfg.client_id,
            request_timeout_s=cfg.request_timeout_ms / 1000.0, security=cfg.security)
        self.membership = Membership(auto_commit=cfg.auto_commit)
        self.streams: dict[tuple[str | None, str], MessageStream] = {}
        if cfg.pattern == "static":
            for topic in cfg.topics:
                for tid in cfg.thread_ids(topic):
                    self._make_stream((topic, tid))
        else:
            for tid in cfg.thread_ids():
                self._make_stream((None, tid))
        self.messages = AllStreams(list(self.streams.values()))
        self.fetchers = FetcherManager(self.cluster, cfg, self.clock, self._partition_failed,
                                       before_handling=self.check_silence)
        self.parts: dict[tuple[str, int], PartitionState] = {}
        self.coordinator: tuple[int, str, int] | None = None
        self.last_error: str | None = None
        self.error: BaseException | None = None
        self._channel: KafkaClientProtocol | None = None
        self._silence: Any = None
        self._close_timer: Any = None
        #: From the RegisterConsumer (v1) answer: proves to the coordinator that a leave is
        #: this registration's (0: not known, the leave is not tried).
        self._session_id = 0
        #: RegisterConsumer version of the next attempt: 1 (with the session id), or 0 once a
        #: broker closed the connection on v1 (a broker older than the leave does that to a
        #: version it does not serve); back to 1 after a registration at 0.
        self._register_version = 1
        #: Addresses whose next ClusterMetadata is v0: each closed the connection on v1 (a
        #: broker older than v1 does that). One attempt only: a connection also drops when a
        #: broker stops mid-request, and on a sharded cluster v0 never names a coordinator.
        self._metadata_v0_once: set[tuple[str, int]] = set()
        self._discover_timer: Any = None
        self._attempt = 0
        self._was_member = False  # registered at least once (see _still_our_old_session)
        self._duplicate_since: float | None = None
        self._rr = itertools.count()
        self._started = False
        self._closed_d: defer.Deferred = defer.Deferred()
        self._state_waiters: list[tuple[Callable[[State], bool], defer.Deferred]] = []
        self._state_listeners: list[Callable[[MemberInfo], Any]] = []
        #: No coordinator, missing topics: warned, timed, raised to readers.
        self._problems = ProblemWatch(self)
        #: The leave (UnregisterConsumer) of a closing consumer.
        self._leave = Leave(self)

    def _make_stream(self, key: tuple[str | None, str]) -> MessageStream:
        s = MessageStream(key, self.config.queued_max_chunks, self._space)
        self.streams[key] = s
        return s

    def _space(self) -> None:
        self.fetchers.wake()

    # -- public API -----------------------------------------------------------------------------

    def start(self) -> None:
        """Find the coordinator and register (in the background; see :meth:`wait_for`)."""
        if self._started:
            return
        self._started = True
        self._problems.tracker.lost(self.clock.seconds())
        self._problems.watch()
        self._schedule_discovery(0.0)

    @property
    def state(self) -> State:
        return self.membership.state

    @property
    def member(self) -> MemberInfo:
        m = self.membership
        return MemberInfo(self.config.group_id, self.config.consumer_id, m.state, m.generation,
                          self.coordinator, {tp: ps.consumed for tp, ps in self.parts.items()},
                          m.rebalances, self.last_error)

    @property
    def health(self) -> Health:
        """See :class:`Health`."""
        return self._problems.health()

    def on_problem(self, callback: Callable[[Health], Any]) -> None:
        """Call ``callback(health)`` whenever the consumer warns about a problem (once per
        distinct reason, then as a reminder), when a problem becomes ``health.error`` after
        ``default.api.timeout.ms``, and when it clears (``health.ok``)."""
        self._problems.add_listener(callback)

    def on_state_change(self, callback: Callable[[MemberInfo], Any]) -> None:
        """Call ``callback(member)`` after every state change."""
        self._state_listeners.append(callback)

    def wait_for(self, *states: State) -> defer.Deferred:
        """Fires with the state once the member is in one of ``states`` (at once if it is);
        fails with the fatal error if registration is rejected first."""
        if self.state in states:
            return defer.succeed(self.state)
        if self.error is not None:
            return defer.fail(self.error)
        d: defer.Deferred = defer.Deferred()
        self._state_waiters.append((lambda s: s in states, d))
        return d

    def stream(self, topic: str | None = None, n: int = 0) -> MessageStream:
        """Stream ``n`` of ``topic`` (static subscription), or of the wildcard (topic None)."""
        return self.streams[(topic, f"{self.config.consumer_id}-{n}")]

    def streams_of(self, topic: str | None = None) -> list[MessageStream]:
        """The streams of ``topic`` (static), or all wildcard streams (topic None)."""
        return [s for k, s in self.streams.items() if k[0] == topic]

    def get(self) -> defer.Deferred:
        """The next message from any stream (Deferred[Message])."""
        return defer.Deferred.fromCoroutine(self.messages.get())

    def get_many(self, max_messages: int | None = None) -> defer.Deferred:
        """At least one message from any stream, at most ``max_messages`` (Deferred[list])."""
        return defer.Deferred.fromCoroutine(self.messages.get_many(max_messages))

    def consume(self, callback: Callable[[Message], Any],
                stream: MessageStream | None = None) -> defer.Deferred:
        """Run ``callback`` for every message (of ``stream``, or of all streams) until the
        consumer closes; see :meth:`MessageSource.consume`. Fires with None at close, fails
        with a fatal error or the callback's exception."""
        source = stream if stream is not None else self.messages
        return defer.Deferred.fromCoroutine(source.consume(callback))

    def positions(self) -> list[dict[str, Any]]:
        """The next offset to consume of every owned partition whose position is known."""
        return [{"topic": ps.topic, "partition": ps.partition, "offset": ps.consumed}
                for ps in self.parts.values() if ps.consumed >= 0]

    def commit(self) -> defer.Deferred:
        """Commit the current positions now (CommitOffsets on an ordinary connection to the
        coordinator). Fires with ``{(topic, partition): offset}`` once the
        coordinator wrote them; fails with :class:`CommitFailed` or :class:`NotRegistered`."""
        return defer.Deferred.fromCoroutine(self._commit())

    async def _commit(self) -> dict[tuple[str, int], int]:
        if self.coordinator is None or not self.membership.registered:
            raise NotRegistered(f"cannot commit in state {self.state.value}: not registered "
                                "with a coordinator")
        offsets = self.positions()
        if not offsets:
            return {}
        _, host, port = self.coordinator
        try:
            resp = await self.cluster.request_address(
                (host, port), ApiKey.COMMIT_OFFSETS,
                {"group_id": self.config.group_id, "consumer_id": self.config.consumer_id,
                 "session_id": self._session_id, "offsets": offsets}, version=1)
        except NETWORK_ERRORS as e:
            raise CommitFailed(f"commit to the coordinator at {host}:{port} failed: {e}") from e
        errors = {(p.topic, p.partition): ErrorCode(p.error_code).name
                  for p in resp.partitions if p.error_code}
        if resp.error_code or errors:
            code = ErrorCode(resp.error_code).name if resp.error_code else "partition errors"
            raise CommitFailed(f"the coordinator refused the commit: {code}"
                               f"{': ' + resp.error_message if resp.error_message else ''}",
                               errors)
        return {(o["topic"], o["partition"]): o["offset"] for o in offsets}

    def close(self) -> defer.Deferred:
        """Leave the group. With auto-commit, hand the final offsets over first (see the
        module docstring: one round trip to the coordinator, the slow path only when it does
        not answer). Fires with None once closed; idempotent."""
        if not self._started:
            self._started = True
            self.membership.state = State.DISCOVERING
        self._input(Input.CLOSE)
        d: defer.Deferred = defer.Deferred()
        self._closed_d.addBoth(lambda r: (d.callback(None), r)[1])
        return d

    @property
    def closed(self) -> bool:
        return self.membership.done

    # -- the state machine's shell --------------------------------------------------------------

    def _input(self, event: Input, request: Any = None) -> Any:
        """Feed ``event`` to the membership; carry out its actions. For a coordinator
        request, returns the response body (or a Deferred of it)."""
        before = self.state
        actions = self.membership.handle(event)
        if self.state is not before:
            self.log.debug("{c}: {a} -> {b} on {e}", c=self.config.consumer_id, a=before.value,
                           b=self.state.value, e=event.value)
        result = self._run(actions, request)
        if self.state is not before:
            self._problems.membership_changed()
            self._notify_state()
        return result

    def _notify_state(self) -> None:
        s = self.state
        waiters, self._state_waiters = self._state_waiters, []
        for match, d in waiters:
            if match(s):
                d.callback(s)
            elif s is State.FAILED and self.error is not None:
                d.errback(self.error)
            elif s is State.CLOSED:
                d.errback(StreamClosed(f"the consumer closed before reaching the state "
                                       f"(now {s.value})"))
            else:
                self._state_waiters.append((match, d))
        if self._state_listeners:
            info = self.member
            for cb in list(self._state_listeners):
                try:
                    cb(info)
                except Exception:
                    self.log.failure("state listener failed")

    def _run(self, actions: tuple[Action, ...], request: Any) -> Any:
        response: Any = None
        for i, a in enumerate(actions):
            if a is Action.REVOKE:
                d = self._revoke()
                # Wait for the listener before answering a request, or before the leave (the
                # coordinator hands the partitions to others as soon as it has it).
                if d is not None and (request is not None or Action.SEND_LEAVE in actions):
                    rest = actions[i + 1:]
                    return d.addBoth(lambda _, rest=rest: self._run(rest, request))
            elif a is Action.START_FETCHERS:
                d = self._start_fetchers(request)
                if d is not None:
                    rest = actions[i + 1:]
                    return d.addBoth(lambda _, rest=rest: self._run(rest, request))
            elif a is Action.REPORT_OFFSETS:
                response = {"error_code": 0, "consumer_id": self.config.consumer_id,
                            "offsets": self.positions() if self.config.auto_commit else None}
            elif a is Action.ANSWER:
                response = {"error_code": 0, "consumer_id": self.config.consumer_id}
            else:
                self._do(a)
        return response

    def _do(self, a: Action) -> None:
        if a is Action.DISCOVER:
            delay = self._discovery_delay()
            self._schedule_discovery(delay)
        elif a is Action.REGISTER:
            d = defer.Deferred.fromCoroutine(self._register())
            d.addErrback(lambda f: self.log.failure("registration failed", f))
        elif a is Action.SERVE:
            self._attempt = 0
            channel = self._channel
            assert channel is not None
            channel.serve(lambda request, ch=channel: self._on_request(ch, request))
            self._arm_silence()
        elif a is Action.STOP_FETCHERS:
            self.fetchers.stop()
            for s in self.streams.values():
                s.clear()
            self.messages.clear()
        elif a is Action.RELEASE:
            self._release()
        elif a is Action.CLOSE_CHANNEL:
            self._close_channel()
        elif a is Action.ARM_CLOSE_TIMER:
            bound = min(self.config.shutdown_timeout_ms, self.config.session_timeout_ms) / 1000.0
            self._close_timer = self.clock.callLater(bound, self._input, Input.CLOSE_TIMEOUT)
        elif a is Action.SEND_LEAVE:
            self._leave.send()
        elif a is Action.FAIL:
            for s in self.streams.values():
                s.close(self.error)
            self.messages.close(self.error)
        elif a is Action.FINISH:
            self._finish()

    # -- discovery and registration -------------------------------------------------------------

    def _discovery_delay(self) -> float:
        n = self._attempt
        self._attempt += 1
        if n == 0:
            return 0.0
        return self.config.retry_wait_s(n)

    def _schedule_discovery(self, delay: float) -> None:
        if self._discover_timer is not None and self._discover_timer.active():
            self._discover_timer.cancel()
        self._discover_timer = self.clock.callLater(delay, self._discover_now)

    def _discover_now(self) -> None:
        self._discover_timer = None
        if self.state is not State.DISCOVERING:
            return
        d = defer.Deferred.fromCoroutine(self._discover())
        d.addErrback(lambda f: self.log.failure("coordinator discovery failed", f))

    async def _discover(self) -> None:
        # ClusterMetadata to the configured brokers, round robin; the consumer keeps
        # trying until it is shut down.
        # v1 names the group: the answer is the coordinator of the group's shard (a broker
        # that answers v0 only coordinates every group with one coordinator).
        servers = self.cluster.bootstrap
        address = servers[next(self._rr) % len(servers)]
        version = 0 if address in self._metadata_v0_once else 1
        self._metadata_v0_once.discard(address)
        try:
            resp = await self.cluster.request_address(
                address, ApiKey.CLUSTER_METADATA,
                {"group_id": self.config.group_id} if version >= 1 else {}, version=version)
        except AUTHENTICATION_ERRORS as e:
            self.cluster.disconnect_address(address)
            self._authentication_failed(e)
            return
        except Exception as e:  # noqa: BLE001 - any failure means "ask the next one later"
            if version == 1 and isinstance(e, ConnectionClosed):
                # Maybe a broker without ClusterMetadata v1: the next attempt to it is v0.
                self._metadata_v0_once.add(address)
            self.cluster.disconnect_address(address)
            self._discovery_failed(f"ClusterMetadata from {address[0]}:{address[1]} failed: {e}",
                                   f"metadata:{type(e).__name__}")
            return
        if self.state is not State.DISCOVERING:
            return
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        if resp.error_code or resp.coordinator_id not in brokers:
            # A code this client does not know (a hostile or newer broker) is shown as a number.
            known = known_code(resp.error_code)
            code = (getattr(known, "name", str(known)) if resp.error_code
                    else "coordinator unknown")
            self._discovery_failed(f"no coordinator from {address[0]}:{address[1]}: {code}",
                                   f"coordinator:{code}")
            return
        self.cluster.update_brokers((n, h, p) for n, (h, p) in brokers.items())
        host, port = brokers[resp.coordinator_id]
        self.coordinator = (resp.coordinator_id, host, port)
        self._input(Input.COORDINATOR_FOUND)

    def _discovery_failed(self, why: str, key: str) -> None:
        self._problems.attempt_failed(why, key)
        if self.state is State.DISCOVERING:
            self._input(Input.DISCOVERY_FAILED)

    async def _register(self) -> None:
        assert self.coordinator is not None
        node, host, port = self.coordinator
        cfg = self.config
        try:
            # Logged in before RegisterConsumer: once it is sent the broker asks, not us.
            proto = await secure_connect.connect(self.reactor, host, port, cfg.client_id,
                                                 timeout_s=cfg.request_timeout_ms / 1000.0,
                                                 security=cfg.security)
        except AUTHENTICATION_ERRORS as e:
            if self.state is State.REGISTERING:
                self._authentication_failed(e)
            return
        except Exception as e:  # noqa: BLE001 - every connect failure means: rediscover
            self._problems.attempt_failed(f"connect to coordinator {node} at {host}:{port} failed: {e}",
                                 f"connect:{type(e).__name__}")
            if self.state is State.REGISTERING:
                self._input(Input.CHANNEL_LOST)
            return
        if self.state is not State.REGISTERING:
            proto.transport.loseConnection()
            return
        self._channel = proto
        proto.closed_d.addCallback(lambda _: self._channel_closed(proto))
        try:
            version = self._register_version
            resp = await request_with_timeout(
                # v1: the answer carries the session id the leave needs.
                proto, self.clock, ApiKey.REGISTER_CONSUMER, version,
                {"group_id": cfg.group_id, "consumer_id": cfg.consumer_id,
                 "topic_count": cfg.topic_count_json(), "auto_commit": cfg.auto_commit,
                 "auto_offset_reset": cfg.auto_offset_reset,
                 "session_timeout_ms": cfg.session_timeout_ms},
                cfg.request_timeout_ms / 1000.0, f"coordinator {host}:{port}")
        except Exception as e:  # noqa: BLE001 - the channel is gone either way
            self._problems.attempt_failed(f"RegisterConsumer to {host}:{port} failed: {e}",
                                 f"register:{type(e).__name__}")
            if version == 1 and isinstance(e, ConnectionClosed):
                # Maybe a broker without RegisterConsumer v1: the next attempt is v0 (this
                # registration then cannot leave early; the close takes the slow path).
                self._register_version = 0
            if self._channel is proto and self.state is State.REGISTERING:
                self._input(Input.CHANNEL_LOST)
            return
        if self._channel is not proto or self.state is not State.REGISTERING:
            return
        code = known_code(resp.error_code)
        if code is ErrorCode.NONE:
            self.log.info("{c} registered with coordinator {n} at {h}:{p}",
                          c=cfg.consumer_id, n=node, h=host, p=port)
            self.last_error = None
            self._was_member = True
            self._duplicate_since = None
            self._session_id = resp.session_id
            if version == 0:
                self.log.info("{c}: registered with RegisterConsumer v0 (no session id: this "
                              "member leaves the slow way)", c=cfg.consumer_id)
                self._register_version = 1
            self._input(Input.REGISTERED)
        elif code in RETRIABLE_REGISTRATION or (isinstance(code, ErrorCode) and code.retriable):
            self._problems.attempt_failed(f"registration refused: {code!r}", f"refused:{code!r}")
            self._input(Input.REFUSED)
        elif code is ErrorCode.DUPLICATE_CONSUMER_ID and self._still_our_old_session():
            # We were a member and came back (our coordinator went silent, or the connection
            # broke without the coordinator seeing it): it still holds our old session until
            # its pings fail, at most 5/3 of a session timeout. Retry until then; past it, the
            # id really is taken.
            self.last_error = ("registration refused: DUPLICATE_CONSUMER_ID (the coordinator "
                               "still holds this consumer's previous session; retrying)")
            self._input(Input.REFUSED)
        else:
            self.error = RegistrationRejected(code, resp.error_message)
            self.last_error = str(self.error)
            self.log.error("{c}: {e}", c=cfg.consumer_id, e=self.error)
            self._input(Input.REJECTED)

    def _authentication_failed(self, cause: BaseException) -> None:
        """A login or TLS handshake was refused: fail the consumer (DISCOVERING or
        REGISTERING -> FAILED); ``poll``/``get`` raise :class:`AuthenticationFailed`."""
        self.error = AuthenticationFailed(cause)
        self.last_error = str(self.error)
        self.log.error("{c}: {e}", c=self.config.consumer_id, e=self.error)
        self._input(Input.REJECTED)

    def _still_our_old_session(self) -> bool:
        """True while a DUPLICATE_CONSUMER_ID can be this consumer's own previous session:
        it was registered before, and less than two session timeouts have passed since the
        first refusal (the coordinator fails a silent member within 5/3 of one)."""
        if not self._was_member:
            return False
        now = self.clock.seconds()
        if self._duplicate_since is None:
            self._duplicate_since = now
        return now - self._duplicate_since < 2 * self.config.session_timeout_ms / 1000.0

    def _channel_closed(self, proto: KafkaClientProtocol) -> None:
        if proto is not self._channel:
            return
        self._channel = None
        self.last_error = "coordinator channel closed"
        self._input(Input.CHANNEL_LOST)

    def _close_channel(self) -> None:
        ch, self._channel = self._channel, None
        if self._silence is not None and self._silence.active():
            self._silence.cancel()
        self._silence = None
        if ch is not None and ch.transport is not None:
            # Later on the reactor: the answer being written now must leave first.
            self.clock.callLater(0, ch.transport.loseConnection)

    def _arm_silence(self) -> None:
        timeout = self.config.session_timeout_ms / 1000.0
        if self._silence is not None and self._silence.active():
            self._silence.reset(timeout)
        else:
            self._silence = self.clock.callLater(timeout, self._silent)

    def check_silence(self) -> bool:
        """Act on the silence timer now if it is overdue; True if it was.

        After the process was paused (SIGSTOP, a stalled VM, a long collection) the reactor
        reads what arrived meanwhile before it runs the timers that came due, so a fetch
        answer could hand out records after the coordinator had already given this member's
        partitions away. The fetchers call this before handling an answer: a member whose
        session ran out stops fetching (and drops that answer) first."""
        s = self._silence
        if s is None or not s.active() or s.getTime() > self.clock.seconds():
            return False
        s.cancel()
        self._silent()
        return True

    def _silent(self) -> None:
        self._silence = None
        self.last_error = (f"no request from the coordinator for {self.config.session_timeout_ms}"
                           " ms")
        self.log.warn("{c}: {e}; registering again", c=self.config.consumer_id,
                      e=self.last_error)
        self._input(Input.SILENCE)

    # -- coordinator requests -------------------------------------------------------------------

    def _on_request(self, channel: KafkaClientProtocol, request: Any) -> Any:
        if channel is not self._channel:
            return None  # a channel we already gave up: no answer
        self._arm_silence()
        api = request.header.api_key
        if api == ApiKey.PING:
            event = Input.PING
        elif api == ApiKey.STOP_FETCHER:
            event = Input.STOP_FETCHER
        elif api == ApiKey.START_FETCHER:
            event = Input.START_FETCHER
        else:
            self.log.warn("unexpected request {api} on the coordinator channel", api=api)
            return None
        return self._input(event, request)

    def _start_fetchers(self, request: Any) -> defer.Deferred | None:
        body = request.body
        cfg = self.config
        self.cluster.update_brokers((b.node_id, b.host, b.port) for b in body.brokers)
        self.membership.generation = body.generation_id
        parts: dict[tuple[str, int], PartitionState] = {}
        for owned in body.ownership:
            for p in owned.partitions:
                stream = self._stream_for(p.topic, owned.consumer_thread_id)
                parts[(p.topic, p.partition)] = PartitionState(p.topic, p.partition, stream,
                                                               p.offset)
        self.parts = parts
        self.log.info("{c}: generation {g}, fetching {n} partitions", c=cfg.consumer_id,
                      g=body.generation_id, n=len(parts))
        self.fetchers.start(parts.values())
        self._problems.check_topics()
        return self._listen("assigned", sorted(parts))

    def _stream_for(self, topic: str, thread_id: str) -> MessageStream:
        key = (topic if self.config.pattern == "static" else None, thread_id)
        s = self.streams.get(key)
        if s is None:
            # A thread id we did not announce: keep the data flowing through a stream of
            # the same topic rather than drop the partition.
            self.log.warn("StartFetcher names unknown stream {k}", k=key)
            candidates = [v for k, v in self.streams.items() if k[0] == key[0]]
            s = candidates[0] if candidates else self._make_stream(key)
            if not candidates:
                self.messages.add(s)
        return s

    def _revoke(self) -> defer.Deferred | None:
        if not self.parts:
            return None
        return self._listen("revoked", sorted(self.parts))

    def _listen(self, what: str, partitions: list[tuple[str, int]]) -> defer.Deferred | None:
        fn = getattr(self.listener, what, None)
        if fn is None:
            return None
        try:
            r = fn(partitions)
        except Exception:
            self.log.failure("assignment listener {w} failed", w=what)
            return None
        if isinstance(r, defer.Deferred) or hasattr(r, "__await__"):
            d = r if isinstance(r, defer.Deferred) else defer.ensureDeferred(r)
            return d.addErrback(lambda f: self.log.failure("assignment listener {w} failed", f,
                                                           w=what))
        return None

    def _release(self) -> None:
        for ps in self.parts.values():
            ps.active = False
        self.parts = {}

    def _partition_failed(self, ps: PartitionState, why: str) -> None:
        self.last_error = f"{ps.topic}-{ps.partition}: {why}"
        if self.state is State.FETCHING:
            self._input(Input.FETCH_FAILED)

    def _finish(self) -> None:
        self.fetchers.stop()
        self._release()
        for t in (self._silence, self._close_timer, self._discover_timer):
            if t is not None and t.active():
                t.cancel()
        self._silence = self._close_timer = self._discover_timer = None
        self._leave.cancel()
        for s in self.streams.values():
            s.close(self.error)
        self.messages.close(self.error)
        # The channel's close is queued behind the last answer; the rest can go now.
        self.clock.callLater(0, self.cluster.close)
        if not self._closed_d.called:
            self._closed_d.callback(None)
