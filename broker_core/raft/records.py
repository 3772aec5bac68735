"""Log entries to Kafka RecordBatch v2 bytes and back: the metadata log's format on disk and in
Fetch responses.

Layout. **One batch per entry**: ``baseOffset`` is the entry's offset, ``partitionLeaderEpoch``
its epoch, and the batch holds one record. One batch per entry keeps every entry boundary a
batch boundary, so the log layer (which truncates whole batches) can truncate the metadata log
at any offset exactly; the cost is the 61-byte batch header per entry. Records carry no
timestamp (``-1``, Kafka's NO_TIMESTAMP): an entry has none, and a made-up one would change the
bytes of the same entry from one encoding to the next.

- A data entry (``bytes`` payload): a plain batch; its record has a null key and the payload
  as value.
- A control entry (:class:`LeaderChange`, :class:`VoterAssignment`): a control batch
  (attributes bit 5) whose one record has Kafka's control-record key (int16 version 0, int16
  type: :data:`LEADER_CHANGE_CONTROL_TYPE` or :data:`VOTER_ASSIGNMENT_CONTROL_TYPE`) and the
  message as value: :data:`LEADER_CHANGE_MESSAGE` (Kafka's ``LeaderChangeMessage`` v0) or
  :data:`VOTER_ASSIGNMENT_MESSAGE` (the design's ``VoterAssignmentMessage`` v0). Both are
  flexible messages whose first field is their own ``Version`` (int16), as Kafka's data
  messages are stored.

Reading (:func:`records_to_entries`) accepts more than this module writes, as a Kafka reader
would: data batches of several records (one entry per record, offsets from the batch's deltas)
and compressed batches. A control batch must hold exactly one record, as Kafka writes them.

Errors. Bad bytes raise :class:`RaftRecordError`, which is both a
:class:`~broker_core.wire.records.CorruptRecordBatch` (the storage layer's "corrupt message")
and a :class:`~broker_core.wire.errors.ProtocolError` (so the network driver's one
``except ProtocolError`` around a decoded response also covers the records in it).
"""

from __future__ import annotations

from collections.abc import Sequence

from broker_core.raft.entries import (
    LEADER_CHANGE_CONTROL_TYPE,
    VOTER_ASSIGNMENT_CONTROL_TYPE,
    LeaderChange,
    LogEntry,
    VoterAssignment,
)
from broker_core.wire.errors import EncodeError, MalformedFrame, ProtocolError
from broker_core.wire.primitives import Reader
from broker_core.wire.records import (
    BatchInfo,
    CorruptRecordBatch,
    InvalidRecordBatch,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
)
from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

#: Kafka's RecordBatch timestamp for "none" (an entry has no timestamp).
NO_TIMESTAMP = -1

CONTROL_KEY_VERSION = 0
LEADER_CHANGE_VERSION = 0
VOTER_ASSIGNMENT_VERSION = 0

#: Kafka's control-record key (``ControlRecordType``): version, then type. A reader takes the
#: first two int16s whatever the version, as Kafka does.
CONTROL_RECORD_KEY = Message("ControlRecordKey", versions="0", fields=[
    Field("version", INT16),
    Field("type", INT16),
])

_VOTER = Schema("Voter", [Field("voter_id", INT32)])

#: Kafka's ``LeaderChangeMessage`` v0 (flexible from v0; v1 adds KIP-853's directory ids).
LEADER_CHANGE_MESSAGE = Message("LeaderChangeMessage", versions="0", flexible="0+", fields=[
    Field("version", INT16),
    Field("leader_id", INT32),
    Field("voters", Array(_VOTER)),
    Field("granting_voters", Array(_VOTER)),
])

#: The design's ``VoterAssignmentMessage`` v0, with its own ``Version`` first like Kafka's data
#: messages. ``target_voters`` is null when no reassignment is under way.
VOTER_ASSIGNMENT_MESSAGE = Message("VoterAssignmentMessage", versions="0", flexible="0+", fields=[
    Field("version", INT16),
    Field("cluster_id", STRING),
    Field("current_voters", Array(_VOTER)),
    Field("target_voters", Array(_VOTER), nullable="0+"),
])

_CONTROL_TYPES = {LEADER_CHANGE_CONTROL_TYPE: LEADER_CHANGE_MESSAGE,
                  VOTER_ASSIGNMENT_CONTROL_TYPE: VOTER_ASSIGNMENT_MESSAGE}


class RaftRecordError(CorruptRecordBatch, ProtocolError):
    """Bytes that do not hold metadata-log entries: a bad batch (CRC, torn, impossible length),
    a control record of an unknown type or version, or a truncated or malformed value."""


# -- encoding ---------------------------------------------------------------------------------


def _voters(ids: Sequence[int]) -> list[dict[str, int]]:
    return [{"voter_id": v} for v in ids]


