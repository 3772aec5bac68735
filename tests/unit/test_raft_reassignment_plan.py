"""The reassignment step planner (docs/design.md#voter-reassignment): every rule, and the
example (1, 2, 3) -> (4, 5, 6) step by step."""

from __future__ import annotations

import pytest

from broker_core.raft.reassignment import (
    Add,
    Done,
    Remove,
    ResignThenRemove,
    Wait,
    next_step,
    plan,
)


def test_current_equal_to_target_is_done():
    assert next_step({1, 2, 3}, {3, 2, 1}, 1, caught_up=()) == Done()


def test_adds_first_when_there_are_at_least_as_many_new_voters_as_removed_ones():
    assert next_step({1, 2, 3}, {4, 5, 6}, 1, caught_up={4, 5, 6}) == Add(4)
    assert next_step({1, 2, 3}, {1, 2, 4}, 1, caught_up={4}) == Add(4)


def test_adds_only_a_caught_up_voter_and_waits_when_none_is():
    assert next_step({1, 2, 3}, {4, 5, 6}, 1, caught_up={6, 9}) == Add(6)
    assert next_step({1, 2, 3}, {4, 5, 6}, 1, caught_up={1, 2, 3}) == Wait()
    assert next_step({1}, {1, 2}, 1, caught_up=()) == Wait()


def test_removes_when_there_are_more_voters_to_remove_than_to_add():
    assert next_step({1, 2, 3, 4}, {4, 5, 6}, 1, caught_up={5, 6}) == Remove(3)
    assert next_step({1, 2, 3}, {1}, 1, caught_up=()) == Remove(3)


def test_never_removes_the_leader_while_another_voter_can_go():
    assert next_step({1, 2, 3}, {3}, 2, caught_up=()) == Remove(1)
    assert next_step({1, 2}, {2}, 2, caught_up=()) == Remove(1)


def test_the_leader_resigns_when_it_is_the_last_voter_to_remove():
    assert next_step({1, 4, 5, 6}, {4, 5, 6}, 1, caught_up={4, 5, 6}) == ResignThenRemove()
    assert next_step({1, 2}, {2}, 1, caught_up={2}) == ResignThenRemove()
    # The next leader sees the old one as an ordinary voter to remove.
    assert next_step({1, 4, 5, 6}, {4, 5, 6}, 4, caught_up=()) == Remove(1)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least one voter"):
        next_step({1}, set(), 1, ())
    with pytest.raises(ValueError, match="not among the current voters"):
        next_step({1, 2}, {2}, 3, ())


def test_the_documented_example_in_single_member_steps():
    # docs/raft.md#reassignment: (1, 2, 3) -> (4, 5, 6) with leader 1; 1 resigns and 4 removes it.
    assert plan((1, 2, 3), (4, 5, 6), leader_id=1, successor_id=4) == [
        (1, 2, 3), (1, 2, 3, 4), (1, 2, 4), (1, 2, 4, 5), (1, 4, 5), (1, 4, 5, 6), (4, 5, 6)]


@pytest.mark.parametrize("current, target, leader", [
    ((1,), (2,), 1), ((1, 2, 3), (1, 2, 3, 4, 5), 2), ((1, 2, 3, 4, 5), (3,), 3),
    ((1, 2, 3, 4, 5), (6,), 5), ((1, 2), (3, 4, 5, 6, 7), 1), ((3,), (1, 2, 3), 3),
])
def test_every_plan_changes_one_voter_at_a_time_and_reaches_the_target(current, target, leader):
    sets = plan(current, target, leader)
    assert sets[0] == tuple(sorted(current)) and sets[-1] == tuple(sorted(target))
    for before, after in zip(sets, sets[1:], strict=False):
        assert len(set(before) ^ set(after)) == 1 and after
    assert len(sets) - 1 == len(set(current) ^ set(target))
