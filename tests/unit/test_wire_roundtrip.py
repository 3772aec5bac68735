"""Every served API, every version, request and response: encode -> decode gives the same
values, and decode -> encode gives the same bytes. Samples put a non-default value in every
field the version has (see ``test_wire_samples``), and a second pass puts null in every field
that is nullable there."""

from __future__ import annotations

import pytest

from broker_core.wire import apis
from broker_core.wire.primitives import Reader, Writer
from tests.support.wire_samples import all_messages, populated

MESSAGES = all_messages()
IDS = [i for i, _, _ in MESSAGES]
PARAMS = [(m, v) for _, m, v in MESSAGES]


def _encode(msg, value, version) -> bytes:
    w = Writer()
    msg.encode(value, version, w)
    return b"".join(w.chunks())


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_message_round_trip(msg, version, nulls):
    value = populated(msg, version, msg.is_flexible(version), nulls=nulls)
    data = _encode(msg, value, version)
    r = Reader(data)
    decoded = msg.decode(r, version)
    assert r.remaining() == 0
    assert decoded == msg.build(value)
    # A decoded struct encodes to the very same bytes.
    assert _encode(msg, decoded, version) == data


@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_round_trip_through_headers_and_entry_points(msg, version):
    key = next(k for k, s in apis.SUPPORTED.items() if msg in (s.request, s.response))
    value = populated(msg, version, msg.is_flexible(version))
    if msg is apis.SUPPORTED[key].request:
        frame = b"".join(apis.encode_request(key, version, 77, "client-\u00e9", value))
        request = apis.decode_request(frame)
        assert (request.header.api_key, request.header.api_version,
                request.header.correlation_id, request.header.client_id) == (
            key, version, 77, "client-\u00e9")
        assert request.body == msg.build(value)
    else:
        frame = b"".join(apis.encode_response(key, version, 78, value))
        correlation_id, body = apis.decode_response(key, version, frame)
        assert correlation_id == 78
        assert body == msg.build(value)


@pytest.mark.parametrize("msg,version", PARAMS, ids=IDS)
def test_defaults_round_trip(msg, version):
    """An empty dict encodes every field at its default, and decodes back to the defaults."""
    data = _encode(msg, {}, version)
    assert msg.decode(Reader(data), version) == msg.make()
