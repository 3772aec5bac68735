"""Request and response headers and which version goes with which API version.

Request header v1 = api_key, api_version, correlation_id, client_id (nullable string); v2 adds a
tagged-field section (flexible APIs). Response header v0 = correlation_id; v1 adds tagged fields.
ApiVersions always answers with response header v0, so a client that does not know the broker's
versions yet can read the answer (KIP-511).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.wire.primitives import Reader, Writer

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def read_request_header(r: Reader, flexible_for: "callable") -> RequestHeader:
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.string(nullable=True, compact=False)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if flexible_for(api_key, api_version):
        r.skip_tagged_fields()
    return header


def write_request_header(w: Writer, h: RequestHeader, flexible: bool) -> None:
    w.int16(h.api_key)
    w.int16(h.api_version)
    w.int32(h.correlation_id)
    w.string(h.client_id, compact=False)
    if flexible:
        w.uvarint(0)


def response_header_flexible(api_key: int, flexible: bool) -> bool:
    return flexible and api_key != API_VERSIONS_KEY


def write_response_header(w: Writer, correlation_id: int, flexible: bool) -> None:
    w.int32(correlation_id)
    if flexible:
        w.uvarint(0)


def read_response_header(r: Reader, flexible: bool) -> int:
    correlation_id = r.int32()
    if flexible:
        r.skip_tagged_fields()
    return correlation_id
