"""The coordinator service on task.Clock with an in-memory store and fake channels: request
checks, Ping scheduling and expiry, failure handling, the initial rebalance delay, SUSPENDED,
fencing and offset commits. No network, no ZooKeeper."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.metadata import (
    Create,
    SessionState,
)
from broker_core.metadata_cache import BrokerEndpoint
from broker_core.metrics import BrokerMetrics
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from coordinator import rebalance
from coordinator.consumer_requests import cluster_metadata_answer
from coordinator.registry import GroupRegistry
from coordinator.service import CoordinatorConfig, CoordinatorService
from tests.support.coordinator_channels import FakeChannel, FakeProto
from tests.support.memory_store import MemoryStore


def make(partitions=2, **overrides):
    clock = task.Clock()
    store = MemoryStore()
    store.ensure_path(paths.CONSUMERS)
    store.ensure_path(paths.TOPICS)
    store.nodes[paths.topic("t")] = (
        paths.TopicAssignment({p: [1] for p in range(partitions)}).to_bytes(), 0)
    cfg = CoordinatorConfig(**{"min_session_timeout_ms": 300, "initial_rebalance_delay_ms": 0,
                               "rebalance_backoff_ms": 100, **overrides})
    metrics = BrokerMetrics(CollectorRegistry())
    svc = CoordinatorService(1, store, clock=clock, config=cfg, metrics=metrics,
                             channel_factory=FakeChannel,
                             brokers=lambda: [BrokerEndpoint(1, "h", 9)])
    svc.start()  # elected at once: the store is synchronous
    assert svc.active
    return clock, store, svc


def register(svc, cid, group="g", sub=None, timeout=3000, **fields):
    body = SimpleNamespace(group_id=group, consumer_id=cid,
                           topic_count=json.dumps({"subscription": sub or {"t": 1}}),
                           auto_commit=True, auto_offset_reset="smallest",
                           session_timeout_ms=timeout)
    for k, v in fields.items():
        setattr(body, k, v)
    proto = FakeProto()
    resp = svc.register_consumer(None, body, proto)
    return resp, getattr(proto, "channel", None)


def answer_all(ch, offsets=None):
    """Answer every pending request on ``ch`` successfully."""
    for key, _body, d in list(ch.sent):
        if d.called:
            continue
        if key == ApiKey.PING:
            d.callback(SimpleNamespace(error_code=0, offsets=offsets))
        elif key == ApiKey.STOP_FETCHER:
            d.callback(SimpleNamespace(error_code=0, offsets=offsets))
        else:
            d.callback(SimpleNamespace(error_code=0))


def test_registration_checks():
    clock, store, svc = make()
    assert register(svc, "a")[0]["error_code"] == 0
    cases = [
        (dict(cid="a"), ErrorCode.DUPLICATE_CONSUMER_ID),
        (dict(cid="b", timeout=100), ErrorCode.INVALID_SESSION_TIMEOUT),
        (dict(cid="b", timeout=10**9), ErrorCode.INVALID_SESSION_TIMEOUT),
        (dict(cid="b", topic_count="nope"), ErrorCode.INVALID_TOPIC_COUNT),
        (dict(cid="b", group="a/b"), ErrorCode.INVALID_GROUP_ID),
        (dict(cid="b", group="coordinator_epoch"), ErrorCode.INVALID_GROUP_ID),
        (dict(cid=""), ErrorCode.INVALID_REQUEST),
        (dict(cid="b", auto_offset_reset="sometimes"), ErrorCode.INVALID_REQUEST),
    ]
    for kw, code in cases:
        resp, ch = register(svc, **kw)
        assert resp["error_code"] == code, kw
        assert resp["error_message"] and ch is None
    assert list(svc.registries.groups["g"].members) == ["a"]


def test_ping_every_third_of_the_session_timeout_and_offsets_only_for_owned_partitions():
    clock, store, svc = make()
    _, ch = register(svc, "a", timeout=3000)
    clock.advance(0)  # the rebalance the registration asked for starts on the next turn
    answer_all(ch)  # StopFetcher / StartFetcher of the first rebalance
    answer_all(ch)
    c = svc.registries.member("g", "a")
    assert c.started and set(c.owned) == {("t", 0), ("t", 1)}
    sent_before = len(ch.pending(ApiKey.PING))
    clock.advance(1.0)
    pings = ch.pending(ApiKey.PING)
    assert len(pings) == sent_before + 1
    assert pings[-1][0] == {"consumer_id": "a", "num_retries": 0}
    clock.advance(0.5)
    offsets = [SimpleNamespace(topic="t", partition=0, offset=9),
               SimpleNamespace(topic="t", partition=7, offset=9)]
    pings[-1][1].callback(SimpleNamespace(error_code=0, offsets=offsets))
    g = svc.registries.groups["g"]
    assert g.offsets == {("t", 0): 9} and g.dirty == {("t", 0)}
    assert svc.metrics.coordinator_ping_rtt_seconds._sum.get() == pytest.approx(0.5)
    # No new Ping while one is outstanding.
    clock.advance(1.0)
    assert len(ch.pending(ApiKey.PING)) == 1
    ch.pending(ApiKey.PING)[0][1].callback(SimpleNamespace(error_code=0, offsets=None))
    clock.advance(1.0)
    assert len(ch.pending(ApiKey.PING)) == 1


def test_a_silent_consumer_is_failed_after_its_pings_expire_and_the_rest_rebalanced():
    clock, store, svc = make()
    _, a = register(svc, "a", timeout=3000)
    _, b = register(svc, "b", timeout=3000)
    clock.advance(0)
    for _ in range(2):
        answer_all(a)
        answer_all(b)
    assert svc.registries.groups["g"].generation == 1
    # From now on b never answers; a always does. b's first Ping (t=1) expires at t=3, the
    # retry sent then expires at t=5: b is failed.
    for _ in range(11):
        clock.advance(0.5)
        answer_all(a)
    c = svc.registries.member("g", "b")
    assert c is None, "b should have been failed"
    assert b.closed
    assert svc.metrics.coordinator_failed_pings_total._value.get() == 2
    assert svc.metrics.coordinator_expired_members_total.labels(reason="ping")._value.get() == 1
    answer_all(a)
    answer_all(a)
    m = svc.registries.member("g", "a")
    assert set(m.owned) == {("t", 0), ("t", 1)}
    assert svc.registries.groups["g"].generation == 2
    owners = {p: store.nodes[paths.consumer_owner("g", "t", p)][0] for p in (0, 1)}
    assert owners == {0: b"a-0", 1: b"a-0"}


def test_a_closed_channel_during_a_rebalance_fails_it_fast():
    clock, store, svc = make(initial_rebalance_delay_ms=500)
    _, a = register(svc, "a")
    _, b = register(svc, "b")
    clock.advance(0.5)
    assert len(a.pending(ApiKey.STOP_FETCHER)) == 1
    answer_all(a)
    b.close()  # b goes away with its StopFetcher unanswered
    assert svc.registries.member("g", "b") is None
    clock.advance(0)  # one reactor turn, not the 0.1 s backoff
    # The queued rebalance with only a runs now: a gets a StopFetcher again, no 2 s wait.
    assert len(a.pending(ApiKey.STOP_FETCHER)) == 1
    answer_all(a)
    answer_all(a)
    assert set(svc.registries.member("g", "a").owned) == {("t", 0), ("t", 1)}


def test_members_joining_within_the_initial_delay_cost_one_rebalance():
    # A quiet period as long as the delay is clamped to it: the full delay, as before the
    # quiet period existed (b arrives 1 s after a, longer than the default quiet period).
    clock, store, svc = make(initial_rebalance_delay_ms=3000, initial_rebalance_quiet_ms=3000)
    _, a = register(svc, "a")
    clock.advance(1.0)
    _, b = register(svc, "b")
    clock.advance(1.9)
    assert a.pending(ApiKey.STOP_FETCHER) == [] and b.pending(ApiKey.STOP_FETCHER) == []
    clock.advance(0.1)
    assert len(a.pending(ApiKey.STOP_FETCHER)) == 1 and len(b.pending(ApiKey.STOP_FETCHER)) == 1


def stop_fetchers_sent(*channels):
    """How many StopFetcher requests each channel got (answered or not)."""
    return [sum(1 for key, _b, _d in ch.sent if key == ApiKey.STOP_FETCHER) for ch in channels]


def test_a_lone_member_rebalances_after_the_quiet_period_not_the_delay():
    clock, store, svc = make(initial_rebalance_delay_ms=2000, initial_rebalance_quiet_ms=250)
    _, a = register(svc, "a")
    clock.advance(0.125)
    assert stop_fetchers_sent(a) == [0]
    clock.advance(0.125)
    assert stop_fetchers_sent(a) == [1]
    answer_all(a)
    answer_all(a)
    assert set(svc.registries.member("g", "a").owned) == {("t", 0), ("t", 1)}
    assert svc.registries.groups["g"].initial_bound is None  # the initial wait is over


def test_arrivals_within_the_quiet_period_extend_it_up_to_the_delay_bound():
    clock, store, svc = make(initial_rebalance_delay_ms=2000, initial_rebalance_quiet_ms=250)
    channels = [register(svc, "m0")[1]]
    # A member every quiet/2: the quiet period never passes, so only the bound ends the wait.
    while clock.seconds() < 1.875:
        clock.advance(0.125)
        channels.append(register(svc, f"m{len(channels)}")[1])
        assert stop_fetchers_sent(*channels) == [0] * len(channels)
    assert len(channels) == 16
    clock.advance(0.125)  # t = 2.0: the bound, first member + the delay
    assert stop_fetchers_sent(*channels) == [1] * len(channels)


def test_the_quiet_period_restarts_with_each_arrival():
    clock, store, svc = make(initial_rebalance_delay_ms=2000, initial_rebalance_quiet_ms=250)
    _, a = register(svc, "a")
    clock.advance(0.125)
    _, b = register(svc, "b")  # pushes the deadline from 0.25 to 0.375
    clock.advance(0.125)
    assert stop_fetchers_sent(a, b) == [0, 0]
    clock.advance(0.125)
    assert stop_fetchers_sent(a, b) == [1, 1]


def test_a_join_storm_costs_one_rebalance():
    clock, store, svc = make(initial_rebalance_delay_ms=3000, initial_rebalance_quiet_ms=200)
    n = 1000
    channels = []
    for i in range(n):
        channels.append(register(svc, f"m{i:04}")[1])
        if i % 100 == 99:
            clock.advance(0.1)  # a burst: 100 registrations per 100 ms, for a second
    assert stop_fetchers_sent(*channels) == [0] * n
    clock.advance(0.2)
    assert stop_fetchers_sent(*channels) == [1] * n
    for ch in channels:
        answer_all(ch)  # StopFetcher
    for ch in channels:
        answer_all(ch)  # StartFetcher
    clock.advance(3.0)
    g = svc.registries.groups["g"]
    assert g.generation == 1
    assert stop_fetchers_sent(*channels) == [1] * n
    assert sorted(tp for m in g.members.values() for tp in m.owned) == [("t", 0), ("t", 1)]


def test_a_quiet_period_of_zero_rebalances_a_new_group_at_once():
    clock, store, svc = make(initial_rebalance_delay_ms=3000, initial_rebalance_quiet_ms=0)
    _, a = register(svc, "a")
    clock.advance(0)
    assert stop_fetchers_sent(a) == [1]


def test_a_member_arriving_after_the_initial_rebalance_does_not_touch_the_initial_wait():
    clock, store, svc = make(initial_rebalance_delay_ms=2000, initial_rebalance_quiet_ms=250)
    _, a = register(svc, "a")
    clock.advance(0.25)
    answer_all(a)
    answer_all(a)
    assert svc.registries.groups["g"].generation == 1
    _, b = register(svc, "b")  # an ordinary rebalance, not held by any initial wait
    assert svc.registries.groups["g"].initial_bound is None
    clock.advance(0)
    assert stop_fetchers_sent(a, b) == [2, 1]


def test_a_registration_during_a_running_rebalance_is_answered_before_it_ends():
    clock, store, svc = make()
    _, a = register(svc, "a")
    assert a.sent == []  # answered first: the rebalance it asked for starts on the next turn
    clock.advance(0)
    assert len(a.pending(ApiKey.STOP_FETCHER)) == 1  # a holds its answer: the rebalance waits
    g = svc.registries.groups["g"]
    assert g.rebalancing
    resp, b = register(svc, "b")
    assert resp["error_code"] == 0 and resp["session_id"] > 0
    assert svc.registries.member("g", "b") is not None
    # Answered while a's rebalance still runs, and no rebalance work ran inside the answer.
    assert g.rebalancing and b.sent == [] and len(a.sent) == 1
    for _ in range(4):
        clock.advance(0)
        answer_all(a)
        answer_all(b)
    ma, mb = svc.registries.member("g", "a"), svc.registries.member("g", "b")
    assert g.state == "stable" and ma.owned and mb.owned
    assert sorted([*ma.owned, *mb.owned]) == [("t", 0), ("t", 1)]


def held(channels):
    """What each consumer may be fetching, as the consumer sees it: the partitions of the last
    StartFetcher it was sent, from the moment it was sent until it answered a later
    StopFetcher (a consumer starts on receipt and has stopped only once it answers)."""
    out = {}
    for name, ch in channels.items():
        tps: set = set()
        for key, body, d in ch.sent:
            if key == ApiKey.START_FETCHER:
                tps = {(p["topic"], p["partition"])
                       for t in body["ownership"] for p in t["partitions"]}
            elif key == ApiKey.STOP_FETCHER and d.called:
                tps = set()
        out[name] = tps
    return out


def assert_no_partition_held_twice(channels):
    seen: dict = {}
    for name, tps in held(channels).items():
        for tp in tps:
            assert tp not in seen, f"{tp} held by {seen[tp]} and {name}"
            seen[tp] = name


def test_a_superseded_rebalance_stops_at_its_next_phase_boundary_and_the_newest_runs():
    # No quiet period (the newer rebalance runs as soon as it can); the delay bounds how
    # long rebalances may be superseded.
    clock, store, svc = make(partitions=4, initial_rebalance_delay_ms=3000,
                             initial_rebalance_quiet_ms=0)
    channels = {}

    def step(action=None):
        if action is not None:
            action()
        clock.advance(0)
        assert_no_partition_held_twice(channels)

    for cid in ("a", "b"):
        channels[cid] = register(svc, cid)[1]
    for _ in range(3):
        step(lambda: [answer_all(ch) for ch in channels.values()])
    g = svc.registries.groups["g"]
    assert g.generation == 1 and g.state == "stable"
    a, b = channels["a"], channels["b"]
    assert held(channels) == {"a": {("t", 0), ("t", 1)}, "b": {("t", 2), ("t", 3)}}
    writes = store.multis

    channels["c"] = register(svc, "c")[1]
    step()  # the rebalance for c starts: b gives t-3 to c, so StopFetcher to b and c; a keeps
    assert stop_fetchers_sent(a, b, channels["c"]) == [1, 2, 1]
    step(lambda: answer_all(b, offsets=[SimpleNamespace(topic="t", partition=3, offset=7)]))
    channels["d"] = register(svc, "d")[1]  # a newer membership while the STOP phase waits
    step()
    step(lambda: answer_all(channels["c"]))
    # The STOP phase ended superseded: no COMMIT, no StartFetcher, no owners written, and the
    # rebalance for a, b, c and d runs now: a gives up t-1, and b and c (stopped, owning
    # nothing) and d take one each, so StopFetcher to all four.
    assert store.multis == writes
    assert all(not ch.pending(ApiKey.START_FETCHER) for ch in channels.values())
    assert sum(1 for k, _b, _d in a.sent if k == ApiKey.START_FETCHER) == 1
    assert g.generation == 1
    assert g.offsets[("t", 3)] == 7  # b's reported offset is kept for the next owner
    assert stop_fetchers_sent(*channels.values()) == [2, 3, 2, 1]
    for _ in range(3):
        step(lambda: [answer_all(ch) for ch in channels.values()])
    assert g.generation == 2 and g.state == "stable"
    owned = {cid: set(svc.registries.member("g", cid).owned) for cid in channels}
    assert owned == {"a": {("t", 0)}, "b": {("t", 1)}, "c": {("t", 2)}, "d": {("t", 3)}}
    assert held(channels) == owned
    starts = [body for ch in channels.values() for k, body, _d in ch.sent
              if k == ApiKey.START_FETCHER and body["generation_id"] == 2]
    assert len(starts) == 4
    assert {p["offset"] for s in starts for t in s["ownership"] for p in t["partitions"]
            if p["partition"] == 3} == {7}


def test_a_member_whose_partitions_do_not_move_is_neither_stopped_nor_started():
    """Incremental rebalances: c joins a group of a and b over two partitions; the sticky
    assignment leaves both with theirs and c with none, so only c is stopped and started. When
    a leaves, its partition goes to c, and b is left alone again."""
    clock, store, svc = make()
    channels = {cid: register(svc, cid)[1] for cid in ("a", "b")}
    for _ in range(3):
        [answer_all(ch) for ch in channels.values()]
        clock.advance(0)
    g = svc.registries.groups["g"]
    assert g.generation == 1 and held(channels) == {"a": {("t", 0)}, "b": {("t", 1)}}
    a, b = channels["a"], channels["b"]
    sent_a, sent_b = len(a.sent), len(b.sent)

    channels["c"] = register(svc, "c")[1]
    for _ in range(3):
        clock.advance(0)
        answer_all(channels["c"])
    assert g.generation == 2 and g.state == "stable"
    assert held(channels) == {"a": {("t", 0)}, "b": {("t", 1)}, "c": set()}
    keys = {ApiKey.STOP_FETCHER, ApiKey.START_FETCHER}
    assert [k for k, _b, _d in a.sent[sent_a:] if k in keys] == []
    assert [k for k, _b, _d in b.sent[sent_b:] if k in keys] == []
    assert svc.registries.member("g", "c").started

    leave(svc, "a", svc.registries.member("g", "a").session_id)
    for _ in range(3):
        clock.advance(0)
        answer_all(channels["c"])
    assert g.generation == 3
    assert held({"b": b, "c": channels["c"]}) == {"b": {("t", 1)}, "c": {("t", 0)}}
    assert [k for k, _b, _d in b.sent[sent_b:] if k in keys] == []


def answer_fetcher_requests(ch, kind):
    """Answer ``ch``'s pending requests of ``kind`` in the order they were sent (a consumer
    answers its channel's requests in order)."""
    for key, _body, d in list(ch.sent):
        if key == kind and not d.called:
            d.callback(SimpleNamespace(error_code=0, offsets=None))


