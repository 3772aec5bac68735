"""Three quorum nodes in one process on real TCP sockets (127.0.0.1, port 0), the real reactor,
logs and quorum-state files on disk, short timeouts: an election, 1,000 committed proposals on
every node in order, the leader cut off (listener and connections shut) and a new leader with
nothing committed lost, a restarted node catching up, and a wrong cluster id refused."""

from __future__ import annotations

import random
import time

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.config.quorum import VoterAddress
from broker_core.raft import RaftConfig, Role, wire
from broker_core.raft.entries import LogEntry
from broker_core.raft.messages import VoteRequest
from broker_core.raft.quorum_state import read_quorum_state
from broker_core.raft.service import QuorumNode
from broker_core.raft.storage import DiskRaftLog
from broker_core.rpc import connect_client
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import eventually

CLUSTER = "quorum-it"
# Short, but not so short that a loaded machine (two cores, other test runs) deposes leaders
# by itself: the fetch timeout is fifteen long polls. With 600 ms (three), a follower stalled
# for that long on a busy machine started an election while the leader took the test's 1,000
# proposals, and the ones not yet committed were rightly truncated away: the test claims a
# stable leader commits them all, so no follower may give up on it for a mere stall.
CONFIG = RaftConfig(election_timeout_ms=1000, fetch_timeout_ms=3000,
                    election_backoff_max_ms=1000, request_timeout_ms=2000, retry_backoff_ms=10,
                    fetch_max_wait_ms=200)


def _epoch_of(message) -> int:
    for name in ("candidate_epoch", "leader_epoch", "current_leader_epoch"):
        if hasattr(message, name):
            return getattr(message, name)
    raise AssertionError(f"no epoch in {message}")


def _time_ms() -> int:
    return int(time.time() * 1000)


class Member:
    """One node, its log on disk and what its subscribers saw."""

    def __init__(self, node_id: int, data_dir, persist_thread: bool) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.persist_thread = persist_thread
        self.raft_log = DiskRaftLog.open(data_dir, time_ms=_time_ms)
        self.node = QuorumNode(node_id, CLUSTER, self.raft_log, data_dir, CONFIG, reactor,
                               random.Random(node_id), persist_thread=persist_thread)
        self.committed: list[LogEntry] = []
        self.ahead_of_disk: list = []
        self.stopped = False

    def start(self, voters: dict[int, VoterAddress]) -> None:
        driver = self.node.start(voters)
        driver.subscribe_committed(self.committed.extend)
        # Persist before send, on the real network and (with the writer thread) across
        # threads: what the file says when a message is handed to the connections.
        network = self.node.network
        send = network.send

        def checked(envelope) -> None:
            persisted = read_quorum_state(self.data_dir)
            if persisted is None or persisted.leader_epoch < _epoch_of(envelope.message):
                self.ahead_of_disk.append(envelope)
            send(envelope)

        network.send = checked

    @property
    def driver(self):
        return self.node.driver

    async def crash(self) -> None:
        """Shut its listener and every connection, as a crash looks to the peers; the files
        are left as they are (no clean-shutdown marker)."""
        self.stopped = True
        await self.node.stop(graceful=False)
        self.raft_log.log.close()

    async def stop(self) -> None:
        self.stopped = True
        await self.node.stop(graceful=False)
        self.raft_log.close()


@pytest.fixture(params=[False, True], ids=["persist-on-reactor", "persist-on-thread"])
def quorum(tmp_path, request):
    members = {n: Member(n, tmp_path / f"node-{n}", request.param) for n in (1, 2, 3)}
    voters = {}
    for n, m in members.items():
        port = pytest_twisted.blockon(defer.Deferred.fromCoroutine(m.node.listen("127.0.0.1", 0)))
        voters[n] = VoterAddress(n, "127.0.0.1", port)
    for m in members.values():
        m.start(voters)
    yield members, voters
    for m in list(members.values()):
        if not m.stopped:
            pytest_twisted.blockon(defer.Deferred.fromCoroutine(m.stop()))


def leader(members: dict[int, Member]) -> Member | None:
    leaders = [m for m in members.values() if m.driver.role is Role.LEADER]
    return leaders[0] if len(leaders) == 1 else None


