"""Coordinator shards' pure parts: the group -> shard hash, the placement of shards on live
brokers (balance, determinism, small movement on join and leave) and the stored count's
checks."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from coordinator.shard_count import BadShardCount, parse_shard_count
from coordinator.shard_hash import MAX_SHARDS, shard_of
from coordinator.shard_placement import desired_owners, shards_of


def test_a_groups_shard_is_crc32_of_its_utf8_id_modulo_the_count():
    import zlib

    for gid in ("g", "orders", "группа", "a" * 249):
        for count in (1, 2, 12, 1024):
            assert shard_of(gid, count) == zlib.crc32(gid.encode()) % count
    assert shard_of("anything", 1) == 0
    assert shard_of("\udc80", 12) in range(12)  # a lone surrogate still has a shard


def test_the_hash_is_the_same_in_another_process():
    """Not Python's salted hash(): another interpreter computes the same shards."""
    groups = [f"group-{i}" for i in range(50)]
    code = ("from coordinator.shard_hash import shard_of; "
            f"print([shard_of(g, 12) for g in {groups!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "12345", "PYTHONPATH": "."})
    assert out.stdout.strip() == str([shard_of(g, 12) for g in groups])


@pytest.mark.parametrize("count", [0, -1, MAX_SHARDS + 1])
def test_a_count_out_of_range_is_refused(count):
    with pytest.raises(ValueError):
        shard_of("g", count)


@pytest.mark.parametrize("count", [1, 2, 7, 12, 100, 1024])
@pytest.mark.parametrize("live", [1, 2, 3, 5, 9])
def test_placement_covers_every_shard_and_no_broker_holds_more_than_its_ceiling(count, live):
    brokers = list(range(1, live + 1))
    owners = desired_owners(brokers, count)
    assert sorted(owners) == list(range(count))
    held = {b: sum(1 for o in owners.values() if o == b) for b in brokers}
    assert max(held.values()) <= math.ceil(count / live)
    assert set(owners.values()) <= set(brokers)
    assert sum(len(shards_of(b, brokers, count)) for b in brokers) == count


def test_placement_is_deterministic_whatever_the_order_of_the_live_set():
    assert desired_owners([3, 1, 2], 12) == desired_owners([1, 2, 3], 12) \
        == desired_owners({2, 3, 1}, 12)
    assert desired_owners([], 12) == {} and shards_of(4, [1, 2], 12) == frozenset()


@pytest.mark.parametrize("count", [12, 50, 100, 1024])
@pytest.mark.parametrize("before", [1, 2, 3, 4, 6, 8])
def test_few_shards_move_when_a_broker_joins_or_leaves(count, before):
    small = list(range(1, before + 1))
    big = small + [before + 1]
    a, b = desired_owners(small, count), desired_owners(big, count)
    moved = sum(a[s] != b[s] for s in range(count))
    # Ideally the newcomer's fair share moves; balancing may move a little more, never a
    # reshuffle of everything.
    # (Leaving is the same move backwards.)
    fair = math.ceil(count / len(big))
    assert moved <= 3 * fair
    # Most moved shards go to the newcomer.
    assert sum(b[s] == before + 1 for s in range(count)) >= moved / 2


def test_a_dead_brokers_shards_go_to_the_survivors_and_the_others_mostly_stay():
    count, live = 12, [1, 2, 3]
    before = desired_owners(live, count)
    after = desired_owners([1, 2], count)
    lost = {s for s, b in before.items() if b == 3}
    assert {after[s] for s in lost} <= {1, 2}
    kept = [s for s in range(count) if s not in lost and before[s] == after[s]]
    assert len(kept) >= count - len(lost) - math.ceil(count / 2)


@pytest.mark.parametrize("data,count", [(b"12", 12), (b"1", 1), (b"1024", 1024), (b" 7\n", 7)])
def test_a_stored_count_is_read(data, count):
    assert parse_shard_count(data) == count


@pytest.mark.parametrize("data", [None, b"", b"0", b"1025", b"-3", b"12.0", b"twelve",
                                  b"\xff\xfe", b"99999999999999999999", b"\xd9\xa3",
                                  "٣".encode()])
def test_a_hostile_stored_count_is_refused(data):
    with pytest.raises(BadShardCount):
        parse_shard_count(data)
