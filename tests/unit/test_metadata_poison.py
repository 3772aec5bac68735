"""A metadata entry no node can apply, committed anyway (poison): three real ``RaftDriver``s on
an injected clock, each with the ``NetworkQuorumClient`` a broker runs and a store on one.

The poison (a command of a newer encoding version, damaged bytes) is proposed straight through
the Raft layer, as a newer or broken writer would get it into the log, between valid commands
of the same reactor turn (so it is committed and delivered in one chunk with them). Every node
skips it alike (counted, offset and reason remembered), applies the commands after it, and the
trees stay equal; the store's watches and writes go on. Restarted over the same logs, every node
starts, replays the log and skips the poison again. And a poison *submitted* is refused before
it is proposed: by the client itself, and by the leader's MetadataWrite handler (for a writer
that skipped its own check), with nothing appended."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core.raft import InMemoryRaftLog
from broker_core.raft.driver import RaftDriver
from broker_core.raft.metadata_commands import (
    CreateNode,
    MalformedCommand,
    SetNode,
    UnsupportedCommandVersion,
    encode,
)
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.roles import Role
from broker_core.wire.errors import ErrorCode
from tests.support.raft_loopback import CONFIG, Loopback, leader_of, run_until

NEWER = b'{"v":2,"t":0,"c":"create","p":"/from-the-future","d":"","o":0,"s":false,"x":1}'
DAMAGED = b'{"v":1,"t":0,"c":"set","p":"/a","d":"\xc3\xa9","n":-1}'


class Quorum:
    """Three drivers over one loopback, each with a client; restartable over the same logs."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.clock = task.Clock()
        self.clock.advance(1000)
        self.loop = Loopback(self.clock)
        self.logs = {n: InMemoryRaftLog() for n in (1, 2, 3)}
        self.clients: dict[int, NetworkQuorumClient] = {}
        self.skips: dict[int, list] = {}
        self.start()

    def start(self) -> None:
        rng = random.Random(7)
        self.loop.drivers.clear()
        for n, log in self.logs.items():
            self.loop.drivers[n] = RaftDriver(n, "poison", frozenset(self.logs), log,
                                              self.tmp_path / str(n), CONFIG, self.clock,
                                              self.loop.transport_for(n),
                                              random.Random(rng.random()))
        for n, driver in self.loop.drivers.items():
            driver.start()
            client = NetworkQuorumClient(n, {}, self.clock)
            self.skips[n] = []
            client.on_skip = lambda offset, reason, n=n: self.skips[n].append((offset, reason))
            client.attach(driver)
            self.clients[n] = client
        run_until(self.clock, lambda: self.leader is not None and all(
            d.role in (Role.LEADER, Role.FOLLOWER) for d in self.loop.drivers.values()),
            within_s=10)
        self.level()

    def stop(self) -> None:
        for n, driver in self.loop.drivers.items():
            self.clients[n].stop()
            driver.stop()

    @property
    def leader(self) -> RaftDriver | None:
        return leader_of(self.loop.drivers)

    def level(self, *outcomes: list) -> None:
        """Until ``outcomes`` (see :func:`_result`) are known, the leader's whole log is
        committed and every tree has applied it."""
        def done() -> bool:
            leader = self.leader
            return (all(outcomes) and leader is not None
                    and leader.high_watermark == leader.raft_log.end_offset()
                    and all(c.tree.applied_offset == leader.high_watermark - 1
                            for c in self.clients.values()))

        run_until(self.clock, done, within_s=10)

    def trees(self) -> set[bytes]:
        return {c.tree.to_snapshot() for c in self.clients.values()}


@pytest.fixture
def quorum(tmp_path):
    q = Quorum(tmp_path)
    yield q
    q.stop()


def _result(d: defer.Deferred):
    out: list = []
    d.addBoth(out.append)
    return out


