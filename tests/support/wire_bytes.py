"""Byte builders for hand-written expected encodings (Kafka's primitive types, compact strings,
request headers): known-bytes tests of the wire codec compare against these.
"""

from __future__ import annotations

import struct


def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def string(s):  # classic string: int16 length + UTF-8
    b = s.encode()
    return i16(len(b)) + b


def compact_string(s):  # uvarint(length + 1) + UTF-8 (all lengths here fit one byte)
    b = s.encode()
    assert len(b) + 1 < 0x80
    return bytes([len(b) + 1]) + b


NO_TAGS = b"\x00"  # an empty tagged-field section


def request_header_v1(key, version, correlation_id, client_id):
    return i16(key) + i16(version) + i32(correlation_id) + string(client_id)


def request_header_v2(key, version, correlation_id, client_id):
    # The client id stays a classic (non-compact) string in header v2.
    return request_header_v1(key, version, correlation_id, client_id) + NO_TAGS


def joined(chunks):
    return b"".join(chunks)


