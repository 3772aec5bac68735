"""Which TCP client endpoint a connection to a broker, a quorum peer or a coordinator uses."""

from __future__ import annotations

import pytest
from twisted.internet import reactor
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor

from broker_core.rpc import client_endpoint


@pytest.mark.parametrize(("host", "kind"), [
    ("127.0.0.1", TCP4ClientEndpoint),
    ("10.1.2.3", TCP4ClientEndpoint),
    ("::1", TCP6ClientEndpoint),
    ("fe80::1%lo", TCP6ClientEndpoint),
    ("localhost", HostnameEndpoint),
    ("broker-1.example", HostnameEndpoint),
    ("127.0.0.1.example", HostnameEndpoint),
])
def test_an_ip_address_is_connected_to_directly_a_name_resolved(host, kind):
    assert type(client_endpoint(reactor, host, 9092)) is kind


def test_an_ip_address_connects_without_asking_the_resolver():
    # MemoryReactor has no name resolver: a resolution would fail; a direct connect is
    # recorded with the address, port and timeout given.
    mem = MemoryReactor()
    client_endpoint(mem, "127.0.0.1", 9092, timeout_s=7.5).connect(Factory.forProtocol(Protocol))
    host, port, _factory, timeout, _bind = mem.tcpClients[0]
    assert (host, port, timeout) == ("127.0.0.1", 9092, 7.5)
