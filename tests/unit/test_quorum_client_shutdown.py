"""A stopping broker's last metadata writes (NetworkQuorumClient.begin_shutdown): none waits for
a leader the node does not know, and none waits longer than one request timeout; before the
shutdown a write waits for a leader up to submit_timeout_s. Injected clock."""

from __future__ import annotations

from twisted.internet.task import Clock

from broker_core.config.quorum import RaftConfig, VoterAddress
from broker_core.metadata import ConnectionLost
from broker_core.raft.metadata_commands import CreateNode, encode
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.roles import Role


class FakeDriver:
    """What the client asks of a driver: a follower that knows ``leader_id`` (-1: none)."""

    config = RaftConfig()
    running = True
    role = Role.FOLLOWER

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id

    def subscribe_transitions(self, callback):
        pass

    def subscribe_committed(self, callback, load_snapshot=None):
        pass


def client_following(leader_id: int, addresses=None) -> tuple[NetworkQuorumClient, Clock]:
    clock = Clock()
    client = NetworkQuorumClient(1, addresses or {}, clock, request_timeout_s=2.0,
                                 submit_timeout_s=10.0)
    client.attach(FakeDriver(leader_id))
    return client, clock


def write(client: NetworkQuorumClient):
    d = client.submit(encode(CreateNode("/x", b""), 0))
    failures: list = []
    d.addErrback(failures.append)
    return d, failures


def advance(clock: Clock, seconds: float, step: float = 0.01) -> None:
    for _ in range(round(seconds / step)):
        clock.advance(step)


def test_before_the_shutdown_a_write_waits_for_a_leader_up_to_the_submit_timeout():
    client, clock = client_following(-1)
    d, failures = write(client)
    advance(clock, 9.9)
    assert not d.called  # still waiting for a leader to be elected
    advance(clock, 0.6)
    assert len(failures) == 1 and failures[0].check(ConnectionLost)
    assert "within 10s" in str(failures[0].value)


def test_while_shutting_down_a_write_with_no_leader_known_fails_at_once():
    client, clock = client_following(-1)
    client.begin_shutdown()
    d, failures = write(client)
    assert len(failures) == 1 and failures[0].check(ConnectionLost)
    assert "no leader known" in str(failures[0].value)


def test_while_shutting_down_a_write_to_an_unreachable_leader_waits_one_request_timeout():
    # Leader 2 is known but has no address here: not sent, retried until the budget.
    client, clock = client_following(2, {3: VoterAddress(3, "127.0.0.1", 1)})
    client.begin_shutdown()
    d, failures = write(client)
    advance(clock, 1.9)
    assert not d.called
    advance(clock, 0.6)
    assert len(failures) == 1 and failures[0].check(ConnectionLost)
    assert "within 2s" in str(failures[0].value)


def test_a_write_waiting_for_a_leader_when_the_shutdown_begins_gives_up_at_its_next_try():
    client, clock = client_following(-1)
    d, failures = write(client)
    advance(clock, 3.0)
    assert not failures
    client.begin_shutdown()
    advance(clock, 0.6)  # the retry backoff is at most 0.5 s
    assert len(failures) == 1 and failures[0].check(ConnectionLost)
    assert "no leader known" in str(failures[0].value)


def test_a_write_started_before_the_shutdown_gets_no_longer_than_one_request_timeout_after():
    # Leader 2 known but unreachable (no address): retried within the 10 s submit budget...
    client, clock = client_following(2)
    d, failures = write(client)
    advance(clock, 3.0)
    assert not failures
    client.begin_shutdown()
    advance(clock, 1.9)
    assert not failures
    advance(clock, 0.6)  # ... until one request timeout after the shutdown began
    assert len(failures) == 1 and failures[0].check(ConnectionLost)


def test_a_write_waiting_for_its_entry_fails_one_request_timeout_into_the_shutdown():
    client, clock = client_following(-1)
    waiting = client._applied(7, 10.0)  # as a forwarded write whose entry has not arrived
    failures: list = []
    waiting.addErrback(failures.append)
    client.begin_shutdown()
    advance(clock, 1.9)
    assert not failures
    advance(clock, 0.2)
    assert len(failures) == 1 and failures[0].check(ConnectionLost)
    assert "the node is stopping" in str(failures[0].value)


class LeaderWithoutMajority(FakeDriver):
    """A node that still leads but whose proposals never commit (its majority has gone)."""

    role = Role.LEADER

    def __init__(self) -> None:
        super().__init__(1)
        self.proposed: list[bytes] = []

    def propose(self, payload: bytes):
        from twisted.internet import defer

        self.proposed.append(payload)
        return defer.Deferred()


def test_while_shutting_down_one_write_without_a_quorum_spares_the_later_ones_the_wait():
    """A stopping broker's last writes come one after another; each used to wait its own
    request timeout on a leader without a majority (seconds each, enough to outlast a
    supervisor's grace): after the first, the rest fail at once."""
    from broker_core.metadata import StoreStopping

    clock = Clock()
    client = NetworkQuorumClient(1, {}, clock, request_timeout_s=2.0, submit_timeout_s=10.0)
    driver = LeaderWithoutMajority()
    client.attach(driver)
    client.begin_shutdown()
    d, failures = write(client)
    advance(clock, 1.9)
    assert not failures
    advance(clock, 0.2)  # one request timeout: its proposal's
    assert len(failures) == 1 and failures[0].check(StoreStopping)
    later = [write(client)[1] for _ in range(5)]  # no clock advance: they fail now
    assert all(len(f) == 1 and f[0].check(StoreStopping) for f in later)
    assert "not waiting again" in str(later[0][0].value)
    assert len(driver.proposed) == 1  # nothing more was proposed


def test_before_the_shutdown_a_failed_write_does_not_stop_later_ones():
    client, clock = client_following(-1)
    d, failures = write(client)
    advance(clock, 10.5)
    assert len(failures) == 1
    d2, failures2 = write(client)
    advance(clock, 1.0)
    assert not failures2  # it waits for a leader as before
