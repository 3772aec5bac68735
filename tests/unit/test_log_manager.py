"""LogManager (partition directories, checkpoints, clean-shutdown marker), checkpoint files,
and LogConfig."""

from __future__ import annotations

import os

import pytest

from broker_core.log import CheckpointError, LogConfig, LogManager
from broker_core.log import checkpoints as checkpoints_module
from broker_core.log.checkpoints import read_offsets, write_offsets
from broker_core.wire.records import Record, build_batch
from tests.support.manual_time import ManualTime


def batch(n: int = 1) -> bytes:
    return build_batch([Record(None, b"payload", [], 5) for _ in range(n)])


# -- checkpoint files --------------------------------------------------------------------------


def test_checkpoint_round_trip_in_kafkas_format(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {("a-b", 0): 17, ("a-b", 1): 0, ("z", 3): 1_000_000_000_000}
    write_offsets(path, offsets)
    assert path.read_text() == "0\n3\na-b 0 17\na-b 1 0\nz 3 1000000000000\n"
    assert read_offsets(path) == offsets
    assert read_offsets(tmp_path / "missing") == {}
    write_offsets(path, {})
    assert read_offsets(path) == {}


@pytest.mark.parametrize("text", ["", "0\n", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n",
                                  "0\n1\nt x 1\n", "0\nmany\n"])
def test_damaged_checkpoint_raises_naming_the_file(tmp_path, text):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match="recovery-point-offset-checkpoint"):
        read_offsets(path)


