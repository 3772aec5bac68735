"""SASL PLAIN (RFC 4616), sans-IO: ``[authzid] NUL authcid NUL password``, all UTF-8.

The password travels in the clear, so a listener enables PLAIN only when asked
(``sasl.enabled.mechanisms``) and should run it over TLS. There is no separate PLAIN user
store: the password is checked against the user's stored SCRAM-SHA-512 credential by
recomputing its stored key with the credential's salt and iteration count (:func:`verify`).

Each part is bounded as RFC 4616 bounds it (255 octets); the authorization id must be empty or
equal to the user name (Sluice does not let one user act as another).
"""

from __future__ import annotations

import hashlib
import hmac

from broker_core.security.scram import digest_name
from broker_core.security.scram_credential import ScramCredential

MAX_PART_BYTES = 255
#: The stored credential PLAIN logins are checked against.
PLAIN_CREDENTIAL_MECHANISM = "SCRAM-SHA-512"


class PlainError(Exception):
    """The message is malformed; the text is safe to show the peer."""


def parse(message: bytes) -> tuple[str, str]:
    """``(username, password)`` from a PLAIN message; PlainError when malformed."""
    if len(message) > 3 * MAX_PART_BYTES + 2:
        raise PlainError("PLAIN message is too long")
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise PlainError("PLAIN message must be authzid NUL username NUL password")
    authzid_b, user_b, password_b = parts
    if not user_b or not password_b:
        raise PlainError("PLAIN user name and password must not be empty")
    if any(len(p) > MAX_PART_BYTES for p in parts):
        raise PlainError(f"a PLAIN field is longer than {MAX_PART_BYTES} bytes")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise PlainError("PLAIN message is not UTF-8") from None
    if authzid and authzid != user:
        raise PlainError("PLAIN authorization id must be empty or equal the user name")
    return user, password


def encode(username: str, password: str) -> bytes:
    """The client's PLAIN message (empty authorization id)."""
    user_b, password_b = username.encode("utf-8"), password.encode("utf-8")
    if not 1 <= len(user_b) <= MAX_PART_BYTES or not 1 <= len(password_b) <= MAX_PART_BYTES:
        raise ValueError(f"PLAIN user name and password must be 1..{MAX_PART_BYTES} bytes")
    if b"\x00" in user_b or b"\x00" in password_b:
        raise ValueError("PLAIN user name and password must not contain NUL")
    return b"\x00" + user_b + b"\x00" + password_b


def verify(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    digest = digest_name(credential.mechanism)
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), credential.salt,
                                 credential.iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return hmac.compare_digest(hashlib.new(digest, client_key).digest(), credential.stored_key)
