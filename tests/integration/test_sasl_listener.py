"""SASL over real sockets: a KafkaServerFactory on a SASL_PLAINTEXT loopback listener (with a
trivial handler answering ApiVersions and Metadata), logged in to by Sluice's own client with
SCRAM-SHA-256/512 and PLAIN and by kafka-python's real client with SCRAM-SHA-512; the refusals
(a request before login, a 1 MiB frame before login, a wrong password) close the connection."""

from __future__ import annotations

import struct

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads
from twisted.internet.error import ConnectionLost

from broker_core.rpc import SaslAuthenticationError, connect_client
from broker_core.security import cluster_secret
from broker_core.security.principal import ListenerSettings, Principal, SecurityProtocol
from broker_core.security.sasl import CLUSTER_USER, ClientCredential, SaslSettings
from broker_core.security.scram_credential import ScramCredential
from broker_core.server.protocol import KafkaServerFactory
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

SECRET = "k" * 48
USERS = {(m, "alice"): ScramCredential.from_password(m, "alice-pw")
         for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


class Listener:
    """A SASL_PLAINTEXT factory on a loopback port; ``handled`` records what reached the
    handler."""

    def __init__(self) -> None:
        self.handled: list[int] = []
        #: (api key, principal of the connection) of every request the handler saw.
        self.seen: list[tuple[int, Principal]] = []
        sasl = SaslSettings(("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"),
                            lambda m, u: USERS.get((m, u)),
                            cluster_secret.cluster_credential(SECRET))
        self.factory = KafkaServerFactory(
            self.handle, clock=reactor,
            listener=ListenerSettings("CLIENT", SecurityProtocol.SASL_PLAINTEXT), sasl=sasl)
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.number = self.port.getHost().port

    def handle(self, request, proto):
        key = request.header.api_key
        self.handled.append(key)
        self.seen.append((key, proto.security.principal))
        if key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": apis.advertised_versions(),
                    "throttle_time_ms": 0}
        if key == ApiKey.METADATA:
            return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.number}],
                    "cluster_id": "sasl-test", "controller_id": 0,
                    "topics": [{"error_code": 0, "name": "sasl-topic", "partitions": [
                        {"error_code": 0, "partition_index": 0, "leader_id": 0,
                         "replica_nodes": [0], "isr_nodes": [0]}]}]}
        raise AssertionError(f"unexpected api {key}")

    def server_side(self, client_proto):
        """The accepted connection at the other end of ``client_proto``."""
        local = client_proto.transport.getHost()
        (proto,) = [p for p in self.factory.connections if p.peer == f"{local.host}:{local.port}"]
        return proto

    async def stop(self) -> None:
        self.factory.close_all()
        await self.port.stopListening()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    pytest_twisted.blockon(defer.Deferred.fromCoroutine(lst.stop()))


async def connect(listener, credential=None):
    return await connect_client(reactor, "127.0.0.1", listener.number, "sasl-test",
                                credential=credential)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest_twisted.ensureDeferred
async def test_sluice_client_logs_in_and_is_served(listener, mechanism):
    proto = await connect(listener, ClientCredential(mechanism, "alice", "alice-pw"))
    try:
        server = listener.server_side(proto)
        assert server.security.authenticated
        assert server.security.principal == Principal("User", "alice")
        assert server.security.is_broker is False
        answer = await proto.request(ApiKey.METADATA, 12, {"topics": None})
        assert [t.name for t in answer.topics] == ["sasl-topic"]
        assert listener.handled == [ApiKey.METADATA]
    finally:
        proto.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_cluster_login_yields_a_broker_connection(listener):
    proto = await connect(listener, cluster_secret.broker_login(SECRET))
    try:
        server = listener.server_side(proto)
        assert server.security.is_broker is True
        assert server.security.principal == Principal("User", CLUSTER_USER)
    finally:
        proto.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_metadata_before_login_closes_the_connection(listener):
    proto = await connect(listener)
    with pytest.raises(ConnectionLost):
        await proto.request(ApiKey.METADATA, 12, {"topics": None})
    await proto.closed_d
    assert listener.handled == []


