"""The client side's one cluster view (consumer_client/cluster_view.py): how a Metadata answer
is indexed, what a refresh keeps, freshness on the caller's clock, and what to drop. Answers
go through the codec (encoded, then decoded) so the view reads what a client receives."""

from __future__ import annotations

from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.cluster_view import ClusterView, PartitionInfo
from tests.support.scripted_broker import metadata

VERSION = 12


def answer(body: dict):
    """``body`` as the client decodes it off the wire."""
    frame = b"".join(apis.encode_response(ApiKey.METADATA, VERSION, 3, body))
    return apis.decode_response(ApiKey.METADATA, VERSION, frame)[1]


def test_an_answer_is_indexed_by_topic_and_partition():
    md = metadata(9092, {"a": [(1, 0), (1, ErrorCode.REPLICA_NOT_AVAILABLE)],
                         "b": [(1, ErrorCode.LEADER_NOT_AVAILABLE)]},
                  topic_errors={"gone": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
    v = ClusterView().updated(answer(md), None, now=10.0)
    assert v.brokers == {1: ("127.0.0.1", 9092)} and v.controller_id == 1
    assert v.topics["a"][0] == PartitionInfo("a", 0, 1, 0, (1,), (1,))
    # A follower down leaves the leader usable; any other partition error makes it leaderless.
    assert v.leader_for("a", 1) == 1 and v.leader_for("b", 0) == -1
    assert v.leader_for("a", 7) == -1 and v.leader_for("nope", 0) == -1
    assert v.partitions_for("a") == [0, 1] and v.partitions_for("gone") is None
    assert v.topic_errors == {"gone": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_topics_not_named_keep_their_entries_and_an_all_topics_refresh_keeps_none():
    first = ClusterView().updated(answer(metadata(1, {"a": [(1, 0)], "b": [(1, 0)]},
                                                  topic_errors={"x": 3})), None, now=0.0)
    # Only "b" named: "a" and the error of "x" stay; "b" becomes an error.
    second = first.updated(answer(metadata(1, {}, topic_errors={"b": 3})), ["b"], now=1.0)
    assert set(second.topics) == {"a"} and second.topic_errors == {"x": 3, "b": 3}
    # "x" named and now there: no longer an error (never both).
    third = second.updated(answer(metadata(1, {"x": [(1, 0)]})), ["x"], now=2.0)
    assert set(third.topics) == {"a", "x"} and third.topic_errors == {"b": 3}
    every = third.updated(answer(metadata(1, {"x": [(1, 0)]})), None, now=3.0)
    assert set(every.topics) == {"x"} and every.topic_errors == {}
    assert set(first.topics) == {"a", "b"}  # a refresh never edits the view it started from


def test_an_error_code_the_client_does_not_know_still_refuses_the_topic():
    v = ClusterView().updated(answer(metadata(1, {}, topic_errors={"t": 30_000})), None, 0.0)
    assert v.topic_errors == {"t": ErrorCode.UNKNOWN_SERVER_ERROR} and "t" not in v.topics


def test_freshness_is_measured_on_the_callers_clock():
    never = ClusterView()
    assert not never.is_fresh(0.0, 1e9)
    v = never.updated(answer(metadata(1, {})), None, now=100.0)
    assert abs(v.age(100.4) - 0.4) < 1e-9
    assert v.is_fresh(100.9, 1.0) and not v.is_fresh(101.0, 1.0)


def test_brokers_that_left_are_named_for_dropping():
    before = ClusterView().updated(answer(metadata(1, {}, others={2: 2})), None, 0.0)
    after = before.updated(answer(metadata(1, {})), None, 1.0)
    assert after.brokers_gone(before) == {2} and before.brokers_gone(after) == set()


def test_brokers_learned_elsewhere_are_added():
    v = ClusterView()
    v.learn_brokers([(4, "h", 94), (5, "h", 95)])
    assert v.brokers == {4: ("h", 94), 5: ("h", 95)}
