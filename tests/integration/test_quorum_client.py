"""The network IQuorumClient on three real quorum nodes over TCP (``EmbeddedQuorum``, as a
broker in quorum mode runs it): a follower's writes are forwarded to the leader with
MetadataWrite and it reads its own write at once; failed commands fail alike on every node;
heartbeats reach the leader's tracker through SessionHeartbeat; a quorum without a majority
fails a write with ConnectionLost after the timeout; the quorum listener advertises the two
APIs; a forwarded write whose answer is lost (a proxy cuts the connection after the request)
is never resent: it succeeds exactly once if it applied, else fails with ConnectionLost."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.config.quorum import VoterAddress
from broker_core.metadata import ConnectionLost, NodeExists, SessionExpired
from broker_core.raft.embedded import EmbeddedQuorum
from broker_core.raft.metadata_commands import CreateNode, OpenSession, SetNode, encode
from broker_core.rpc import connect_client
from broker_core.wire.apis import ApiKey
from tests.support.cluster import eventually
from tests.support.cutting_proxy import CuttingProxy
from tests.support.embedded_quorums import embedded_quorums, stop_quorums


@pytest.fixture
def quorums(tmp_path):
    qs = embedded_quorums(tmp_path)

    async def start() -> None:
        await defer.gatherResults([defer.Deferred.fromCoroutine(q.start()) for q in qs])
        await eventually(lambda: any(q.client.leading for q in qs), what="a leader")

    try:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(start()))
        yield qs
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_quorums(qs)))


def _now() -> int:
    return int(reactor.seconds() * 1000)


@pytest_twisted.ensureDeferred
async def test_a_followers_write_is_forwarded_and_read_back_at_once(quorums):
    follower = next(q for q in quorums if not q.client.leading)
    result = await follower.client.submit(encode(CreateNode("/a", b"1", 0, False), _now()))
    assert result == "/a"
    assert follower.client.tree.get("/a")[0] == b"1"  # read-your-writes, no waiting
    # A failed command fails on the follower with the same typed error as on the leader.
    with pytest.raises(NodeExists):
        await follower.client.submit(encode(CreateNode("/a", b"2", 0, False), _now()))
    stat = await follower.client.submit(encode(SetNode("/a", b"3", 0), _now()))
    assert stat.version == 1
    trees = [q.client.tree for q in quorums]
    await eventually(lambda: len({t.applied_offset for t in trees}) == 1, what="trees level")
    assert len({t.to_snapshot() for t in trees}) == 1


@pytest_twisted.ensureDeferred
async def test_heartbeats_through_a_follower_reach_the_leaders_tracker(quorums):
    leader = next(q for q in quorums if q.client.leading)
    follower = next(q for q in quorums if not q.client.leading)
    sid = await follower.client.submit(encode(OpenSession(6000), _now()))
    assert leader.client.sessions.is_live(sid)
    await follower.client.heartbeat(sid)
    with pytest.raises(SessionExpired):
        await follower.client.heartbeat(sid + 1000)


@pytest_twisted.ensureDeferred
async def test_the_quorum_listener_advertises_the_client_apis(quorums):
    port = quorums[0].listen[1]
    proto = await connect_client(reactor, "127.0.0.1", port, "test")
    try:
        resp = await proto.request(ApiKey.API_VERSIONS, 0, {})
    finally:
        proto.transport.loseConnection()
    keys = {k.api_key for k in resp.api_keys}
    assert {int(ApiKey.METADATA_WRITE), int(ApiKey.SESSION_HEARTBEAT)} <= keys


@pytest_twisted.ensureDeferred
async def test_writes_continue_after_the_leader_stops(quorums):
    leader = next(q for q in quorums if q.client.leading)
    rest = [q for q in quorums if q is not leader]
    await rest[0].client.submit(encode(CreateNode("/before", b"", 0, False), _now()))
    await leader.stop()
    await eventually(lambda: any(q.client.leading for q in rest), timeout=10,
                     what="a new leader")
    follower = next(q for q in rest if not q.client.leading)
    assert await follower.client.submit(encode(CreateNode("/after", b"", 0, False),
                                               _now())) == "/after"
    assert follower.client.tree.exists("/before") is not None


@pytest_twisted.ensureDeferred
async def test_without_a_majority_a_write_fails_with_connection_lost(tmp_path):
    (alone,) = embedded_quorums(tmp_path, ids=(1,))
    alone.client.submit_timeout_s = 1.0
    await alone.start()
    try:
        with pytest.raises(ConnectionLost, match="no metadata quorum leader"):
            await alone.client.submit(encode(CreateNode("/x", b"", 0, False), _now()))
        with pytest.raises(ConnectionLost):
            await alone.client.heartbeat(1)
    finally:
        await alone.stop()


# -- a forwarded write whose answer is lost ---------------------------------------------------


@pytest.fixture
def cut_off(quorums):
    """``(leader, follower, proxy)``: the follower's quorum client reaches the leader's
    listener only through a :class:`CuttingProxy` watching MetadataWrite (its Raft traffic
    goes direct, so it goes on applying the log)."""
    leader = next(q for q in quorums if q.client.leading)
    follower = next(q for q in quorums if not q.client.leading)
    proxy = CuttingProxy(reactor, ("127.0.0.1", leader.listen[1]), ApiKey.METADATA_WRITE)
    port = pytest_twisted.blockon(defer.Deferred.fromCoroutine(proxy.start()))
    follower.client.addresses[leader.node_id] = VoterAddress(leader.node_id, "127.0.0.1", port)
    try:
        yield leader, follower, proxy
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(proxy.stop()))


def offsets_of(quorum: EmbeddedQuorum, payload: bytes) -> list[int]:
    """The offsets of the entries of ``quorum``'s log that carry exactly ``payload``."""
    log = quorum.raft_log
    return [e.offset for e in log.read(0, log.end_offset()) if e.payload == payload]


