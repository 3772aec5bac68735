"""Leader election rules (seed 000 A and B), as tables."""

import pytest

from broker_core.controller.election import (
    Election,
    init_leader,
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
