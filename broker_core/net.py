"""Socket options for every TCP connection the broker accepts or opens.

Kafka's protocol is request/response with small frames (a produce answer, a follower's empty
fetch, an acks=all ack), so Nagle's algorithm is exactly wrong for it: a small write waits for
the peer's ACK of the previous one, and the peer delays that ACK by up to 40 ms on Linux. Kafka
sets ``TCP_NODELAY`` on every socket (``SocketServer.scala``, ``Selector.java``); Twisted sets
nothing, so each protocol calls :func:`tune` from its ``connectionMade``.

Keepalive is switched on as well, so a peer that vanished without a FIN (a killed VM, a cut
cable) is eventually noticed on an idle connection; the request timeouts catch it sooner on a
busy one.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import ITCPTransport


def tune(transport: Any) -> bool:
    """Set ``TCP_NODELAY`` and ``SO_KEEPALIVE`` on ``transport`` if it is a TCP transport.

    Returns whether the options were set: any other transport (a test's ``StringTransport``, a
    UNIX socket) has no such options and is left alone.
    """
    if not ITCPTransport.providedBy(transport):
        return False
    try:
        transport.setTcpNoDelay(True)
        transport.setTcpKeepAlive(True)
    except OSError:
        return False  # the socket closed under us; connectionLost follows
    return True
