"""A quorum listener on task.Clock and a StringTransport: build one, feed it frames, read
what it sent.
"""

from __future__ import annotations

from twisted.internet import task
from twisted.internet.testing import StringTransport

from broker_core.raft.listener import (
    InboundRequests,
    QuorumListenerFactory,
    QuorumRequestHandler,
)
from broker_core.raft.messages import (
    Envelope,
)
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.wire import framing

NODE = 1


TIMEOUT_S = 2.0


def make(credential: ClusterCredential | None = None):
    """A connection to a quorum listener; with ``credential`` a brokers-only one, as every
    broker's."""
    clock = task.Clock()
    delivered: list[Envelope] = []
    inbound = InboundRequests(NODE, delivered.append)
    factory = QuorumListenerFactory(
        QuorumRequestHandler(inbound, clock, TIMEOUT_S, brokers_only=credential is not None),
        clock=clock, sasl=None if credential is None else credential.sasl_settings(()))
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return transport, proto, inbound, delivered, clock


def frame(chunks) -> bytes:
    return b"".join(framing.frame(chunks))


def sent_frames(transport) -> list[bytes]:
    return framing.FrameDecoder().feed(transport.value())


