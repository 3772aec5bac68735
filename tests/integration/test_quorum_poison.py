"""Poison metadata on three real quorum nodes over TCP and on disk (``EmbeddedQuorum``, as a
broker in quorum mode runs it).

- A MetadataWrite whose command does not validate (another encoding version, damaged bytes,
  deep nesting, an oversize value) sent straight to the leader's quorum listener is refused
  with INVALID_REQUEST / UNSUPPORTED_VERSION and the reason, nothing is appended, and the same
  connection then carries a valid write.
- A poison entry that reaches the log anyway (proposed through the Raft layer, as a writer of
  another version past the leader's check would get it there) is skipped by every node, the
  entries after it apply, the trees stay equal; then all three nodes are stopped and started
  again over their disk logs: every one starts, replays the log, skips the poison again (its
  offset and reason recorded), and writes go on.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.config.quorum import VoterAddress
from broker_core.raft import RaftConfig
from broker_core.raft.embedded import EmbeddedQuorum
from broker_core.raft.metadata_commands import CreateNode, SetNode, encode
from broker_core.rpc import connect_client
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import eventually, free_port

FAST = RaftConfig(election_timeout_ms=200, fetch_timeout_ms=1000, election_backoff_max_ms=200,
                  request_timeout_ms=1000, retry_backoff_ms=20, fetch_max_wait_ms=200)
NEWER = b'{"v":2,"t":0,"c":"create","p":"/from-the-future","d":"","o":0,"s":false}'


def _now() -> int:
    return int(reactor.seconds() * 1000)


class Quorums:
    def __init__(self, base) -> None:
        self.base = base
        self.voters = {i: VoterAddress(i, "127.0.0.1", free_port()) for i in (1, 2, 3)}
        self.nodes: list[EmbeddedQuorum] = []

    async def start(self) -> None:
        self.nodes = [EmbeddedQuorum(i, "poison-test", self.voters,
                                     ("127.0.0.1", self.voters[i].port), self.base / f"q{i}",
                                     reactor, FAST) for i in self.voters]
        await defer.gatherResults([defer.Deferred.fromCoroutine(q.start()) for q in self.nodes])
        await eventually(lambda: self.leader is not None, what="a leader")

    async def stop(self) -> None:
        for q in self.nodes:
            await q.stop()

    @property
    def leader(self) -> EmbeddedQuorum | None:
        return next((q for q in self.nodes if q.client.leading), None)

    async def level(self) -> None:
        leader = self.leader
        await eventually(lambda: leader.node.driver.high_watermark == leader.raft_log.end_offset()
                         and all(q.client.tree.applied_offset
                                 == leader.node.driver.high_watermark - 1
                                 for q in self.nodes), what="every tree up to the leader's log")


@pytest.fixture
def quorums(tmp_path):
    qs = Quorums(tmp_path)
    try:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(qs.start()))
        yield qs
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(qs.stop()))


@pytest_twisted.ensureDeferred
async def test_the_leader_refuses_a_metadata_write_that_does_not_validate(quorums):
    leader = quorums.leader
    proto = await connect_client(reactor, "127.0.0.1", leader.listen[1], "poison-writer")
    try:
        for command, code, reason in [
                (NEWER, ErrorCode.UNSUPPORTED_VERSION, "version 2"),
                ('{"v":1,"t":0,"c":"set","p":"/a","d":"\u00e9","n":-1}'.encode(),
                 ErrorCode.INVALID_REQUEST, "not base64"),
                (b"[" * 100_000, ErrorCode.INVALID_REQUEST, "nests deeper"),
                (b'{"v":1,"t":0,"c":"check","p":"/a\\u0000","n":-1}', ErrorCode.INVALID_REQUEST,
                 "forbidden character"),
                (encode(SetNode("/a", b"x" * 800_000), _now()), ErrorCode.INVALID_REQUEST,
                 "longer than")]:
            end = leader.raft_log.end_offset()
            answer = await proto.request(ApiKey.METADATA_WRITE, 0,
                                         {"node_id": 9, "command": command})
            assert (answer.error_code, answer.offset) == (code, -1), answer
            assert reason in answer.error_message
            assert leader.raft_log.end_offset() == end  # nothing appended
        # The connection is fine, and a valid write goes through it.
        answer = await proto.request(ApiKey.METADATA_WRITE, 0, {
            "node_id": 9, "command": encode(CreateNode("/ok"), _now())})
        assert answer.error_code == 0 and answer.offset >= 0
    finally:
        proto.transport.loseConnection()
    await quorums.level()
    for q in quorums.nodes:
        assert q.client.tree.exists("/ok") is not None and sum(q.client.skipped.values()) == 0


@pytest_twisted.ensureDeferred
async def test_a_poison_entry_is_skipped_by_every_node_and_every_node_restarts(quorums):
    leader = quorums.leader
    follower = next(q for q in quorums.nodes if q is not leader)
    await follower.client.submit(encode(CreateNode("/before", b"1"), _now()))
    driver = leader.node.driver
    poison_offset, after = await defer.gatherResults([
        driver.propose(NEWER), driver.propose(encode(CreateNode("/after", b"2"), _now()))])
    assert after == poison_offset + 1
    await quorums.level()
    for q in quorums.nodes:
        assert q.client.tree.get("/after")[0] == b"2"
        assert q.client.tree.exists("/from-the-future") is None
        assert [(o, r) for o, r, _ in q.client.recent_skipped] == [
            (poison_offset, "unsupported_version")]
    assert len({q.client.tree.to_snapshot() for q in quorums.nodes}) == 1

    await quorums.stop()
    await quorums.start()  # the same directories and ports: every node replays its log
    await quorums.level()
    for q in quorums.nodes:
        assert [(o, r) for o, r, _ in q.client.recent_skipped] == [
            (poison_offset, "unsupported_version")]
        assert q.client.tree.get("/before")[0] == b"1"
        assert q.client.tree.get("/after")[0] == b"2"
    assert len({q.client.tree.to_snapshot() for q in quorums.nodes}) == 1
    follower = next(q for q in quorums.nodes if q is not quorums.leader)
    assert await follower.client.submit(encode(CreateNode("/again"), _now())) == "/again"
