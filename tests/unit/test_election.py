"""Leader election rules (seed 000 A and B), leader epochs (seed 003) and the judgement of a
leader's ISR change (seed 004), as tables."""

import pytest

from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import (
    Election,
    IsrVerdict,
    init_leader,
    judge_isr_change,
    next_leader_epoch,
    offline_leader,
    shrink_isr,
)


@pytest.mark.parametrize(
    ("assignment", "live", "expected"),
    [
        ((1, 2, 3), {1, 2, 3}, Election(1, (1, 2, 3))),
        ((1, 2, 3), {2, 3}, Election(2, (2, 3))),  # preferred replica down: next live one
        ((3, 1, 2), {1, 2, 3}, Election(3, (3, 1, 2))),  # assignment order, not id order
        ((1, 2), set(), Election(-1, (1, 2))),  # nobody alive: offline, whole AR as ISR
        ((1,), {2}, Election(-1, (1,))),
    ],
)
def test_init_leader(assignment, live, expected):
    assert init_leader(assignment, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "unclean", "expected"),
    [
        # a live ISR member leads, preferred order first; dead members leave the ISR
        ((1, 2, 3), (1, 2, 3), {2, 3}, False, Election(2, (2, 3))),
        ((1, 2, 3), (3, 2), {2, 3}, False, Election(2, (2, 3))),
        # no live ISR member: offline, last ISR kept so a returning member can lead cleanly
        ((1, 2, 3), (1,), {2, 3}, False, Election(-1, (1,))),
        # ... unless unclean election is allowed: first live AR member, alone, flagged unclean
        ((1, 2, 3), (1,), {3, 2}, True, Election(2, (2,), unclean=True)),
        # nobody in AR alive: offline even with unclean allowed
        ((1, 2), (1,), {5}, True, Election(-1, (1,))),
        # single copy: its broker returns and is in the ISR
        ((1,), (1,), {1}, False, Election(1, (1,))),
    ],
)
def test_offline_leader(assignment, isr, live, unclean, expected):
    assert offline_leader(assignment, isr, live, unclean_allowed=unclean) == expected


def test_shrink_isr_keeps_order_and_drops_dead():
    assert shrink_isr((3, 1, 2), {1}) == (3, 2)
    assert shrink_isr((1,), {1}) == ()


@pytest.mark.parametrize(
    ("leader", "epoch", "election", "expected"),
    [
        (1, 4, Election(1, (1, 2)), 4),  # ISR change only: same generation
        (1, 4, Election(2, (2,)), 5),  # new leader
        (1, 4, Election(-1, (1,)), 5),  # goes offline
        (-1, 5, Election(-1, (1,)), 6),  # stays offline: every write is a new epoch
        (-1, 5, Election(1, (1,)), 6),  # back online
        (1, 4, Election(1, (1, 2), new_generation=True), 5),  # seed 003: returning leader
    ],
)
def test_next_leader_epoch(leader, epoch, election, expected):
    assert next_leader_epoch(leader, epoch, election) == expected


# Broker 1 leads at epoch 4, znode version 7; AR (1, 2, 3), ISR (1, 2); 4 is no replica.
STATE = PartitionDecision(leader=1, leader_epoch=4, isr=(1, 2), replicas=(1, 2, 3),
                          zk_version=7, controller_epoch=2)
LIVE = {1, 2, 3, 4}
WRITE = IsrVerdict(None, write=True)


@pytest.mark.parametrize(
    ("requester", "leader_epoch", "partition_epoch", "new_isr", "current", "live", "expected"),
    [
        (1, 4, 7, (1,), STATE, LIVE, WRITE),  # shrink
        (1, 4, 7, (1, 2, 3), STATE, LIVE, WRITE),  # expand
        (1, 4, 7, (3, 1), STATE, LIVE, WRITE),  # order is the leader's business
        (1, 4, 7, (1,), None, LIVE, IsrVerdict("UNKNOWN_TOPIC_OR_PARTITION")),
        (2, 4, 7, (2,), STATE, LIVE, IsrVerdict("NOT_LEADER_OR_FOLLOWER")),
        (1, 3, 7, (1,), STATE, LIVE, IsrVerdict("FENCED_LEADER_EPOCH")),  # older epoch
        (1, 5, 7, (1,), STATE, LIVE, IsrVerdict("FENCED_LEADER_EPOCH")),  # from the future
        (1, 4, 6, (1,), STATE, LIVE, IsrVerdict("INVALID_UPDATE_VERSION")),
        # the ISR the partition already has: no write and no error, even from a stale version
        (1, 4, 6, (2, 1), STATE, LIVE, IsrVerdict(None, write=False)),
        (1, 4, 7, (2,), STATE, LIVE, IsrVerdict("INVALID_REQUEST")),  # without the leader
        (1, 4, 7, (1, 4), STATE, LIVE, IsrVerdict("INVALID_REQUEST")),  # not a replica
        (1, 4, 7, (1, 3, 3), STATE, LIVE, IsrVerdict("INVALID_REQUEST")),  # duplicate
        (1, 4, 7, (), STATE, LIVE, IsrVerdict("INVALID_REQUEST")),
        (1, 4, 7, (1, 2, 3), STATE, {1, 2}, IsrVerdict("INELIGIBLE_REPLICA")),  # adds a dead one
        # keeping a dead member is not adding it (the controller drops it on broker change)
        (1, 4, 7, (1, 2), PartitionDecision(1, 4, (1, 2, 3), (1, 2, 3), 7, 2), {1, 2}, WRITE),
    ],
)
def test_judge_isr_change(requester, leader_epoch, partition_epoch, new_isr, current, live,
                          expected):
    assert judge_isr_change(requester, leader_epoch, partition_epoch, new_isr, current,
                            live) == expected
