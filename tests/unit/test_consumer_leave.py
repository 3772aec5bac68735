"""The consumer's close, shell side (consumer_client/consumer.py) on task.Clock with a scripted
cluster: the leave carries the session id and the final positions after the listener heard of
the revocation; an answered leave closes at once; a refused or unanswered one falls back to
handing the positions over on the next Pings, bounded."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer, task

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.consumer import Consumer, ConsumerConfig, State
from consumer_client.consumer_streams import PartitionState


class ScriptedCluster:
    """Records requests; the test answers them (or not)."""

    def __init__(self):
        self.sent: list[tuple[int, dict, defer.Deferred]] = []
        self.closed = False

    async def request_address(self, address, api_key, body, *, version=None, timeout_s=None):
        d: defer.Deferred = defer.Deferred()
        self.sent.append((api_key, body, d))
        return await d

    def close(self):
        self.closed = True

    def disconnect_address(self, address):
        pass


def fetching_consumer(listener=None, session_ms=30000, session_id=77):
    clock = task.Clock()
    cluster = ScriptedCluster()
    c = Consumer(ConsumerConfig.create(bootstrap_servers="h:9", group_id="g", consumer_id="c",
                                       topics={"t": 1}, session_timeout_ms=session_ms),
                 reactor=clock, clock=clock, cluster=cluster, listener=listener)
    # As if registered and started: the state machine is tested on its own elsewhere.
    c._started = True
    c.membership.state = State.FETCHING
    c.coordinator = (1, "h", 9)
    c._session_id = session_id
    ps = PartitionState("t", 0, c.stream("t"), 5)
    c.parts = {("t", 0): ps}
    return clock, cluster, c, ps


def test_an_answered_leave_carries_session_and_positions_and_closes_at_once():
    clock, cluster, c, ps = fetching_consumer()
    closed = c.close()
    assert c.state is State.DEPARTING
    (api, body, d), = cluster.sent
    assert api == ApiKey.UNREGISTER_CONSUMER
    assert body == {"group_id": "g", "consumer_id": "c", "session_id": 77,
                    "offsets": [{"topic": "t", "partition": 0, "offset": 5}]}
    assert not ps.active  # nothing is delivered past what the leave reports
    assert not closed.called
    d.callback(SimpleNamespace(error_code=0, error_message=None, partitions=[]))
    assert c.state is State.CLOSED and closed.called and c.last_error is None
    clock.advance(0)
    assert cluster.closed


def test_the_leave_waits_for_the_revoke_listener():
    revoked = defer.Deferred()
    heard = []

    class Listener:
        def revoked(self, partitions):
            heard.append(partitions)
            return revoked

    clock, cluster, c, ps = fetching_consumer(listener=Listener())
    c.close()
    assert heard == [[("t", 0)]] and cluster.sent == []
    revoked.callback(None)
    assert [api for api, _, _ in cluster.sent] == [ApiKey.UNREGISTER_CONSUMER]


def test_an_unanswered_leave_falls_back_to_the_pings_after_one_ping_interval():
    from consumer_client.membership import Input

    clock, cluster, c, ps = fetching_consumer(session_ms=30000)
    closed = c.close()
    clock.advance(9.9)
    assert c.state is State.DEPARTING
    clock.advance(0.1)  # a third of the session timeout
    assert c.state is State.CLOSING and "no answer to the leave" in c.last_error
    request = SimpleNamespace(header=SimpleNamespace(api_key=ApiKey.PING), body=None)
    answer = c._input(Input.PING, request)
    assert answer["offsets"] == [{"topic": "t", "partition": 0, "offset": 5}]
    assert c.state is State.LEAVING
    # a late answer to the leave changes nothing: the slow path finishes on its own
    cluster.sent[0][2].callback(SimpleNamespace(error_code=0, error_message=None,
                                                partitions=[]))
    assert c.state is State.LEAVING and not closed.called
    c._input(Input.PING, request)
    assert c.state is State.CLOSED and closed.called


def test_a_refused_leave_falls_back_at_once():
    clock, cluster, c, ps = fetching_consumer()
    c.close()
    cluster.sent[0][2].callback(SimpleNamespace(
        error_code=int(ErrorCode.NOT_COORDINATOR), error_message="moved", partitions=[]))
    assert c.state is State.CLOSING and "refused the leave" in c.last_error


def test_without_a_session_id_no_leave_is_sent():
    clock, cluster, c, ps = fetching_consumer(session_id=0)
    c.close()
    clock.advance(0)
    assert cluster.sent == [] and c.state is State.CLOSING
