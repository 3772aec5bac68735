"""Leader election rules (docs/design.md), leader epochs, the judgement of a leader's ISR
change, and the reassignment, preferred-leader, unclean-on-request and
controlled-shutdown rules, as tables."""

import pytest

from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import (
    Election,
    IsrVerdict,
    controlled_shutdown_election,
    init_leader,
    judge_isr_change,
    next_leader_epoch,
    offline_leader,
    preferred_leader,
    reassignment_complete,
    reassignment_leader,
    reassignment_replicas,
    shrink_isr,
    unclean_leader_on_request,
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
        (1, 4, Election(1, (1, 2), new_generation=True), 5),  # returning leader
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


# -- reassignment, preferred election, controlled shutdown --------------------------------------


@pytest.mark.parametrize(
    ("original", "target", "expected"),
    [
        ((1, 2, 3), (2, 3, 4), ((1, 2, 3, 4), (4,), (1,))),
        ((1, 2, 3), (4, 5, 6), ((1, 2, 3, 4, 5, 6), (4, 5, 6), (1, 2, 3))),
        ((1, 2, 3), (3, 2, 1), ((1, 2, 3), (), ())),  # reorder only
        ((1, 2, 3), (1, 2), ((1, 2, 3), (), (3,))),  # replication factor down
        ((1, 2), (1, 2, 3), ((1, 2, 3), (3,), ())),  # replication factor up
    ],
)
def test_reassignment_replicas_keep_the_original_order_first(original, target, expected):
    ar, adding, removing = reassignment_replicas(original, target)
    assert (ar, adding, removing) == expected
    assert tuple(b for b in ar if b not in adding) == original  # OAR is recoverable


@pytest.mark.parametrize(
    ("target", "isr", "expected"),
    [((2, 3, 4), (1, 2, 3, 4), True), ((2, 3, 4), (1, 2, 3), False), ((), (1,), False),
     ((4,), (4,), True)],
)
def test_reassignment_complete(target, isr, expected):
    assert reassignment_complete(target, isr) is expected


@pytest.mark.parametrize(
    ("target", "isr", "leader", "live", "expected"),
    [
        # the leader stays when it is in RAR; the ISR keeps only RAR members
        ((2, 3, 4), (1, 2, 3, 4), 2, {1, 2, 3, 4}, Election(2, (2, 3, 4))),
        # the leader leaves: first live RAR member in the ISR, RAR order
        ((2, 3, 4), (1, 2, 3, 4), 1, {1, 2, 3, 4}, Election(2, (2, 3, 4))),
        ((4, 3, 2), (1, 2, 3, 4), 1, {1, 2, 3, 4}, Election(4, (2, 3, 4))),
        ((2, 3, 4), (1, 3, 4), 1, {1, 3, 4}, Election(3, (3, 4))),
        # a dead leader inside RAR is replaced too
        ((2, 3, 4), (2, 3, 4), 2, {3, 4}, Election(3, (2, 3, 4))),
        # no live in-sync member of RAR: wait
        ((4, 5), (1, 2), 1, {1, 2, 4, 5}, None),
    ],
)
def test_reassignment_leader(target, isr, leader, live, expected):
    assert reassignment_leader(target, isr, leader, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "leader", "live", "expected"),
    [
        ((1, 2, 3), (1, 2, 3), 2, {1, 2, 3}, Election(1, (1, 2, 3))),
        ((1, 2, 3), (1, 2, 3), 1, {1, 2, 3}, None),  # already preferred
        ((1, 2, 3), (2, 3), 2, {1, 2, 3}, None),  # preferred out of sync
        ((1, 2, 3), (1, 2, 3), 2, {2, 3}, None),  # preferred dead
        ((), (), -1, set(), None),
    ],
)
def test_preferred_leader(assignment, isr, leader, live, expected):
    assert preferred_leader(assignment, isr, leader, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "leader", "live", "expected"),
    [
        ((1, 2, 3), (1,), 1, {1, 2, 3}, None),  # a live leader: no election needed
        ((1, 2, 3), (1, 2), 2, {2}, None),  # a live leader out of preferred order: still none
        ((1, 2, 3), (1,), -1, set(), None),  # nobody alive: nobody can lead
        ((1, 2, 3), (1,), 1, {4}, None),  # only brokers outside AR alive
        # no live ISR member: the first live replica of AR leads alone, uncleanly
        ((1, 2, 3), (1,), -1, {3, 2}, Election(2, (2,), unclean=True)),
        ((1, 2, 3), (1,), 1, {3}, Election(3, (3,), unclean=True)),  # dead leader, not -1
        # a live ISR member is still preferred: a clean election
        ((1, 2, 3), (1, 3), -1, {2, 3}, Election(3, (3,))),
        ((), (), -1, {1}, None),
    ],
)
def test_unclean_leader_on_request(assignment, isr, leader, live, expected):
    assert unclean_leader_on_request(assignment, isr, leader, live) == expected


def test_an_unclean_election_on_request_starts_a_new_leader_epoch():
    election = unclean_leader_on_request((1, 2), (1,), -1, {2})
    assert election is not None and next_leader_epoch(-1, 7, election) == 8


@pytest.mark.parametrize(
    ("assignment", "isr", "leader", "shutting", "live", "expected"),
    [
        # it leads: next live ISR member in AR order, ISR without it
        ((1, 2, 3), (1, 2, 3), 1, 1, {2, 3}, Election(2, (2, 3))),
        ((1, 3, 2), (1, 2, 3), 1, 1, {2, 3}, Election(3, (2, 3))),
        ((1, 2, 3), (1, 3), 1, 1, {2, 3}, Election(3, (3,))),
        # it leads alone in the ISR: cannot move
        ((1, 2, 3), (1,), 1, 1, {2, 3}, None),
        ((1, 2), (1, 2), 1, 1, {1}, None),  # the other replica is not alive
        # it follows in the ISR: leave the ISR, same leader
        ((1, 2, 3), (1, 2, 3), 1, 2, {1, 3}, Election(1, (1, 3))),
        # not in the ISR: nothing to change
        ((1, 2, 3), (1, 3), 1, 2, {1, 3}, None),
    ],
)
def test_controlled_shutdown_election(assignment, isr, leader, shutting, live, expected):
    assert controlled_shutdown_election(assignment, isr, leader, shutting, live) == expected


def test_offline_election_passes_over_brokers_in_controlled_shutdown():
    """A broker being shut down gets no new leadership unless it alone keeps the partition
    online (it still serves until it stops)."""
    from twisted.internet import task

    from broker_core.controller.batch import PartitionDecision
    from broker_core.controller.controller import Controller

    ctl = Controller(1, store=None, reactor=task.Clock())
    ctl.context.shutting_down = {2}
    d = PartitionDecision(leader=3, leader_epoch=4, isr=(3, 2, 1), replicas=(3, 2, 1),
                          zk_version=7, controller_epoch=1)
    assert ctl._offline_election(("t", 0), d, live={1, 2}).leader == 1
    only = PartitionDecision(leader=3, leader_epoch=4, isr=(3, 2), replicas=(3, 2, 1),
                             zk_version=7, controller_epoch=1)
    assert ctl._offline_election(("t", 0), only, live={1, 2}).leader == 2
    ctl.context.shutting_down = set()
    assert ctl._offline_election(("t", 0), d, live={1, 2}).leader == 2  # replica order
