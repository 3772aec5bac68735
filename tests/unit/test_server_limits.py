"""The limits the broker's protocol shell enforces, driven through StringTransport on a
task.Clock: connections refused at accept (per address, in total, with overrides), idle
connections closed (but never one with a request in flight or a coordinator channel), and the
request-memory pool: a frame reserves its bytes when its size arrives, a connection that cannot
have them stops reading and resumes, in order, when memory frees."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from twisted.internet import defer, task
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.testing import StringTransport
from twisted.logger import globalLogPublisher

from broker_core.metrics import BrokerMetrics
from broker_core.server.channel import ServerChannel
from broker_core.server.connection_limits import ConnectionLimiter, ServerLimits
from broker_core.server.memory_pool import MemoryPool
from broker_core.server.protocol import NO_RESPONSE, KafkaServerFactory
from broker_core.wire import framing


class RawFactory(KafkaServerFactory):
    """Hands every frame to the handler as is (its first 4 bytes an id), so frames of any size
    can be sent without encoding a real request."""

    def decode_request(self, frame):  # type: ignore[override]
        cid = struct.unpack_from(">i", frame)[0]
        return SimpleNamespace(header=SimpleNamespace(api_key=18, api_version=0,
                                                      correlation_id=cid), body=frame)


def make_factory(handler=None, *, limits=None, max_frame_bytes=framing.MAX_FRAME_BYTES,
                 **kw):
    """``(factory, clock, metrics)``: a RawFactory whose handler records the frame ids it sees
    in ``factory.seen`` (unless ``handler`` is given)."""
    clock = task.Clock()
    metrics = BrokerMetrics()
    seen: list[int] = []

    def record(req, proto):
        seen.append(req.header.correlation_id)
        return NO_RESPONSE

    factory = RawFactory(handler or record, clock=clock, metrics=metrics, limits=limits,
                         max_frame_bytes=max_frame_bytes, **kw)
    factory.seen = seen
    return factory, clock, metrics


def connect(factory, host="10.0.0.1", port=40000):
    """``(transport, protocol)``, or ``(None, None)`` when the factory refused at accept."""
    address = (IPv6Address if ":" in host else IPv4Address)("TCP", host, port)
    proto = factory.buildProtocol(address)
    if proto is None:
        return None, None
    transport = StringTransport(peerAddress=address)
    proto.makeConnection(transport)
    return transport, proto


def lose(proto):
    """What the reactor does once a transport's loseConnection has taken effect."""
    proto.connectionLost(None)


def raw_frame(cid, size):
    """A frame of ``size`` bytes (>= 4) starting with the id ``cid``."""
    return struct.pack(">ii", size, cid) + b"x" * (size - 4)


# -- refused at accept --------------------------------------------------------------------------


def test_connections_over_the_per_ip_limit_are_refused_at_accept_and_counted_and_logged_once():
    limits = ServerLimits(connections=ConnectionLimiter(max_connections=100, max_per_ip=3))
    factory, clock, metrics = make_factory(limits=limits)
    lines = []
    observer = lines.append
    globalLogPublisher.addObserver(observer)
    try:
        open_ = [connect(factory, port=40000 + i) for i in range(3)]
        refused = [connect(factory, port=41000 + i) for i in range(50)]
        clock.advance(61)
        refused.append(connect(factory, port=42000))
    finally:
        globalLogPublisher.removeObserver(observer)
    assert all(p is not None for _, p in open_)
    assert all(p is None for _, p in refused)
    assert metrics.connections_refused_total.labels(
        reason="max_connections_per_ip")._value.get() == 51
    refusal_lines = [e for e in lines if "refused a connection" in e.get("log_format", "")]
    # One line, then one a minute later telling the 49 refused silently in between.
    assert [(e["host"], e["reason"], e["suppressed"]) for e in refusal_lines] == [
        ("10.0.0.1", "max_connections_per_ip", 0), ("10.0.0.1", "max_connections_per_ip", 49)]
    assert connect(factory, host="10.0.0.2")[1] is not None  # another address is fine
    lose(open_[0][1])  # a closed connection frees its place
    assert connect(factory, port=43000)[1] is not None


