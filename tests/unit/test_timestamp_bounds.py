"""KIP-937's timestamp bounds: ``message.timestamp.before.max.ms`` and
``message.timestamp.after.max.ms`` (with ``message.timestamp.difference.max.ms``, the tighter
of each side applies), in the leader's check (:func:`check_timestamps`), through
``Log.append_as_leader`` on an injected clock, in the topic and broker key tables, and as
settings a running broker changes (a dynamic broker key; a topic key AlterConfigs accepts)."""

from __future__ import annotations

import pytest

from broker_core.broker import log_config_from
from broker_core.config.broker_config import BROKER_KEYS, BrokerConfig
from broker_core.config.parsing import LONG_MAX
from broker_core.config.topic_keys import TOPIC_CONFIG_KEYS, check_topic_value
from broker_core.config_changes import DYNAMIC_BROKER_KEYS, TOPIC, Change, apply_incremental
from broker_core.dynamic_config import effective_broker_config
from broker_core.log import Log, LogConfig
from broker_core.log.leader_rewrite import check_timestamps
from broker_core.log.validator import InvalidRecords
from broker_core.wire.messages.describe_configs import ConfigType
from broker_core.wire.messages.incremental_alter_configs import OpType
from broker_core.wire.records import Compression, Record, build_batch, iter_batches
from tests.support.manual_time import ManualTime

NOW = 1_800_000_000_000
HOUR = 3_600_000
MINIMAL = {"broker.id": "1", "log.dirs": "d", "zookeeper.connect": "zk:2181"}
NEVER = LONG_MAX


def batch(*timestamps: int, codec: Compression = Compression.NONE) -> bytes:
    return build_batch([Record(None, b"v", [], ts) for ts in timestamps], compression=codec)


def check(data: bytes, max_batch_bytes: int = 1 << 20, **bounds) -> None:
    check_timestamps(data, list(iter_batches(data)), timestamp_type="CreateTime", now_ms=NOW,
                     max_batch_bytes=max_batch_bytes, **bounds)


def refusal(data: bytes, **bounds) -> tuple[int, str]:
    with pytest.raises(InvalidRecords) as info:
        check(data, **bounds)
    assert info.value.error_code_name == "INVALID_TIMESTAMP"
    (found,) = info.value.record_errors
    return found


def test_the_future_bound_refuses_the_first_record_beyond_it_naming_the_key():
    check(batch(NOW + HOUR, NOW - 10 * HOUR), after_max_ms=HOUR)
    assert refusal(batch(NOW, NOW + HOUR + 1), after_max_ms=HOUR) == (
        1, f"timestamp {NOW + HOUR + 1} is {HOUR + 1} ms after the leader's clock; "
           f"message.timestamp.after.max.ms is {HOUR}")


def test_the_past_bound_refuses_the_first_record_beyond_it_naming_the_key():
    check(batch(NOW - 5000, NOW + 10 * HOUR), before_max_ms=5000)
    assert refusal(batch(NOW, NOW - 5001, NOW - 9000), before_max_ms=5000) == (
        1, f"timestamp {NOW - 5001} is 5001 ms before the leader's clock; "
           "message.timestamp.before.max.ms is 5000")


def test_the_tighter_of_each_side_and_the_difference_applies_and_is_named():
    assert refusal(batch(NOW + 2000), after_max_ms=HOUR, max_difference_ms=1000)[1].endswith(
        "message.timestamp.difference.max.ms is 1000")
    assert refusal(batch(NOW - 2000), before_max_ms=1000, max_difference_ms=HOUR)[1].endswith(
        "message.timestamp.before.max.ms is 1000")
    check(batch(NOW - 1000, NOW + 1000), before_max_ms=HOUR, after_max_ms=HOUR,
          max_difference_ms=1000)


def test_no_bound_for_log_append_time_a_record_without_timestamp_or_no_bounds():
    far = batch(NOW + 100 * HOUR)
    check_timestamps(far, list(iter_batches(far)), timestamp_type="LogAppendTime", now_ms=NOW,
                     max_batch_bytes=1 << 20, before_max_ms=0, after_max_ms=0)
    check(batch(-1), before_max_ms=0, after_max_ms=0)
    check(far)


def test_with_the_past_unbounded_a_batch_within_the_future_bound_is_not_decoded():
    # A compressed batch that would not decompress within 1 byte: only its header is read.
    within = batch(NOW, NOW + 10, codec=Compression.GZIP)
    check(within, max_batch_bytes=1, after_max_ms=HOUR)
    with pytest.raises(Exception, match="decompress|bytes"):
        check(within, max_batch_bytes=1, after_max_ms=HOUR, before_max_ms=HOUR)


def test_the_log_refuses_a_record_from_the_future_and_appends_nothing(tmp_path):
    time = ManualTime(NOW)
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=time)  # Kafka 4's default: one hour
    with pytest.raises(InvalidRecords) as info:
        log.append_as_leader(batch(NOW + HOUR + 1), 0)
    assert "message.timestamp.after.max.ms is 3600000" in str(info.value)
    assert log.log_end_offset == 0
    assert log.append_as_leader(batch(NOW + HOUR), 0).record_count == 1
    time.now += 1  # the bound follows the injected clock
    assert log.append_as_leader(batch(NOW + HOUR + 1), 0).record_count == 1


def test_the_log_takes_the_bounds_from_topic_overrides():
    config = LogConfig.from_topic_config(LogConfig(), {
        "message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "0"})
    assert (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms) == (
        60000, 0)
    with pytest.raises(ValueError, match="message.timestamp.after.max.ms"):
        LogConfig.from_topic_config(LogConfig(), {"message.timestamp.after.max.ms": "-1"})


def test_the_keys_are_declared_with_kafkas_defaults_types_and_docs():
    for key in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        spec = TOPIC_CONFIG_KEYS[key]
        assert spec.config_type is ConfigType.LONG and spec.synonym == "log." + key
        assert "INVALID_TIMESTAMP" in spec.doc
        assert spec.synonym in BROKER_KEYS and spec.synonym in DYNAMIC_BROKER_KEYS
        assert check_topic_value(key, " 5 ") == "5"
    cfg = BrokerConfig.from_mapping(MINIMAL)
    assert (cfg.log_message_timestamp_before_max_ms,
            cfg.log_message_timestamp_after_max_ms) == (NEVER, HOUR)
    assert log_config_from(cfg) == LogConfig()


def test_the_broker_defaults_change_live_and_reach_the_log_config():
    cfg = BrokerConfig.from_mapping(MINIMAL)
    live, ignored = effective_broker_config(cfg, {"log.message.timestamp.after.max.ms": "10",
                                                  "log.message.timestamp.before.max.ms": "-3"})
    assert "log.message.timestamp.before.max.ms" in ignored
    assert log_config_from(live).message_timestamp_after_max_ms == 10
    assert log_config_from(live).message_timestamp_before_max_ms == NEVER


def test_incremental_alter_configs_sets_and_deletes_the_topic_keys():
    new = apply_incremental(TOPIC, {}, [
        Change("message.timestamp.before.max.ms", "86400000", OpType.SET),
        Change("message.timestamp.after.max.ms", "0", OpType.SET)], defaults={})
    assert new == {"message.timestamp.before.max.ms": "86400000",
                   "message.timestamp.after.max.ms": "0"}
    assert apply_incremental(TOPIC, new, [Change("message.timestamp.after.max.ms", None,
                                                 OpType.DELETE)], defaults={}) == {
        "message.timestamp.before.max.ms": "86400000"}