def settle(clock, channels, turns=4):
    for _ in range(turns):
        clock.advance(0)
        [answer_all(ch) for ch in channels.values()]
        assert_no_partition_held_twice(channels)


def test_a_member_whose_start_fetcher_expired_is_stopped_before_its_partition_moves():
    """c is sent t1 in a rebalance, but its answer comes only after the wait expired; a newer
    rebalance must not take c for idle (it may be fetching t1) and give t1 to b2: c is stopped
    first, and from its late answer on the group converges."""
    clock, store, svc = make()
    channels = {cid: register(svc, cid)[1] for cid in ("a", "b")}
    settle(clock, channels)
    channels["c"] = register(svc, "c")[1]
    settle(clock, channels)
    g = svc.registries.groups["g"]
    assert held(channels) == {"a": {("t", 0)}, "b": {("t", 1)}, "c": set()}
    assert g.state == "stable"

    c = channels["c"]
    leave(svc, "b", svc.registries.member("g", "b").session_id)
    channels.pop("b")
    clock.advance(0)
    answer_fetcher_requests(c, ApiKey.STOP_FETCHER)
    clock.advance(0)
    start = c.pending(ApiKey.START_FETCHER)
    assert len(start) == 1 and held(channels)["c"] == {("t", 1)}  # c has it, the answer waits
    assert g.state == "rebalancing"
    channels["b2"] = register(svc, "b2")[1]  # a newer rebalance is queued meanwhile
    stops_before = len([k for k, _b, _d in c.sent if k == ApiKey.STOP_FETCHER])
    clock.advance(2.0)  # c's StartFetcher expires: the attempt fails, the queued one runs
    for _ in range(4):
        clock.advance(0)
        answer_all(channels["a"])
        answer_all(channels["b2"])
        assert_no_partition_held_twice(channels)
    stops_after = len([k for k, _b, _d in c.sent if k == ApiKey.STOP_FETCHER])
    assert stops_after == stops_before + 1, "c must be stopped: its state is unknown"
    assert held(channels)["b2"] == set(), "t1 may move only once c has stopped"
    answer_all(c)  # the late StartFetcher answer, then the StopFetcher, in order
    settle(clock, channels)
    assert g.state == "stable"
    owned = {cid: set(m.owned) for cid, m in g.members.items()}
    assert owned == {cid: tps for cid, tps in held(channels).items()}
    assert set().union(*owned.values()) == {("t", 0), ("t", 1)}


