"""The session side of NetworkQuorumClient on an injected clock: a follower keeps the leader's
liveness table from its heartbeat answers as its view, the leader puts its table in the
answers, a node that learns of a new leader tells its leader listeners (the store, which
heartbeats it at once), and a
node that becomes leader refreshes its own sessions and keeps the deadlines of its view (so a
session whose client died with the old leader is expired about when the old leader would have,
not a whole timeout after the takeover)."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer
from twisted.internet.task import Clock

from broker_core.config.quorum import RaftConfig
from broker_core.raft.effects import Transition
from broker_core.raft.metadata_commands import OpenSession, encode
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.roles import Role
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode


class FakeDriver:
    """What the client asks of a driver; ``role`` and ``leader_id`` are set by the test."""

    config = RaftConfig()
    running = True

    def __init__(self, role: Role, leader_id: int) -> None:
        self.role = role
        self.leader_id = leader_id
        self.proposed: list[bytes] = []

    def subscribe_transitions(self, callback):
        self.transition = callback

    def subscribe_committed(self, callback, load_snapshot=None):
        pass

    def propose(self, payload):
        self.proposed.append(payload)
        return defer.Deferred()


class Requests:
    """Stands in for the network: records each request and answers a heartbeat with the
    given liveness table."""

    def __init__(self, table: list[tuple[int, int]]) -> None:
        self.sent: list[tuple[int, ApiKey, dict]] = []
        self.table = table

    async def __call__(self, leader_id: int, api_key: ApiKey, body: dict):
        self.sent.append((leader_id, api_key, body))
        return SimpleNamespace(error_code=0, error_message=None, leader_id=leader_id,
                               sessions=[SimpleNamespace(session_id=s, age_ms=a)
                                         for s, a in self.table])


def open_sessions(client: NetworkQuorumClient, count: int) -> list[int]:
    """``count`` sessions of 6 s in the client's tree (ids 1..count: a session's id is its
    entry's offset)."""
    client.tree.skip(0)
    for offset in range(1, count + 1):
        client.tree.apply(offset, encode(OpenSession(6000), 0))
    return sorted(client.tree.sessions)


def client_on(driver: FakeDriver, clock: Clock, requests: Requests) -> NetworkQuorumClient:
    client = NetworkQuorumClient(1, {}, clock)
    client.attach(driver)
    client._request = requests  # type: ignore[method-assign]
    return client


def test_a_follower_keeps_the_leaders_table_and_uses_it_when_it_leads():
    clock = Clock()
    clock.advance(100)
    driver = FakeDriver(Role.FOLLOWER, leader_id=2)
    requests = Requests(table=[(1, 0), (2, 1500)])  # 2: the old leader's own, 1.5 s silent
    client = client_on(driver, clock, requests)
    assert open_sessions(client, 3) == [1, 2, 3]
    client.heartbeat(1)
    assert requests.sent == [(2, ApiKey.SESSION_HEARTBEAT, {"node_id": 1, "session_id": 1})]
    # The leader (and its broker, session 2) dies; this node wins the election 1 s later.
    clock.advance(1)
    driver.role, driver.leader_id = Role.LEADER, 1
    driver.transition(Transition(Role.FOLLOWER, 1, Role.LEADER, 2, 1))
    deadline_2 = (100 - 1.5 + 6) * 1000  # when the old leader would have expired it
    assert client.sessions.next_deadline() == deadline_2  # not (101 + 6) s
    clock.advance(deadline_2 / 1000 - clock.seconds() - 0.001)
    assert driver.proposed == []
    clock.advance(0.001)
    assert len(driver.proposed) == 1  # expire_session 2
    ages = client.sessions.ages(clock.seconds() * 1000)
    # 1 is this node's own session: refreshed at the takeover, a full timeout from it; 3 was
    # not in the view: a full timeout from the takeover too.
    assert ages == {1: 3500, 3: 3500}


def test_a_node_tells_its_leader_listeners_of_each_new_leader():
    """The store listens, and heartbeats a new leader at once (tests/unit/test_quorum_store.py)."""
    clock = Clock()
    driver = FakeDriver(Role.FOLLOWER, leader_id=2)
    client = client_on(driver, clock, Requests(table=[]))
    told: list[int] = []
    client.add_leader_listener(lambda: told.append(driver.leader_id))
    driver.role, driver.leader_id = Role.UNATTACHED, -1
    driver.transition(Transition(Role.FOLLOWER, 1, Role.UNATTACHED, 2, -1))
    assert told == []  # no leader to tell of
    driver.role, driver.leader_id = Role.FOLLOWER, 3
    driver.transition(Transition(Role.UNATTACHED, 2, Role.FOLLOWER, 2, 3))
    assert told == [3]
    driver.role, driver.leader_id = Role.LEADER, 1
    driver.transition(Transition(Role.CANDIDATE, 2, Role.LEADER, 3, 1))  # this node won
    assert told == [3, 1]
    client.remove_leader_listener(client._leader_listeners[0])
    driver.role, driver.leader_id = Role.FOLLOWER, 2
    driver.transition(Transition(Role.LEADER, 3, Role.FOLLOWER, 4, 2))
    assert told == [3, 1]


def test_the_leader_answers_a_heartbeat_with_its_table():
    clock = Clock()
    clock.advance(10)
    driver = FakeDriver(Role.LEADER, leader_id=1)
    client = client_on(driver, clock, Requests(table=[]))
    open_sessions(client, 2)
    driver.transition(Transition(Role.CANDIDATE, 1, Role.LEADER, 2, 1))
    clock.advance(2)
    answer = client._serve_heartbeat(SimpleNamespace(body=SimpleNamespace(session_id=2)), None)
    assert answer["error_code"] == 0
    assert answer["sessions"] == [{"session_id": 1, "age_ms": 2000},
                                  {"session_id": 2, "age_ms": 0}]


def test_a_leader_whose_tracker_has_not_taken_over_yet_answers_not_leader():
    """The driver's role is LEADER before the transition is announced: a heartbeat then is
    answered NOT_LEADER_OR_FOLLOWER (retriable), never "not live"."""
    clock = Clock()
    driver = FakeDriver(Role.LEADER, leader_id=1)
    client = client_on(driver, clock, Requests(table=[]))
    open_sessions(client, 1)
    answer = client._serve_heartbeat(SimpleNamespace(body=SimpleNamespace(session_id=1)), None)
    assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    driver.transition(Transition(Role.CANDIDATE, 1, Role.LEADER, 2, 1))
    answer = client._serve_heartbeat(SimpleNamespace(body=SimpleNamespace(session_id=1)), None)
    assert answer["error_code"] == 0
