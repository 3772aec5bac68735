"""The cluster secret: the password brokers log in to each other with (``cluster.secret.file``).

Every broker of a cluster reads the same file. The secret is the password of the cluster login
(:data:`~broker_core.security.sasl.CLUSTER_USER` over SCRAM-SHA-512): a broker serving SASL
derives a SCRAM credential from it (:func:`cluster_credential`), and a broker connecting to
another logs in with it (:func:`broker_login`). Whoever reads the file can act as a broker, so
:func:`load` refuses a file anyone on the machine may read, and a secret too short to resist
guessing. Surrounding whitespace (a trailing newline) is not part of the secret.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path

from broker_core.security.sasl import CLUSTER_MECHANISM, CLUSTER_USER, ClientCredential
from broker_core.security.scram_credential import ScramCredential

#: Shortest secret accepted, in characters.
MIN_SECRET_CHARS = 32
#: Longest file read: a secret is a line, not a document.
MAX_FILE_BYTES = 4096


class ClusterSecretError(ValueError):
    """The cluster secret file cannot be used; the message says which check failed."""


def load(path: str | os.PathLike[str]) -> str:
    """The secret in ``path``; ClusterSecretError if the file is missing, unreadable,
    readable by everyone (mode & 0o004), not UTF-8, too large or shorter than
    :data:`MIN_SECRET_CHARS`."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise ClusterSecretError(f"cluster secret file {p} does not exist") from None
    except OSError as e:
        raise ClusterSecretError(f"cluster secret file {p} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ClusterSecretError(f"cluster secret file {p} is not a regular file")
    if mode & stat.S_IROTH:
        raise ClusterSecretError(
            f"cluster secret file {p} is readable by every user (mode {stat.S_IMODE(mode):o}); "
            f"run: chmod o-rwx {p}")
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ClusterSecretError(f"cluster secret file {p} cannot be read: {e.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ClusterSecretError(f"cluster secret file {p} is larger than {MAX_FILE_BYTES} bytes")
    try:
        secret = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ClusterSecretError(f"cluster secret file {p} is not UTF-8 text") from None
    if len(secret) < MIN_SECRET_CHARS:
        raise ClusterSecretError(
            f"cluster secret in {p} has {len(secret)} characters; at least "
            f"{MIN_SECRET_CHARS} are required")
    return secret


def generate(path: str | os.PathLike[str]) -> str:
    """Write a new random secret to ``path`` (created with mode 0600; an existing file is
    never overwritten: FileExistsError) and return it."""
    secret = secrets.token_urlsafe(48)  # 64 characters, 384 bits
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secret + "\n")
    return secret


def cluster_credential(secret: str) -> ScramCredential:
    """The SCRAM-SHA-512 credential a SASL listener checks the cluster login against (a fresh
    salt per call: each broker derives its own, clients learn it in the exchange)."""
    return ScramCredential.from_password(CLUSTER_MECHANISM, secret)


def decoy_key(secret: str) -> bytes:
    """The key for the salts SCRAM shows unknown users (``SaslSettings.decoy_key``): derived
    from the secret, so the same on every broker, and revealing nothing about it."""
    return hashlib.sha256(b"sluice scram decoy salts\0" + secret.encode("utf-8")).digest()


def broker_login(secret: str) -> ClientCredential:
    """What a broker logs in to another broker (or the quorum) with."""
    return ClientCredential(CLUSTER_MECHANISM, CLUSTER_USER, secret)
