"""A blocking Kafka-protocol connection over the sans-IO codec (no Twisted).

Used by the admin tool now, and by the consumer, the producer and the PySpark workers later, where
a reactor is not wanted. On connect it completes the TLS handshake (when its
:class:`~consumer_client.security.ClientSecurity` says so), negotiates versions with ApiVersions,
logs in over SASL (when asked; as Kafka's clients, after ApiVersions), and then sends every
request at the highest version both sides speak.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
from typing import Any, NamedTuple

from broker_core.config.parsing import split_host_port
from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey
from broker_core.wire.schema import Struct
from consumer_client.security import ClientSecurity, login_blocking

_SIZE = struct.Struct(">i")  # a frame's size prefix


class Pending(NamedTuple):
    """A request sent on a :class:`BrokerConnection` whose answer is not read yet."""

    api_key: int
    version: int
    correlation_id: int


class ConnectionError_(OSError):
    """The broker closed the connection or answered nonsense."""


class UnsupportedVersionError(Exception):
    """The broker does not serve an API this client needs."""


class NoBrokersAvailable(ConnectionError):
    """No broker could be reached: none of the bootstrap servers (nor any known broker) accepted
    a connection, or the broker asked for is not in the cluster metadata.

    The one such error of the client library, for its blocking and its Twisted side alike. An
    ``OSError`` (as ``ConnectionError``), not Twisted's ``ConnectError``: this module does not
    import Twisted, and every caller that retries a failed connect already treats an
    ``OSError`` as one."""


class BrokerConnection:
    """One blocking connection; see the module docstring. Not thread-safe."""

    def __init__(self, host: str, port: int, *, client_id: str = "sluice",
                 timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        """Connect, then TLS, ApiVersions and SASL as ``security`` says (default PLAINTEXT).

        Raises OSError when the broker cannot be reached (``ssl.SSLCertVerificationError``,
        an OSError too, when its certificate is not trusted) and
        :class:`~broker_core.security.sasl.SaslAuthenticationError` when it refuses the login;
        nothing stays open after a failure."""
        self.host, self.port = host, port
        self.client_id = client_id
        self._ids = itertools.count(1)
        self.max_frame_bytes = framing.MAX_FRAME_BYTES * 2
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.versions: dict[int, int] = {}
        security = security or ClientSecurity()
        try:
            context = security.ssl_context()
            if context is not None:
                self.sock = context.wrap_socket(self.sock, server_hostname=host)
            self._negotiate()
            credential = security.credential
            if credential is not None:
                login_blocking(self._roundtrip, credential, f"{host}:{port}")
        except BaseException:
            self.close()
            raise

    def _negotiate(self) -> None:
        resp = self._roundtrip(ApiKey.API_VERSIONS, 0, {})
        self.versions = apis.common_versions(resp.api_keys)

    def version_of(self, api_key: int) -> int:
        try:
            return self.versions[int(api_key)]
        except KeyError:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not serve {ApiKey(api_key).name} at a "
                "version this client speaks") from None

    def request(self, api_key: int, body: Any, *, version: int | None = None) -> Struct:
        """Send one request at the negotiated (or given) version and return the response."""
        return self.receive(self.send(api_key, body, version=version))

    def send(self, api_key: int, body: Any, *, version: int | None = None) -> Pending:
        """Send a request without waiting for its answer; :meth:`receive` it later. Answers
        come in the order requests were sent, so they must be received in that order (a
        caller that gives up on a sent request closes the connection)."""
        return self._send(api_key, self.version_of(api_key) if version is None else version,
                          body)

    def receive(self, pending: Pending) -> Struct:
        """The response to a request :meth:`send` returned ``pending`` for."""
        api_key, version, cid = pending
        got, resp = apis.decode_response(api_key, version, self._read_frame())
        if got != cid:
            raise ConnectionError_(f"expected correlation id {cid}, got {got}")
        return resp

    def _send(self, api_key: int, version: int, body: Any) -> Pending:
        cid = next(self._ids) & 0x7FFFFFFF
        self.sock.sendall(b"".join(framing.frame(
            apis.encode_request(api_key, version, cid, self.client_id, body))))
        return Pending(api_key, version, cid)

    def _roundtrip(self, api_key: int, version: int, body: Any) -> Struct:
        return self.receive(self._send(api_key, version, body))

    def _read_frame(self) -> bytearray:
        """The next response frame. Requests and responses alternate on a blocking connection,
        so the stream holds at most the one frame being waited for: its size is read, then
        exactly that many bytes with ``recv_into`` into one buffer of the frame's size (Fetch
        responses are megabytes; a stream buffer and a copy out of it cost as much as the
        decoding that follows)."""
        size = _SIZE.unpack(self._recv_exactly(framing.SIZE_PREFIX_BYTES))[0]
        if size < 0 or size > self.max_frame_bytes:
            raise ConnectionError_(f"broker {self.host}:{self.port} sent a frame of {size} "
                                   f"bytes (limit {self.max_frame_bytes})")
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError_(f"broker {self.host}:{self.port} closed the connection")
            got += k
        view.release()
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """``host:port`` pairs of a comma-separated list; an IPv6 address is written in brackets
    (``[::1]:9092``, as Kafka clients take it) and returned without them. ``ValueError`` names
    the first entry that is not ``host:port`` with a port from 1 to 65535."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host_port = split_host_port(item)
        if host_port is None:
            raise ValueError(f"bad bootstrap server {item!r}: expected host:port "
                             "(an IPv6 address in brackets) with a port from 1 to 65535")
        out.append(host_port)
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


def bootstrap(servers: str, **kw: Any) -> BrokerConnection:
    """Connect to the first reachable ``host:port`` of a comma-separated list. A broker whose
    certificate is not trusted, or that refuses the SASL login, fails it at once: another
    broker of the same cluster would answer the same."""
    errors = []
    for host, port in parse_servers(servers):
        try:
            return BrokerConnection(host, port, **kw)
        except ssl.SSLCertVerificationError:
            raise
        except OSError as e:
            errors.append(f"{host}:{port} ({e})")
    raise NoBrokersAvailable("could not connect to any of: " + ", ".join(errors))
