"""The range and sticky assignors behind the IPartitionAssignor seam."""

from __future__ import annotations

import random

from zope.interface.verify import verifyObject

from coordinator.assignor import IPartitionAssignor, RangeAssignor, StickyAssignor


def test_range_assignor_provides_the_interface():
    assert verifyObject(IPartitionAssignor, RangeAssignor())


def test_ranges_over_sorted_threads_first_ones_get_the_extra_partitions():
    out = RangeAssignor().assign({"t": [0, 1, 2, 3, 4]}, {"t": ["b-0", "a-1", "a-0"]})
    assert out == {("t", 0): "a-0", ("t", 1): "a-0", ("t", 2): "a-1", ("t", 3): "a-1",
                   ("t", 4): "b-0"}


def test_more_threads_than_partitions_leaves_threads_idle():
    out = RangeAssignor().assign({"t": [0, 1]}, {"t": ["a-0", "b-0", "c-0"]})
    assert out == {("t", 0): "a-0", ("t", 1): "b-0"}


def test_topic_without_threads_gets_no_owner_and_topics_are_independent():
    out = RangeAssignor().assign({"t": [0], "u": [0, 1]}, {"u": ["x-0"]})
    assert out == {("u", 0): "x-0", ("u", 1): "x-0"}


def test_deterministic_and_complete_at_scale():
    parts = list(range(1000))
    threads = [f"c{i}-0" for i in range(1000)]
    a = RangeAssignor().assign({"t": parts}, {"t": threads})
    random.Random(1).shuffle(parts)
    random.Random(2).shuffle(threads)
    b = RangeAssignor().assign({"t": parts}, {"t": threads})
    assert a == b
    assert sorted(p for _, p in a) == list(range(1000))
    assert len(set(a.values())) == 1000


# -- the sticky assignor ---------------------------------------------------------------------------

def test_sticky_assignor_provides_the_interface():
    assert verifyObject(IPartitionAssignor, StickyAssignor())


def test_sticky_with_nothing_owned_is_the_range_assignment():
    for seed in range(300):
        rnd = random.Random(seed)
        parts = {"t": list(range(rnd.randint(0, 40))), "u": list(range(rnd.randint(0, 5)))}
        threads = {"t": [f"c{i}-0" for i in range(rnd.randint(1, 12))],
                   "u": [f"c{i}-0" for i in range(rnd.randint(0, 3))]}
        assert StickyAssignor().assign(parts, threads) == RangeAssignor().assign(parts, threads)


def moved(before: dict, after: dict) -> int:
    return sum(1 for tp, t in after.items() if before.get(tp) != t)


def test_a_joining_thread_takes_only_its_share():
    threads = [f"c{i:02d}-0" for i in range(10)]
    before = StickyAssignor().assign({"t": list(range(100))}, {"t": threads})
    after = StickyAssignor().assign({"t": list(range(100))}, {"t": [*threads, "new-0"]},
                                    before)
    # 100 over 11: nine each and one ten; the new thread takes its nine, nothing else moves.
    assert sorted(list(after.values()).count(t) for t in [*threads, "new-0"]) == [9] * 10 + [10]
    assert moved(before, after) == 9
    assert list(after.values()).count("new-0") == 9
    # 99 threads over 100 partitions, one more: the thread with two gives one up.
    threads = [f"c{i:02d}-0" for i in range(99)]
    before = StickyAssignor().assign({"t": list(range(100))}, {"t": threads})
    after = StickyAssignor().assign({"t": list(range(100))}, {"t": [*threads, "new-0"]},
                                    before)
    assert moved(before, after) == 1 and sorted(set(after.values())) == sorted(
        [*threads, "new-0"])


def test_a_leaving_thread_hands_over_only_its_own_partitions():
    threads = [f"c{i}-0" for i in range(10)]
    before = StickyAssignor().assign({"t": list(range(100))}, {"t": threads})
    after = StickyAssignor().assign({"t": list(range(100))}, {"t": threads[1:]}, before)
    assert moved(before, after) == 10  # c0-0's ten, nothing else
    assert all(after[tp] == t for tp, t in before.items() if t != "c0-0")


def test_sticky_is_balanced_keeps_all_it_can_and_ignores_input_order():
    """From random owners (partitions gone, threads gone, new ones): every thread gets P // T or
    one more, exactly P % T of them one more; a thread that lost a partition it owned is full
    of partitions it owned (it was over its quota); and input order does not matter."""
    for seed in range(500):
        rnd = random.Random(seed)
        parts = list(range(rnd.randint(1, 60)))
        old_threads = [f"c{i}-0" for i in range(rnd.randint(1, 15))]
        new_threads = [t for t in old_threads if rnd.random() < 0.7] + [
            f"n{i}-0" for i in range(rnd.randint(0, 5))] or ["x-0"]
        previous = {("t", p): rnd.choice(old_threads) for p in range(rnd.randint(0, 70))}
        out = StickyAssignor().assign({"t": parts}, {"t": new_threads}, previous)
        assert sorted(p for _, p in out) == parts
        base, extra = divmod(len(parts), len(new_threads))
        counts = [list(out.values()).count(t) for t in new_threads]
        assert set(counts) <= {base, base + 1} and counts.count(base + 1) == extra
        for t in new_threads:
            had = {tp for tp, o in previous.items() if o == t and tp[1] in parts}
            got = {tp for tp, o in out.items() if o == t}
            if had - got:
                assert got <= had, (seed, t)
        shuffled = list(parts)
        rnd.shuffle(shuffled)
        again = StickyAssignor().assign({"t": shuffled}, {"t": new_threads[::-1]},
                                        dict(reversed(list(previous.items()))))
        assert again == out
