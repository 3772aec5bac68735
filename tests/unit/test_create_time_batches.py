"""A batch a producer marks LogAppendTime on a CreateTime topic is stored as Kafka's validator
stores it: with the topic's timestamp type, the bit cleared and ``maxTimestamp`` its records'
largest timestamp (CRC recomputed), before the timestamp bounds look at the records; on a
LogAppendTime topic nothing changes (the leader stamps every batch)."""

from __future__ import annotations

import struct

import crc32c
import pytest

from broker_core.log import Log, LogConfig
from broker_core.log.leader_rewrite import as_create_time
from broker_core.log.validator import InvalidRecords
from broker_core.wire.records import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_batch,
)
from tests.support.manual_time import ManualTime

NOW = 1_800_000_000_000
HOUR = 3_600_000


def marked(*timestamps: int, claimed: int, codec: Compression = Compression.NONE) -> bytes:
    """A batch with the LogAppendTime bit and a ``maxTimestamp`` of the producer's choosing
    (``claimed``), its CRC right: what a hostile or buggy producer may send."""
    out = bytearray(build_batch([Record(None, b"v", [], ts) for ts in timestamps],
                                compression=codec, timestamp_type=TIMESTAMP_LOG_APPEND_TIME))
    struct.pack_into(">q", out, 35, claimed)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def stored(log: Log) -> list:
    data = log.read(0, 1 << 20).records
    return list(iter_batches(data)), decode_records(data)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_the_bit_is_cleared_and_max_timestamp_is_the_records(tmp_path, codec):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime(NOW))
    log.append_as_leader(marked(NOW - 30, NOW - 10, NOW - 20, claimed=NOW + 5, codec=codec), 0)
    (info,), records = stored(log)
    assert info.timestamp_type == TIMESTAMP_CREATE_TIME and info.compression is codec
    assert info.max_timestamp == NOW - 10
    assert [r.timestamp for r in records] == [NOW - 30, NOW - 10, NOW - 20]
    data = log.read(0, 1 << 20).records
    parse_batch(data, 0)  # the CRC holds


def test_the_bounds_see_the_records_own_timestamps(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime(NOW))
    with pytest.raises(InvalidRecords) as info:
        log.append_as_leader(marked(NOW, NOW + 2 * HOUR, claimed=NOW), 0)
    assert info.value.error_code_name == "INVALID_TIMESTAMP"
    assert info.value.record_errors[0][0] == 1
    assert log.log_end_offset == 0


def test_a_log_append_time_topic_still_stamps_the_batch(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"),
                   time_ms=ManualTime(NOW))
    log.append_as_leader(marked(1000, 2000, claimed=5), 0)
    (info,), records = stored(log)
    assert (info.timestamp_type, info.max_timestamp) == (TIMESTAMP_LOG_APPEND_TIME, NOW)
    assert [r.timestamp for r in records] == [NOW, NOW]


def test_unmarked_batches_are_left_as_they_are():
    data = build_batch([Record(None, b"v", [], NOW)]) + marked(NOW - 1, claimed=NOW,
                                                              codec=Compression.GZIP)
    infos = list(iter_batches(data))
    same, same_infos = as_create_time(data[:infos[0].size], infos[:1], max_batch_bytes=1 << 20)
    assert same == data[:infos[0].size] and same_infos == infos[:1]
    out, out_infos = as_create_time(data, infos, max_batch_bytes=1 << 20)
    assert bytes(out[:infos[0].size]) == data[:infos[0].size]
    assert [(i.timestamp_type, i.max_timestamp) for i in out_infos] == [
        (TIMESTAMP_CREATE_TIME, NOW), (TIMESTAMP_CREATE_TIME, NOW - 1)]
