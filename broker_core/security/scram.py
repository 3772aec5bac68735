"""SCRAM (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512): both sides, sans-IO.

:class:`ScramServer` checks a client's proof against a stored
:class:`~broker_core.security.scram_credential.ScramCredential`; :class:`ScramClient` logs in
with a password. Each is a two-step exchange of byte messages and holds no I/O::

    client-first  n,,n=<user>,r=<cnonce>              → server-first  r=<cnonce+snonce>,s=<salt>,i=<n>
    client-final  c=biws,r=<cnonce+snonce>,p=<proof>  → server-final  v=<server signature>

What this module accepts, and why it is strict:

- the GS2 header is exactly ``n,,``: no channel binding (``y``/``p=``), no authorization id;
  Kafka's clients send nothing else, and each optional part is a way to confuse the parser;
- no extensions (``m=`` or anything after the nonce / before the proof);
- every field has a bounded length, is ASCII where the RFC says so and UTF-8 where it names a
  user; anything else is refused with :class:`ScramError` and the exchange is over;
- an unknown user is not told apart from a wrong password: the server answers with a salt and
  iteration count derived from the name (stable across attempts), and fails at the proof;
- proofs and server signatures are compared with :func:`hmac.compare_digest`;
- client-final's nonce is the server-first one, or (librdkafka before 2.6.1, kcat's among
  them) the client's nonce followed by it: that client repeats its own half, and Kafka 3.8.1
  to 3.9 accept any nonce that ends with the server's. Only that one extra form is taken here,
  so the server's fresh half is still required, and the proof covers the text as received.

Invariant: a :class:`ScramServer` reaches ``DONE`` only after a proof that matches the stored
key; any error moves it to ``FAILED`` for good (one exchange per object).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable

from broker_core.security.scram_credential import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)

#: The one GS2 header accepted: no channel binding, no authorization identity.
GS2_HEADER = "n,,"
_GS2_B64 = base64.b64encode(GS2_HEADER.encode()).decode()  # "biws"
#: Longest client message accepted; real ones are under 200 bytes.
MAX_MESSAGE_BYTES = 1024
#: Longest user name (after unescaping, in characters) and nonce accepted.
MAX_USERNAME_CHARS = 255
MAX_NONCE_CHARS = 256
#: Bytes of randomness in the server's half of the nonce.
SERVER_NONCE_BYTES = 24

#: Looks up the stored credential of a user for this exchange's mechanism; None: no such user.
UserLookup = Callable[[str], "ScramCredential | None"]


class ScramError(Exception):
    """The exchange failed; the message says why and is safe to show the peer (it never tells
    an unknown user from a wrong password)."""


class ScramState(enum.Enum):
    EXPECT_CLIENT_FIRST = "expect-client-first"
    EXPECT_CLIENT_FINAL = "expect-client-final"
    DONE = "done"
    FAILED = "failed"


def digest_name(mechanism: str) -> str:
    """``SCRAM-SHA-256`` → ``sha256``; ValueError for any other name."""
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}") from None


def _hmac(key: bytes, msg: bytes, digest: str) -> bytes:
    return hmac.new(key, msg, digest).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _decode_message(data: bytes, what: str) -> str:
    if len(data) > MAX_MESSAGE_BYTES:
        raise ScramError(f"{what} is longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


def _attributes(text: str, names: tuple[str, ...], what: str) -> list[str]:
    """Split ``a=..,b=..`` into the values of exactly ``names``, in that order."""
    parts = text.split(",")
    if len(parts) != len(names):
        keys = [p.partition("=")[0] for p in parts]
        raise ScramError(f"{what} must have the attributes {','.join(names)}, not "
                         f"{','.join(k[:8] for k in keys[:8])} (extensions are not accepted)")
    values = []
    for part, name in zip(parts, names, strict=True):
        key, sep, value = part.partition("=")
        if key != name or not sep:
            raise ScramError(f"{what}: expected attribute {name!r}, got {part[:16]!r}")
        values.append(value)
    return values


def _check_nonce(nonce: str, what: str) -> None:
    # RFC 5802: printable ASCII except ','.
    if not 1 <= len(nonce) <= MAX_NONCE_CHARS:
        raise ScramError(f"{what} must be 1..{MAX_NONCE_CHARS} characters")
    if any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
        raise ScramError(f"{what} has a character outside printable ASCII")


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not valid base64") from None


def escape_username(name: str) -> str:
    """RFC 5802's ``saslname``: ``=`` → ``=3D``, ``,`` → ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(value: str) -> str:
    """The inverse of :func:`escape_username`; ScramError for any other ``=`` sequence."""
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "=":
            seq = value[i:i + 3]
            if seq == "=2C":
                out.append(",")
            elif seq == "=3D":
                out.append("=")
            else:
                raise ScramError("user name has an invalid '=' escape")
            i += 3
        else:
            out.append(c)
            i += 1
    name = "".join(out)
    if not 1 <= len(name) <= MAX_USERNAME_CHARS:
        raise ScramError(f"user name must be 1..{MAX_USERNAME_CHARS} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ScramError("user name has a control character")
    return name


def parse_client_first(data: bytes) -> tuple[str, str, str]:
    """``(username, client_nonce, client_first_bare)`` from a client-first message."""
    text = _decode_message(data, "client-first message")
    if not text.startswith(GS2_HEADER):
        flag = text[:1]
        if flag in ("y", "p"):
            raise ScramError("channel binding is not supported (GS2 header must be 'n,,')")
        if text.startswith("n,a="):
            raise ScramError("an authorization identity is not supported "
                             "(GS2 header must be 'n,,')")
        raise ScramError("client-first message must start with the GS2 header 'n,,'")
    bare = text[len(GS2_HEADER):]
    if bare.startswith("m="):
        raise ScramError("mandatory extensions are not supported")
    user_field, nonce = _attributes(bare, ("n", "r"), "client-first message")
    username = unescape_username(user_field)
    _check_nonce(nonce, "client nonce")
    return username, nonce, bare


def decoy_credential(mechanism: str, username: str, key: bytes | None = None) -> ScramCredential:
    """A credential no password matches, with a salt stable for ``username`` under ``key`` (so
    two attempts at an unknown user look like two attempts at a known one). Without ``key`` the
    salt is stable within this process only; give every broker the same key (derived from the
    cluster secret) and an unknown user looks the same on all of them, across restarts."""
    digest = digest_name(mechanism)
    salt = _hmac(_DECOY_KEY if key is None else key, username.encode("utf-8"), "sha256")
    size = hashlib.new(digest).digest_size
    return ScramCredential(mechanism, salt, secrets.token_bytes(size), secrets.token_bytes(size),
                           MIN_ITERATIONS)


#: Per-process key for decoy salts when none is given; never leaves the process.
_DECOY_KEY = secrets.token_bytes(32)


class ScramServer:
    """One server-side SCRAM exchange (see the module docstring).

    ``lookup(username)`` gives the stored credential or None; ``decoy_key`` keys the salts
    shown for unknown users (:func:`decoy_credential`); ``nonce`` makes the server's half of
    the nonce deterministic (tests only: RFC 7677's vector).
    """

    def __init__(self, mechanism: str, lookup: UserLookup, *, decoy_key: bytes | None = None,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._decoy_key = decoy_key
        self._digest = digest_name(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(
            SERVER_NONCE_BYTES)
        self.state = ScramState.EXPECT_CLIENT_FIRST
        #: The user named in client-first (set once it parsed; authenticated only at DONE).
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._nonce = ""
        #: The nonce as librdkafka before 2.6.1 sends it back: the client's half twice.
        self._repeated_nonce = ""
        self._auth_prefix = ""

    def _expect(self, state: ScramState, step: str) -> None:
        if self.state is not state:
            found, self.state = self.state, ScramState.FAILED
            raise ScramError(f"SCRAM {step} is not expected in state {found.value}")

    def client_first(self, data: bytes) -> bytes:
        """Take client-first; return server-first. ScramError ends the exchange."""
        self._expect(ScramState.EXPECT_CLIENT_FIRST, "client-first")
        try:
            username, client_nonce, bare = parse_client_first(data)
            credential = self._lookup(username)
            if credential is not None and credential.mechanism != self.mechanism:
                credential = None
            self._known = credential is not None
            if credential is None:
                credential = decoy_credential(self.mechanism, username, self._decoy_key)
        except Exception:
            self.state = ScramState.FAILED
            raise
        self.username = username
        self._credential = credential
        self._nonce = client_nonce + self._server_nonce
        self._repeated_nonce = client_nonce + self._nonce
        server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._auth_prefix = f"{bare},{server_first},"
        self.state = ScramState.EXPECT_CLIENT_FINAL
        return server_first.encode()

    def client_final(self, data: bytes) -> bytes:
        """Take client-final; return server-final once the proof matched. ScramError (the
        same message for a wrong password and an unknown user) ends the exchange."""
        self._expect(ScramState.EXPECT_CLIENT_FINAL, "client-final")
        try:
            server_final = self._verify(data)
        except Exception:
            self.state = ScramState.FAILED
            raise
        self.state = ScramState.DONE
        return server_final

    def _verify(self, data: bytes) -> bytes:
        text = _decode_message(data, "client-final message")
        binding, nonce, proof_b64 = _attributes(text, ("c", "r", "p"), "client-final message")
        if binding != _GS2_B64:
            raise ScramError("channel binding data must be 'biws' (GS2 header 'n,,')")
        if not (hmac.compare_digest(nonce.encode(), self._nonce.encode())
                or hmac.compare_digest(nonce.encode(), self._repeated_nonce.encode())):
            raise ScramError("nonce does not match the server's")
        proof = _b64(proof_b64, "client proof")
        credential = self._credential
        assert credential is not None
        if len(proof) != len(credential.stored_key):
            raise ScramError("client proof has the wrong length")
        without_proof = text[:text.rindex(",p=")]
        auth_message = (self._auth_prefix + without_proof).encode("utf-8")
        signature = _hmac(credential.stored_key, auth_message, self._digest)
        client_key = _xor(proof, signature)
        matches = hmac.compare_digest(hashlib.new(self._digest, client_key).digest(),
                                      credential.stored_key)
        if not (matches and self._known):
            raise ScramError(f"Authentication failed during authentication due to invalid "
                             f"credentials with SASL mechanism {self.mechanism}")
        server_signature = _hmac(credential.server_key, auth_message, self._digest)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """One client-side SCRAM exchange: :meth:`client_first`, :meth:`client_final` (given the
    server-first message), :meth:`verify_server_final`. ``nonce`` is for tests only.

    The server's answers are input like any other: its nonce must extend ours, its iteration
    count must lie in Kafka's range (a hostile server cannot make us spin), and its final
    signature must prove it knows the credential.
    """

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._digest = digest_name(mechanism)
        if not 1 <= len(username) <= MAX_USERNAME_CHARS:
            raise ValueError(f"user name must be 1..{MAX_USERNAME_CHARS} characters")
        self.username = username
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(SERVER_NONCE_BYTES)
        self._bare = f"n={escape_username(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def client_first(self) -> bytes:
        return (GS2_HEADER + self._bare).encode("utf-8")

    def client_final(self, server_first: bytes) -> bytes:
        text = _decode_message(server_first, "server-first message")
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:66]}")
        if text.startswith("m="):
            raise ScramError("server sent a mandatory extension")
        nonce, salt_b64, iterations_text = _attributes(text, ("r", "s", "i"),
                                                       "server-first message")
        _check_nonce(nonce, "server nonce")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("server nonce does not extend the client's")
        salt = _b64(salt_b64, "salt")
        if not iterations_text.isdigit() or len(iterations_text) > 9:
            raise ScramError("iteration count is not a number")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"iteration count {iterations} outside "
                             f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._digest, self._password.encode("utf-8"), salt,
                                     iterations)
        client_key = _hmac(salted, b"Client Key", self._digest)
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c={_GS2_B64},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(stored_key, auth_message, self._digest))
        server_key = _hmac(salted, b"Server Key", self._digest)
        self._server_signature = _hmac(server_key, auth_message, self._digest)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Raise ScramError unless the server proved it holds our credential."""
        if self._server_signature is None:
            raise ScramError("server-final before server-first")
        text = _decode_message(server_final, "server-final message")
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:66]}")
        (signature_b64,) = _attributes(text, ("v",), "server-final message")
        if not hmac.compare_digest(_b64(signature_b64, "server signature"),
                                   self._server_signature):
            raise ScramError("server signature does not match: the server does not hold "
                             "this user's credential")