def test_a_member_whose_stop_fetcher_expired_is_started_again():
    """b is stopped in a rebalance but its answer is late (it did stop: it owns nothing); the
    attempt fails and c, the member it was for, crashes. The membership is back to a and b
    with the old owners in ZooKeeper, yet b's partitions must not be left unconsumed: b is not
    settled, so the next rebalance starts it again."""
    clock, store, svc = make(partitions=4)
    channels = {cid: register(svc, cid)[1] for cid in ("a", "b")}
    settle(clock, channels)
    g = svc.registries.groups["g"]
    assert held(channels) == {"a": {("t", 0), ("t", 1)}, "b": {("t", 2), ("t", 3)}}

    channels["c"] = register(svc, "c")[1]
    clock.advance(0)
    answer_all(channels["c"])
    a, b = channels["a"], channels["b"]
    assert b.pending(ApiKey.STOP_FETCHER) and not a.pending(ApiKey.STOP_FETCHER)
    clock.advance(2.0)  # b's StopFetcher expires (b got it: it stops, its answer is slow)
    channels.pop("c").close()  # c crashes
    clock.advance(0.1)  # the failed attempt's backoff: the rebalance of a and b runs
    settle(clock, channels)  # b's answers come, in order
    assert held(channels) == {"a": {("t", 0), ("t", 1)}, "b": {("t", 2), ("t", 3)}}
    assert g.state == "stable"
    assert {cid: set(m.owned) for cid, m in g.members.items()} == held(channels)


