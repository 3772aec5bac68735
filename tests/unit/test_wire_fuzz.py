"""Property tests: whatever bytes arrive, the codec either decodes them or raises a
ProtocolError subclass -- never IndexError, struct.error, UnicodeDecodeError, MemoryError..."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.wire import apis
from broker_core.wire.apis import SUPPORTED, ApiKey, Request
from broker_core.wire.errors import MalformedFrame, ProtocolError
from broker_core.wire.schema import Struct
from tests.support.wire_samples import populated

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

KEY_VERSIONS = [(k, v) for k, s in sorted(SUPPORTED.items())
                for v in range(s.min_version, s.max_version + 1)]
key_versions = st.sampled_from(KEY_VERSIONS)


def _valid_request(key, version, client_id="fuzz") -> bytes:
    spec = SUPPORTED[key]
    value = populated(spec.request, version, spec.is_flexible(version))
    return b"".join(apis.encode_request(key, version, 5, client_id, value))


def _valid_response(key, version) -> bytes:
    spec = SUPPORTED[key]
    value = populated(spec.response, version, spec.is_flexible(version))
    return b"".join(apis.encode_response(key, version, 6, value))


def _decode_request_or_protocol_error(data: bytes) -> None:
    try:
        result = apis.decode_request(data)
    except ProtocolError:
        return
    assert isinstance(result, Request) and isinstance(result.body, Struct)


def _decode_response_or_protocol_error(key, version, data: bytes) -> None:
    try:
        correlation_id, body = apis.decode_response(key, version, data)
    except ProtocolError:
        return
    assert isinstance(body, Struct) and isinstance(correlation_id, int)


@FUZZ
@given(st.binary(max_size=200))
def test_decode_request_of_arbitrary_bytes(data):
    _decode_request_or_protocol_error(data)


@FUZZ
@given(key_versions, st.binary(max_size=200), st.booleans())
def test_decode_request_with_a_valid_header_and_arbitrary_body(kv, body, flexible_header):
    # A real header gets the fuzz past the registry checks into every body decoder.
    key, version = kv
    header = struct.pack(">hhi", key, version, 1) + b"\xff\xff"
    if SUPPORTED[key].is_flexible(version) and flexible_header:
        header += b"\x00"
    _decode_request_or_protocol_error(header + body)


@FUZZ
@given(key_versions, st.binary(max_size=200))
def test_decode_response_of_arbitrary_bytes(kv, data):
    key, version = kv
    _decode_response_or_protocol_error(key, version, data)


@pytest.mark.parametrize("key,version", KEY_VERSIONS,
                         ids=[f"{k.name}-v{v}" for k, v in KEY_VERSIONS])
def test_every_truncation_of_a_valid_message_is_malformed(key, version):
    # Messages are self-delimiting, so no strict prefix of a valid one can decode.
    request = _valid_request(key, version)
    for cut in range(len(request)):
        with pytest.raises(MalformedFrame):
            apis.decode_request(request[:cut])
    response = _valid_response(key, version)
    for cut in range(len(response)):
        prefix = response[:cut]
        if key == ApiKey.API_VERSIONS and version > 0:
            # The one exception, on purpose: a prefix that is exactly a v0 body decodes as v0
            # (the KIP-511 fallback); then its v0 parse must agree.
            try:
                _, body = apis.decode_response(key, version, prefix)
            except MalformedFrame:
                continue
            assert body == apis.decode_response(key, 0, prefix)[1]
            continue
        with pytest.raises(MalformedFrame):
            apis.decode_response(key, version, prefix)


@FUZZ
@given(key_versions, st.data())
def test_flipped_bytes_in_valid_messages(kv, data):
    key, version = kv
    for original, decode in [
        (_valid_request(key, version), _decode_request_or_protocol_error),
        (_valid_response(key, version),
         lambda b: _decode_response_or_protocol_error(key, version, b)),
    ]:
        mutated = bytearray(original)
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(mutated) - 1))
            mutated[i] = data.draw(st.integers(0, 255))
        decode(bytes(mutated))


@FUZZ
@given(key_versions, st.data())
def test_inserted_and_deleted_bytes_in_valid_messages(kv, data):
    key, version = kv
    raw = bytearray(_valid_request(key, version))
    i = data.draw(st.integers(0, len(raw)))
    if data.draw(st.booleans()):
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    else:
        del raw[i:i + data.draw(st.integers(1, 8))]
    _decode_request_or_protocol_error(bytes(raw))
