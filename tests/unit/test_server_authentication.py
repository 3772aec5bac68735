"""The authentication gate in the broker's protocol shell, driven through StringTransport: on a
SASL listener nothing but ApiVersions and SASL reaches the handler before authentication,
a failed login is answered and then closes the connection, and the SASL APIs never reach the
handler on any listener; on a PLAINTEXT or SSL listener the cluster login, and only it, makes a
broker connection."""

from __future__ import annotations

import struct

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet import task
from twisted.internet.testing import StringTransport

from broker_core.metrics import BrokerMetrics
from broker_core.security.principal import (
    ANONYMOUS,
    ConnectionSecurity,
    ListenerSettings,
    Principal,
    SecurityProtocol,
)
from broker_core.security.sasl import CLUSTER_USER, ClientCredential, SaslClient, SaslSettings
from broker_core.security.scram_credential import ScramCredential
from broker_core.server.authentication import MAX_UNAUTHENTICATED_FRAME_BYTES
from broker_core.server.protocol import FAILED_AUTHENTICATION_CLOSE_DELAY_S, KafkaServerFactory
from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

SECRET = "c" * 40
SASL_LISTENER = ListenerSettings("CLIENT", SecurityProtocol.SASL_PLAINTEXT)
ALICE = {("SCRAM-SHA-512", "alice"): ScramCredential.from_password("SCRAM-SHA-512", "alice-pw")}
API_VERSIONS_BODY = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}


def make(listener=SASL_LISTENER, mechanisms=("SCRAM-SHA-512", "PLAIN")):
    """``(transport, protocol, metrics, handled)``: a connection to a factory whose handler
    records every request it sees and answers ApiVersions."""
    handled = []

    def handler(req, proto):
        handled.append(req.header.api_key)
        return API_VERSIONS_BODY if req.header.api_key == ApiKey.API_VERSIONS else None

    metrics = BrokerMetrics(CollectorRegistry())
    sasl = SaslSettings(mechanisms, lambda m, u: ALICE.get((m, u)),
                        ScramCredential.from_password("SCRAM-SHA-512", SECRET))
    factory = KafkaServerFactory(handler, clock=task.Clock(), metrics=metrics, listener=listener,
                                 sasl=sasl)
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return transport, proto, metrics, handled


def frame(api_key, version, cid, body):
    return b"".join(framing.frame(apis.encode_request(api_key, version, cid, "t", body)))


def answers(transport, api_key, version):
    """Decode every response written so far (then clear the transport)."""
    out = [apis.decode_response(api_key, version, f)[1]
           for f in framing.FrameDecoder().feed(transport.value())]
    transport.clear()
    return out


def counter(metrics, name, **labels):
    return metrics.registry.get_sample_value(f"sluice_{name}_total", labels) or 0


def login(transport, proto, mechanism, username, password):
    """Run the exchange; returns the last SaslAuthenticate answer."""
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": mechanism}))
    (shake,) = answers(transport, ApiKey.SASL_HANDSHAKE, 1)
    assert shake.error_code == 0
    client = SaslClient(ClientCredential(mechanism, username, password))
    token = client.first()
    cid = 2
    while True:
        proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 2, cid, {"auth_bytes": token}))
        (answer,) = answers(transport, ApiKey.SASL_AUTHENTICATE, 2)
        if answer.error_code:
            return answer
        token = client.step(answer.auth_bytes)
        if token is None:
            return answer
        cid += 1


def test_before_authentication_only_api_versions_reaches_the_handler():
    transport, proto, metrics, handled = make()
    proto.dataReceived(frame(ApiKey.API_VERSIONS, 3, 1, {}))
    assert answers(transport, ApiKey.API_VERSIONS, 3)[0].error_code == 0
    assert not transport.disconnecting
    proto.dataReceived(frame(ApiKey.METADATA, 12, 2, {"topics": None}))
    assert transport.disconnecting and transport.value() == b""
    assert handled == [ApiKey.API_VERSIONS]
    assert counter(metrics, "disconnects", reason="unauthenticated_request") == 1


def test_scram_login_authenticates_the_connection_and_opens_the_other_apis():
    transport, proto, metrics, handled = make()
    answer = login(transport, proto, "SCRAM-SHA-512", "alice", "alice-pw")
    assert answer.error_code == 0 and answer.error_message is None
    assert proto.security.authenticated
    assert proto.security.principal == Principal("User", "alice")
    assert proto.security.is_broker is False
    assert counter(metrics, "sasl_authentications", mechanism="SCRAM-SHA-512",
                   result="success") == 1
    proto.dataReceived(frame(ApiKey.METADATA, 12, 9, {"topics": None}))
    assert handled == [ApiKey.METADATA]
    assert ApiKey.SASL_HANDSHAKE not in handled and ApiKey.SASL_AUTHENTICATE not in handled


def test_cluster_login_makes_a_broker_connection():
    transport, proto, _, _ = make()
    assert login(transport, proto, "SCRAM-SHA-512", CLUSTER_USER, SECRET).error_code == 0
    assert proto.security.is_broker is True


