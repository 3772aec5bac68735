"""The leader's bookkeeping in ``broker_core.replica.partition`` and the follower's truncation
rule in ``broker_core.replica.fetcher.truncation_offset``, on real logs in a temp dir."""

from __future__ import annotations

import pytest

from broker_core.log import Log, LogConfig
from broker_core.replica.fetcher import truncation_offset
from broker_core.replica.partition import LeaderAndIsrState, Partition, PendingIsrChange
from broker_core.wire.records import Record, build_batch
from tests.support.manual_time import ManualTime

ME = 1


def batch(n: int = 1) -> bytes:
    return build_batch([Record(None, b"v", [], 1000) for _ in range(n)])


def state(leader=ME, epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0):
    return LeaderAndIsrState(leader, epoch, tuple(isr), tuple(replicas), 1, zk_version)


@pytest.fixture
def part(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime())
    yield Partition("t", 0, ME, log)
    log.close()


def append(p: Partition, n: int) -> None:
    p.log.append_as_leader(batch(n), p.leader_epoch)


# -- leadership and staleness --------------------------------------------------------------------


def test_new_leadership_records_its_epoch_start_and_forgets_followers(part):
    assert part.make_leader(state(epoch=3), now_ms=0)
    assert part.log.leader_epochs.latest_entry == (3, 0)
    append(part, 5)
    part.record_follower_fetch(2, 5, now_ms=10)
    assert part.remotes[2].log_end_offset == 5
    assert not part.make_leader(state(epoch=3, zk_version=1), now_ms=20)  # same epoch: ISR update
    assert part.remotes[2].log_end_offset == 5
    assert part.make_leader(state(epoch=4), now_ms=30)  # new generation
    assert part.remotes[2].log_end_offset == -1
    assert part.log.leader_epochs.latest_entry == (4, 5)
    assert part.leader_epoch_start_offset == 5


@pytest.mark.parametrize("held,incoming,stale", [
    ((3, 5), (2, 9), True),    # older epoch
    ((3, 5), (3, 4), True),    # same epoch, older znode version
    ((3, 5), (3, 5), False),   # the same state again
    ((3, 5), (3, 6), False),   # ISR change at the same epoch
    ((3, 5), (4, 0), False),   # newer epoch, whatever the version
])
def test_stale_states_are_recognised(part, held, incoming, stale):
    part.make_leader(state(epoch=held[0], zk_version=held[1]), now_ms=0)
    assert part.is_stale(state(epoch=incoming[0], zk_version=incoming[1])) is stale


# -- high watermark ------------------------------------------------------------------------------


def test_hw_is_the_minimum_over_the_isr_and_waits_for_unknown_followers(part):
    part.make_leader(state(isr=(1, 2, 3)), now_ms=0)
    append(part, 10)
    assert part.high_watermark == 0  # followers 2 and 3 have not fetched yet
    assert not part.record_follower_fetch(2, 10, now_ms=1)
    assert part.high_watermark == 0  # 3 still unknown
    assert part.record_follower_fetch(3, 4, now_ms=2)
    assert part.high_watermark == 4
    assert part.record_follower_fetch(3, 10, now_ms=3)
    assert part.high_watermark == 10


def test_hw_never_moves_back(part):
    part.make_leader(state(isr=(1, 2)), now_ms=0)
    append(part, 10)
    part.record_follower_fetch(2, 10, now_ms=1)
    assert part.high_watermark == 10
    part.record_follower_fetch(2, 3, now_ms=2)  # a follower that truncated and starts again
    assert part.high_watermark == 10


