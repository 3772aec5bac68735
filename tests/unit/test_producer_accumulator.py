"""The record accumulator, sans-IO: batching by size and linger, memory accounting, one batch
per partition out at a time, retries at the front, expiry, and batches any reader decodes."""

from __future__ import annotations

import pytest

from broker_core.wire.primitives import zigzag_bytes as varint
from broker_core.wire.record_encoding import encode_record
from broker_core.wire.records import Compression, decode_batch, parse_batch
from consumer_client.producer_accumulator import (
    BATCH_FULL,
    NEW_BATCH,
    RecordAccumulator,
)


def make(batch_size=1000, linger_s=0.005, buffer_memory=100_000, delivery_timeout_s=120.0):
    return RecordAccumulator(batch_size=batch_size, linger_s=linger_s,
                             buffer_memory=buffer_memory, delivery_timeout_s=delivery_timeout_s)


def drain(acc, now, leader=1, can_send=True, max_request=1 << 20):
    return acc.drain(now, lambda t, p: leader, lambda n: can_send, max_request)


def test_varint_is_kafkas_zigzag():
    assert varint(0) == b"\x00"
    assert varint(-1) == b"\x01"
    assert varint(1) == b"\x02"
    assert varint(63) == b"\x7e"
    assert varint(64) == b"\x80\x01"
    assert varint(-(1 << 63)) == b"\xff" * 9 + b"\x01"


def test_records_fill_a_batch_then_open_the_next():
    acc = make(batch_size=300)
    flags = [acc.append("t", 0, None, b"v" * 50, None, 1000, 0.0)[2] for _ in range(10)]
    assert flags[0] == NEW_BATCH
    assert BATCH_FULL | NEW_BATCH in flags
    batches = acc.queues[("t", 0)]
    assert len(batches) >= 2
    assert all(len(b.buf) <= 300 for b in batches)
    assert sum(b.count for b in batches) == 10


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own():
    acc = make(batch_size=100)
    acc.append("t", 0, None, b"x" * 500, None, 0, 0.0)
    acc.append("t", 0, None, b"y", None, 0, 0.0)
    assert [b.count for b in acc.queues[("t", 0)]] == [1, 1]


def test_linger_decides_when_a_partial_batch_is_ready():
    acc = make(linger_s=0.005)
    acc.append("t", 0, None, b"v", None, 0, 10.0)
    ready, next_delay, unknown, expired = drain(acc, 10.002)
    assert ready == {} and next_delay == pytest.approx(0.003) and not unknown and not expired
    ready, *_ = drain(acc, 10.005)
    assert [b.count for b in ready[1]] == [1]


def test_a_full_batch_is_ready_before_linger():
    acc = make(batch_size=100, linger_s=60)
    for _ in range(5):
        acc.append("t", 0, None, b"v" * 30, None, 0, 0.0)
    ready, *_ = drain(acc, 0.0)
    assert len(ready[1]) == 1  # the full one; the partition is then muted


def test_flush_makes_everything_ready_now():
    acc = make(linger_s=60)
    acc.append("t", 0, None, b"v", None, 0, 0.0)
    acc.flushing += 1
    ready, *_ = drain(acc, 0.0)
    assert len(ready[1]) == 1


def test_one_batch_per_partition_in_flight_and_retries_go_first():
    acc = make(batch_size=100, linger_s=0)
    for i in range(6):
        acc.append("t", 0, None, b"%02d" % i * 20, None, 0, 0.0)
    ready, *_ = drain(acc, 1.0)
    first = ready[1][0]
    assert drain(acc, 1.0)[0] == {}  # muted while the first is out
    acc.reenqueue(first, retry_at=1.1)
    ready, next_delay, *_ = drain(acc, 1.05)
    assert ready == {} and next_delay == pytest.approx(0.05)  # backoff holds the partition
    ready, *_ = drain(acc, 1.1)
    assert ready[1][0] is first


def test_partitions_share_a_request_up_to_max_request_size():
    acc = make(linger_s=0)
    for p in range(4):
        acc.append("t", p, None, b"v" * 100, None, 0, 0.0)
    ready, next_delay, *_ = drain(acc, 0.0, max_request=400)
    assert len(ready[1]) == 2 and next_delay == 0.0
    ready, *_ = drain(acc, 0.0, max_request=400)
    assert len(ready[1]) == 2