def settled_leader(members: dict[int, Member]) -> Member | None:
    """A leader every member follows, with its first entries committed everywhere."""
    first = leader(members)
    if first is None or first.driver.high_watermark < 2:
        return None
    epoch = first.driver.node.epoch
    if all(m.driver.node.epoch == epoch and m.driver.leader_id == first.node_id
           and m.driver.high_watermark >= 2 for m in members.values()):
        return first
    return None


@pytest_twisted.ensureDeferred
async def test_quorum_elects_commits_fails_over_and_a_restarted_node_catches_up(quorum):
    members, voters = quorum
    first = await eventually(lambda: settled_leader(members), timeout=45,
                             what="a leader followed by all")
    payloads = [f"entry-{i:04d}".encode().ljust(100, b".") for i in range(1000)]
    offsets = await defer.gatherResults([first.driver.propose(p) for p in payloads])
    assert offsets == sorted(offsets) and len(set(offsets)) == 1000
    hw = first.driver.high_watermark
    await eventually(lambda: all(m.driver.high_watermark >= hw for m in members.values()),
                     timeout=30, what="every node at the leader's high watermark")
    for m in members.values():
        assert [e.offset for e in m.committed] == list(range(len(m.committed)))
        data = [e.payload for e in m.committed if isinstance(e.payload, bytes)]
        assert data == payloads, m.node_id
    committed_before = list(first.committed[:hw])

    # The leader is cut off: its listener and connections go, as in a crash. What this
    # proves is that the survivors elect a new leader of a later epoch on their own and that it
    # commits, keeping every entry committed before; not how fast (the election timing is the
    # unit tests' business, on a Clock).
    await first.crash()
    survivors = {n: m for n, m in members.items() if m is not first}
    second = await eventually(lambda: leader(survivors), timeout=30,
                              what="a new leader among the survivors")
    offset = await second.driver.propose(b"after-failover")
    assert second.driver.node.epoch > first.driver.node.epoch
    for m in survivors.values():
        await eventually(lambda m=m: m.driver.high_watermark > offset, timeout=30,
                         what=f"node {m.node_id} commits the new entry")
        assert m.committed[:hw] == committed_before, "a committed entry was lost"

    # The old leader restarts on its files (same quorum-state and log) and catches up.
    restarted = Member(first.node_id, first.data_dir, first.persist_thread)
    assert restarted.raft_log.end_offset() >= hw
    members[first.node_id] = restarted
    await restarted.node.listen("127.0.0.1", voters[first.node_id].port)
    restarted.start(voters)
    assert restarted.driver.node.epoch >= first.driver.node.epoch  # from the quorum-state file
    await eventually(lambda: restarted.driver.high_watermark > offset, timeout=45,
                     what="the restarted node catches up")
    assert restarted.committed[:hw] == committed_before
    assert restarted.committed[offset].payload == b"after-failover"
    assert restarted.driver.leader_id == second.node_id
    for m in [*members.values(), first]:
        assert m.ahead_of_disk == [], f"node {m.node_id} sent ahead of its quorum state"


@pytest_twisted.ensureDeferred
async def test_a_request_with_another_cluster_id_is_refused_over_the_wire(quorum):
    members, voters = quorum
    address = voters[1]
    proto = await connect_client(reactor, address.host, address.port, "stranger")
    try:
        body = await proto.request(ApiKey.VOTE, 0, wire.request_body(
            VoteRequest("another-cluster", 99, 7, 0, 0)))
        answer = wire.response_from_body(ApiKey.VOTE, body)
        assert answer.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID
        assert not answer.vote_granted
        versions = await proto.request(ApiKey.API_VERSIONS, 3, {})
        # 17, 36: SaslHandshake, SaslAuthenticate (the cluster login of a brokers-only listener)
        assert {k.api_key for k in versions.api_keys} == {1, 17, 18, 36, 45, 52, 53, 54, 55,
                                                          59}
    finally:
        proto.transport.loseConnection()
    assert members[1].driver.node.epoch < 99  # the stranger's epoch was not taken up