def test_pending_expansion_counts_at_once_and_pending_shrink_does_not(part):
    part.make_leader(state(isr=(1, 2), replicas=(1, 2, 3)), now_ms=0)
    append(part, 10)
    part.record_follower_fetch(2, 10, now_ms=1)
    part.record_follower_fetch(3, 6, now_ms=1)
    assert part.high_watermark == 10  # 3 is outside the ISR
    # Expansion in flight: the maximal ISR includes 3, which holds the HW at what 3 has.
    append(part, 5)
    expand = part.propose_isr((1, 2, 3))
    part.record_follower_fetch(2, 15, now_ms=2)
    assert part.maximal_isr == (1, 2, 3)
    assert part.high_watermark == 10
    part.record_follower_fetch(3, 12, now_ms=2)
    assert part.high_watermark == 12
    # Shrink in flight: the committed (larger) ISR still counts until the controller answers.
    assert part.apply_isr_update(expand, 0, (1, 2, 3), 1)
    shrink = part.propose_isr((1, 2))
    part.record_follower_fetch(2, 15, now_ms=3)
    assert part.high_watermark == 12
    assert part.apply_isr_update(shrink, 0, (1, 2), 2)
    assert part.maybe_advance_high_watermark() and part.high_watermark == 15


def test_isr_update_for_another_epoch_or_older_version_ends_the_change_but_is_not_adopted(part):
    part.make_leader(state(epoch=2, isr=(1, 2, 3), zk_version=4), now_ms=0)
    change = part.propose_isr((1, 2))
    assert not part.apply_isr_update(change, 1, (1, 2), 5)
    assert part.pending_isr is None and part.isr == (1, 2, 3)
    change = part.propose_isr((1, 2))
    assert not part.apply_isr_update(change, 2, (1, 2), 3)
    assert part.isr == (1, 2, 3)
    change = part.propose_isr((1, 2))
    assert part.apply_isr_update(change, 2, (1, 2), 5) and part.isr == (1, 2)


def test_an_answer_to_a_change_that_is_not_pending_changes_nothing(part):
    """The maximal-ISR race: the LeaderAndIsr for change A arrives before A's answer, and the
    leader proposes B in between; A's late answer must leave B pending (so the HW keeps
    counting the replica B adds), whether it is a success or a refusal."""
    part.make_leader(state(isr=(1, 2), replicas=(1, 2, 3, 4)), now_ms=0)
    a = part.propose_isr((1, 2, 3))
    part.make_leader(state(isr=(1, 2, 3), replicas=(1, 2, 3, 4), zk_version=1), now_ms=1)
    assert part.pending_isr is None  # settled by the newer state
    b = part.propose_isr((1, 2, 3, 4))
    assert b == PendingIsrChange((1, 2, 3, 4), 0, 1)
    assert not part.apply_isr_update(a, 0, (1, 2, 3), 1)
    assert not part.refuse_isr_change(a)
    assert part.pending_isr == b and part.maximal_isr == (1, 2, 3, 4)
    assert part.refuse_isr_change(b) and part.pending_isr is None


def test_a_state_repeating_the_base_of_the_pending_change_leaves_it_pending(part):
    """A's answer came first, B was proposed from it, then A's LeaderAndIsr (the same version
    B was computed from) arrives late: B is still in flight and stays pending. A newer state
    (a higher version, or a new leader epoch) settles it."""
    part.make_leader(state(isr=(1, 2), replicas=(1, 2, 3, 4)), now_ms=0)
    a = part.propose_isr((1, 2, 3))
    assert part.apply_isr_update(a, 0, (1, 2, 3), 1)
    b = part.propose_isr((1, 2, 3, 4))
    assert not part.make_leader(state(isr=(1, 2, 3), replicas=(1, 2, 3, 4), zk_version=1),
                                now_ms=1)
    assert part.pending_isr == b
    part.make_leader(state(isr=(1, 2, 3, 4), replicas=(1, 2, 3, 4), zk_version=2), now_ms=2)
    assert part.pending_isr is None
    c = part.propose_isr((1, 2, 3))
    part.make_leader(state(epoch=1, isr=(1, 2, 3, 4), replicas=(1, 2, 3, 4), zk_version=2),
                     now_ms=3)
    assert part.pending_isr is None and c is not None


def test_only_a_leader_without_a_pending_change_proposes(part):
    part.make_follower(state(leader=2))
    with pytest.raises(ValueError):
        part.propose_isr((1, 2))
    part.make_leader(state(isr=(1, 2)), now_ms=0)
    part.propose_isr((1, 2, 3))
    with pytest.raises(ValueError):
        part.propose_isr((1,))


