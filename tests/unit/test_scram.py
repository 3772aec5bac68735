"""SCRAM, both sides, sans-IO: RFC 7677's SCRAM-SHA-256 vector byte for byte, SHA-512 round
trips, and every malformed or hostile message refused with the exchange ended."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker_core.security.scram import (
    MAX_MESSAGE_BYTES,
    ScramClient,
    ScramError,
    ScramServer,
    ScramState,
    escape_username,
    unescape_username,
)
from broker_core.security.scram_credential import ScramCredential

# RFC 7677 section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

USERS_512 = {"alice": ScramCredential.from_password("SCRAM-SHA-512", "alice-secret")}


def rfc_server() -> ScramServer:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil", salt=RFC_SALT)
    return ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)


def test_rfc7677_vector_client_side():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.client_first() == RFC_CLIENT_FIRST
    assert client.client_final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)


def test_rfc7677_vector_server_side():
    server = rfc_server()
    assert server.client_first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.state is ScramState.DONE
    assert server.username == "user"


def exchange(server: ScramServer, client: ScramClient) -> bytes:
    server_first = server.client_first(client.client_first())
    return server.client_final(client.client_final(server_first))


@pytest.mark.parametrize("name", ["alice", "a,b=c", "ünïcødé"])
def test_sha512_round_trip(name):
    users = {name: ScramCredential.from_password("SCRAM-SHA-512", "pw-" + name)}
    server = ScramServer("SCRAM-SHA-512", users.get)
    client = ScramClient("SCRAM-SHA-512", name, "pw-" + name)
    client.verify_server_final(exchange(server, client))
    assert server.state is ScramState.DONE and server.username == name


def test_wrong_password_and_unknown_user_fail_alike():
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        server = ScramServer("SCRAM-SHA-512", USERS_512.get)
        client = ScramClient("SCRAM-SHA-512", user, password)
        server_first = server.client_first(client.client_first())
        # An unknown user still gets a well-formed challenge at Kafka's default iterations.
        assert b",i=4096" in server_first
        with pytest.raises(ScramError) as e:
            server.client_final(client.client_final(server_first))
        assert server.state is ScramState.FAILED
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert "invalid credentials" in messages[0]


def test_unknown_user_gets_the_same_salt_every_time():
    def salt() -> bytes:
        server = ScramServer("SCRAM-SHA-512", USERS_512.get)
        return server.client_first(b"n,,n=mallory,r=abcdefgh").split(b",s=")[1]

    assert salt() == salt()


def test_credential_of_another_mechanism_is_not_used():
    cred256 = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-512", {"bob": cred256}.get)
    client = ScramClient("SCRAM-SHA-512", "bob", "pw")
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange(server, client)


@pytest.mark.parametrize("message, reason", [
    (b"y,,n=user,r=abc", "channel binding"),
    (b"p=tls-unique,,n=user,r=abc", "channel binding"),
    (b"n,a=admin,n=user,r=abc", "authorization identity"),
    (b"n,n=user,r=abc", "GS2 header"),
    (b"n=user,r=abc", "GS2 header"),
    (b"n,,m=ext,n=user,r=abc", "mandatory extensions"),
    (b"n,,n=user,r=abc,x=ext", "extensions are not accepted"),
    (b"n,,n=user,r=abc,", "extensions are not accepted"),
    (b"n,,r=abc,n=user", "expected attribute 'n'"),
    (b"n,,n=user", "attributes"),
    (b"n,,n=,r=abc", "user name must be"),
    (b"n,,n=us=er,r=abc", "escape"),
    (b"n,,n=us=2Xer,r=abc", "escape"),
    (b"n,,n=user\x01,r=abc", "control character"),
    (b"n,,n=" + b"u" * 256 + b",r=abc", "user name must be"),
    (b"n,,n=user,r=", "client nonce"),
    (b"n,,n=user,r=" + b"x" * 257, "client nonce"),
    (b"n,,n=user,r=ab c", "printable ASCII"),
    (b"n,,n=user,r=ab\xc3\xa9", "printable ASCII"),
    (b"n,,n=\xff\xfe,r=abc", "not UTF-8"),
    (b"n,,n=user,r=" + b"x" * MAX_MESSAGE_BYTES, "longer than"),
])
def test_malformed_client_first_is_refused(message, reason):
    looked_up = []
    server = ScramServer("SCRAM-SHA-256", lambda u: looked_up.append(u))
    with pytest.raises(ScramError, match=reason):
        server.client_first(message)
    assert server.state is ScramState.FAILED
    assert looked_up == []  # refused before the user store is consulted
    with pytest.raises(ScramError, match="not expected"):
        server.client_first(RFC_CLIENT_FIRST)


def _rfc_final_with(**parts: str) -> bytes:
    fields = {"c": "biws", "r": RFC_CLIENT_NONCE + RFC_SERVER_NONCE,
              "p": "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="}
    fields.update(parts)
    return ",".join(f"{k}={v}" for k, v in fields.items()).encode()


@pytest.mark.parametrize("message, reason", [
    (_rfc_final_with(c="eSws"), "channel binding"),  # base64("y,,")
    (_rfc_final_with(c="cD10bHMtdW5pcXVlLCw="), "channel binding"),
    (_rfc_final_with(r=RFC_CLIENT_NONCE), "nonce does not match"),
    (_rfc_final_with(r=RFC_CLIENT_NONCE + RFC_SERVER_NONCE + "x"), "nonce does not match"),
    (_rfc_final_with(r="someone-elses" + RFC_SERVER_NONCE), "nonce does not match"),
    (_rfc_final_with(p="AAAA"), "wrong length"),
    (_rfc_final_with(p="not base64!"), "base64"),
    (_rfc_final_with(p=base64.b64encode(bytes(32)).decode()), "invalid credentials"),
    (RFC_CLIENT_FINAL.replace(b",p=", b",x=ext,p="), "extensions are not accepted"),
    (b"r=" + RFC_CLIENT_FINAL, "expected attribute .c."),
    (RFC_CLIENT_FINAL.split(b",p=")[0], "attributes"),
    (b"c=biws,r=\xff,p=abc", "not UTF-8"),
    (b"c=biws,r=" + b"x" * MAX_MESSAGE_BYTES + b",p=abc", "longer than"),
])
def test_malformed_client_final_is_refused(message, reason):
    server = rfc_server()
    server.client_first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match=reason):
        server.client_final(message)
    assert server.state is ScramState.FAILED
    with pytest.raises(ScramError, match="not expected"):
        server.client_final(RFC_CLIENT_FINAL)  # the right proof no longer helps


def _rfc_proof(without_proof: str) -> str:
    """The RFC 7677 user's proof over ``without_proof`` (a client-final message without p=)."""
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", RFC_SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    auth = b",".join([RFC_CLIENT_FIRST[3:], RFC_SERVER_FIRST, without_proof.encode()])
    signature = hmac.new(stored_key, auth, "sha256").digest()
    return base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature,
                                                          strict=True))).decode()


