"""Request/response headers and the rule picking their versions."""

from __future__ import annotations

import pytest

from broker_core.wire.errors import MalformedFrame
from broker_core.wire.header import (
    REQUEST_IDS,
    RequestHeader,
    read_request_header,
    read_response_header,
    request_header_version,
    response_header_version,
    write_request_header,
    write_response_header,
)
from broker_core.wire.primitives import Reader, Writer


@pytest.mark.parametrize("key,version,flexible,req,resp", [
    (3, 8, False, 1, 0),    # Metadata v8: classic
    (3, 9, True, 2, 1),     # Metadata v9: flexible
    (18, 3, True, 2, 0),    # ApiVersions v3: flexible request, response header stays v0
    (18, 0, False, 1, 0),
    (7, 0, False, 0, 0),    # ControlledShutdown v0 used request header v0
    (7, 3, True, 2, 1),
])
def test_header_version_rule(key, version, flexible, req, resp):
    assert request_header_version(key, version, flexible) == req
    assert response_header_version(key, version, flexible) == resp


@pytest.mark.parametrize("version,client_id,expected", [
    (0, None, b"\x00\x03\x00\x01\x00\x00\x00\x09"),
    (1, "ab", b"\x00\x03\x00\x01\x00\x00\x00\x09\x00\x02ab"),
    (1, None, b"\x00\x03\x00\x01\x00\x00\x00\x09\xff\xff"),
    (2, "ab", b"\x00\x03\x00\x01\x00\x00\x00\x09\x00\x02ab\x00"),  # client id stays classic
])
def test_request_header_layouts(version, client_id, expected):
    h = RequestHeader(3, 1, 9, client_id)
    w = Writer()
    write_request_header(w, h, version)
    assert w.tobytes() == expected
    r = Reader(expected)
    assert read_request_header(r, version) == RequestHeader(3, 1, 9, client_id)
    assert r.remaining() == 0


def test_unknown_header_tags_are_skipped():
    data = b"\x00\x03\x00\x09\x00\x00\x00\x01\xff\xff" + b"\x01\x05\x02zz" + b"BODY"
    r = Reader(data)
    assert read_request_header(r, 2) == RequestHeader(3, 9, 1, None)
    assert bytes(r.buf[r.pos:]) == b"BODY"


@pytest.mark.parametrize("version,expected", [(0, b"\x00\x00\x00\x05"),
                                              (1, b"\x00\x00\x00\x05\x00")])
def test_response_header_layouts(version, expected):
    w = Writer()
    write_response_header(w, 5, version)
    assert w.tobytes() == expected
    assert read_response_header(Reader(expected), version) == 5


def _reader_read_header(r: Reader, version: int) -> RequestHeader:
    """The header read field by field through the Reader: what the inline client id and
    empty tagged section must agree with, errors included."""
    api_key, api_version, correlation_id = r.fixed(REQUEST_IDS)
    client_id = r.nullable_string() if version >= 1 else None
    if version >= 2:
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def _outcome(read, data: bytes, version: int):
    r = Reader(data)
    try:
        return read(r, version), r.pos
    except MalformedFrame as e:
        return type(e), str(e)


IDS = b"\x00\x03\x00\x09\x00\x00\x00\x11"
CLIENT_IDS = [
    b"\x00\x07rdkafka", b"\x00\x00", b"\xff\xff", b"\xff\xfe", b"\x80\x00", b"\x00\x09rdkafka",
    b"\x00\x03\xff\xfe\xfd", b"\x00\x02\xc3", b"\x00\x02\xc3\xa9", b"\x00", b"",
    b"\x00\x03" + "é".encode()[:1] + b"ab",
]
TAGS = [b"", b"\x00", b"\x01\x05\x02xy", b"\x01\x05\x09xy", b"\x80", b"\x02\x01\x00\x02\x01z"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_request_header_reads_as_the_reader_does_for_every_client_id_and_tag_section(version):
    for client_id in CLIENT_IDS:
        for tags in TAGS:
            data = IDS + client_id + tags + b"body"
            for cut in range(len(data) + 1):
                assert _outcome(read_request_header, data[:cut], version) == \
                    _outcome(_reader_read_header, data[:cut], version), (data, cut)