def test_failed_login_is_answered_then_the_connection_closes():
    transport, proto, metrics, handled = make()
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "PLAIN"}))
    answers(transport, ApiKey.SASL_HANDSHAKE, 1)
    # The wrong password and a request pipelined behind it, in one read.
    proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 1, 2, {"auth_bytes": b"\0alice\0nope"}) +
                       frame(ApiKey.API_VERSIONS, 3, 3, {}))
    (answer,) = answers(transport, ApiKey.SASL_AUTHENTICATE, 1)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "invalid credentials" in answer.error_message
    # The answer is out; the close follows after Kafka's failed-authentication delay, and
    # nothing is read meanwhile.
    assert not transport.disconnecting and transport.producerState == "paused"
    proto.dataReceived(frame(ApiKey.API_VERSIONS, 3, 4, {}))
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting
    assert transport.value() == b""
    assert handled == []  # the pipelined request was not served
    assert not proto.security.authenticated and proto.security.principal.name == "ANONYMOUS"
    assert counter(metrics, "sasl_authentications", mechanism="PLAIN", result="failure") == 1
    assert counter(metrics, "disconnects", reason="sasl_authentication_failed") == 1


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes():
    transport, proto, metrics, _ = make(mechanisms=("SCRAM-SHA-512",))
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "PLAIN"}))
    (shake,) = answers(transport, ApiKey.SASL_HANDSHAKE, 1)
    assert shake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert shake.mechanisms == ["SCRAM-SHA-512"]
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting
    assert counter(metrics, "disconnects", reason="unsupported_sasl_mechanism") == 1


def test_handshake_v0_is_advertised_but_not_served():
    """v0 would mean raw SASL tokens outside Kafka requests. ApiVersions lists it (librdkafka
    before 2.10 starts SASL only when the range includes v0, then sends v1), but a v0
    handshake is answered UNSUPPORTED_VERSION, starts nothing, and closes the connection."""
    assert apis.advertised_versions([ApiKey.SASL_HANDSHAKE]) == [
        {"api_key": 17, "min_version": 0, "max_version": 1}]
    transport, proto, metrics, handled = make()
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 0, 1, {"mechanism": "PLAIN"}))
    (shake,) = answers(transport, ApiKey.SASL_HANDSHAKE, 0)
    assert shake.error_code == ErrorCode.UNSUPPORTED_VERSION and shake.mechanisms == []
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting
    assert handled == [] and not proto.security.authenticated
    assert counter(metrics, "disconnects", reason="unsupported_version") == 1


def test_second_handshake_after_success_is_illegal_but_harmless():
    transport, proto, _, _ = make()
    login(transport, proto, "PLAIN", "alice", "alice-pw")
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 7, {"mechanism": "PLAIN"}))
    assert answers(transport, ApiKey.SASL_HANDSHAKE, 1)[0].error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 2, 8, {"auth_bytes": b"\0x\0y"}))
    assert answers(transport, ApiKey.SASL_AUTHENTICATE, 2)[0].error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    assert not transport.disconnecting
    assert proto.security.principal == Principal("User", "alice")


def test_authenticate_before_handshake_is_illegal_and_closes():
    transport, proto, _, _ = make()
    proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 2, 1, {"auth_bytes": b"\0alice\0pw"}))
    assert answers(transport, ApiKey.SASL_AUTHENTICATE, 2)[0].error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting


def test_a_peer_that_closes_first_leaves_no_timer_behind():
    transport, proto, _, _ = make()
    proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 2, 1, {"auth_bytes": b"\0alice\0pw"}))
    assert proto.factory.clock.getDelayedCalls()
    proto.connectionLost(None)
    assert not proto.factory.clock.getDelayedCalls()


def test_a_broker_logs_in_on_a_plaintext_listener_and_becomes_a_broker_connection():
    transport, proto, metrics, handled = make(listener=ListenerSettings())
    proto.dataReceived(frame(ApiKey.METADATA, 12, 1, {"topics": None}))
    assert handled == [ApiKey.METADATA]  # PLAINTEXT needs no login: served anonymously
    assert proto.security.principal == ANONYMOUS and not proto.security.is_broker
    transport.clear()
    assert login(transport, proto, "SCRAM-SHA-512", CLUSTER_USER, SECRET).error_code == 0
    assert proto.security.is_broker is True
    assert proto.security.principal == Principal("User", CLUSTER_USER)
    assert counter(metrics, "sasl_authentications", mechanism="SCRAM-SHA-512",
                   result="success") == 1
    # Logged in once: another handshake is refused, harmlessly.
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 9, {"mechanism": "SCRAM-SHA-512"}))
    assert answers(transport, ApiKey.SASL_HANDSHAKE, 1)[0].error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    assert not transport.disconnecting and proto.security.is_broker
    assert ApiKey.SASL_HANDSHAKE not in handled and ApiKey.SASL_AUTHENTICATE not in handled