def test_librdkafka_repeated_client_nonce_is_accepted():
    """librdkafka before 2.6.1 (kcat's) sends back its own nonce followed by the server's whole
    nonce, and proves that text: accepted, as Kafka 3.8.1-3.9 accept it."""
    without_proof = f"c=biws,r={RFC_CLIENT_NONCE}{RFC_CLIENT_NONCE}{RFC_SERVER_NONCE}"
    server = rfc_server()
    server.client_first(RFC_CLIENT_FIRST)
    final = server.client_final(f"{without_proof},p={_rfc_proof(without_proof)}".encode())
    assert final.startswith(b"v=") and server.state is ScramState.DONE


@pytest.mark.parametrize("nonce", [
    "someone-elses" + RFC_CLIENT_NONCE + RFC_SERVER_NONCE,  # Kafka's endsWith would take it
    RFC_CLIENT_NONCE * 3 + RFC_SERVER_NONCE,
    RFC_CLIENT_NONCE * 2,
])
def test_only_the_exact_repeated_form_is_accepted(nonce):
    """Correctly proved, but not the server's nonce nor librdkafka's one repeated form."""
    without_proof = f"c=biws,r={nonce}"
    server = rfc_server()
    server.client_first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce does not match"):
        server.client_final(f"{without_proof},p={_rfc_proof(without_proof)}".encode())
    assert server.state is ScramState.FAILED


def test_steps_out_of_order_fail():
    server = rfc_server()
    with pytest.raises(ScramError, match="not expected"):
        server.client_final(RFC_CLIENT_FINAL)
    assert server.state is ScramState.FAILED
    done = rfc_server()
    done.client_first(RFC_CLIENT_FIRST)
    done.client_final(RFC_CLIENT_FINAL)
    with pytest.raises(ScramError, match="not expected"):
        done.client_first(RFC_CLIENT_FIRST)


@pytest.mark.parametrize("server_first, reason", [
    (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000", "iteration count"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1", "iteration count"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-5", "not a number"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=!!,i=4096", "base64"),
    (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
    (b"e=unknown-user", "server refused"),
])
def test_client_refuses_a_hostile_server_first(server_first, reason):
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    with pytest.raises(ScramError, match=reason):
        client.client_final(server_first)


def test_client_refuses_a_server_that_does_not_know_the_credential():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.client_final(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(bytes(32))
    with pytest.raises(ScramError, match="server signature does not match"):
        client.verify_server_final(forged)


def test_username_escaping_round_trips_and_rejects_bad_escapes():
    assert escape_username("a=b,c") == "a=3Db=2Cc"
    assert unescape_username("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ScramError):
        unescape_username("a=")
