"""Kafka's error-code table and the codec's exception hierarchy."""

from __future__ import annotations

from broker_core.wire import errors
from broker_core.wire.errors import DESCRIPTIONS, ErrorCode
from broker_core.wire.header import RequestHeader


def test_codes_named_as_in_kafka():
    expected = {
        "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3, "LEADER_NOT_AVAILABLE": 5,
        "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7, "MESSAGE_TOO_LARGE": 10,
        "STALE_CONTROLLER_EPOCH": 11, "INVALID_TOPIC_EXCEPTION": 17,
        "RECORD_LIST_TOO_LARGE": 18, "NOT_ENOUGH_REPLICAS": 19,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "INVALID_REQUIRED_ACKS": 21,
        "UNSUPPORTED_VERSION": 35, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
        "INVALID_REPLICATION_FACTOR": 38, "INVALID_REPLICA_ASSIGNMENT": 39,
        "INVALID_CONFIG": 40, "NOT_CONTROLLER": 41, "INVALID_REQUEST": 42,
        "KAFKA_STORAGE_ERROR": 56, "FENCED_LEADER_EPOCH": 74, "UNKNOWN_LEADER_EPOCH": 75,
        "STALE_BROKER_EPOCH": 77, "INVALID_RECORD": 87,
    }
    assert {name: int(ErrorCode[name]) for name in expected} == expected


def test_table_is_contiguous_and_described():
    # Kafka's codes without a gap, then Sluice's own from 1000 without a gap.
    assert sorted(int(c) for c in ErrorCode) == list(range(-1, 128)) + [1000, 1001]
    assert set(DESCRIPTIONS) == set(ErrorCode)
    assert all(c.description.endswith(".") and "\n" not in c.description for c in ErrorCode)


def test_retriable_matches_kafka_client_behaviour():
    for c in [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT,
              ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.KAFKA_STORAGE_ERROR,
              ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_CONTROLLER]:
        assert c.retriable, c
    for c in [ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.OFFSET_OUT_OF_RANGE,
              ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.TOPIC_ALREADY_EXISTS,
              ErrorCode.INVALID_RECORD, ErrorCode.STALE_BROKER_EPOCH,
              ErrorCode.UNSUPPORTED_VERSION]:
        assert not c.retriable, c


def test_every_codec_error_is_a_protocol_error():
    h = RequestHeader(1, 2, 3, "c")
    for e in [errors.MalformedFrame("x"), errors.FrameTooLarge(10, 5),
              errors.UnknownApiKey(h), errors.UnsupportedVersion(h), errors.EncodeError("x")]:
        assert isinstance(e, errors.ProtocolError)
    assert errors.UnsupportedVersion(h).header is h
    assert "correlation id 3" in str(errors.UnknownApiKey(h))


def test_located_errors_render_their_path():
    e = errors.MalformedFrame("short").at("records").at("[2]").at("partitions")
    assert str(e) == "partitions[2].records: short"
    assert isinstance(errors.EncodeError("bad").at("f"), errors.EncodeError)