def test_total_limit_and_per_ip_overrides():
    limits = ServerLimits(connections=ConnectionLimiter(
        max_connections=4, max_per_ip=1, overrides={"10.0.0.9": 3}))
    factory, _, metrics = make_factory(limits=limits)
    assert [connect(factory, "10.0.0.9", 1 + i)[1] is not None for i in range(4)] == [
        True, True, True, False]
    assert connect(factory, "10.0.0.1")[1] is not None  # 4 in total now
    assert connect(factory, "10.0.0.2")[1] is None  # over max.connections
    assert metrics.connections_refused_total.labels(reason="max_connections")._value.get() == 1
    assert limits.connections.total == 4
    for proto in list(factory.connections):
        lose(proto)
    assert (limits.connections.total, limits.connections.per_ip) == (0, {})


def test_an_ipv4_client_on_an_ipv6_listener_is_counted_and_named_by_its_ipv4_address():
    """An IPv6 wildcard listener accepts IPv4 clients as ``::ffff:a.b.c.d``: the per-address
    limit, its overrides and the connection's peer host (what ACL hosts match) use the plain
    IPv4 address, so one client is one host whichever family accepted it."""
    limits = ServerLimits(connections=ConnectionLimiter(
        max_connections=100, max_per_ip=1, overrides={"10.0.0.9": 2}))
    factory, _, _ = make_factory(limits=limits)
    _, mapped = connect(factory, "::ffff:10.0.0.9", 1)
    _, plain = connect(factory, "10.0.0.9", 2)
    assert mapped is not None and plain is not None  # the override for 10.0.0.9 applies
    assert connect(factory, "::ffff:10.0.0.9", 3)[1] is None  # both counted as one host
    assert limits.connections.per_ip == {"10.0.0.9": 2}
    assert mapped.security.peer_host == "10.0.0.9" == plain.security.peer_host
    _, v6 = connect(factory, "2001:db8:0:0::1", 4)
    assert v6.security.peer_host == "2001:db8::1"  # a real IPv6 address, canonical
    for proto in list(factory.connections):
        lose(proto)
    assert limits.connections.per_ip == {}


# -- idle connections ---------------------------------------------------------------------------


def test_idle_connections_are_closed_after_the_idle_time_and_activity_defers_it():
    factory, clock, metrics = make_factory(limits=ServerLimits(idle_s=10.0))
    quiet_t, quiet = connect(factory, port=1)
    talking_t, talking = connect(factory, port=2)
    clock.advance(9)
    talking.dataReceived(b"\x00")  # one byte of a size prefix: activity all the same
    clock.advance(1)
    assert quiet_t.disconnecting and not talking_t.disconnecting
    lose(quiet)
    clock.advance(8.9)
    assert not talking_t.disconnecting
    clock.advance(0.1)
    assert talking_t.disconnecting
    lose(talking)
    assert metrics.disconnects_total.labels(reason="idle")._value.get() == 2
    assert clock.getDelayedCalls() == []  # no connection, no timer


def test_a_request_in_flight_is_not_idle_and_idleness_counts_from_its_response():
    waiting = []

    def long_poll(req, proto):
        waiting.append(defer.Deferred())
        return waiting[-1]

    factory, clock, _ = make_factory(long_poll, limits=ServerLimits(idle_s=10.0))
    transport, proto = connect(factory)
    proto.dataReceived(raw_frame(1, 8))
    clock.advance(100)  # a long poll held far longer than the idle time
    assert not transport.disconnecting
    waiting[0].callback(NO_RESPONSE)  # the request leaves flight at 100
    clock.advance(9.9)
    assert not transport.disconnecting
    clock.advance(0.1)
    assert transport.disconnecting


