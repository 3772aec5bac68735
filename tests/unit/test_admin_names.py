"""How the admin client names what brokers send: a code or config source it does not know is
shown as its number, never an exception (a newer broker may send values this one lacks)."""

from __future__ import annotations

from broker_core.wire.errors import ErrorCode
from sluice_tools.admin import _source_name, error_name


def test_known_and_unknown_error_codes():
    assert error_name(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(31000) == "31000"


def test_known_and_unknown_config_sources():
    assert _source_name(5) == "DEFAULT_CONFIG"
    assert _source_name(8) == "8"  # a source Kafka added after this client