@pytest.mark.parametrize("username, password", [
    ("alice", "alice-pw"),   # a real user of a SASL listener: not on this one
    (CLUSTER_USER, "w" * 40),  # the cluster login with another secret
])
def test_on_a_plaintext_listener_only_the_cluster_login_can_succeed(username, password):
    transport, proto, metrics, handled = make(listener=ListenerSettings())
    answer = login(transport, proto, "SCRAM-SHA-512", username, password)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert proto.security.principal == ANONYMOUS and not proto.security.is_broker
    proto.dataReceived(frame(ApiKey.METADATA, 12, 9, {"topics": None}))
    assert handled == []  # nothing more is read: the connection closes after the delay
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting
    assert counter(metrics, "sasl_authentications", mechanism="SCRAM-SHA-512",
                   result="failure") == 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_on_a_plaintext_listener_user_mechanisms_are_not_offered(mechanism):
    transport, proto, _, handled = make(listener=ListenerSettings())
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": mechanism}))
    (shake,) = answers(transport, ApiKey.SASL_HANDSHAKE, 1)
    assert shake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert shake.mechanisms == []
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting and handled == []


def test_no_login_without_a_cluster_credential():
    def refused(proto, transport):
        proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "SCRAM-SHA-512"}))
        proto.dataReceived(frame(ApiKey.SASL_AUTHENTICATE, 2, 2, {"auth_bytes": b"n,,n=x,r=y"}))
        shake, auth = [apis.decode_response(k, v, f)[1] for (k, v), f in zip(
            [(ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 2)],
            framing.FrameDecoder().feed(transport.value()), strict=True)]
        return shake.error_code, auth.error_code, transport.disconnecting

    # A listener given no SASL settings has no cluster login to check.
    factory = KafkaServerFactory(lambda r, p: None, clock=task.Clock(),
                                 listener=ListenerSettings())
    proto, transport = factory.buildProtocol(None), StringTransport()
    proto.makeConnection(transport)
    assert refused(proto, transport) == (ErrorCode.ILLEGAL_SASL_STATE,) * 2 + (False,)


def test_the_cluster_login_may_follow_a_client_certificate():
    # A broker connecting to an SSL listener that requires certificates presents its own,
    # then logs in as the cluster: the connection becomes a broker connection.
    transport, proto, _, handled = make(listener=ListenerSettings("TLS", SecurityProtocol.SSL))
    proto.security.authenticate(Principal("User", "CN=broker-2"))
    assert login(transport, proto, "SCRAM-SHA-512", CLUSTER_USER, SECRET).error_code == 0
    assert proto.security.is_broker
    assert proto.security.principal == Principal("User", CLUSTER_USER)
    # Once a broker, it stays one: another login is refused, harmlessly.
    proto.dataReceived(frame(ApiKey.SASL_HANDSHAKE, 1, 9, {"mechanism": "SCRAM-SHA-512"}))
    assert answers(transport, ApiKey.SASL_HANDSHAKE, 1)[0].error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    assert proto.security.is_broker and handled == []


def test_a_certificate_holder_with_a_wrong_cluster_secret_keeps_its_principal_and_is_closed():
    transport, proto, _, handled = make(listener=ListenerSettings("TLS", SecurityProtocol.SSL))
    proto.security.authenticate(Principal("User", "CN=client"))
    answer = login(transport, proto, "SCRAM-SHA-512", CLUSTER_USER, "not-the-secret" * 3)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    proto.factory.clock.advance(FAILED_AUTHENTICATION_CLOSE_DELAY_S)
    assert transport.disconnecting
    assert not proto.security.is_broker
    assert proto.security.principal == Principal("User", "CN=client") and handled == []


def test_a_certificate_principal_is_not_replaced_by_a_user_login():
    security = ConnectionSecurity("TLS", SecurityProtocol.SSL)
    security.authenticate(Principal("User", "CN=client"))
    with pytest.raises(RuntimeError):
        security.authenticate(Principal("User", "alice"))
    security.authenticate(Principal("User", CLUSTER_USER), is_broker=True)
    with pytest.raises(RuntimeError):
        security.authenticate(Principal("User", CLUSTER_USER), is_broker=True)


def test_frames_above_512_kib_close_the_connection_until_authenticated():
    big = struct.pack(">i", MAX_UNAUTHENTICATED_FRAME_BYTES + 1)
    transport, proto, metrics, _ = make()
    proto.dataReceived(big)
    assert transport.disconnecting
    assert counter(metrics, "disconnects", reason="frame_too_large") == 1
    # Once authenticated the listener's own limit applies: the prefix alone closes nothing.
    transport, proto, _, _ = make()
    login(transport, proto, "PLAIN", "alice", "alice-pw")
    proto.dataReceived(big)
    assert not transport.disconnecting


def test_a_sasl_listener_without_sasl_settings_is_refused_at_construction():
    with pytest.raises(ValueError, match="needs SASL settings"):
        KafkaServerFactory(lambda r, p: None, clock=task.Clock(), listener=SASL_LISTENER)
