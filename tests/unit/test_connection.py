"""The blocking connection's framing: responses are read whole however the bytes arrive, and a
bad size or a closed connection is a clear error; and the bootstrap list's parsing
(consumer_client/connection.py)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey
from consumer_client.connection import BrokerConnection, ConnectionError_, parse_servers


def _serve(script):
    """A one-connection server: answers ApiVersions, then runs ``script(conn, frames)`` where
    ``frames`` yields each request frame received."""
    srv = socket.create_server(("127.0.0.1", 0))

    def run():
        conn, _ = srv.accept()
        dec = framing.FrameDecoder()

        def frames():
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                yield from dec.feed(data)

        it = frames()
        req = apis.decode_request(next(it))
        body = {"error_code": 0, "api_keys": apis.advertised_versions(), "throttle_time_ms": 0}
        conn.sendall(b"".join(framing.frame(apis.encode_response(
            ApiKey.API_VERSIONS, req.header.api_version, req.header.correlation_id,
            body))))
        try:
            script(conn, it)
        finally:
            conn.close()
            srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv.getsockname()[1], t


def _metadata_response(req) -> bytes:
    return b"".join(framing.frame(apis.encode_response(
        ApiKey.METADATA, req.header.api_version, req.header.correlation_id,
        {"brokers": [{"node_id": 7, "host": "h" * 5000, "port": 1, "rack": None}],
         "cluster_id": "c", "controller_id": 7, "topics": []})))


def test_a_response_arriving_a_byte_at_a_time_is_read_whole():
    def script(conn, frames):
        for _ in range(2):
            raw = _metadata_response(apis.decode_request(next(frames)))
            conn.sendall(raw[:1])  # the size prefix split too
            conn.sendall(raw[1:3])
            for i in range(3, len(raw), 997):
                conn.sendall(raw[i:i + 997])

    port, t = _serve(script)
    with BrokerConnection("127.0.0.1", port, timeout=5) as c:
        for _ in range(2):
            md = c.request(ApiKey.METADATA, {"topics": None})
            assert md.brokers[0].node_id == 7 and len(md.brokers[0].host) == 5000
    t.join(5)


@pytest.mark.parametrize("size", [-1, framing.MAX_FRAME_BYTES * 2 + 1])
def test_a_frame_size_out_of_bounds_is_an_error(size):
    def script(conn, frames):
        next(frames)
        conn.sendall(struct.pack(">i", size) + b"x" * 10)

    port, t = _serve(script)
    with BrokerConnection("127.0.0.1", port, timeout=5) as c, \
            pytest.raises(ConnectionError_, match=f"frame of {size} bytes"):
        c.request(ApiKey.METADATA, {"topics": None})
    t.join(5)


def test_a_connection_closed_mid_frame_is_an_error():
    def script(conn, frames):
        raw = _metadata_response(apis.decode_request(next(frames)))
        conn.sendall(raw[:len(raw) // 2])

    port, t = _serve(script)
    with BrokerConnection("127.0.0.1", port, timeout=5) as c, \
            pytest.raises(ConnectionError_, match="closed the connection"):
        c.request(ApiKey.METADATA, {"topics": None})
    t.join(5)


def test_bootstrap_servers_take_bracketed_ipv6_addresses():
    assert parse_servers(" a:1, [::1]:9092 ,,10.0.0.1:65535") == [
        ("a", 1), ("::1", 9092), ("10.0.0.1", 65535)]


@pytest.mark.parametrize("raw", ["a", "a:", ":9092", "[]:9092", "a:0", "a:65536", "a:x",
                                 "[::1:9092", "::1]:9092", "a:-1", ""])
def test_a_bad_bootstrap_server_is_refused_by_name(raw):
    with pytest.raises(ValueError, match="bootstrap server|no bootstrap servers"):
        parse_servers(raw)