@pytest_twisted.ensureDeferred
async def test_a_write_whose_answer_is_lost_but_that_applied_succeeds_exactly_once(cut_off):
    leader, follower, proxy = cut_off
    assert await follower.client.submit(encode(CreateNode("/w", b"1", 0, False),
                                               _now())) == "/w"
    assert (proxy.seen, proxy.cuts) == (1, 0)  # the proxy passes writes through

    # The leader gets the set and commits it; the follower's connection closes before the
    # answer. The client must not resend it, and must find its result in the applied log.
    proxy.cut_next(forward=True)
    command = encode(SetNode("/w", b"2", 0), _now())
    stat = await follower.client.submit(command)
    assert (proxy.seen, proxy.cuts) == (2, 1)  # sent once, never again
    assert stat.version == 1 and follower.client.tree.get("/w")[0] == b"2"
    # Applied exactly once, at the offset the caller was given as the node's mzxid.
    await eventually(lambda: follower.client.tree.applied_offset
                     == leader.client.tree.applied_offset, what="trees level")
    assert offsets_of(leader, command) == [stat.mzxid]
    assert offsets_of(follower, command) == [stat.mzxid]


@pytest_twisted.ensureDeferred
async def test_a_write_whose_answer_is_lost_and_that_never_applied_fails_connection_lost(
        cut_off):
    leader, follower, proxy = cut_off
    follower.client.submit_timeout_s = 1.0  # the deadline of the watch for its payload
    # The request never reaches the leader, but to the client it is the same as a lost
    # answer: a connection lost after sending. It cannot know, so it must not resend.
    proxy.cut_next(forward=False)
    command = encode(CreateNode("/never", b"", 0, False), _now())
    with pytest.raises(ConnectionLost, match="did not appear in the metadata log"):
        await follower.client.submit(command)
    assert (proxy.seen, proxy.cuts) == (1, 1)  # sent once, never again

    # The client works on, and the lost command never applies under its payload.
    assert await follower.client.submit(encode(CreateNode("/later", b"", 0, False),
                                               _now())) == "/later"
    assert proxy.seen == 2
    await eventually(lambda: follower.client.tree.applied_offset
                     == leader.client.tree.applied_offset, what="trees level")
    for q in (leader, follower):
        assert offsets_of(q, command) == [] and q.client.tree.exists("/never") is None
