"""The metadata log's entries as RecordBatch v2 bytes (broker_core/raft/records.py): round trips
over random entry sequences, the exact bytes of a control batch, and every way bad bytes fail."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.raft import wire
from broker_core.raft.entries import LeaderChange, LogEntry, VoterAssignment
from broker_core.raft.messages import FetchResponse
from broker_core.raft.records import (
    RaftRecordError,
    entries_to_records,
    records_to_entries,
)
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import EncodeError, ErrorCode, ProtocolError
from broker_core.wire.records import (
    Compression,
    CorruptRecordBatch,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
)

voter_ids = st.lists(st.integers(0, 2**31 - 1), max_size=6)
unique_voters = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=6, unique=True)
payloads = st.one_of(
    st.binary(max_size=300),
    st.builds(LeaderChange, st.integers(0, 2**31 - 1), voter_ids.map(tuple),
              voter_ids.map(tuple)),
    st.builds(VoterAssignment, st.text(max_size=40), unique_voters.map(tuple),
              st.none() | unique_voters.map(tuple)),
)


@st.composite
def entry_sequences(draw) -> tuple[LogEntry, ...]:
    """A run of entries as a log holds them: dense offsets from any start, epochs >= 1 that
    never decrease."""
    offset = draw(st.integers(0, 2**40))
    # Up to 12 entries, each up to 2 epochs after the one before: stay within int32.
    epoch = draw(st.integers(1, 2**31 - 1 - 2 * 12))
    out = []
    for payload in draw(st.lists(payloads, max_size=12)):
        epoch += draw(st.integers(0, 2))
        out.append(LogEntry(offset, epoch, payload))
        offset += 1
    return tuple(out)


@settings(max_examples=300)
@given(entry_sequences())
def test_any_entry_sequence_round_trips_one_batch_per_entry(entries):
    data = entries_to_records(entries)
    assert records_to_entries(data) == entries
    assert records_to_entries(memoryview(data)) == entries
    batches = list(iter_batches(data))
    assert [(b.base_offset, b.partition_leader_epoch, b.record_count, b.is_control)
            for b in batches] == [(e.offset, e.epoch, 1, e.is_control) for e in entries]


def _hand_built_batch(base_offset: int, epoch: int, attributes: int, key: bytes | None,
                      value: bytes) -> bytes:
    """One batch of one record, laid out field by field from Kafka's RecordBatch v2 spec
    (single-byte varints only: the lengths used here are all below 64)."""
    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        assert z < 0x80
        return bytes([z])

    key_part = varint(-1) if key is None else varint(len(key)) + key
    body = b"\x00" + varint(0) + varint(0) + key_part + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", attributes, 0, -1, -1, -1, -1, -1, 1) + record
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", base_offset, batch_length, epoch, 2,
                       crc32c.crc32c(after_crc)) + after_crc


def test_a_leader_change_is_a_control_batch_with_kafkas_key_and_leader_change_message_v0():
    entry = LogEntry(5, 3, LeaderChange(leader_id=1, voters=(1, 2, 3), granting_voters=(1, 2)))
    key = struct.pack(">hh", 0, 2)  # version 0, LEADER_CHANGE
    value = (struct.pack(">hi", 0, 1)  # Version, LeaderId
             + b"\x04" + b"".join(struct.pack(">i", v) + b"\x00" for v in (1, 2, 3))  # Voters
             + b"\x03" + b"".join(struct.pack(">i", v) + b"\x00" for v in (1, 2))  # Granting
             + b"\x00")  # no tagged fields
    expected = _hand_built_batch(5, 3, 0x20, key, value)
    assert entries_to_records([entry]) == expected
    assert records_to_entries(expected) == (entry,)


def test_a_voter_assignment_is_a_control_batch_of_type_1000_with_a_nullable_target():
    entry = LogEntry(0, 1, VoterAssignment("ab", (4, 7)))
    key = struct.pack(">hh", 0, 1000)
    value = (struct.pack(">h", 0) + b"\x03ab"  # Version, ClusterId (compact string)
             + b"\x03" + b"".join(struct.pack(">i", v) + b"\x00" for v in (4, 7))
             + b"\x00"  # TargetVoters: null compact array
             + b"\x00")
    expected = _hand_built_batch(0, 1, 0x20, key, value)
    assert entries_to_records([entry]) == expected
    assert records_to_entries(expected) == (entry,)


def test_a_data_entry_is_a_plain_batch_with_a_null_key():
    entry = LogEntry(9, 4, b"hello")
    expected = _hand_built_batch(9, 4, 0, None, b"hello")
    assert entries_to_records([entry]) == expected
    assert records_to_entries(expected) == (entry,)


def test_multi_record_and_compressed_data_batches_are_read_one_entry_per_record():
    batch = build_batch([Record(None, b"a"), Record(None, b"b"), Record(b"k", b"c")],
                        base_offset=10, leader_epoch=2, compression=Compression.GZIP)
    assert records_to_entries(batch) == (LogEntry(10, 2, b"a"), LogEntry(11, 2, b"b"),
                                         LogEntry(12, 2, b"c"))


def test_no_entries_are_no_bytes():
    assert entries_to_records([]) == b""
    assert records_to_entries(b"") == ()


def test_the_mapping_plugs_into_the_fetch_response_codec():
    entries = (LogEntry(3, 2, LeaderChange(2, (1, 2, 3), (2, 3))), LogEntry(4, 2, b"meta"))
    message = FetchResponse(ErrorCode.NONE, 2, 2, 4, None, entries)
    frame = b"".join(wire.encode_response(message, 11, entries_to_records=entries_to_records))
    assert wire.decode_response(ApiKey.FETCH, frame, records_to_entries=records_to_entries) \
        == (11, message)


# -- errors -------------------------------------------------------------------------------------


def _control_batch(key: bytes | None, value: bytes | None, records: int = 1) -> bytes:
    return build_batch([Record(key, value)] * records, base_offset=0, leader_epoch=1,
                       control=True)


def _good_leader_change_value() -> bytes:
    data = entries_to_records([LogEntry(0, 1, LeaderChange(1, (1,), (1,)))])
    return decode_batch(data)[0].value


def test_the_error_is_a_corrupt_record_batch_and_a_protocol_error():
    assert issubclass(RaftRecordError, CorruptRecordBatch)
    assert issubclass(RaftRecordError, ProtocolError)


def test_a_crc_mismatch_is_refused():
    data = bytearray(entries_to_records([LogEntry(0, 1, b"payload")]))
    data[-3] ^= 0xFF
    with pytest.raises(RaftRecordError, match="CRC mismatch"):
        records_to_entries(bytes(data))


def test_a_torn_batch_is_refused_even_after_good_ones():
    data = entries_to_records([LogEntry(0, 1, b"one"), LogEntry(1, 1, b"two")])
    with pytest.raises(RaftRecordError, match="torn batch"):
        records_to_entries(data[:-5])


def test_an_old_message_format_is_refused():
    data = bytearray(entries_to_records([LogEntry(0, 1, b"x")]))
    data[16] = 1
    with pytest.raises(RaftRecordError, match="magic 1"):
        records_to_entries(bytes(data))


def test_an_unknown_control_type_is_refused():
    with pytest.raises(RaftRecordError, match="unknown control type 7"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 7), b"\x00\x00"))


def test_a_short_control_key_is_refused():
    with pytest.raises(RaftRecordError, match="bad control key"):
        records_to_entries(_control_batch(b"\x00\x00", _good_leader_change_value()))


def test_a_negative_control_key_version_is_refused():
    with pytest.raises(RaftRecordError, match="negative control key version"):
        records_to_entries(_control_batch(struct.pack(">hh", -1, 2), _good_leader_change_value()))


def test_a_newer_key_version_is_read_as_version_0_as_kafka_does():
    entry = records_to_entries(_control_batch(struct.pack(">hhi", 1, 2, 99),
                                              _good_leader_change_value()))
    assert entry == (LogEntry(0, 1, LeaderChange(1, (1,), (1,))),)


def test_a_truncated_control_value_is_refused():
    value = _good_leader_change_value()
    with pytest.raises(RaftRecordError, match="bad LeaderChangeMessage value"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 2), value[:-3]))


def test_trailing_bytes_after_a_control_value_are_refused():
    value = _good_leader_change_value()
    with pytest.raises(RaftRecordError, match="bytes left"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 2), value + b"\x00"))


def test_an_unsupported_control_value_version_is_refused():
    value = b"\x00\x01" + _good_leader_change_value()[2:]
    with pytest.raises(RaftRecordError, match="version 1 is not supported"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 2), value))


def test_a_null_control_key_or_value_is_refused():
    with pytest.raises(RaftRecordError, match="null key"):
        records_to_entries(_control_batch(None, _good_leader_change_value()))
    with pytest.raises(RaftRecordError, match="null value"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 2), None))


def test_a_control_batch_of_two_records_is_refused():
    value = _good_leader_change_value()
    with pytest.raises(RaftRecordError, match="holds 2 records, not 1"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 2), value, records=2))


def test_an_invalid_voter_assignment_is_refused():
    value = b"\x00\x00" + b"\x02c" + b"\x01" + b"\x00" + b"\x00"  # no current voters
    with pytest.raises(RaftRecordError, match="at least one current voter"):
        records_to_entries(_control_batch(struct.pack(">hh", 0, 1000), value))


def test_a_data_record_with_a_null_value_is_refused():
    batch = build_batch([Record(None, None)], base_offset=0, leader_epoch=1)
    with pytest.raises(RaftRecordError, match="null value"):
        records_to_entries(batch)


def test_a_record_that_overruns_its_batch_is_refused():
    batch = bytearray(build_batch([Record(None, b"abc")], base_offset=0, leader_epoch=1))
    batch[-5] = 0x7E  # the value length: 63 bytes, far past the record's end
    # Recompute the CRC so the record parser, not the CRC check, finds the damage.
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(RaftRecordError, match="overruns"):
        records_to_entries(bytes(batch))


def test_an_entry_the_format_cannot_hold_is_an_encode_error():
    with pytest.raises(EncodeError, match="cannot encode"):
        entries_to_records([LogEntry(0, 1, VoterAssignment("x" * 40000, (1,)))])