def test_a_coordinator_channel_is_never_closed_as_idle():
    factory, clock, _ = make_factory(limits=ServerLimits(idle_s=10.0))
    transport, proto = connect(factory)
    proto.attach_channel(ServerChannel())
    clock.advance(1000)
    assert not transport.disconnecting
    lose(proto)
    assert clock.getDelayedCalls() == []


# -- responses to a peer that does not read, and closes that finish --------------------------


def answering_factory(**kw):
    """A RawFactory that answers every frame with its id, recording what it handled."""
    seen: list[int] = []

    def answer(req, proto):
        seen.append(req.header.correlation_id)
        return {"id": req.header.correlation_id}

    factory, clock, metrics = make_factory(answer, **kw)
    factory.seen = seen
    return factory, clock, metrics


def test_the_connection_is_its_transports_streaming_producer():
    factory, _, _ = make_factory()
    transport, proto = connect(factory)
    assert transport.producer is proto and transport.streaming


def test_a_full_write_buffer_stops_dispatch_and_reading_until_it_drains():
    """A peer that sends requests but never reads their answers: once the transport says its
    write buffer is full, the frames already read wait undispatched (their memory still
    reserved) and nothing more is read; they are answered in order once it drains."""
    pool = MemoryPool(1000)
    factory, clock, _ = answering_factory(limits=ServerLimits(pool=pool))
    transport, proto = connect(factory)

    def answer(req, p):
        factory.seen.append(req.header.correlation_id)
        if len(factory.seen) == 2:
            p.pauseProducing()  # what the TCP transport does when this write fills it
        return NO_RESPONSE

    factory.handler = answer
    proto.dataReceived(b"".join(raw_frame(i, 8) for i in range(1, 6)))
    assert factory.seen == [1, 2]  # the rest wait for the buffer to drain
    assert transport.producerState == "paused"  # and nothing more is read
    assert pool.in_use == 3 * 8  # what waits is still accounted for
    proto.resumeProducing()  # the transport drained its buffer
    assert transport.producerState == "producing"
    clock.advance(0)
    assert factory.seen == [1, 2, 3, 4, 5] and pool.in_use == 0


def test_a_close_waits_at_most_the_grace_period_for_a_peer_that_does_not_read():
    """Twisted's loseConnection waits forever for the write buffer to drain (and for a
    registered producer): a malformed frame's close unregisters and aborts after the grace."""
    from broker_core.server.protocol import CLOSE_GRACE_S

    factory, clock, _ = make_factory()
    transport, proto = connect(factory)
    proto.dataReceived(struct.pack(">i", -1))  # malformed: closed
    assert transport.producer is None and transport.disconnecting
    assert not getattr(transport, "disconnected", False)  # may flush what was written...
    clock.advance(CLOSE_GRACE_S)
    assert transport.disconnected  # ...for the grace period only: then aborted
    lose(proto)
    assert clock.getDelayedCalls() == []


def test_an_idle_close_aborts_at_once_and_frees_the_slot_and_reservation():
    pool = MemoryPool(1000)
    limits = ServerLimits(connections=ConnectionLimiter(10, 1), pool=pool, idle_s=10.0)
    factory, clock, _ = make_factory(limits=limits)
    transport, proto = connect(factory)
    proto.dataReceived(raw_frame(1, 100)[:10])  # a partial frame, then silence
    assert pool.in_use == 100
    clock.advance(10)
    assert transport.disconnected and transport.producer is None
    lose(proto)  # what the reactor does once the abort took effect
    assert pool.in_use == 0 and limits.connections.total == 0


# -- the request-memory pool --------------------------------------------------------------------


