"""Every TCP connection a broker accepts or opens has ``TCP_NODELAY`` (and keepalive) set on the
real socket: without it, small responses and follower fetches wait for Nagle and the peer's
delayed ACK (broker_core.net)."""

from __future__ import annotations

import socket

import pytest
import pytest_twisted
from twisted.internet import reactor

from broker_core.rpc import connect_client
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    running_brokers,
)


def nodelay(transport) -> bool:
    sock = transport.getHandle()
    return (sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0)


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, replica_fetch_wait_max_ms="100")


@pytest_twisted.ensureDeferred
async def test_accepted_and_outgoing_broker_sockets_have_nodelay(brokers):
    controller = await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "nodelay", partitions=3, rf=3)
    await eventually(lambda: all(leader_of(brokers, "nodelay", p) for p in range(3)),
                     what="leaders")
    leader = leader_of(brokers, "nodelay", 0)
    assert (await produce(leader, "nodelay", 0, [b"x"])).error_code == 0

    # Outgoing: every follower's fetcher connection to each leader ...
    fetchers = [f for b in brokers for f in b.replicas.fetchers.fetchers.values()]
    await eventually(lambda: fetchers and all(f._conn._proto is not None for f in fetchers),
                     what="fetchers connected")
    for f in fetchers:
        assert nodelay(f._conn._proto.transport), f"fetcher to {f.leader_id}"
    # ... and the controller's channels to the brokers.
    protos = [await ch._service.whenConnected() for ch in controller.controller.channels.values()]
    assert protos
    for proto in protos:
        assert nodelay(proto.transport)

    # Accepted: every connection each broker's server holds (fetchers, controller, clients).
    for b in brokers:
        assert b.factory.connections
        for proto in b.factory.connections:
            assert nodelay(proto.transport), f"broker {b.broker_id} from {proto.peer}"


@pytest_twisted.ensureDeferred
async def test_client_connection_has_nodelay(brokers):
    """The Twisted client protocol (consumer_client, the AlterIsr sender) sets it too."""
    b = brokers[0]
    proto = await connect_client(reactor, "127.0.0.1", b.port.getHost().port, "nodelay-test")
    try:
        assert nodelay(proto.transport)
    finally:
        proto.transport.loseConnection()
        await proto.closed_d
