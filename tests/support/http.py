"""One HTTP request through a Twisted ``Site`` without a socket (the /metrics unit tests).
"""

from __future__ import annotations

from twisted.internet import task
from twisted.internet.testing import StringTransport


def http_get(site, path: bytes, headers: bytes = b"") -> tuple[bytes, bytes]:
    """One HTTP/1.1 request through ``site`` over a StringTransport; returns (head, body)."""
    clock = task.Clock()
    protocol = site.buildProtocol(None)
    protocol.callLater = clock.callLater  # idle timeouts on the test clock, not the reactor
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(b"GET " + path + b" HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
                          + headers + b"\r\n")
    head, _, body = transport.value().partition(b"\r\n\r\n")
    protocol.connectionLost(None)
    assert clock.getDelayedCalls() == []
    return head, body


