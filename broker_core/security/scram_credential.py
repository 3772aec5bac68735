"""A stored SCRAM credential (RFC 5802): what the broker keeps instead of a password.

Kept in the metadata store as Kafka keeps it in ZooKeeper, one text per mechanism:
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``. The password itself is
never stored: ``StoredKey = H(ClientKey)`` lets the server check a client's proof, and
``ServerKey`` lets it prove itself, but neither lets anyone log in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

#: mechanism name → hashlib name. Kafka serves these two (KIP-84).
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum and default iteration count; the maximum bounds a hostile client's cost.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Bounds of a stored salt: any client's random salt fits (``sluice users`` sends 32 bytes);
#: a hostile one cannot make the store keep megabytes.
MIN_SALT_BYTES = 8
MAX_SALT_BYTES = 1024


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(cls, mechanism: str, password: str, *, salt: bytes | None = None,
                      iterations: int = MIN_ITERATIONS) -> ScramCredential:
        salt = os.urandom(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salt, salted_password(mechanism, password, salt, iterations),
            iterations)

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted: bytes,
                             iterations: int) -> ScramCredential:
        """The credential of ``SaltedPassword = Hi(password, salt, iterations)``: what Kafka's
        AlterUserScramCredentials carries instead of the password. Raises ValueError when the
        iterations, the salt or the salted password's length do not fit ``mechanism``."""
        digest = _digest(mechanism)
        _check_iterations(iterations)
        if not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
            raise ValueError(f"a salt is {MIN_SALT_BYTES}..{MAX_SALT_BYTES} bytes, "
                             f"not {len(salt)}")
        if len(salted) != hashlib.new(digest).digest_size:
            raise ValueError(f"a {mechanism} salted password is "
                             f"{hashlib.new(digest).digest_size} bytes, not {len(salted)}")
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        return cls(mechanism, bytes(salt), hashlib.new(digest, client_key).digest(),
                   server_key, iterations)

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, mechanism: str, text: str) -> ScramCredential:
        """Parse :meth:`to_text`'s form; raises ValueError on anything else (a stored value
        is input like any other)."""
        digest = _digest(mechanism)
        size = hashlib.new(digest).digest_size
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key in fields:
                raise ValueError(f"malformed SCRAM credential field {part[:40]!r}")
            fields[key] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError(f"a SCRAM credential has salt, stored_key, server_key and "
                             f"iterations, not {sorted(fields)}")
        try:
            salt = base64.b64decode(fields["salt"], validate=True)
            stored = base64.b64decode(fields["stored_key"], validate=True)
            server = base64.b64decode(fields["server_key"], validate=True)
            iterations = int(fields["iterations"])
        except ValueError as e:
            raise ValueError(f"malformed SCRAM credential: {e}") from None
        if len(stored) != size or len(server) != size or \
                not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
            raise ValueError("SCRAM credential keys or salt have the wrong length")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"SCRAM iterations {iterations} out of range")
        return cls(mechanism, salt, stored, server, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)`` (PBKDF2-HMAC): the one place a
    password is stretched, by the server's store and by the ``sluice users`` client alike."""
    _check_iterations(iterations)
    return hashlib.pbkdf2_hmac(_digest(mechanism), password.encode("utf-8"), salt, iterations)


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, "
                         f"not {iterations}")


def _digest(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: "
                         f"{', '.join(MECHANISMS)})") from None
