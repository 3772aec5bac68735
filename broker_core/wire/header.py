"""Request and response headers, and which header version goes with which API version.

Request header
    v0: ``api_key int16, api_version int16, correlation_id int32``
    v1: v0 + ``client_id`` (nullable *classic* string, even in v2)
    v2: v1 + a tagged-field section (used by flexible request versions)

Response header
    v0: ``correlation_id int32``
    v1: v0 + a tagged-field section (used by flexible response versions)

The rule: a flexible API version uses request header v2 and response header v1, a non-flexible
one request header v1 and response header v0. Two exceptions: ApiVersions always answers with
response header v0, because the client reads the answer before it knows which versions the broker
speaks (KIP-511); and ControlledShutdown v0 used request header v0.

Header tagged fields: none are defined for Sluice; unknown ones are skipped on decode and
dropped (the header is rebuilt, not round-tripped).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_core.wire.primitives import Reader, Writer

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7

REQUEST_IDS = struct.Struct(">hhi")
"""The three fixed fields every request header starts with: api_key, api_version,
correlation_id."""
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A parsed request header. ``client_id`` is ``None`` when the client sent a null id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def request_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    """The request header version used by ``api_key`` at ``api_version``."""
    if flexible:
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    """The response header version used by ``api_key`` at ``api_version``."""
    if flexible and api_key != API_VERSIONS_KEY:
        return 1
    return 0


def read_request_header(r: Reader, version: int) -> RequestHeader:
    api_key, api_version, correlation_id = r.fixed(REQUEST_IDS)
    client_id = None
    if version >= 1:
        # Every request pays for this: a client id that fits and is UTF-8 is read inline;
        # anything else (null, a bad length, bad UTF-8) by the reader, which raises the errors.
        pos = r.pos
        buf = r.buf
        n = _I16.unpack_from(buf, pos)[0] if pos + 2 <= r.end else -1
        if n >= 0 and pos + 2 + n <= r.end:
            try:
                client_id = str(buf[pos + 2:pos + 2 + n], "utf-8")
                r.pos = pos + 2 + n
            except UnicodeDecodeError:
                client_id = r.nullable_string()
        else:
            client_id = r.nullable_string()
    if version >= 2:
        pos = r.pos
        if pos < r.end and r.buf[pos] == 0:  # no tagged fields: the usual case
            r.pos = pos + 1
        else:
            r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def write_request_header(w: Writer, header: RequestHeader, version: int) -> None:
    w.fixed(REQUEST_IDS, (header.api_key, header.api_version, header.correlation_id))
    if version >= 1:
        w.nullable_string(header.client_id)
    if version >= 2:
        w.tagged_fields()


def read_response_header(r: Reader, version: int) -> int:
    """The correlation id."""
    correlation_id = r.int32()
    if version >= 1:
        r.skip_tagged_fields()
    return correlation_id


def write_response_header(w: Writer, correlation_id: int, version: int) -> None:
    w.int32(correlation_id)
    if version >= 1:
        w.tagged_fields()
