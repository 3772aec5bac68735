"""HTTP basic authentication for the ``/metrics`` page: the password file, its hashes, and
the check of an ``Authorization`` header.

The file (``metrics.basic.auth.file``) holds one ``user:<hash>`` line per user; the hash is
``pbkdf2-sha256$<iterations>$<salt base64>$<digest base64>`` (:func:`hash_password`, which
``sluice metrics-password`` prints), so the file never holds a password.

A PBKDF2 check costs milliseconds of the reactor's thread, which a stream of wrong passwords
could turn into a stall of the whole broker. So a password once verified for a user is
remembered as a SHA-256 of salt and password (a scraper sends the same header every time and
pays one hash), and at most :data:`CHECKS_PER_SECOND` full checks run per second: beyond that
the answer is :attr:`Outcome.THROTTLED` (HTTP 429) without looking at the password. An unknown
user costs a full check too, so timing does not tell which users exist.

The throttle comes before every answer, the remembered password's included: while the budget
is spent, no header is looked at, so a guesser learns nothing faster than the full checks
allow (were the cheap path answered first, a right guess would show as ALLOWED among the 429s
at network speed). The price: while someone spends the budget with wrong passwords, the
scraper is answered 429 too. A right password on the cheap path spends nothing.

Sans-IO: time comes from the ``clock`` callable given to :class:`BasicAuthUsers`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_core.config.parsing import ConfigError
from broker_core.security.secret_file import SecretFileError, read_secret_file

if TYPE_CHECKING:
    from broker_core.config.broker_config import BrokerConfig

SCHEME = "pbkdf2-sha256"
#: About 20 ms on a 2020s core: slow for a guesser who stole the file, cheap for one scrape.
DEFAULT_ITERATIONS = 100_000
#: Bounds of a line's iteration count: weaker is refused; stronger would let one request stall
#: the reactor for seconds.
MIN_ITERATIONS = 10_000
MAX_ITERATIONS = 1_000_000
#: Full PBKDF2 checks per second (a token bucket of this size, refilled at this rate).
CHECKS_PER_SECOND = 10
#: The realm named in the challenge.
REALM = "sluice metrics"


class PasswordFileError(SecretFileError):
    """``metrics.basic.auth.file`` cannot be used; the message says which line and why."""


@dataclass(frozen=True)
class PasswordHash:
    """A salted PBKDF2-SHA256 hash of one password."""

    iterations: int
    salt: bytes
    digest: bytes

    def __str__(self) -> str:
        b64 = base64.b64encode
        return (f"{SCHEME}${self.iterations}${b64(self.salt).decode()}$"
                f"{b64(self.digest).decode()}")

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """The inverse of ``str()``; ValueError says what is wrong."""
        parts = text.split("$")
        if len(parts) != 4 or parts[0] != SCHEME:
            raise ValueError(f"expected {SCHEME}$<iterations>$<salt>$<digest>")
        if not parts[1].isascii() or not parts[1].isdigit():
            raise ValueError("the iteration count is not a number")
        iterations = int(parts[1])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        try:
            salt = base64.b64decode(parts[2], validate=True)
            digest = base64.b64decode(parts[3], validate=True)
        except binascii.Error:
            raise ValueError("the salt or digest is not base64") from None
        if len(salt) < 16 or len(digest) != 32:
            raise ValueError("the salt must be at least 16 bytes and the digest 32")
        return cls(iterations, salt, digest)

    def matches(self, password: str) -> bool:
        """Constant-time check of ``password`` (the full PBKDF2 cost)."""
        candidate = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), self.salt,
                                        self.iterations)
        return hmac.compare_digest(candidate, self.digest)


def hash_password(password: str, *, iterations: int = DEFAULT_ITERATIONS,
                  salt: bytes | None = None) -> PasswordHash:
    """A new salted hash of ``password`` (16 random bytes of salt unless given)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    salt = os.urandom(16) if salt is None else salt
    return PasswordHash(iterations, salt,
                        hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations))