def test_a_rebalance_that_gave_up_is_tried_again_and_takes_a_late_answer_for_the_truth():
    """A StartFetcher answered after its rebalance ran out of attempts: the member is not
    settled, so the coordinator tries again after the backoff; by then the late answer says
    what the member fetches, and the new attempt only writes the owners."""
    clock, store, svc = make(rebalance_max_retries=1)
    _, a = register(svc, "a")
    clock.advance(0)
    answer_all(a)
    clock.advance(0)
    assert a.pending(ApiKey.START_FETCHER)
    clock.advance(2.0)  # expired: the only attempt failed
    g = svc.registries.groups["g"]
    assert g.rebalance_failures == 1 and g.rebalance_initiated and g.state == "rebalancing"
    answer_all(a)  # the late answer (and a Ping)
    clock.advance(0.1)  # rebalance.backoff.ms
    answer_all(a)
    clock.advance(0)
    # The new rebalance finds a fetching what it was sent, so it only writes owners.
    assert g.state == "stable" and g.generation == 1
    assert set(svc.registries.member("g", "a").owned) == {("t", 0), ("t", 1)}
    assert {p: store.nodes[paths.consumer_owner("g", "t", p)][0] for p in (0, 1)} == {
        0: b"a-0", 1: b"a-0"}
    assert len([k for k, _b, _d in a.sent if k == ApiKey.START_FETCHER]) == 1