def test_a_committed_poison_entry_is_skipped_alike_and_the_entries_after_it_apply(quorum):
    leader = quorum.leader
    client = quorum.clients[leader.node_id]
    store = QuorumMetadataStore(client, reactor=quorum.clock)
    client.add_apply_listener(store._on_apply)  # what store.start() does
    seen: list = []
    store.watch_data("/b", lambda data, stat: seen.append(data))
    # One reactor turn: one group, committed and delivered as one chunk.
    proposed = [leader.propose(encode(CreateNode("/a", b"1"), 1)), leader.propose(NEWER),
                leader.propose(DAMAGED), leader.propose(encode(CreateNode("/b", b"2"), 2)),
                leader.propose(encode(SetNode("/a", b"3"), 3))]
    outcomes = [_result(d) for d in proposed]
    quorum.level(*outcomes)
    offsets = [o[0] for o in outcomes]
    assert all(isinstance(o, int) for o in offsets), outcomes
    for c in quorum.clients.values():
        assert c.tree.get("/a")[0] == b"3" and c.tree.get("/b")[0] == b"2"
        assert c.tree.exists("/from-the-future") is None
        assert dict(c.skipped) == {"unsupported_version": 1, "malformed": 1}
        assert [(o, r) for o, r, _ in c.recent_skipped] == [
            (offsets[1], "unsupported_version"), (offsets[2], "malformed")]
        assert "version 2" in c.recent_skipped[0][2]
    assert all(s == [(offsets[1], "unsupported_version"), (offsets[2], "malformed")]
               for s in quorum.skips.values())
    assert len(quorum.trees()) == 1  # the state machines stay equal
    assert seen[-1] == b"2"  # the watch fired for the entry after the poison
    # The store keeps writing and reading.
    done = _result(store.set("/b", b"4"))
    quorum.level(done)
    assert done[0].version == 1 and seen[-1] == b"4"


def test_every_node_restarts_over_a_log_holding_poison_and_skips_it_again(quorum):
    leader = quorum.leader
    proposed = [leader.propose(NEWER), leader.propose(encode(CreateNode("/after", b"x"), 1))]
    outcomes = [_result(d) for d in proposed]
    quorum.level(*outcomes)
    poison_offset = outcomes[0][0]
    before = quorum.trees()
    assert len(before) == 1
    quorum.stop()

    quorum.start()  # new drivers and clients over the same logs and quorum-state files
    assert len(quorum.trees()) == 1
    for n, c in quorum.clients.items():
        assert c.tree.get("/after")[0] == b"x"
        assert quorum.skips[n] == [(poison_offset, "unsupported_version")]
    # And the quorum takes writes again.
    client = quorum.clients[quorum.leader.node_id]
    done = _result(client.submit(encode(CreateNode("/again"), 5)))
    quorum.level(done)
    assert done == ["/again"]


@pytest.mark.parametrize("payload, error", [
    (NEWER, UnsupportedCommandVersion), (DAMAGED, MalformedCommand),
    (b"[" * 100_000, MalformedCommand), (encode(SetNode("/a", b"x" * 800_000)), MalformedCommand)])
def test_a_poison_submitted_is_refused_before_it_is_proposed(quorum, payload, error):
    end = {n: log.end_offset() for n, log in quorum.logs.items()}
    for client in quorum.clients.values():  # the leader's and the followers'
        out = _result(client.submit(payload))
        assert len(out) == 1 and out[0].check(error), out  # at once, no retry
    quorum.clock.advance(1)
    assert {n: log.end_offset() for n, log in quorum.logs.items()} == end


@pytest.mark.parametrize("payload, code", [
    (NEWER, ErrorCode.UNSUPPORTED_VERSION), (DAMAGED, ErrorCode.INVALID_REQUEST),
    (b"\xff" * 10, ErrorCode.INVALID_REQUEST), (b"{" * 100_000, ErrorCode.INVALID_REQUEST)])
def test_the_leader_refuses_a_metadata_write_that_does_not_validate(quorum, payload, code):
    leader = quorum.leader
    end = leader.raft_log.end_offset()
    request = SimpleNamespace(body=SimpleNamespace(node_id=2, command=payload))
    answer = quorum.clients[leader.node_id]._serve_write(request, None)
    assert answer["error_code"] == code and answer["offset"] == -1
    assert answer["error_message"] and answer["leader_id"] == leader.node_id
    quorum.clock.advance(1)
    assert leader.raft_log.end_offset() == end  # nothing appended


def test_a_forwarding_node_fails_a_refused_write_at_once_without_retrying(quorum):
    follower = next(c for n, c in quorum.clients.items()
                    if quorum.loop.drivers[n].role is Role.FOLLOWER)
    asked: list = []

    async def leader_refuses(leader_id, api_key, body):
        asked.append(body["command"])
        return SimpleNamespace(error_code=int(ErrorCode.UNSUPPORTED_VERSION),
                               error_message="encoding version 2", leader_id=leader_id,
                               offset=-1)

    follower._request = leader_refuses
    # _submit is what submit runs after its own check: a writer of another version skips it.
    out = _result(defer.Deferred.fromCoroutine(follower._submit(NEWER)))
    assert len(out) == 1 and out[0].check(UnsupportedCommandVersion), out
    assert "encoding version 2" in str(out[0].value) and asked == [NEWER]