def user_line(user: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> str:
    """One line of the password file: ``user:<hash>``."""
    check_user_name(user)
    return f"{user}:{hash_password(password, iterations=iterations)}"


def check_user_name(user: str) -> None:
    """A user name is non-empty, without ``:`` (the separator), whitespace or control
    characters; ValueError otherwise."""
    if not user or ":" in user or any(c.isspace() or not c.isprintable() for c in user):
        raise ValueError(f"invalid user name {user!r}: non-empty, without ':' or spaces")


def parse_password_file(text: str, what: str) -> dict[str, PasswordHash]:
    """``user:<hash>`` lines (blank lines and ``#`` comments allowed), each user once, at
    least one; raises :class:`PasswordFileError` naming the line."""
    users: dict[str, PasswordHash] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, rest = line.partition(":")
        try:
            if not sep:
                raise ValueError("expected user:<hash> (make it with sluice metrics-password)")
            check_user_name(user)
            if user in users:
                raise ValueError(f"user {user!r} is listed twice")
            users[user] = PasswordHash.parse(rest)
        except ValueError as e:
            raise PasswordFileError(f"{what} line {n}: {e}") from None
    if not users:
        raise PasswordFileError(f"{what} lists no user")
    return users


def load_password_file(path: str, what: str = "metrics.basic.auth.file"
                       ) -> dict[str, PasswordHash]:
    """Read ``path`` (private, see :func:`read_secret_file`) and parse it."""
    try:
        text = read_secret_file(path, what)
    except SecretFileError as e:
        raise PasswordFileError(str(e)) from None
    return parse_password_file(text, f"{what} {path!r}")


def metrics_password_hashes(cfg: BrokerConfig) -> dict[str, PasswordHash] | None:
    """The users of a broker's ``metrics.basic.auth.file`` (user -> ``PasswordHash``), or None
    when unset. Reads the file on each call; raises ConfigError naming the key."""
    if cfg.metrics_basic_auth_file is None:
        return None
    try:
        return load_password_file(cfg.metrics_basic_auth_file)
    except PasswordFileError as e:
        raise ConfigError(str(e), "metrics.basic.auth.file") from None


class Outcome(enum.Enum):
    ALLOWED = "allowed"      #: the credentials are right
    DENIED = "denied"        #: missing, malformed or wrong (HTTP 401)
    THROTTLED = "throttled"  #: too many full checks this second; not looked at (HTTP 429)


#: Checked for an unknown user, so that it costs what a known one does.
_DUMMY = hash_password("not a password", salt=b"\0" * 16)


class BasicAuthUsers:
    """The users allowed in, and the check of one request's ``Authorization`` header.

    Invariant: ``_verified[user]`` is ``sha256(salt + password)`` of a password that passed
    the full check for ``user``; it is only ever compared with :func:`hmac.compare_digest`."""

    def __init__(self, users: Mapping[str, PasswordHash], *, clock: Callable[[], float],
                 checks_per_second: int = CHECKS_PER_SECOND) -> None:
        self._users = dict(users)
        self._clock = clock
        self._rate = checks_per_second
        self._tokens = float(checks_per_second)
        self._refilled_at = clock()
        self._verified: dict[str, bytes] = {}

    def _quick(self, user: str, password: str) -> bytes:
        return hashlib.sha256(self._users[user].salt + password.encode("utf-8")).digest()

    def _has_token(self) -> bool:
        """Refill the bucket for the time passed; whether a full check may run now."""
        now = self._clock()
        self._tokens = min(float(self._rate), self._tokens + (now - self._refilled_at) * self._rate)
        self._refilled_at = now
        return self._tokens >= 1

    def check(self, authorization: bytes | None) -> tuple[Outcome, str | None]:
        """The outcome for a request with this ``Authorization`` header value (None: none),
        and the user when allowed."""
        credentials = _parse_basic(authorization)
        if credentials is None:
            return Outcome.DENIED, None
        if not self._has_token():  # before any path that could answer ALLOWED
            return Outcome.THROTTLED, None
        user, password = credentials
        if user in self._verified and hmac.compare_digest(self._verified[user],
                                                          self._quick(user, password)):
            return Outcome.ALLOWED, user
        self._tokens -= 1
        if user not in self._users:
            _DUMMY.matches(password)
            return Outcome.DENIED, None
        if not self._users[user].matches(password):
            return Outcome.DENIED, None
        self._verified[user] = self._quick(user, password)
        return Outcome.ALLOWED, user


def _parse_basic(value: bytes | None) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` (RFC 7617; UTF-8), else None."""
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep else None


def challenge() -> bytes:
    """The ``WWW-Authenticate`` value of a 401 answer."""
    return f'Basic realm="{REALM}", charset="UTF-8"'.encode("ascii")