@pytest_twisted.ensureDeferred
async def test_a_1_mib_frame_before_login_closes_the_connection(listener):
    proto = await connect(listener)
    proto.transport.write(struct.pack(">i", 1 << 20) + b"\x00" * (1 << 20))
    await proto.closed_d
    assert listener.handled == []


@pytest_twisted.ensureDeferred
async def test_wrong_password_gets_error_58_then_the_connection_closes(listener):
    proto = await connect(listener)
    with pytest.raises(SaslAuthenticationError) as e:
        await proto.authenticate("SCRAM-SHA-512", "alice", "wrong")
    assert "SASL_AUTHENTICATION_FAILED" in str(e.value)
    assert "invalid credentials" in str(e.value)
    await proto.closed_d
    assert int(ErrorCode.SASL_AUTHENTICATION_FAILED) == 58
    # connect_client with a bad credential fails the same way and leaves nothing open.
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        await connect(listener, ClientCredential("PLAIN", "alice", "wrong"))
    assert listener.handled == []


@pytest_twisted.ensureDeferred
async def test_unsupported_mechanism_names_the_enabled_ones(listener):
    proto = await connect(listener)
    with pytest.raises(SaslAuthenticationError, match="UNSUPPORTED_SASL_MECHANISM.*PLAIN"):
        # The Sluice client refuses unknown names itself, so ask over the raw API.
        shake = await proto.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        raise SaslAuthenticationError(f"{ErrorCode(shake.error_code).name} "
                                      f"{','.join(shake.mechanisms)}")
    await proto.closed_d


@pytest.mark.interop
@pytest_twisted.ensureDeferred
async def test_kafka_python_logs_in_with_scram_sha_512(listener):
    from kafka import KafkaConsumer  # noqa: PLC0415

    def run(password):
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{listener.number}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
            sasl_plain_password=password, request_timeout_ms=5000,
            metadata_max_age_ms=60000)
        try:
            return consumer.topics()
        finally:
            consumer.close()

    assert await threads.deferToThread(run, "alice-pw") == {"sasl-topic"}
    assert ApiKey.METADATA in listener.handled
    assert all(k in (ApiKey.API_VERSIONS, ApiKey.METADATA) for k in listener.handled)
    # Every Metadata request came over a connection logged in as alice.
    alice = Principal("User", "alice")
    assert all(who == alice for key, who in listener.seen if key == ApiKey.METADATA)


@pytest.mark.interop
@pytest_twisted.ensureDeferred
async def test_kafka_python_with_a_wrong_password_gets_authentication_failed(listener, caplog):
    """kafka-python gets error 58 on its first attempt; it then keeps retrying its bootstrap
    (its own policy) until ``bootstrap_timeout_ms``, and reports a timeout."""
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka.errors import KafkaError  # noqa: PLC0415

    def run():
        KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{listener.number}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
            sasl_plain_password="wrong", request_timeout_ms=2000, bootstrap_timeout_ms=2000)

    with pytest.raises(KafkaError):
        await threads.deferToThread(run)
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in caplog.text
    assert ApiKey.METADATA not in listener.handled


@pytest.mark.interop
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest_twisted.ensureDeferred
async def test_confluent_kafka_logs_in(listener, mechanism):
    """librdkafka's SCRAM and PLAIN (what kcat and confluent-kafka use) against the gate."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    def run():
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{listener.number}",
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                             "sasl.username": "alice", "sasl.password": "alice-pw"})
        return set(admin.list_topics(timeout=10).topics)

    assert await threads.deferToThread(run) == {"sasl-topic"}
    alice = Principal("User", "alice")
    assert all(who == alice for key, who in listener.seen if key == ApiKey.METADATA)