def test_unknown_leader_and_busy_broker_hold_batches():
    acc = make(linger_s=0)
    acc.append("t", 0, None, b"v", None, 0, 0.0)
    assert drain(acc, 0.0, leader=-1)[:3] == ({}, None, True)
    assert drain(acc, 0.0, can_send=False)[:3] == ({}, None, False)
    assert len(drain(acc, 0.0)[0][1]) == 1


def test_batches_past_delivery_timeout_expire_in_the_accumulator():
    acc = make(linger_s=0, delivery_timeout_s=2.0)
    acc.append("t", 0, None, b"v", None, 0, 0.0)
    *_, expired = drain(acc, 1.0, leader=-1)
    assert expired == []
    *_, expired = drain(acc, 2.0, leader=-1)
    assert len(expired) == 1 and not acc.incomplete


def test_memory_is_reserved_on_append_and_released_on_completion():
    acc = make(buffer_memory=500, linger_s=0)
    batch, *_ = acc.append("t", 0, b"k", b"v" * 100, None, 0, 0.0)
    used = acc.used
    assert 100 < used < 150
    assert acc.has_room(500 - used) and not acc.has_room(501 - used)
    drain(acc, 0.0)
    acc.release(batch)
    assert acc.used == 0 and not acc.incomplete and not acc.muted


def test_a_value_of_the_wrong_type_changes_nothing():
    acc = make()
    acc.append("t", 0, None, b"ok", None, 0, 0.0)
    before = (acc.used, bytes(acc.queues[("t", 0)][0].buf))
    with pytest.raises(TypeError):
        acc.append("t", 0, None, "text, not bytes", None, 0, 0.0)  # type: ignore[arg-type]
    assert (acc.used, bytes(acc.queues[("t", 0)][0].buf)) == before


@pytest.mark.parametrize("codec", list(Compression))
def test_sealed_batches_decode_with_the_brokers_reader(codec):
    acc = make(linger_s=0, batch_size=1 << 20)
    sent = []
    for i in range(50):
        key = None if i % 3 == 0 else b"k%d" % i
        value = None if i == 7 else b"value-%d" % i * (i % 5 + 1)
        headers = [("h", b"x"), ("n", None)] if i % 10 == 0 else None
        acc.append("t", 0, key, value, headers, 1_700_000_000_000 + i * 3, 0.0)
        sent.append((key, value, headers or [], 1_700_000_000_000 + i * 3))
    (batch,) = drain(acc, 0.0)[0][1]
    data = batch.seal(codec)
    info = parse_batch(data)  # verifies the CRC
    assert info.compression is codec and info.record_count == 50
    assert info.max_timestamp == 1_700_000_000_000 + 49 * 3
    got = [(r.key, r.value, r.headers, r.timestamp) for r in decode_batch(data)]
    assert got == sent
    assert batch.seal(codec) is data  # a retry resends the same bytes


def test_encode_record_handles_large_lengths_and_negative_deltas():
    rec = encode_record(-5, 40000, b"k" * 70000, b"v", None)
    assert len(rec) > 70000


def test_the_open_batch_grows_past_batch_size_while_its_partition_is_in_flight():
    acc = RecordAccumulator(batch_size=200, linger_s=0, buffer_memory=1 << 20,
                            delivery_timeout_s=120, max_batch=1000)
    acc.append("t", 0, None, b"v" * 50, None, 0, 0.0)
    (first,) = drain(acc, 0.0)[0][1]  # in flight: the partition is muted
    for _ in range(12):
        acc.append("t", 0, None, b"v" * 50, None, 0, 0.0)
    sizes = [len(b.buf) for b in acc.queues[("t", 0)]]
    assert len(sizes) == 1 and 200 < sizes[0] <= 1000
    acc.release(first)
    for _ in range(12):
        acc.append("t", 0, None, b"v" * 50, None, 0, 0.0)
    assert all(len(b.buf) <= 200 for b in list(acc.queues[("t", 0)])[1:])