def test_a_refusal_that_ends_the_last_attempt_is_tried_again_after_the_backoff():
    """b refuses its StopFetcher on the last attempt after a has stopped: no membership change
    will come to restart a, so the coordinator asks for another rebalance after the backoff
    and the group is consumed again."""
    clock, store, svc = make(partitions=2, rebalance_max_retries=1)
    channels = {"a": register(svc, "a")[1]}
    settle(clock, channels)
    g = svc.registries.groups["g"]
    channels["b"] = register(svc, "b")[1]
    clock.advance(0)
    a, b = channels["a"], channels["b"]
    answer_fetcher_requests(a, ApiKey.STOP_FETCHER)
    b.pending(ApiKey.STOP_FETCHER)[0][1].callback(SimpleNamespace(error_code=1, offsets=None))
    clock.advance(0)
    assert g.rebalance_failures == 1 and held(channels) == {"a": set(), "b": set()}
    clock.advance(0.1)  # rebalance.backoff.ms
    settle(clock, channels)
    assert g.state == "stable"
    assert held(channels) == {"a": {("t", 0)}, "b": {("t", 1)}}


def test_a_rebalance_of_an_earlier_term_does_not_act_after_re_election():
    """A rebalance waiting out its backoff when the coordinator resigns and is elected again
    must not run its next attempt on the old term's registry (it would rewrite owners, and
    offsets, under the new epoch)."""
    clock, store, svc = make(partitions=2, rebalance_backoff_ms=1000)
    channels = {"a": register(svc, "a")[1]}
    settle(clock, channels)
    ctx = svc.rebalance_context
    real, calls = ctx.write_owners, []

    async def failing_once(group, new, old):
        calls.append(dict(new))
        if len(calls) == 1:
            raise RuntimeError("transient store error")
        return await real(group, new, old)

    ctx.write_owners = failing_once
    channels["b"] = register(svc, "b")[1]
    settle(clock, channels, turns=3)
    assert len(calls) == 1  # the attempt failed at OWNERS: its retry waits 1 s
    term = svc.term
    store.state(SessionState.LOST)
    store.nodes.pop(paths.coordinator_shard_seat(0), None)  # the ephemeral seat went with it
    store.state(SessionState.CONNECTED)
    clock.advance(0)
    assert svc.active and svc.term > term
    again = {"a": register(svc, "a")[1]}  # only a comes back
    settle(clock, again)
    owners = {p: store.nodes[paths.consumer_owner("g", "t", p)][0] for p in (0, 1)}
    assert owners == {0: b"a-0", 1: b"a-0"}
    clock.advance(1.0)  # the old term's backoff ends
    clock.advance(0)
    assert {p: store.nodes[paths.consumer_owner("g", "t", p)][0] for p in (0, 1)} == owners
    assert all("b-0" not in c.values() for c in calls[1:])  # the new term's writes only


def test_a_coordinator_whose_session_ended_sends_nothing_before_it_has_resigned():
    """The session is lost while an election step holds the steps' lock, so the resignation
    waits behind it; meanwhile the session is no longer suspended, but the shard may have a
    new coordinator already: the running rebalance must not send its StartFetchers."""
    clock, store, svc = make(partitions=2)
    channels = {"a": register(svc, "a")[1]}
    settle(clock, channels)
    channels["b"] = register(svc, "b")[1]
    clock.advance(0)
    a, b = channels["a"], channels["b"]
    assert a.pending(ApiKey.STOP_FETCHER) and b.pending(ApiKey.STOP_FETCHER)
    store.state(SessionState.SUSPENDED)
    lock = svc.elector.steps._lock  # an election step in progress
    lock.acquire()
    try:
        path = paths.coordinator_shard_epoch(0)
        data, version = store.nodes[path]
        store.nodes[path] = (b"99", version + 1)  # another broker won the shard
        store.state(SessionState.LOST)
        assert svc.active and not svc.elector.suspended and not svc.can_act()
        starts = len(b.sent)
        answer_fetcher_requests(a, ApiKey.STOP_FETCHER)
        answer_fetcher_requests(b, ApiKey.STOP_FETCHER)
        clock.advance(0)
        assert [k for k, _b, _d in b.sent[starts:] if k == ApiKey.START_FETCHER] == []
    finally:
        lock.release()
    clock.advance(0)
    assert not svc.active and b.closed