def test_frame_reserves_its_size_when_the_prefix_arrives_and_releases_when_dispatched():
    pool = MemoryPool(100)
    factory, _, metrics = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    metrics.track_request_memory(pool)
    _, proto = connect(factory)
    frame = raw_frame(1, 80)
    proto.dataReceived(frame[:4])  # the size alone
    assert pool.in_use == 80
    assert metrics.registry.get_sample_value("sluice_request_memory_bytes") == 80
    proto.dataReceived(frame[4:])
    assert factory.seen == [1] and pool.in_use == 0


def test_a_connection_that_cannot_have_memory_stops_reading_and_resumes_when_it_frees():
    pool = MemoryPool(100)
    factory, clock, metrics = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    metrics.track_request_memory(pool)
    slow_t, slow = connect(factory, port=1)
    other_t, other = connect(factory, port=2)
    big = raw_frame(1, 80)
    slow.dataReceived(big[:50])  # a partial sender holds 80
    second = raw_frame(2, 60)
    other.dataReceived(second[:10])  # 60 more would not fit: paused, body not parsed
    assert other_t.producerState == "paused"
    assert (pool.in_use, pool.waiting) == (80, 1)
    assert metrics.registry.get_sample_value("sluice_request_memory_waiting_connections") == 1
    slow.dataReceived(big[50:])  # the big frame completes and is dispatched: 80 released
    assert other_t.producerState == "producing" and slow_t.producerState == "producing"
    assert pool.in_use == 60  # granted to the waiter
    clock.advance(0)
    assert factory.seen == [1]  # its frame is not complete yet
    other.dataReceived(second[10:])
    assert factory.seen == [1, 2] and pool.in_use == 0


def test_a_grant_during_the_connections_own_dispatch_keeps_its_frames_in_order():
    pool = MemoryPool(100)
    factory, clock, _ = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    _, holder = connect(factory, port=1)
    holder.dataReceived(raw_frame(9, 60)[:8])  # holds 60 until it completes
    transport, proto = connect(factory, port=2)
    # Three whole frames in one read: 30 fits, the second 30 waits until the first is
    # dispatched, then 40 waits until the second is: each is granted by this connection's
    # own release, in the middle of its own read, and parsed on the next turn of the clock.
    proto.dataReceived(raw_frame(1, 30) + raw_frame(2, 30) + raw_frame(3, 40))
    assert factory.seen == [1]
    clock.advance(0)  # runs the grants' calls, the one scheduled while it runs included
    assert factory.seen == [1, 2, 3]
    assert transport.producerState == "producing"
    assert pool.in_use == 60


def test_closing_a_connection_releases_its_partial_frame_and_its_wait():
    pool = MemoryPool(100)
    factory, _, _ = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    _, holder = connect(factory, port=1)
    _, waiter = connect(factory, port=2)
    holder.dataReceived(raw_frame(1, 90)[:20])
    waiter.dataReceived(raw_frame(2, 50)[:4])
    assert (pool.in_use, pool.waiting) == (90, 1)
    lose(waiter)
    lose(holder)
    assert (pool.in_use, pool.waiting) == (0, 0)


def test_a_peer_that_keeps_sending_while_paused_is_cut():
    pool = MemoryPool(100)
    factory, _, metrics = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    _, holder = connect(factory, port=1)
    holder.dataReceived(raw_frame(1, 100)[:4])
    transport, proto = connect(factory, port=2)
    proto.dataReceived(struct.pack(">i", 100))
    assert transport.producerState == "paused"
    proto.dataReceived(b"x" * framing.MAX_UNADMITTED_BYTES)  # the most a paused peer may send
    assert not transport.disconnecting
    proto.dataReceived(b"x")
    assert transport.disconnecting
    assert metrics.disconnects_total.labels(reason="buffer_overflow")._value.get() == 1


def test_an_oversized_frame_is_refused_at_its_size_before_anything_is_buffered_or_reserved():
    pool = MemoryPool(2048)
    factory, _, metrics = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=1024)
    transport, proto = connect(factory)
    proto.dataReceived(struct.pack(">i", 1025))
    assert transport.disconnecting
    assert proto._decoder.buffered == 0 and pool.in_use == 0
    assert metrics.disconnects_total.labels(reason="frame_too_large")._value.get() == 1