def test_checkpoint_replace_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "log-start-offset-checkpoint"
    write_offsets(path, {("t", 0): 5})

    def failing_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(checkpoints_module.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_offsets(path, {("t", 0): 6})
    assert read_offsets(path) == {("t", 0): 5}  # the old file is whole
    monkeypatch.undo()
    write_offsets(path, {("t", 0): 7})  # a leftover temp file does not get in the way
    assert read_offsets(path) == {("t", 0): 7}
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_checkpoint_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(checkpoints_module.os, "fsync",
                        lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(checkpoints_module.os, "replace",
                        lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    write_offsets(tmp_path / "c", {("t", 0): 1})
    assert events == ["fsync", "rename", "fsync"]  # file, rename, directory


# -- the manager -------------------------------------------------------------------------------


def test_get_or_create_load_and_checkpoints_round_trip(tmp_path):
    time = ManualTime()
    manager = LogManager(tmp_path, LogConfig(), time_ms=time)
    assert manager.load() == {} and manager.clean_shutdown
    a = manager.get_or_create("payments-eu", 2)
    assert manager.get_or_create("payments-eu", 2) is a
    assert manager.get("payments-eu", 2) is a and manager.get("nope", 0) is None
    assert (tmp_path / "payments-eu-2").is_dir()
    for _ in range(4):
        a.append_as_leader(batch(3), 1)
    a.high_watermark = 9
    a.flush()
    manager.shutdown()
    assert (tmp_path / ".clean-shutdown").exists()
    assert read_offsets(tmp_path / "recovery-point-offset-checkpoint") == {("payments-eu", 2): 12}
    assert read_offsets(tmp_path / "replication-offset-checkpoint") == {("payments-eu", 2): 9}
    assert read_offsets(tmp_path / "log-start-offset-checkpoint") == {("payments-eu", 2): 0}

    again = LogManager(tmp_path, LogConfig(), time_ms=time)
    logs = again.load()
    assert again.clean_shutdown and not (tmp_path / ".clean-shutdown").exists()
    log = logs[("payments-eu", 2)]
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (12, 9, 12)
    again.shutdown()


def test_config_given_to_get_or_create_replaces_the_logs(tmp_path):
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    manager.load()
    log = manager.get_or_create("t", 0, LogConfig(segment_bytes=1234))
    assert log.config.segment_bytes == 1234
    manager.get_or_create("t", 0, LogConfig(segment_bytes=999))
    assert log.config.segment_bytes == 999
    manager.shutdown()


@pytest.mark.parametrize("topic", ["", "..", "a/b", "spaces here", "x" * 250, "tab\t"])
def test_illegal_topic_names_are_refused(tmp_path, topic):
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    manager.load()
    with pytest.raises(ValueError, match="illegal topic name"):
        manager.get_or_create(topic, 0)
    with pytest.raises(ValueError, match="illegal partition"):
        manager.get_or_create("fine", -1)
    assert list(tmp_path.iterdir()) == []


def test_unparseable_directories_and_checkpoints_are_reported_not_fatal(tmp_path):
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    manager.load()
    manager.get_or_create("good", 0).append_as_leader(batch(), 0)
    manager.shutdown()
    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "lost+found").mkdir()
    (tmp_path / "replication-offset-checkpoint").write_text("garbage")
    again = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    logs = again.load()
    assert list(logs) == [("good", 0)]
    assert set(again.load_errors) == {"not-a-partition", "lost+found",
                                      "replication-offset-checkpoint"}
    assert logs[("good", 0)].high_watermark == 0
    again.shutdown()


def test_delete_removes_the_partition_and_its_checkpoint_entries(tmp_path):
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    manager.load()
    manager.get_or_create("t", 0).append_as_leader(batch(), 0)
    manager.get_or_create("t", 1).append_as_leader(batch(), 0)
    manager.checkpoint()
    manager.delete("t", 0)
    assert not (tmp_path / "t-0").exists()
    assert [(log.topic, log.partition) for log in manager.logs()] == [("t", 1)]
    manager.checkpoint()
    assert list(read_offsets(tmp_path / "recovery-point-offset-checkpoint")) == [("t", 1)]
    manager.shutdown()


def test_interrupted_deletion_is_finished_at_load(tmp_path):
    (tmp_path / "t-0.0123abcd-delete").mkdir()
    (tmp_path / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    assert manager.load() == {} and manager.load_errors == {}
    assert list(tmp_path.iterdir()) == []


# -- LogConfig ---------------------------------------------------------------------------------


def test_topic_config_overrides():
    defaults = LogConfig()
    cfg = LogConfig.from_topic_config(defaults, {
        "segment.bytes": "1048576", "segment.ms": "60000", "retention.bytes": "-1",
        "retention.ms": "3600000", "flush.messages": "1", "flush.ms": "1000",
        "index.interval.bytes": "0", "max.message.bytes": "2000000",
        "segment.index.bytes": "4096"})
    assert (cfg.segment_bytes, cfg.segment_ms, cfg.retention_bytes, cfg.retention_ms) == (
        1 << 20, 60_000, -1, 3_600_000)
    assert (cfg.flush_messages, cfg.flush_ms, cfg.index_interval_bytes) == (1, 1000, 0)
    assert (cfg.max_message_bytes, cfg.max_index_entries) == (2_000_000, 512)
    never = LogConfig.from_topic_config(cfg, {"flush.messages": str((1 << 63) - 1),
                                              "flush.ms": str((1 << 63) - 1)})
    assert never.flush_messages is None and never.flush_ms is None
    assert LogConfig.from_topic_config(defaults, {}) == defaults


@pytest.mark.parametrize("key,value", [
    ("segment.bytes", "0"), ("segment.bytes", str(1 << 31)), ("segment.ms", "soon"),
    ("retention.ms", "-2"), ("flush.messages", "0"), ("index.interval.bytes", "-1"),
    ("max.message.bytes", "1.5"), ("segment.index.bytes", "4")])
def test_bad_topic_config_values_name_the_key(key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LogConfig.from_topic_config(LogConfig(), {key: value})


def test_unknown_topic_config_key_is_named():
    with pytest.raises(ValueError, match="'cleanup.policy'"):
        LogConfig.from_topic_config(LogConfig(), {"cleanup.policy": "delete"})


def test_config_constructor_checks_ranges():
    with pytest.raises(ValueError, match="segment.bytes"):
        LogConfig(segment_bytes=0)
    with pytest.raises(ValueError, match="flush.ms"):
        LogConfig(flush_ms=-1)


def test_checkpoints_are_rewritten_only_when_they_changed(tmp_path, monkeypatch):
    manager = LogManager(tmp_path, LogConfig(), time_ms=ManualTime())
    a = manager.get_or_create("t", 0)
    manager.get_or_create("t", 1)
    written: list[str] = []
    real = checkpoints_module.write_atomically
    monkeypatch.setattr(checkpoints_module, "write_atomically",
                        lambda path, text, **kw: (written.append(path.name),
                                                  real(path, text, **kw))[1])
    manager.checkpoint()
    assert sorted(written) == ["log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
                               "replication-offset-checkpoint"]
    written.clear()
    manager.checkpoint()
    assert written == []  # nothing changed: nothing written
    a.append_as_leader(batch(2), 1)
    a.high_watermark = 2
    manager.checkpoint()
    assert written == ["replication-offset-checkpoint"]
    assert read_offsets(tmp_path / "replication-offset-checkpoint") == {("t", 0): 2, ("t", 1): 0}
    written.clear()
    manager.delete("t", 1)
    manager.checkpoint()
    assert sorted(written) == ["log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
                               "replication-offset-checkpoint"]
    manager.shutdown()