def test_a_rebalance_superseded_during_its_reads_sends_nothing():
    # No quiet period (the newer rebalance runs as soon as it can); the delay bounds how
    # long rebalances may be superseded.
    clock, store, svc = make(initial_rebalance_delay_ms=3000, initial_rebalance_quiet_ms=0)
    a = register(svc, "a")[1]
    clock.advance(0)
    answer_all(a)
    answer_all(a)
    g = svc.registries.groups["g"]
    assert g.generation == 1
    reads, get_many = [], store.get_many

    def held_read(paths_):  # the next rebalance's partition read waits for the test
        d: defer.Deferred = defer.Deferred()
        reads.append((paths_, d))
        return d

    store.get_many = held_read
    b = register(svc, "b")[1]
    clock.advance(0)
    assert len(reads) == 1
    c = register(svc, "c")[1]
    clock.advance(0)
    store.get_many = get_many
    for paths_, d in reads:
        get_many(paths_).chainDeferred(d)
    clock.advance(0)
    # The rebalance for b ends at its first boundary: nothing was sent for it; the one for b
    # and c runs instead.
    assert stop_fetchers_sent(a, b, c) == [2, 1, 1]


def test_members_arriving_during_a_rebalance_supersede_it_and_the_next_waits_for_a_pause():
    clock, store, svc = make(initial_rebalance_delay_ms=2000, initial_rebalance_quiet_ms=250)
    channels = {"a": register(svc, "a")[1]}
    clock.advance(0.25)  # a's first rebalance: StopFetcher to a, not answered yet
    assert stop_fetchers_sent(channels["a"]) == [1]
    channels["b"] = register(svc, "b")[1]  # t = 0.25: the next rebalance waits until 0.5
    answer_all(channels["a"])  # the STOP phase ends superseded: nothing started
    clock.advance(0.125)
    channels["c"] = register(svc, "c")[1]  # t = 0.375: the wait moves to 0.625
    clock.advance(0.125)
    assert stop_fetchers_sent(*channels.values()) == [1, 0, 0]
    assert not any(k == ApiKey.START_FETCHER for ch in channels.values() for k, _b, _d in ch.sent)
    clock.advance(0.125)  # t = 0.625: one rebalance for a, b and c
    assert stop_fetchers_sent(*channels.values()) == [2, 1, 1]


def test_a_storm_that_never_pauses_still_gets_a_rebalance_through_after_the_bound():
    clock, store, svc = make(initial_rebalance_delay_ms=1000, initial_rebalance_quiet_ms=250)
    channels = {}
    g = None
    # A member every 0.125 s for 4 s (the quiet period never passes), every request answered
    # at once: without the bound, every rebalance would be superseded until the storm ends.
    # Each arrival comes while the running rebalance waits for its StopFetcher answers.
    channels["m00"] = register(svc, "m00")[1]
    while clock.seconds() < 4.0:
        clock.advance(0.125)
        cid = f"m{len(channels):02}"
        channels[cid] = register(svc, cid)[1]
        for ch in channels.values():
            answer_all(ch)
        assert_no_partition_held_twice(channels)
        g = svc.registries.groups["g"]
        if g.generation:
            break
    assert g.generation == 1, "no rebalance completed while members kept arriving"
    assert clock.seconds() <= 2.5  # the first wait (1 s), then at most the bound (1 s) more


class CountingMembers(dict):
    """A group's member dict that counts every walk over it (iteration, keys, values, items)."""

    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()

    def keys(self):
        self.walks += 1
        return super().keys()

    def values(self):
        self.walks += 1
        return super().values()

    def items(self):
        self.walks += 1
        return super().items()


def ping_round_cost(n):
    """One Ping round over a stable group of ``n`` members, every Ping answered with an offset:
    returns (pings, walks over the member dict, store writes, Python calls per Ping)."""
    clock, store, svc = make()
    channels = [register(svc, f"m{i:04}", timeout=3000)[1] for i in range(n)]
    clock.advance(0)
    for _ in range(2):
        for ch in channels:
            answer_all(ch)
    g = svc.registries.groups["g"]
    assert g.state == "stable"
    clock.advance(1.0)  # a first round, so that the measured one is a steady-state round
    for ch in channels:
        answer_all(ch)
    g.members = CountingMembers(g.members)
    writes = store.multis
    calls = [0]

    def count(frame, event, arg):
        if event == "call":
            calls[0] += 1

    pings = 0
    sys.setprofile(count)
    try:
        clock.advance(1.0)
        for ch in channels:
            for _body, d in ch.pending(ApiKey.PING):
                d.callback(SimpleNamespace(error_code=0, offsets=[
                    SimpleNamespace(topic="t", partition=0, offset=5)]))
                pings += 1
    finally:
        sys.setprofile(None)
    return pings, g.members.walks, store.multis - writes, calls[0] / max(pings, 1)


def test_a_ping_costs_the_same_whatever_the_group_size():
    small, large = ping_round_cost(5), ping_round_cost(500)
    assert small[0] == 5 and large[0] == 500
    # No Ping (sent, answered, its offsets taken) walks the group or writes to the store...
    assert small[1:3] == (0, 0) and large[1:3] == (0, 0)
    # ... and the work per Ping, counted as Python calls, does not grow with the group.
    assert large[3] <= small[3] * 1.1


def test_while_suspended_nothing_is_pinged_nor_failed():
    clock, store, svc = make()
    _, a = register(svc, "a", timeout=3000)
    answer_all(a)
    answer_all(a)
    store.state(SessionState.SUSPENDED)
    assert not svc.can_act()
    clock.advance(1.0)
    assert a.pending(ApiKey.PING) == []
    resp, _ = register(svc, "b")
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    store.state(SessionState.CONNECTED)
    clock.advance(1.0)
    assert len(a.pending(ApiKey.PING)) == 1


def test_session_loss_clears_everything_and_closes_channels():
    clock, store, svc = make()
    _, a = register(svc, "a")
    store.state(SessionState.LOST)
    assert not svc.active and a.closed
    assert svc.registries.groups == {}
    assert svc.metrics.coordinator_expired_members_total.labels(
        reason="disconnect")._value.get() == 0  # resigning fails nobody