def test_the_quorum_listener_enforces_the_same_limits():
    from broker_core.raft.listener import (
        InboundRequests,
        QuorumListenerFactory,
        QuorumRequestHandler,
    )

    clock = task.Clock()
    pool = MemoryPool(200)
    limits = ServerLimits(connections=ConnectionLimiter(max_connections=10, max_per_ip=1),
                          pool=pool, idle_s=5.0)
    factory = QuorumListenerFactory(QuorumRequestHandler(InboundRequests(1), clock, 2.0),
                                    clock=clock, limits=limits, max_frame_bytes=100)
    transport, proto = connect(factory)
    assert connect(factory, port=2)[1] is None  # per-address limit
    proto.dataReceived(struct.pack(">i", 80))
    assert pool.in_use == 80  # its frames reserve from its pool
    proto.dataReceived(struct.pack(">i", 1))  # still a partial frame: activity
    clock.advance(5)
    assert transport.disconnecting  # and it closes idle connections
    lose(proto)
    assert pool.in_use == 0 and limits.connections.total == 0


# -- bounding what size prefixes reserve -------------------------------------------------------


def test_twelve_bytes_of_prefixes_from_one_host_cannot_stall_another_hosts_requests():
    """Three connections sending only sizes (the reviewer's 100+100+56 of 256): one host
    holds at most its share; a request from another host is served at once."""
    pool = MemoryPool(256, host_capacity=128)
    factory, _, _ = make_factory(limits=ServerLimits(pool=pool), max_frame_bytes=100)
    hogs = [connect(factory, "10.0.0.66", port=i) for i in range(3)]
    for (_, proto), size in zip(hogs, (100, 100, 56), strict=True):
        proto.dataReceived(struct.pack(">i", size))
    assert pool.per_host == {"10.0.0.66": 100} and pool.waiting == 2  # the others wait
    assert hogs[1][0].producerState == "paused"
    _, victim = connect(factory, "10.0.0.7")
    victim.dataReceived(raw_frame(7, 20))
    assert factory.seen == [7]


def test_a_frame_not_completed_within_the_read_timeout_is_closed_and_its_memory_freed():
    pool = MemoryPool(1000)
    factory, clock, metrics = make_factory(
        limits=ServerLimits(pool=pool, read_timeout_s=30.0, idle_s=600.0))
    transport, proto = connect(factory)
    frame = raw_frame(1, 500)
    proto.dataReceived(frame[:4])
    assert pool.in_use == 500
    for i in range(29):  # a trickle: activity, so never idle, but the frame is late
        clock.advance(1)
        proto.dataReceived(frame[4 + i:5 + i])
    assert not transport.disconnecting
    clock.advance(1)
    assert transport.disconnecting
    assert metrics.disconnects_total.labels(reason="request_read_timeout")._value.get() == 1
    lose(proto)
    assert pool.in_use == 0


def test_each_frame_gets_its_own_deadline_and_a_complete_one_none():
    factory, clock, _ = make_factory(limits=ServerLimits(read_timeout_s=10.0))
    transport, proto = connect(factory)
    first, second = raw_frame(1, 50), raw_frame(2, 50)
    proto.dataReceived(first[:10])
    clock.advance(9)
    proto.dataReceived(first[10:] + second[:10])  # the first completes; the second begins
    clock.advance(9)
    assert not transport.disconnecting  # the second has 10 s of its own
    proto.dataReceived(second[10:])
    assert factory.seen == [1, 2] and clock.getDelayedCalls() == []
    clock.advance(100)
    assert not transport.disconnecting  # nothing half-read: no deadline


