"""The per-connection SASL state machine (SaslServer), PLAIN, and Sluice's client side, sans-IO:
every mechanism end to end against the client, the cluster login alone yielding is_broker, and
each misuse refused with Kafka's error code."""

from __future__ import annotations

import pytest

from broker_core.security import sasl_plain
from broker_core.security.principal import Principal
from broker_core.security.sasl import (
    CLUSTER_USER,
    ClientCredential,
    SaslAuthenticationError,
    SaslClient,
    SaslClientError,
    SaslLogin,
    SaslServer,
    SaslSettings,
    SaslState,
)
from broker_core.security.scram_credential import ScramCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

SECRET = "s" * 40
USERS = {
    ("SCRAM-SHA-256", "alice"): ScramCredential.from_password("SCRAM-SHA-256", "alice-pw"),
    ("SCRAM-SHA-512", "alice"): ScramCredential.from_password("SCRAM-SHA-512", "alice-pw"),
    # A user store that (wrongly) holds the reserved name must still never be consulted for it.
    ("SCRAM-SHA-512", CLUSTER_USER): ScramCredential.from_password("SCRAM-SHA-512", "guess"),
    ("SCRAM-SHA-512", "__other"): ScramCredential.from_password("SCRAM-SHA-512", "guess"),
}


def lookup(mechanism, username):
    return USERS.get((mechanism, username))


