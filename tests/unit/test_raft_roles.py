"""The role transition table: every allowed move with its epoch rule, and refusals."""

from __future__ import annotations

import itertools

import pytest

from broker_core.raft import TRANSITIONS, IllegalStateTransition, Role
from broker_core.raft.roles import EpochRule, check_transition


def test_every_allowed_move_is_checked_against_its_epoch_rule():
    for (current, target), rule in TRANSITIONS.items():
        for new_epoch in (4, 5, 6, 7):
            if rule.allows(5, new_epoch):
                check_transition(1, current, 5, target, new_epoch)
            else:
                with pytest.raises(IllegalStateTransition, match=f"must be {rule.value}"):
                    check_transition(1, current, 5, target, new_epoch)


def test_moves_missing_from_the_table_are_refused_with_both_ends_named():
    missing = [(a, b) for a, b in itertools.product(Role, Role) if (a, b) not in TRANSITIONS]
    assert (Role.FOLLOWER, Role.LEADER) in missing  # only a candidate becomes leader
    for current, target in missing:
        with pytest.raises(IllegalStateTransition) as info:
            check_transition(3, current, 5, target, 6)
        assert current.value in str(info.value) and target.value in str(info.value)


def test_the_epoch_never_goes_back():
    for rule in TRANSITIONS.values():
        assert not rule.allows(5, 4)


@pytest.mark.parametrize("current, target, rule", [
    (Role.UNATTACHED, Role.VOTED, EpochRule.SAME),  # a vote is cast in the epoch one is in
    (Role.CANDIDATE, Role.LEADER, EpochRule.SAME),  # winning keeps the epoch stood in
    (Role.CANDIDATE, Role.CANDIDATE, EpochRule.NEXT),  # a lost election: stand again
    (Role.FOLLOWER, Role.CANDIDATE, EpochRule.NEXT),
    (Role.LEADER, Role.RESIGNED, EpochRule.SAME),
    (Role.RESIGNED, Role.CANDIDATE, EpochRule.NEXT),
    (Role.LEADER, Role.FOLLOWER, EpochRule.HIGHER),  # a leader never follows in its own epoch
    (Role.FOLLOWER, Role.FOLLOWER, EpochRule.HIGHER),  # one leader per epoch
])
def test_key_rules_of_the_table(current, target, rule):
    assert TRANSITIONS[(current, target)] is rule


def test_leader_and_resigned_never_go_back_to_voted_or_candidate_in_their_epoch():
    for target in (Role.VOTED, Role.UNATTACHED, Role.CANDIDATE):
        for current in (Role.LEADER, Role.RESIGNED):
            rule = TRANSITIONS.get((current, target))
            assert rule is None or not rule.allows(5, 5)