def control_record(payload: LeaderChange | VoterAssignment) -> Record:
    """The one record of a control entry's batch: Kafka's control key and the message value."""
    if isinstance(payload, LeaderChange):
        kind = LEADER_CHANGE_CONTROL_TYPE
        value = LEADER_CHANGE_MESSAGE.to_bytes({
            "version": LEADER_CHANGE_VERSION, "leader_id": payload.leader_id,
            "voters": _voters(payload.voters),
            "granting_voters": _voters(payload.granting_voters)}, 0)
    elif isinstance(payload, VoterAssignment):
        kind = VOTER_ASSIGNMENT_CONTROL_TYPE
        value = VOTER_ASSIGNMENT_MESSAGE.to_bytes({
            "version": VOTER_ASSIGNMENT_VERSION, "cluster_id": payload.cluster_id,
            "current_voters": _voters(payload.current_voters),
            "target_voters": (None if payload.target_voters is None
                              else _voters(payload.target_voters))}, 0)
    else:
        raise TypeError(f"{type(payload).__name__} is not a control record")
    key = CONTROL_RECORD_KEY.to_bytes({"version": CONTROL_KEY_VERSION, "type": kind}, 0)
    return Record(key, value, timestamp=NO_TIMESTAMP)


def entry_to_batch(entry: LogEntry) -> bytes:
    """One entry as one RecordBatch v2 (see the module docstring)."""
    payload = entry.payload
    if isinstance(payload, bytes):
        return build_batch([Record(None, payload, timestamp=NO_TIMESTAMP)],
                           base_offset=entry.offset, leader_epoch=entry.epoch)
    return build_batch([control_record(payload)], base_offset=entry.offset,
                       leader_epoch=entry.epoch, control=True)


def entries_to_records(entries: Sequence[LogEntry]) -> bytes:
    """``entries`` as RecordBatch v2 bytes, one batch per entry, in order (empty for none).
    Raises :class:`~broker_core.wire.errors.EncodeError` for a value the format cannot hold
    (e.g. a cluster id longer than a Kafka string)."""
    try:
        return b"".join([entry_to_batch(e) for e in entries])
    except (EncodeError, OverflowError, ValueError) as e:
        raise EncodeError(f"cannot encode log entries: {e}") from e


# -- decoding ---------------------------------------------------------------------------------


def _control_payload(record: Record) -> LeaderChange | VoterAssignment:
    where = f"control record at offset {record.offset}"
    if record.key is None or record.value is None:
        raise RaftRecordError(f"{where} has a null {'key' if record.key is None else 'value'}")
    try:
        key = CONTROL_RECORD_KEY.decode(Reader(record.key), 0)
    except MalformedFrame as e:
        raise RaftRecordError(f"{where}: bad control key: {e}") from None
    if key.version < 0:
        raise RaftRecordError(f"{where}: negative control key version {key.version}")
    message = _CONTROL_TYPES.get(key.type)
    if message is None:
        raise RaftRecordError(f"{where} has unknown control type {key.type} (known: "
                              f"{sorted(_CONTROL_TYPES)})")
    # Versions above 0 lay the voters out differently (KIP-853), so the version is checked
    # before the body is read at v0.
    if len(record.value) >= 2:
        version = int.from_bytes(record.value[:2], "big", signed=True)
        if version != 0:
            raise RaftRecordError(f"{where}: {message.name} version {version} is not "
                                  "supported (only 0)")
    try:
        body = message.from_bytes(record.value, 0)
    except MalformedFrame as e:
        raise RaftRecordError(f"{where}: bad {message.name} value: {e}") from None
    try:
        if message is LEADER_CHANGE_MESSAGE:
            return LeaderChange(body.leader_id, tuple(v.voter_id for v in body.voters),
                                tuple(v.voter_id for v in body.granting_voters))
        return VoterAssignment(
            body.cluster_id, tuple(v.voter_id for v in body.current_voters),
            None if body.target_voters is None
            else tuple(v.voter_id for v in body.target_voters))
    except ValueError as e:  # VoterAssignment's own checks (no voters, duplicates)
        raise RaftRecordError(f"{where}: invalid {message.name}: {e}") from None


def batch_entries(data: bytes | bytearray | memoryview, info: BatchInfo) -> list[LogEntry]:
    """The entries of the batch ``info`` describes (already parsed and CRC-checked)."""
    try:
        records = decode_batch(data, info)
    except InvalidRecordBatch as e:
        raise RaftRecordError(str(e)) from None
    epoch = info.partition_leader_epoch
    if info.is_control:
        if len(records) != 1:
            raise RaftRecordError(f"control batch at offset {info.base_offset} holds "
                                  f"{len(records)} records, not 1")
        return [LogEntry(records[0].offset, epoch, _control_payload(records[0]))]
    out = []
    for r in records:
        if r.value is None:
            raise RaftRecordError(f"data record at offset {r.offset} has a null value")
        out.append(LogEntry(r.offset, epoch, r.value))
    return out


def records_to_entries(data: bytes | memoryview) -> tuple[LogEntry, ...]:
    """The entries held by RecordBatch v2 bytes, in order; :class:`RaftRecordError` for bytes
    that are not valid batches of valid entries (nothing is returned then)."""
    out: list[LogEntry] = []
    try:
        for info in iter_batches(data):
            out.extend(batch_entries(data, info))
    except RaftRecordError:
        raise
    except InvalidRecordBatch as e:
        raise RaftRecordError(str(e)) from None
    return tuple(out)