# -- ISR membership ----------------------------------------------------------------------------


def test_expansion_needs_the_hw_and_the_start_of_this_leadership(part):
    part.log.append_as_leader(batch(4), 0)  # an earlier generation wrote offsets 0-3
    part.make_leader(state(epoch=1, isr=(1,), replicas=(1, 2)), now_ms=0)
    assert part.leader_epoch_start_offset == 4
    append(part, 4)
    part.record_follower_fetch(2, 2, now_ms=1)
    assert part.isr_expansion(2) is None  # below the start of epoch 1
    part.record_follower_fetch(2, 8, now_ms=2)
    assert part.high_watermark == 8
    assert part.isr_expansion(2) == (1, 2)
    part.propose_isr((1, 2))
    assert part.isr_expansion(2) is None  # one change in flight at a time


def test_out_of_sync_is_about_time_not_distance(part):
    part.make_leader(state(isr=(1, 2, 3)), now_ms=0)
    append(part, 10)
    part.record_follower_fetch(2, 10, now_ms=1_000)   # caught up
    part.record_follower_fetch(3, 2, now_ms=1_000)    # far behind, but new in this leadership
    assert part.out_of_sync_replicas(now_ms=20_000, max_lag_ms=30_000) == []
    assert part.out_of_sync_replicas(now_ms=31_000, max_lag_ms=30_000) == [3]
    # 3 reaches the log end the leader had at its previous fetch: caught up as of that fetch,
    # although the leader has moved on since.
    append(part, 5)
    part.record_follower_fetch(3, 10, now_ms=31_500)   # leader's log end is 15 now
    append(part, 5)
    part.record_follower_fetch(3, 15, now_ms=32_000)   # 15 < 20, but 15 >= 15
    assert part.remotes[3].last_caught_up_time_ms == 31_500
    part.record_follower_fetch(2, 20, now_ms=32_000)
    assert part.out_of_sync_replicas(now_ms=40_000, max_lag_ms=30_000) == []
    assert part.out_of_sync_replicas(now_ms=62_000, max_lag_ms=30_000) == [3]


def test_a_silent_follower_that_has_everything_stays_in_sync(part):
    part.make_leader(state(isr=(1, 2)), now_ms=0)
    append(part, 3)
    part.record_follower_fetch(2, 3, now_ms=1)
    assert part.out_of_sync_replicas(now_ms=10**9, max_lag_ms=30_000) == []
    append(part, 1)
    assert part.out_of_sync_replicas(now_ms=10**9, max_lag_ms=30_000) == [2]


# -- follower truncation (leader epochs, KIP-279) -------------------------------------------------


def follower_with(part, epochs: list[tuple[int, int]]) -> Partition:
    """A follower log holding ``(epoch, count)`` runs of batches."""
    for epoch, count in epochs:
        part.log.append_as_leader(batch(count), epoch)
    part.make_follower(state(leader=2, epoch=epochs[-1][0] + 1))
    return part


def test_same_epoch_cuts_at_the_smaller_end(part):
    follower_with(part, [(0, 5), (1, 5)])  # epoch 1 covers 5-9 here
    assert truncation_offset(part, 1, 7) == (7, True)   # the leader's epoch 1 ends at 7
    assert truncation_offset(part, 1, 12) == (10, True)  # the leader has more: keep all


def test_leader_without_our_epoch_makes_us_ask_again(part):
    # We hold epochs 0, 2 (2 never reached the leader); the leader answers with epoch 0 ending
    # at 6: cut where our epoch 0 ends (5) and ask about epoch 0 again.
    follower_with(part, [(0, 5), (2, 5)])
    assert truncation_offset(part, 0, 6) == (5, True)
    follower = part
    assert truncation_offset(follower, 1, 7) == (5, False)  # we never had epoch 1


def test_undefined_answers(part):
    follower_with(part, [(0, 5)])
    part.log.high_watermark = 3
    assert truncation_offset(part, -1, -1) == (3, True)   # leader knows nothing: fall back to HW
    assert truncation_offset(part, -1, 2) == (2, True)    # below every epoch the leader has