def test_fenced_writes_fail_after_the_epoch_moves_and_the_coordinator_steps_down():
    clock, store, svc = make()
    data, version = store.nodes[paths.coordinator_shard_epoch(0)]
    store.nodes[paths.coordinator_shard_epoch(0)] = (b"99", version + 1)
    d = defer.Deferred.fromCoroutine(svc.fenced([Create("/consumers/x", b"1")]))
    f = d.result
    d.addErrback(lambda _: None)
    assert isinstance(f.value, rebalance.NotCoordinator)
    assert "/consumers/x" not in store.nodes
    # It resigned, deleted its seat, and won a fresh election at once (synchronous store).
    assert svc.active and int(store.nodes[paths.coordinator_shard_epoch(0)][0]) == 100


def test_the_committer_writes_only_changed_offsets_in_batches():
    clock, store, svc = make(offsets_commit_interval_ms=1000)
    _, a = register(svc, "a")
    clock.advance(0)
    answer_all(a)
    answer_all(a)
    g = svc.registries.groups["g"]
    m = svc.registries.member("g", "a")
    g.record_offsets(m, [("t", 0, 5), ("t", 1, 6)])
    clock.advance(1.0)
    assert store.nodes[paths.consumer_offset("g", "t", 0)][0] == b"5"
    assert not g.dirty
    before = store.multis
    clock.advance(1.0)
    assert store.multis == before  # nothing changed: nothing written
    g.record_offsets(m, [("t", 1, 8)])
    clock.advance(1.0)
    assert store.nodes[paths.consumer_offset("g", "t", 1)][0] == b"8"
    assert store.multis == before + 1


def test_the_committer_writes_commit_extras_and_reads_them_back():
    clock, store, svc = make(offsets_commit_interval_ms=1000)
    g = svc.registries.group("k")
    g.set_offset(("t", 0), 5, (4, "state"))
    g.set_offset(("t", 1), 6)
    clock.advance(1.0)
    assert store.nodes[paths.consumer_offset("k", "t", 1)][0] == b"6"
    assert paths.CommittedOffset.from_bytes(store.nodes[paths.consumer_offset("k", "t", 0)][0]) \
        == paths.CommittedOffset(5, 4, "state")
    assert not g.dirty
    # Same offset, new metadata: rewritten (SetData: the znode is known to exist).
    g.set_offset(("t", 0), 5, (4, "state-2"))
    clock.advance(1.0)
    assert paths.CommittedOffset.from_bytes(store.nodes[paths.consumer_offset("k", "t", 0)][0]) \
        == paths.CommittedOffset(5, 4, "state-2")
    # A new coordinator's registry learns them from the store; a damaged value is no offset.
    store.nodes[paths.consumer_offset("k", "t", 1)] = (b'{"version":1,"offset":[]}', 0)
    fresh = GroupRegistry("k")
    defer.ensureDeferred(svc.load_committed(fresh, [("t", 0), ("t", 1)]))
    assert (fresh.offsets, fresh.extras) == ({("t", 0): 5}, {("t", 0): (4, "state-2")})
    assert fresh.committed == {("t", 0): 5, ("t", 1): -1}


def test_describe_and_cluster_metadata():
    clock, store, svc = make()
    _, a = register(svc, "a")
    md = cluster_metadata_answer(svc.coordinator_id, svc.brokers(), None, unknown="none")
    assert md["coordinator_id"] == 1 and md["brokers"] == [{"node_id": 1, "host": "h", "port": 9}]
    out = svc.describe_consumer_groups(None, SimpleNamespace(groups=None))
    (g,) = out["groups"]
    assert g["group_id"] == "g" and g["state"] == "rebalancing"
    assert g["members"][0]["consumer_id"] == "a"


# -- UnregisterConsumer: a member leaves ----------------------------------------------------------

def leave(svc, cid, session_id, offsets=(), group="g", topic_allowed=None):
    body = SimpleNamespace(group_id=group, consumer_id=cid, session_id=session_id,
                           offsets=[SimpleNamespace(topic=t, partition=p, offset=o)
                                    for t, p, o in offsets])
    d = defer.ensureDeferred(svc.unregister_consumer(None, body, topic_allowed=topic_allowed))
    out = []
    d.addBoth(out.append)
    assert out, "the store is synchronous: the leave is answered at once"
    return out[0]


def two_members(svc):
    resp_a, a = register(svc, "a", timeout=30000)
    resp_b, b = register(svc, "b", timeout=30000)
    for _ in range(6):
        clock = svc.clock
        clock.advance(0)
        answer_all(a)
        answer_all(b)
    ma, mb = svc.registries.member("g", "a"), svc.registries.member("g", "b")
    assert ma.owned and mb.owned and not set(ma.owned) & set(mb.owned)
    return resp_a, a, resp_b, b


def test_registration_hands_out_a_session_id_per_registration():
    clock, store, svc = make()
    resp_a, _ = register(svc, "a")
    resp_b, _ = register(svc, "b")
    assert resp_a["session_id"] > 0 and resp_b["session_id"] > 0
    assert resp_a["session_id"] != resp_b["session_id"]
    assert svc.registries.member("g", "a").session_id == resp_a["session_id"]


