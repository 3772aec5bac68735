"""Names and values from a disk or the metadata store that look numeric to ``str.isdigit`` but
are not ASCII decimals ("²", "٣") are passed over or refused, never a crash in ``int()``."""

from __future__ import annotations

import pytest

from broker_core import metadata_paths as paths
from broker_core.log import LogConfig
from broker_core.log.log import Log
from broker_core.log.meta_properties import MetaPropertiesError, parse


def test_a_segment_file_named_with_superscript_digits_is_passed_over(tmp_path):
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "\u00b2\u00b2.log").write_bytes(b"")
    (part / "\u00b3.index").write_bytes(b"")
    log = Log.open(part, LogConfig(), time_ms=lambda: 0)
    try:
        assert log.log_end_offset == 0
    finally:
        log.close()


def test_meta_properties_refuse_a_broker_id_of_non_ascii_digits():
    with pytest.raises(MetaPropertiesError, match="not an integer"):
        parse("version=0\nbroker.id=\u0663\n", "meta.properties")


def test_an_endpoint_with_a_non_ascii_port_is_refused():
    with pytest.raises(ValueError, match="NAME://host:port"):
        paths.ListenerEndpoint.parse("PLAINTEXT://h:\u00b2")
