"""The network IQuorumClient on three real quorum nodes over TCP (``EmbeddedQuorum``, as a
broker in quorum mode runs it): a follower's writes are forwarded to the leader with
MetadataWrite and it reads its own write at once; failed commands fail alike on every node;
heartbeats reach the leader's tracker through SessionHeartbeat; a quorum without a majority
fails a write with ConnectionLost after the timeout; the quorum listener advertises the two
APIs."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.metadata import ConnectionLost, NodeExists, SessionExpired
from broker_core.raft import RaftConfig
from broker_core.raft.config import VoterAddress
from broker_core.raft.embedded import EmbeddedQuorum
from broker_core.raft.metadata_commands import CreateNode, OpenSession, SetNode, encode
from broker_core.rpc import connect_client
from broker_core.wire.apis import ApiKey
from tests.support.cluster import eventually, free_port

#: Short timers: an election in 0.2-0.4 s.
FAST = RaftConfig(election_timeout_ms=200, fetch_timeout_ms=1000, election_backoff_max_ms=200,
                  request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=200)


def _quorums(base, ids=(1, 2, 3)) -> list[EmbeddedQuorum]:
    voters = {i: VoterAddress(i, "127.0.0.1", free_port()) for i in (1, 2, 3)}
    return [EmbeddedQuorum(i, "client-test", voters, ("127.0.0.1", voters[i].port),
                           base / f"q{i}", reactor, FAST) for i in ids]


async def _stop(quorums: list[EmbeddedQuorum]) -> None:
    for q in quorums:
        await q.stop()


@pytest.fixture
def quorums(tmp_path):
    qs = _quorums(tmp_path)

    async def start() -> None:
        await defer.gatherResults([defer.Deferred.fromCoroutine(q.start()) for q in qs])
        await eventually(lambda: any(q.client.leading for q in qs), what="a leader")

    try:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(start()))
        yield qs
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(_stop(qs)))


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
    (alone,) = _quorums(tmp_path, ids=(1,))
    alone.client.submit_timeout_s = 1.0
    await alone.start()
    try:
        with pytest.raises(ConnectionLost, match="no metadata quorum leader"):
            await alone.client.submit(encode(CreateNode("/x", b"", 0, False), _now()))
        with pytest.raises(ConnectionLost):
            await alone.client.heartbeat(1)
    finally:
        await alone.stop()