def settings(mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")):
    return SaslSettings(mechanisms, lookup,
                        ScramCredential.from_password("SCRAM-SHA-512", SECRET))


def login(server: SaslServer, mechanism: str, username: str, password: str):
    """Run a whole exchange; returns the last AuthenticateOutcome."""
    assert server.handshake(mechanism).error_code == ErrorCode.NONE
    client = SaslClient(ClientCredential(mechanism, username, password))
    token = client.first()
    while True:
        outcome = server.authenticate(token)
        if outcome.error_code or outcome.result == "success":
            if outcome.result == "success":
                assert client.step(outcome.auth_bytes) is None
            return outcome
        token = client.step(outcome.auth_bytes)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_user_login_succeeds_without_broker_rights(mechanism):
    server = SaslServer(settings())
    outcome = login(server, mechanism, "alice", "alice-pw")
    assert (outcome.error_code, outcome.close, outcome.result) == (0, False, "success")
    assert server.state is SaslState.DONE
    assert server.principal == Principal("User", "alice")
    assert server.is_broker is False


def test_cluster_login_is_checked_against_the_secret_and_yields_is_broker():
    server = SaslServer(settings())
    assert login(server, "SCRAM-SHA-512", CLUSTER_USER, SECRET).result == "success"
    assert server.is_broker is True
    assert server.principal == Principal("User", CLUSTER_USER)
    # The user store's entry for the reserved name is never consulted.
    refused = SaslServer(settings())
    assert login(refused, "SCRAM-SHA-512", CLUSTER_USER, "guess").error_code == \
        ErrorCode.SASL_AUTHENTICATION_FAILED
    assert refused.is_broker is False and refused.principal is None


@pytest.mark.parametrize("mechanism, password", [
    ("SCRAM-SHA-256", SECRET), ("PLAIN", SECRET), ("PLAIN", "guess")])
def test_cluster_user_over_another_mechanism_fails(mechanism, password):
    server = SaslServer(settings())
    outcome = login(server, mechanism, CLUSTER_USER, password)
    assert (outcome.error_code, outcome.close) == (ErrorCode.SASL_AUTHENTICATION_FAILED, True)
    assert server.is_broker is False


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_other_reserved_names_fail(mechanism):
    outcome = login(SaslServer(settings()), mechanism, "__other", "guess")
    assert outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_no_cluster_credential_means_no_broker_login():
    server = SaslServer(SaslSettings(("SCRAM-SHA-512",), lookup, None))
    assert login(server, "SCRAM-SHA-512", CLUSTER_USER, SECRET).error_code == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_cluster_login_works_when_scram_512_is_not_offered_to_users():
    only_256 = settings(("SCRAM-SHA-256",))
    assert login(SaslServer(only_256), "SCRAM-SHA-512", CLUSTER_USER, SECRET).result == "success"
    # ... but no user gets in over it.
    outcome = login(SaslServer(only_256), "SCRAM-SHA-512", "alice", "alice-pw")
    assert outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest.mark.parametrize("username, password", [("alice", "wrong"), ("nobody", "alice-pw")])
def test_wrong_password_and_unknown_user_fail_with_the_same_message(mechanism, username,
                                                                    password):
    server = SaslServer(settings())
    outcome = login(server, mechanism, username, password)
    assert (outcome.error_code, outcome.close, outcome.result) == \
        (ErrorCode.SASL_AUTHENTICATION_FAILED, True, "failure")
    assert outcome.error_message == ("Authentication failed during authentication due to "
                                     f"invalid credentials with SASL mechanism {mechanism}")
    assert server.state is SaslState.FAILED and server.principal is None


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes():
    server = SaslServer(settings(("SCRAM-SHA-256", "SCRAM-SHA-512")))
    for name in ("PLAIN", "GSSAPI", "OAUTHBEARER"):
        outcome = SaslServer(server.settings).handshake(name)
        assert outcome.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert outcome.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
        assert outcome.close


def test_misuse_of_the_state_machine():
    # Authenticate before any handshake: refused, exchange over.
    early = SaslServer(settings())
    outcome = early.authenticate(b"n,,n=alice,r=abc")
    assert (outcome.error_code, outcome.close) == (ErrorCode.ILLEGAL_SASL_STATE, True)
    assert early.state is SaslState.FAILED
    # Two handshakes before authenticating: refused, exchange over.
    twice = SaslServer(settings())
    twice.handshake("SCRAM-SHA-256")
    assert twice.handshake("SCRAM-SHA-256").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert twice.state is SaslState.FAILED
    assert twice.authenticate(b"n,,n=alice,r=abc").error_code == ErrorCode.ILLEGAL_SASL_STATE
    # After success: refused, but the connection stays authenticated and open.
    done = SaslServer(settings())
    login(done, "PLAIN", "alice", "alice-pw")
    again = done.handshake("PLAIN")
    assert (again.error_code, again.close) == (ErrorCode.ILLEGAL_SASL_STATE, False)
    more = done.authenticate(b"\x00alice\x00alice-pw")
    assert (more.error_code, more.close) == (ErrorCode.ILLEGAL_SASL_STATE, False)
    assert done.state is SaslState.DONE and done.principal == Principal("User", "alice")
    # After failure: still refused (and still closing).
    failed = SaslServer(settings())
    login(failed, "PLAIN", "alice", "nope")
    assert failed.authenticate(b"\x00alice\x00alice-pw").error_code == \
        ErrorCode.ILLEGAL_SASL_STATE
    assert failed.principal is None


@pytest.mark.parametrize("token, reason", [
    (b"alice\x00alice-pw", "authzid NUL"),
    (b"\x00alice\x00alice-pw\x00", "authzid NUL"),
    (b"\x00\x00alice-pw", "must not be empty"),
    (b"\x00alice\x00", "must not be empty"),
    (b"bob\x00alice\x00alice-pw", "authorization id"),
    (b"\x00" + b"a" * 256 + b"\x00pw", "longer than"),
    (b"\x00alice\x00" + b"p" * 256, "longer than"),
    (b"\x00" + b"a" * 800, "too long"),
    (b"\x00al\xffice\x00alice-pw", "not UTF-8"),
])
def test_malformed_plain_is_refused(token, reason):
    with pytest.raises(sasl_plain.PlainError, match=reason):
        sasl_plain.parse(token)
    server = SaslServer(settings())
    server.handshake("PLAIN")
    outcome = server.authenticate(token)
    assert outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and outcome.close


def test_plain_authzid_equal_to_the_user_is_accepted():
    server = SaslServer(settings())
    server.handshake("PLAIN")
    assert server.authenticate(b"alice\x00alice\x00alice-pw").result == "success"


def test_malformed_scram_token_fails_the_login():
    server = SaslServer(settings())
    server.handshake("SCRAM-SHA-512")
    outcome = server.authenticate(b"y,,n=alice,r=abc")
    assert outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "channel binding" in outcome.error_message


def test_settings_refuse_unknown_mechanisms_and_a_wrong_cluster_credential():
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslSettings(("GSSAPI",))
    with pytest.raises(ValueError, match="SCRAM-SHA-512"):
        SaslSettings(cluster_credential=ScramCredential.from_password("SCRAM-SHA-256", SECRET))


def test_client_credential_hides_the_password_and_checks_the_mechanism():
    cred = ClientCredential("PLAIN", "alice", "alice-pw")
    assert "alice-pw" not in repr(cred)
    with pytest.raises(ValueError, match="unknown SASL mechanism"):
        ClientCredential("GSSAPI", "alice", "pw")


def test_client_refuses_a_forged_server_final_and_extra_rounds():
    client = SaslClient(ClientCredential("SCRAM-SHA-256", "alice", "alice-pw"))
    server = SaslServer(settings())
    server.handshake("SCRAM-SHA-256")
    first = server.authenticate(client.first())
    client.step(first.auth_bytes)
    with pytest.raises(SaslClientError, match="server signature"):
        client.step(b"v=" + b"A" * 44)
    plain = SaslClient(ClientCredential("PLAIN", "alice", "alice-pw"))
    assert plain.step(b"") is None and plain.done
    with pytest.raises(SaslClientError, match="already complete"):
        plain.step(b"")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_failing_user_store_fails_the_login_without_crashing(mechanism):
    def broken(mechanism, username):
        raise OSError("store unreachable")

    server = SaslServer(SaslSettings(("SCRAM-SHA-512", "PLAIN"), broken))
    outcome = login(server, mechanism, "alice", "alice-pw")
    assert (outcome.error_code, outcome.close) == (ErrorCode.SASL_AUTHENTICATION_FAILED, True)
    assert "OSError while looking up the credential" in outcome.error_message
    assert server.state is SaslState.FAILED and server.principal is None


# -- SaslLogin: the client's requests, carried by each client's own I/O ---------------------------


def _carry(login, server: SaslServer) -> list[int]:
    """Carry ``login``'s requests to ``server`` as a broker's gate would; returns the API keys
    sent. Raises what ``login.answer`` raises."""
    from types import SimpleNamespace

    sent = []
    request = login.first_request()
    while request is not None:
        api_key, version, body = request
        sent.append(api_key)
        if api_key == ApiKey.SASL_HANDSHAKE:
            assert version == 1
            got = server.handshake(body["mechanism"])
            answer = SimpleNamespace(error_code=got.error_code, mechanisms=list(got.mechanisms))
        else:
            assert version == 2
            got = server.authenticate(body["auth_bytes"])
            answer = SimpleNamespace(error_code=got.error_code, error_message=got.error_message,
                                     auth_bytes=got.auth_bytes)
        request = login.answer(answer)
    return sent


@pytest.mark.parametrize("mechanism, rounds", [("SCRAM-SHA-512", 2), ("SCRAM-SHA-256", 2),
                                               ("PLAIN", 1)])
def test_sasl_login_logs_in_with_a_handshake_then_its_mechanisms_rounds(mechanism, rounds):
    login = SaslLogin(ClientCredential(mechanism, "alice", "alice-pw"), "broker-1")
    sent = _carry(login, SaslServer(settings()))
    assert sent == [ApiKey.SASL_HANDSHAKE] + [ApiKey.SASL_AUTHENTICATE] * rounds


def test_sasl_login_names_the_servers_refusal_and_its_code():
    login = SaslLogin(ClientCredential("SCRAM-SHA-512", "alice", "wrong"), "broker-1")
    with pytest.raises(SaslAuthenticationError, match="broker-1 refused SASL SCRAM-SHA-512 "
                       "login of 'alice': SASL_AUTHENTICATION_FAILED") as e:
        _carry(login, SaslServer(settings()))
    assert e.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    login = SaslLogin(ClientCredential("PLAIN", "alice", "alice-pw"), "broker-1")
    with pytest.raises(SaslAuthenticationError, match="UNSUPPORTED_SASL_MECHANISM") as e:
        _carry(login, SaslServer(settings(mechanisms=("SCRAM-SHA-512",))))
    assert e.value.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_sasl_login_refuses_a_server_that_cannot_prove_it_holds_the_credential():
    from types import SimpleNamespace

    login = SaslLogin(ClientCredential("SCRAM-SHA-512", "alice", "alice-pw"), "broker-1")
    login.first_request()
    request = login.answer(SimpleNamespace(error_code=0, mechanisms=["SCRAM-SHA-512"]))
    assert request is not None and request[0] == ApiKey.SASL_AUTHENTICATE  # client-first
    with pytest.raises(SaslAuthenticationError, match="broker-1") as e:
        login.answer(SimpleNamespace(error_code=0, error_message=None,
                                     auth_bytes=b"r=not-our-nonce,s=c2FsdA==,i=4096"))
    assert e.value.error_code is None  # the exchange's fault, not a server's error code
