"""The pure part of AlterConfigs / IncrementalAlterConfigs (broker_core.config_changes):
what a change makes of the stored set, and every refusal with its code and message."""

from __future__ import annotations

import pytest

from broker_core.config.broker_config import BROKER_KEYS
from broker_core.config_changes import (
    BROKER,
    DEFAULT_BROKER,
    DYNAMIC_BROKER_KEYS,
    TOPIC,
    Change,
    ConfigChangeError,
    apply_full,
    apply_incremental,
    entity_path,
)
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.incremental_alter_configs import OpType

SET, DELETE, APPEND, SUBTRACT = OpType


def refused(code: ErrorCode, fn, *args, **kw) -> str:
    with pytest.raises(ConfigChangeError) as info:
        fn(*args, **kw)
    assert info.value.code == code
    return str(info.value)


def test_full_replaces_the_set_and_normalises():
    assert apply_full(TOPIC, [Change("retention.ms", " 1000 "),
                              Change("unclean.leader.election.enable", "TRUE"),
                              Change("segment.bytes", None)]) == {
        "retention.ms": "1000", "unclean.leader.election.enable": "true"}
    assert apply_full(TOPIC, []) == {}


@pytest.mark.parametrize("changes, code, message", [
    ([Change("retention.ms", "soon")], ErrorCode.INVALID_CONFIG,
     "invalid value 'soon' for 'retention.ms': expected an integer ≥ -1 (-1: no limit)"),
    ([Change("retention.msec", "1")], ErrorCode.INVALID_CONFIG,
     "unknown topic config key 'retention.msec' (did you mean 'retention.ms'?)"),
    ([Change("preallocate", None)], ErrorCode.INVALID_CONFIG,
     "topic config key 'preallocate' is not supported: segment files are not preallocated"),
    ([Change("retention.ms", "1"), Change("retention.ms", "2")], ErrorCode.INVALID_REQUEST,
     "config key 'retention.ms' is named twice in one resource"),
])
def test_full_refusals(changes, code, message):
    assert refused(code, apply_full, TOPIC, changes) == message


def test_incremental_set_delete_keep_the_rest():
    current = {"retention.ms": "1000", "segment.bytes": "2048"}
    new = apply_incremental(TOPIC, current, [Change("retention.ms", "5", SET),
                                             Change("segment.bytes", None, DELETE),
                                             Change("flush.ms", None, DELETE)], defaults={})
    assert new == {"retention.ms": "5"}
    assert current == {"retention.ms": "1000", "segment.bytes": "2048"}  # not modified


def test_delete_removes_a_stored_key_sluice_does_not_know():
    """Another tool may have stored one; DELETE cleans it up, SET of it is still refused."""
    assert apply_incremental(TOPIC, {"x.future": "1", "retention.ms": "5"},
                             [Change("x.future", None, DELETE)], defaults={}) == {
        "retention.ms": "5"}


def test_append_and_subtract_work_on_list_keys_from_their_default():
    defaults = {"cleanup.policy": "delete"}
    # Appending what is there already changes nothing; starting from the default.
    assert apply_incremental(TOPIC, {}, [Change("cleanup.policy", "delete", APPEND)],
                             defaults=defaults) == {"cleanup.policy": "delete"}
    # Subtracting the only policy leaves an empty list, which the key's check refuses.
    assert "expected 'delete'" in refused(
        ErrorCode.INVALID_CONFIG, apply_incremental, TOPIC, {},
        [Change("cleanup.policy", "delete", SUBTRACT)], defaults=defaults)
    assert "log compaction is not supported" in refused(
        ErrorCode.INVALID_CONFIG, apply_incremental, TOPIC, {},
        [Change("cleanup.policy", "compact", APPEND)], defaults=defaults)


@pytest.mark.parametrize("change, code, message", [
    (Change("retention.ms", "5", APPEND), ErrorCode.INVALID_CONFIG,
     "APPEND applies to list-typed keys only; 'retention.ms' is LONG"),
    (Change("segment.bytes", "5", SUBTRACT), ErrorCode.INVALID_CONFIG,
     "SUBTRACT applies to list-typed keys only; 'segment.bytes' is INT"),
    (Change("retention.ms", None, SET), ErrorCode.INVALID_CONFIG,
     "SET of 'retention.ms' needs a value"),
    (Change("retention.ms", "5", 9), ErrorCode.INVALID_REQUEST,
     "unknown config operation 9 for 'retention.ms' (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)"),
    (Change("no.such.key", None, DELETE), ErrorCode.INVALID_CONFIG,
     "unknown topic config key 'no.such.key'"),
])
def test_incremental_refusals(change, code, message):
    assert refused(code, apply_incremental, TOPIC, {}, [change], defaults={}) == message


def test_broker_keys_only_the_dynamic_ones():
    assert apply_incremental(BROKER, {}, [Change("log.retention.ms", "60000", SET),
                                          Change("unclean.leader.election.enable", "True", SET)],
                             defaults={}) == {"log.retention.ms": "60000",
                                              "unclean.leader.election.enable": "true"}
    message = refused(ErrorCode.POLICY_VIOLATION, apply_full, BROKER,
                      [Change("listeners", "tcp:9093")])
    assert message.startswith("broker key 'listeners' cannot change while the broker runs")
    assert refused(ErrorCode.INVALID_CONFIG, apply_full, BROKER,
                   [Change("min.insync.replicas", "0")]) == \
        "invalid value '0' for 'min.insync.replicas': expected an integer ≥ 1"
    assert "unknown broker config key 'log.retention.msx'" in refused(
        ErrorCode.INVALID_CONFIG, apply_full, BROKER, [Change("log.retention.msx", "1")])
    assert set(DYNAMIC_BROKER_KEYS) <= set(BROKER_KEYS)


def test_entity_paths():
    assert entity_path(2, "orders") == "/config/topics/orders"
    assert entity_path(4, "3") == "/config/brokers/3"
    assert entity_path(4, "") == entity_path(4, DEFAULT_BROKER) == "/config/brokers/<default>"
    assert refused(ErrorCode.INVALID_TOPIC_EXCEPTION, entity_path, 2, "../x")
    assert refused(ErrorCode.INVALID_REQUEST, entity_path, 4, "-1")
    # Characters str.isdigit() accepts but int() does not, or not ASCII: refused, not a crash.
    for name in ("²", "١", "1_0", "+1", " 1", "2147483648"):
        assert "is not a broker id" in refused(ErrorCode.INVALID_REQUEST, entity_path, 4, name)
    assert entity_path(4, "0042") == "/config/brokers/42"
    assert "use TOPIC (2) or BROKER (4)" in refused(ErrorCode.INVALID_REQUEST, entity_path,
                                                     8, "x")
