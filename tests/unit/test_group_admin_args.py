"""``sluice groups reset-offsets``' arguments: topic/partition specs, dates, and the choice of
exactly one target, each refused as bad usage (exit 2) before any broker is asked."""

from __future__ import annotations

import pytest

from sluice_tools.cli import main
from sluice_tools.group_admin import parse_datetime_ms, parse_topic_partitions


def test_topic_specs():
    assert parse_topic_partitions(["a", "b:2,0,2", "c:7"]) == [
        ("a", None), ("b", [0, 2]), ("c", [7])]
    for bad, says in [(":1", "no topic name"), ("t:x", "must be numbers"),
                      ("t:", "must be numbers"), ("t:-1", ">= 0")]:
        with pytest.raises(ValueError, match=says):
            parse_topic_partitions([bad])


def test_datetimes_are_utc_unless_they_say_otherwise():
    assert parse_datetime_ms("1970-01-01T00:00:01") == 1000
    assert parse_datetime_ms("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(ValueError, match="not an ISO 8601 date-time"):
        parse_datetime_ms("yesterday")


BASE = ["groups", "reset-offsets", "--bootstrap-server", "127.0.0.1:1", "--group", "g"]


@pytest.mark.parametrize("extra, says", [
    (["--topic", "t"], "one of the arguments --to-earliest"),
    (["--topic", "t", "--to-earliest", "--to-latest"], "not allowed with argument"),
    (["--to-earliest"], "--topic"),
    (["--topic", "t:x", "--to-earliest"], "partitions must be numbers"),
    (["--topic", "t", "--to-datetime", "soon"], "not an ISO 8601 date-time"),
])
def test_bad_reset_arguments_are_bad_usage(capsys, extra, says):
    assert main(BASE + extra) == 2
    assert says in capsys.readouterr().err
