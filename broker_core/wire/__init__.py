"""Sluice's sans-IO Kafka wire codec. Nothing in this package imports Twisted: bytes go in,
objects come out, and encoded messages come back as lists of ``bytes`` chunks for the caller's
transport.

Layers, bottom up:

- :mod:`~broker_core.wire.primitives` -- ``Reader``/``Writer`` for Kafka's primitive types
  (bounds-checked reads; chunked writes that keep record data uncopied).
- :mod:`~broker_core.wire.schema` -- the DSL messages are declared in, compiled per version.
- :mod:`~broker_core.wire.messages` -- one module per API: request/response schemas.
- :mod:`~broker_core.wire.header` -- request/response headers and their version rule.
- :mod:`~broker_core.wire.framing` -- the 4-byte size prefix; ``FrameDecoder`` for streams.
- :mod:`~broker_core.wire.apis` -- ``ApiKey``, the ``SUPPORTED`` registry and the entry points
  ``decode_request``/``encode_response`` (server side), ``encode_request``/``decode_response``
  (client side) and ``error_response``.
- :mod:`~broker_core.wire.errors` -- Kafka's ``ErrorCode`` table and the codec's exceptions;
  bad input only ever raises a ``ProtocolError`` subclass.
- :mod:`~broker_core.wire.records` -- RecordBatch v2 (maintained separately; the codec treats
  record data as opaque bytes).

Typical server loop::

    decoder = FrameDecoder(MAX_FRAME_BYTES)
    for frame in decoder.feed(data):
        request = decode_request(frame)            # Request(header, body)
        body = handle(request)                     # a dict or Struct
        chunks = encode_response(request.header.api_key, request.header.api_version,
                                 request.header.correlation_id, body)
        transport.writeSequence(framing.frame(chunks))

``docs/protocol.md`` lists the APIs and versions served and why.
"""

from broker_core.wire.apis import (
    SUPPORTED,
    ApiKey,
    ApiSpec,
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response,
)
from broker_core.wire.errors import (
    EncodeError,
    ErrorCode,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from broker_core.wire.framing import MAX_FRAME_BYTES, FrameDecoder, frame
from broker_core.wire.header import RequestHeader
from broker_core.wire.primitives import Reader, Writer
from broker_core.wire.schema import Struct

__all__ = [
    "MAX_FRAME_BYTES",
    "SUPPORTED",
    "ApiKey",
    "ApiSpec",
    "EncodeError",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "Reader",
    "Request",
    "RequestHeader",
    "Struct",
    "UnknownApiKey",
    "UnsupportedVersion",
    "Writer",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "frame",
]