def test_the_deadline_does_not_count_while_the_broker_stopped_reading():
    factory, clock, _ = make_factory(limits=ServerLimits(read_timeout_s=10.0))
    transport, proto = connect(factory)
    frame = raw_frame(1, 50)
    proto.dataReceived(frame[:10])
    proto.pauseProducing()  # the write buffer is full: the broker stopped reading
    clock.advance(25)
    assert not transport.disconnecting
    proto.resumeProducing()
    clock.advance(0)
    proto.dataReceived(frame[10:])
    assert factory.seen == [1]


def test_before_a_sasl_login_frames_reserve_from_the_small_unauthenticated_pool():
    """512 connections each sending a 512 KiB size before logging in used to hold 256 MiB of
    the listeners' pool: they now reserve from a pool of their own, capped per host."""
    from broker_core.security.principal import ListenerSettings, SecurityProtocol
    from broker_core.security.sasl import SaslSettings

    listeners, before_login = MemoryPool(10_000_000), MemoryPool(2 * 512 * 1024, 512 * 1024)
    factory, _, _ = make_factory(
        limits=ServerLimits(pool=listeners, unauthenticated_pool=before_login),
        listener=ListenerSettings("C", SecurityProtocol.SASL_PLAINTEXT), sasl=SaslSettings())
    first_t, first = connect(factory, "10.0.0.66", port=1)
    second_t, second = connect(factory, "10.0.0.66", port=2)
    first.dataReceived(struct.pack(">i", 512 * 1024))
    second.dataReceived(struct.pack(">i", 512 * 1024))
    assert listeners.in_use == 0  # the listeners' pool is untouched
    assert before_login.per_host == {"10.0.0.66": 512 * 1024}
    assert second_t.producerState == "paused"  # over its host's share: waits
    _, other = connect(factory, "10.0.0.7")
    other.dataReceived(raw_frame(7, 20))  # another host's login-time request is served
    assert factory.seen == [7]
    lose(first)
    assert second_t.producerState == "producing"  # granted in its turn
    lose(second)
    assert before_login.in_use == 0


def test_a_request_answered_later_keeps_its_memory_until_its_answer():
    """An acks=all Produce holds its request (the records) until its replicas answer: its
    bytes stay counted in the pool until then, not only until dispatch."""
    pool = MemoryPool(1000)
    pending: list[defer.Deferred] = []

    def later(req, proto):
        d = defer.Deferred()
        pending.append(d)
        return d

    factory, _, _ = make_factory(later, limits=ServerLimits(pool=pool))
    transport, proto = connect(factory)
    proto.dataReceived(raw_frame(1, 300) + raw_frame(2, 200))
    assert pool.in_use == 500  # both dispatched, both still held by their handler
    pending[1].callback(NO_RESPONSE)
    assert pool.in_use == 300
    pending[0].callback(NO_RESPONSE)
    assert pool.in_use == 0
    # A connection closed while a request is pending gives its bytes back at once, once.
    proto.dataReceived(raw_frame(3, 400))
    assert pool.in_use == 400
    lose(proto)
    assert pool.in_use == 0
    pending[2].callback(NO_RESPONSE)
    assert pool.in_use == 0


def test_a_close_from_inside_a_handler_still_writes_that_handlers_answer(monkeypatch):
    """The coordinator may close a channel while the RegisterConsumer that made it is being
    answered: the answer still leaves (then the close, bounded by the grace period)."""
    from broker_core.server import protocol as protocol_module

    # RawFactory's requests are not real ones: any body encodes as these bytes.
    monkeypatch.setattr(protocol_module.apis, "encode_response", lambda *a: [b"answer"])

    def close_then_answer(req, proto):
        proto.lose_connection()
        return {"closing": True}

    factory, clock, _ = make_factory(close_then_answer)
    transport, proto = connect(factory)
    proto.dataReceived(raw_frame(1, 8))
    assert transport.value().endswith(b"answer") and transport.disconnecting
    clock.advance(protocol_module.CLOSE_GRACE_S)
    assert transport.disconnected