def test_a_leave_commits_the_final_offsets_removes_the_member_and_rebalances_at_once():
    clock, store, svc = make()
    resp_a, a, resp_b, b = two_members(svc)
    owned_a = sorted(svc.registries.member("g", "a").owned)
    tp = owned_a[0]
    resp = leave(svc, "a", resp_a["session_id"], [(tp[0], tp[1], 42)])
    assert resp["error_code"] == 0 and resp["error_message"] is None
    assert resp["partitions"] == [{"topic": tp[0], "partition": tp[1], "error_code": 0}]
    # written (fenced) before the answer, not at the next commit tick
    assert store.nodes[paths.consumer_offset("g", *tp)][0] == b"42"
    assert svc.registries.member("g", "a") is None
    assert svc.metrics.coordinator_left_members_total._value.get() == 1
    assert not a.closed  # the member closes it once it has the answer
    for reason in ("ping", "disconnect"):
        assert svc.metrics.coordinator_expired_members_total.labels(
            reason=reason)._value.get() == 0
    # The channel closing after the leave is not a second removal nor an expiration.
    assert svc.registries.consumers == 1
    # b is rebalanced at once (no Ping interval, no session timeout): it gets a's partitions
    # from the offset a handed over.
    clock.advance(0)
    answer_all(b)
    starts = b.pending(ApiKey.START_FETCHER)
    assert len(starts) == 1
    given = {(p["topic"], p["partition"]): p["offset"]
             for t in starts[0][0]["ownership"] for p in t["partitions"]}
    assert given[tp] == 42 and set(given) == {("t", 0), ("t", 1)}
    answer_all(b)
    assert set(svc.registries.member("g", "b").owned) == {("t", 0), ("t", 1)}
    # A member that does not close its channel has it closed for it, bounded.
    clock.advance(20.0)
    assert a.closed
    assert svc.metrics.coordinator_left_members_total._value.get() == 1


@pytest.mark.parametrize("forgery", ["another member's id", "wrong session", "old session",
                                     "unknown member", "no session"])
def test_a_forged_leave_is_refused_and_changes_nothing(forgery):
    clock, store, svc = make()
    resp_a, a, resp_b, b = two_members(svc)
    g = svc.registries.groups["g"]
    tp_b = sorted(svc.registries.member("g", "b").owned)[0]
    offsets_before, gen_before = dict(g.offsets), g.generation
    cid, sid = {
        # a's own session id naming b: a member can only leave itself
        "another member's id": ("b", resp_a["session_id"]),
        "wrong session": ("b", resp_b["session_id"] ^ 1),
        "old session": ("b", resp_b["session_id"]),
        "unknown member": ("z", resp_a["session_id"]),
        "no session": ("b", 0),
    }[forgery]
    if forgery == "old session":
        # b's registration is replaced by a new one: its old session id is no longer good
        b.close()
        clock.advance(0)
        resp_b2, b2 = register(svc, "b", timeout=30000)
        assert resp_b2["session_id"] != resp_b["session_id"]
        offsets_before, gen_before = dict(g.offsets), g.generation
    members_before = sorted(svc.registries.groups["g"].members)
    initiated_before = g.rebalance_initiated
    left_before = svc.metrics.coordinator_left_members_total._value.get()
    resp = leave(svc, cid, sid, [(tp_b[0], tp_b[1], 99)])
    assert resp["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert "leave itself" in resp["error_message"] and resp["partitions"] == []
    assert sorted(svc.registries.groups["g"].members) == members_before
    assert g.offsets == offsets_before and g.generation == gen_before
    assert paths.consumer_offset("g", *tp_b) not in store.nodes
    assert svc.metrics.coordinator_left_members_total._value.get() == left_before
    assert g.rebalance_initiated == initiated_before


def test_a_leave_commits_only_partitions_the_member_owns():
    clock, store, svc = make()
    resp_a, a, resp_b, b = two_members(svc)
    tp_a = sorted(svc.registries.member("g", "a").owned)[0]
    tp_b = sorted(svc.registries.member("g", "b").owned)[0]
    resp = leave(svc, "a", resp_a["session_id"],
                 [(tp_a[0], tp_a[1], 7), (tp_b[0], tp_b[1], 99)])
    assert resp["error_code"] == 0
    codes = {(p["topic"], p["partition"]): p["error_code"] for p in resp["partitions"]}
    assert codes == {tp_a: 0, tp_b: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert tp_b[1] != tp_a[1] and "not owned by a" in resp["error_message"]
    assert store.nodes[paths.consumer_offset("g", *tp_a)][0] == b"7"
    assert paths.consumer_offset("g", *tp_b) not in store.nodes
    assert svc.registries.groups["g"].offsets.get(tp_b, -1) == -1
    assert svc.registries.member("g", "a") is None  # it still left


def test_a_leave_does_not_commit_offsets_of_a_topic_the_principal_may_not_read():
    """As CommitOffsets: the final offsets of a topic without READ are refused, not written;
    the member still leaves."""
    clock, store, svc = make()
    resp_a, a, resp_b, b = two_members(svc)
    tp_a = sorted(svc.registries.member("g", "a").owned)[0]
    asked = []

    def no_read(topic: str) -> bool:
        asked.append(topic)
        return False

    resp = leave(svc, "a", resp_a["session_id"], [(tp_a[0], tp_a[1], 7)], topic_allowed=no_read)
    assert asked == [tp_a[0]]
    assert resp["error_code"] == 0
    assert resp["partitions"] == [{"topic": tp_a[0], "partition": tp_a[1],
                                   "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}]
    assert "READ" in resp["error_message"]
    assert paths.consumer_offset("g", *tp_a) not in store.nodes
    assert svc.registries.groups["g"].offsets.get(tp_a, -1) == -1
    assert svc.registries.member("g", "a") is None


def test_a_leave_whose_offsets_cannot_be_written_leaves_the_member_in_place():
    clock, store, svc = make()
    resp_a, a, resp_b, b = two_members(svc)
    tp = sorted(svc.registries.member("g", "a").owned)[0]
    svc.elector.resign_soon = lambda: None
    store.nodes[paths.coordinator_shard_epoch(0)] = (
        store.nodes[paths.coordinator_shard_epoch(0)][0], 99)  # another coordinator's epoch
    resp = leave(svc, "a", resp_a["session_id"], [(tp[0], tp[1], 5)])
    assert resp["error_code"] == ErrorCode.NOT_COORDINATOR
    # still a member: it hands its offsets over on its channel instead (the slow path)
    assert svc.registries.member("g", "a") is not None and not a.closed
    assert svc.metrics.coordinator_left_members_total._value.get() == 0
