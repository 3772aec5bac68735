"""ElectLeaders' UNCLEAN type end to end on one controller (task.Clock, in-memory store): the
request document and its validation, the controller's election of an out-of-sync replica for a
leaderless partition (fenced, new leader epoch, sent to the brokers, request deleted), what it
leaves alone, and the answer the request path gives once the controller has acted."""

from __future__ import annotations

import pytest
from twisted.internet import defer
from twisted.python.failure import Failure

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.wire.apis import ApiKey
from tests.support.controller_harness import make, run

LEADERLESS = ("t", 0)


def done_now(d: defer.Deferred):
    """The result of an in-memory store call (it answers at once)."""
    out: list = []
    d.addBoth(out.append)
    assert out and not isinstance(out[0], Failure), out
    return out[0]


def leaderless(store, ctl):
    """Partition t-0 (AR 1,2,3) lost its only in-sync replica, broker 1, which is gone; 2 and
    3 are alive but out of sync. Broker 1 is gone from the store and the controller's view."""
    store.delete(paths.broker(1))
    ctl.context.live.pop(1)
    _, stat = done_now(store.get(paths.leader_and_isr(*LEADERLESS)))
    done_now(store.set(paths.leader_and_isr(*LEADERLESS),
                  paths.LeaderAndIsr(-1, 4, [1], 5).to_bytes(), stat.version))
    run(ctl._load_context())


def state(store, tp) -> paths.LeaderAndIsr:
    return paths.LeaderAndIsr.from_bytes(done_now(store.get(paths.leader_and_isr(*tp)))[0])


def test_the_request_document_round_trips_and_stays_kafkas_for_preferred():
    preferred = paths.PreferredReplicaElection([("t", 0)])
    assert b"election" not in preferred.to_bytes()
    unclean = paths.PreferredReplicaElection([("t", 0)], unclean=True)
    assert paths.PreferredReplicaElection.from_bytes(unclean.to_bytes()) == unclean
    assert paths.PreferredReplicaElection.from_bytes(preferred.to_bytes()) == preferred


@pytest.mark.parametrize("election", [b'"dirty"', b"1", b"true", b"null", b'["unclean"]'])
def test_an_unknown_election_kind_is_refused_on_read(election):
    data = b'{"version":1,"partitions":[{"topic":"t","partition":0}],"election":' + election + b"}"
    with pytest.raises(ValueError):
        paths.PreferredReplicaElection.from_bytes(data)


def test_the_controller_elects_an_out_of_sync_replica_on_request():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)
    before = state(store, ("t", 1))
    done_now(store.create(paths.PREFERRED_REPLICA_ELECTION, paths.PreferredReplicaElection(
        [LEADERLESS, ("t", 1), ("t", 9)], unclean=True).to_bytes(),
                          makepath=True))
    done = defer.Deferred.fromCoroutine(ctl.preferred_election.on_preferred_election())
    for b in channels:
        channels[b].answer()
    assert done.called
    after = state(store, LEADERLESS)
    assert (after.leader, after.isr, after.leader_epoch) == (2, [2], 5)
    assert ctl.context.states[LEADERLESS].leader == 2
    assert state(store, ("t", 1)) == before  # had a live leader: left alone
    assert paths.PREFERRED_REPLICA_ELECTION not in store.nodes
    sent = [body for key, body, _ in channels[2].sent if key == ApiKey.LEADER_AND_ISR]
    assert sent, "the new leader was not told"


def test_a_preferred_request_never_elects_outside_the_isr():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)
    done_now(store.create(paths.PREFERRED_REPLICA_ELECTION,
                     paths.PreferredReplicaElection([LEADERLESS]).to_bytes(), makepath=True))
    run(ctl.preferred_election.on_preferred_election())
    assert state(store, LEADERLESS).leader == -1
    assert paths.PREFERRED_REPLICA_ELECTION not in store.nodes


def test_a_damaged_request_is_dropped_and_changes_nothing():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)
    done_now(store.create(paths.PREFERRED_REPLICA_ELECTION,
                     b'{"version":1,"partitions":[{"topic":"t","partition":0}],'
                     b'"election":{"kind":"unclean"}}', makepath=True))
    run(ctl.preferred_election.on_preferred_election())
    assert state(store, LEADERLESS).leader == -1
    assert paths.PREFERRED_REPLICA_ELECTION not in store.nodes


def test_no_live_replica_means_no_election():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)
    for b in (2, 3):
        ctl.context.live.pop(b)
    run(ctl.preferred_election.elect_unclean([LEADERLESS]))
    assert state(store, LEADERLESS).leader == -1


def test_the_request_path_answers_per_partition_once_the_controller_acted():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)

    asked = defer.Deferred.fromCoroutine(topic_admin.elect_unclean_leaders(
        store, [LEADERLESS, ("t", 1), ("t", 7), ("u", 0)], timeout_s=5, clock=clock))
    assert not asked.called
    request = paths.PreferredReplicaElection.from_bytes(
        store.nodes[paths.PREFERRED_REPLICA_ELECTION][0])
    assert request == paths.PreferredReplicaElection([LEADERLESS], unclean=True)
    defer.Deferred.fromCoroutine(ctl.preferred_election.on_preferred_election())
    for b in channels:
        channels[b].answer()
    clock.advance(0.1)
    assert asked.called
    out = asked.result
    assert out[LEADERLESS] == topic_admin.ELECTED
    assert out[("t", 1)] == topic_admin.ELECTION_NOT_NEEDED
    assert out[("t", 7)].startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert out[("u", 0)].startswith("UNKNOWN_TOPIC_OR_PARTITION")


def test_the_request_path_refuses_when_no_replica_is_alive_and_writes_nothing():
    store, clock, channels, ctl = make(partitions=3)
    leaderless(store, ctl)
    for b in (2, 3):
        store.delete(paths.broker(b))
    out = run(topic_admin.elect_unclean_leaders(store, [LEADERLESS], clock=clock))
    assert out[LEADERLESS].startswith("ELIGIBLE_LEADERS_NOT_AVAILABLE")
    assert paths.PREFERRED_REPLICA_ELECTION not in store.nodes
