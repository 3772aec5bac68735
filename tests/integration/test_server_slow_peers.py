"""Peers that abuse the broker's connection shell, on real sockets and the real reactor:

- a peer that sends requests and never reads the answers (ApiVersions before a SASL login,
  the one request such a peer may repeat) leaves the broker's write buffer bounded: the
  connection stops reading once the transport's buffer is full, and the requests it did not
  read are never handled;
- closing such a connection (idle) finishes: it does not wait for a buffer that never drains,
  so the connection slot and its reservations are freed;
- size prefixes alone from one address cannot take the request-memory pool, and a reserved
  frame that does not arrive within ``socket.request.read.timeout.ms`` is closed.

Waits are bounded polls on the broker's own state (``eventually``), never sleeps.
"""

from __future__ import annotations

import socket
import struct
import threading

import pytest_twisted
from twisted.internet import threads

from broker_core.security.principal import ListenerSettings, SecurityProtocol
from broker_core.security.sasl import SaslSettings
from broker_core.server.connection_limits import ConnectionLimiter, ServerLimits
from broker_core.server.memory_pool import MemoryPool
from broker_core.server.protocol import KafkaServerFactory
from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey
from tests.support.cluster import eventually

MIB = 1024 * 1024
#: An ApiVersions answer of about 400 bytes, from a request of 23: an amplifier.
BODY = {"error_code": 0, "throttle_time_ms": 0,
        "api_keys": [{"api_key": i, "min_version": 0, "max_version": 9} for i in range(60)]}


def write_buffer_bytes(transport) -> int:
    """What the reactor's TCP transport holds in user space, not yet handed to the kernel."""
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


@pytest_twisted.ensureDeferred
async def test_a_peer_that_never_reads_cannot_grow_the_brokers_buffers_and_is_closed():
    from twisted.internet import reactor

    handled = []

    def handler(request, proto):
        handled.append(request.header.correlation_id)
        return BODY

    limits = ServerLimits(connections=ConnectionLimiter(10, 10), pool=MemoryPool(64 * MIB))
    factory = KafkaServerFactory(
        handler, clock=reactor, limits=limits, sasl=SaslSettings(),
        listener=ListenerSettings("CLIENT", SecurityProtocol.SASL_PLAINTEXT))
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    request = b"".join(framing.frame(apis.encode_request(ApiKey.API_VERSIONS, 2, 1, "x", {})))
    stop = threading.Event()
    sent = [0]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.connect(("127.0.0.1", port.getHost().port))
        sock.settimeout(0.2)
        blob = request * 2000

        def flood() -> None:
            # Sends until told to stop, never reading: once the broker stops reading, the
            # sends block (time out) and are retried.
            while not stop.is_set():
                try:
                    sent[0] += sock.send(blob)
                except TimeoutError:
                    continue
                except OSError:
                    return

        flooding = threads.deferToThread(flood)
        (proto,) = await eventually(lambda: list(factory.connections), what="the connection")
        await eventually(lambda: "writing" in proto._pauses, what="the write buffer filling")
        # The broker stopped reading: the flood now only fills the kernel's buffers.
        assert write_buffer_bytes(proto.transport) < 4 * MIB
        count = len(handled)
        await eventually(lambda: sent[0] > (count + 20000) * len(request),
                         what="the client sending well past what was handled")
        assert write_buffer_bytes(proto.transport) < 4 * MIB
        assert len(handled) < sent[0] // len(request)

        # An idle close (a close the broker decides) finishes although nothing drains.
        proto.close_idle()
        await eventually(lambda: not factory.connections, what="the connection closed")
        assert limits.connections.total == 0 and limits.pool.in_use == 0
    finally:
        stop.set()
        sock.close()
        await flooding
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_size_prefixes_from_one_address_neither_stall_others_nor_hold_memory(tmp_path):
    """The reviewer's 12 bytes: three connections sending only the sizes 100, 100 and 56 MiB
    used to fill the default 256 MiB pool and stall every client. With the default limits
    one address holds at most half the pool, another address's request is answered at once,
    and a reservation whose frame does not arrive in time is closed and given back."""
    from twisted.internet import reactor

    from broker_core.config.broker_config import BrokerConfig

    cfg = BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": str(tmp_path),
                                     "zookeeper.connect": "h:2181",
                                     "socket.request.read.timeout.ms": "1000"})
    limits = ServerLimits.from_config(cfg)
    factory = KafkaServerFactory(lambda request, proto: BODY, clock=reactor, limits=limits,
                                 max_frame_bytes=cfg.socket_request_max_bytes)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    address = ("127.0.0.1", port.getHost().port)
    request = b"".join(framing.frame(apis.encode_request(ApiKey.API_VERSIONS, 2, 1, "x", {})))
    hogs: list[socket.socket] = []
    try:
        for size in (100 * MIB, 100 * MIB, 56 * MIB):
            hog = socket.create_connection(address, source_address=("127.0.0.2", 0))
            hog.sendall(struct.pack(">i", size))
            hogs.append(hog)
        await eventually(lambda: limits.pool.waiting == 2, what="two sizes over the share")
        assert limits.pool.per_host == {"127.0.0.2": 100 * MIB}

        def ask() -> int:
            with socket.create_connection(address) as victim:
                victim.settimeout(30)
                victim.sendall(request)
                return len(victim.recv(4))

        assert await threads.deferToThread(ask) == 4  # answered beside them

        # The admitted size's frame never comes: closed after the read deadline, and the
        # waiting ones after theirs in turn; the pool is empty again.
        await eventually(lambda: not factory.connections and limits.pool.in_use == 0,
                         what="the hogs closed and their memory given back")
        assert limits.pool.per_host == {} and limits.pool.waiting == 0
    finally:
        for hog in hogs:
            hog.close()
        await port.stopListening()
