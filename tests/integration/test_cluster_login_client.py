"""The broker's own client logs in with the cluster login before its first request, over real
loopback sockets to a PLAINTEXT listener that accepts the cluster login (as every broker's
does): requests made before the login finished are held and then served as a broker's; a
refused login (another secret) fails them with SaslAuthenticationError, logs that the secret
may be wrong, and closes the connection; a connection lost while logging in fails them once,
with ConnectionLost; a BrokerChannel (ClientService) never hands a refused
connection to its requests, and keeps retrying with its backoff."""

from __future__ import annotations

import pytest
import pytest_twisted
from prometheus_client import CollectorRegistry
from twisted.internet import defer, reactor
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol
from twisted.internet.error import ConnectError, ConnectionLost
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import formatEvent, globalLogPublisher

from broker_core.metrics import BrokerMetrics
from broker_core.rpc import BrokerChannel, KafkaClientProtocol, SaslAuthenticationError
from broker_core.security.cluster_secret import ClusterCredential
from broker_core.security.principal import ListenerSettings
from broker_core.server.protocol import KafkaServerFactory
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from tests.support.cluster import eventually

CLUSTER = ClusterCredential("s" * 64)
OTHER = ClusterCredential("t" * 64)


class Listener:
    """A PLAINTEXT listener with the cluster login; ``seen`` is (api, is_broker) per request."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []
        self.metrics = BrokerMetrics(CollectorRegistry())
        self.factory = KafkaServerFactory(self.handle, clock=reactor, metrics=self.metrics,
                                          listener=ListenerSettings(),
                                          sasl=CLUSTER.sasl_settings())
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.number = self.port.getHost().port

    def logins(self, result: str) -> float:
        return self.metrics.registry.get_sample_value(
            "sluice_sasl_authentications_total",
            {"mechanism": "SCRAM-SHA-512", "result": result}) or 0

    def handle(self, request, proto):
        self.seen.append((request.header.api_key, proto.security.is_broker))
        return {"error_code": 0, "api_keys": apis.advertised_versions(), "throttle_time_ms": 0}


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    pytest_twisted.blockon(defer.maybeDeferred(lst.port.stopListening))


@pytest.fixture
def log_lines():
    lines: list[str] = []

    def observe(event):
        if "log_format" in event:
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    yield lines
    globalLogPublisher.removeObserver(observe)


async def open_client(listener: Listener, credential: ClusterCredential) -> KafkaClientProtocol:
    endpoint = HostnameEndpoint(reactor, "127.0.0.1", listener.number)
    return await connectProtocol(endpoint, KafkaClientProtocol(
        "t", credential=credential.login, peer_name="broker 9"))


@pytest_twisted.ensureDeferred
async def test_requests_made_while_logging_in_are_held_then_served_as_a_brokers(listener):
    proto = await open_client(listener, CLUSTER)
    try:
        # Sent at once, before the login's rounds have been answered.
        answers = [proto.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                          "client_software_version": "1"})
                   for _ in range(3)]
        for d in answers:
            assert (await d).error_code == 0
        assert await proto.when_logged_in() is proto
        assert listener.seen == [(ApiKey.API_VERSIONS, True)] * 3  # SASL never reached it
    finally:
        proto.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_refused_login_fails_the_held_requests_logs_and_closes(listener, log_lines):
    proto = await open_client(listener, OTHER)
    held = proto.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                  "client_software_version": "1"})
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED") as e:
        await held
    assert isinstance(e.value, ConnectError)  # every caller backs off as after a failed connect
    with pytest.raises(SaslAuthenticationError):
        await proto.when_logged_in()
    await proto.closed_d
    assert listener.seen == []
    assert any("broker 9 refused the cluster login: wrong cluster.secret.file?" in line
               for line in log_lines), log_lines
    with pytest.raises(ConnectionLost):  # closed: nothing more is sent on it
        await proto.request(ApiKey.API_VERSIONS, 3, {})


@pytest_twisted.ensureDeferred
async def test_a_channel_with_the_wrong_secret_never_delivers_and_the_right_one_does(listener):
    wrong = BrokerChannel(9, "127.0.0.1", listener.number, reactor=reactor,
                          credential=OTHER.login)
    wrong.start()
    refused = wrong.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                  "client_software_version": "1"})
    # The service tries again (each refused login a failed connection attempt, backing off).
    await eventually(lambda: listener.logins("failure") >= 2, what="a second login attempt")
    assert not refused.called and listener.seen == []
    await wrong.stop()
    with pytest.raises(defer.CancelledError):
        await refused
    right = BrokerChannel(9, "127.0.0.1", listener.number, reactor=reactor,
                          credential=CLUSTER.login)
    right.start()
    try:
        resp = await right.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                         "client_software_version": "1"})
        assert resp.error_code == 0 and listener.seen == [(ApiKey.API_VERSIONS, True)]
    finally:
        await right.stop()


class _HangUp(Protocol):
    """A peer that closes the connection as soon as anything arrives."""

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted API)
        self.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_connection_lost_while_logging_in_fails_the_held_requests_once():
    port = reactor.listenTCP(0, Factory.forProtocol(_HangUp), interface="127.0.0.1")
    try:
        endpoint = HostnameEndpoint(reactor, "127.0.0.1", port.getHost().port)
        proto = await connectProtocol(endpoint, KafkaClientProtocol("t",
                                                                    credential=CLUSTER.login))
        held = proto.request(ApiKey.API_VERSIONS, 3, {})
        with pytest.raises(ConnectionLost):
            await held
        with pytest.raises(ConnectionLost):
            await proto.when_logged_in()
        await proto.closed_d
    finally:
        await port.stopListening()
