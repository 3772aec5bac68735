"""The cluster secret: the password brokers log in to each other with (``cluster.secret.file``).

Every broker of a cluster reads the same file, and every broker must have it: it is what lets
a broker send the control plane's requests (LeaderAndIsr, replica Fetch, the quorum's Vote,
...) that other brokers refuse to anyone else. The secret is the password of the cluster login
(:data:`~broker_core.security.sasl.CLUSTER_USER` over SCRAM-SHA-512). The broker reads the file
once, into one :class:`ClusterCredential`, and hands that to every component: the listeners
check the login against its SCRAM credential (:meth:`ClusterCredential.sasl_settings`), and
every connection a broker opens to another broker or quorum node logs in with
:attr:`ClusterCredential.login`. Whoever reads the file can act as a broker, so :func:`load`
refuses a file other users may read (the rules of every secret file,
:func:`~broker_core.security.secret_file.read_secret_file`), and a secret too short to resist
guessing. Surrounding whitespace (a trailing newline) is not part of the secret.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.config.parsing import ConfigError
from broker_core.security.sasl import (
    CLUSTER_MECHANISM,
    CLUSTER_USER,
    DEFAULT_MECHANISMS,
    ClientCredential,
    CredentialLookup,
    SaslSettings,
    no_users,
)
from broker_core.security.scram_credential import ScramCredential
from broker_core.security.secret_file import SecretFileError, read_secret_file

if TYPE_CHECKING:
    from broker_core.config.broker_config import BrokerConfig

#: Shortest secret accepted, in characters.
MIN_SECRET_CHARS = 32
#: Longest file read: a secret is a line, not a document.
MAX_FILE_BYTES = 4096
#: The config key that names the file (in every message about it).
KEY = "cluster.secret.file"


class ClusterSecretError(ValueError):
    """The cluster secret file cannot be used; the message says which check failed."""


def load(path: str | os.PathLike[str]) -> str:
    """The secret in ``path``; ClusterSecretError if the file cannot be used as a secret file
    (missing, not a regular file, open to other users, not UTF-8), is larger than
    :data:`MAX_FILE_BYTES`, or holds fewer than :data:`MIN_SECRET_CHARS` characters."""
    try:
        text = read_secret_file(path, KEY)
    except SecretFileError as e:
        raise ClusterSecretError(str(e)) from None
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        raise ClusterSecretError(f"{KEY} {str(path)!r} is larger than {MAX_FILE_BYTES} bytes")
    secret = text.strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ClusterSecretError(
            f"the secret in {KEY} {str(path)!r} has {len(secret)} characters; at least "
            f"{MIN_SECRET_CHARS} are required (make a new one: sluice secret create FILE)")
    return secret


def generate(path: str | os.PathLike[str]) -> str:
    """Write a new random secret (64 hex characters, 256 bits) to ``path``, created with mode
    0600 (an existing file is never overwritten: FileExistsError), and return it."""
    secret = secrets.token_hex(32)
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


@dataclass(frozen=True)
class ClusterCredential:
    """The cluster secret as a broker uses it, read once and passed to every component that
    serves or opens a broker-to-broker connection. The secret never appears in a repr."""

    secret: str = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_CHARS:
            raise ClusterSecretError(f"the cluster secret must have at least "
                                     f"{MIN_SECRET_CHARS} characters")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ClusterCredential:
        """Read ``path`` (:func:`load`); ClusterSecretError says why it cannot be used."""
        return cls(load(path))

    @property
    def login(self) -> ClientCredential:
        """What this broker logs in to another broker or quorum node with."""
        return broker_login(self.secret)

    def sasl_settings(self, mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS,
                      lookup: CredentialLookup = no_users) -> SaslSettings:
        """A listener's SASL settings: users' ``mechanisms`` and ``lookup`` (none on the quorum
        listener, where only brokers log in) and the cluster login checked against a SCRAM
        credential derived from the secret."""
        return SaslSettings(mechanisms=mechanisms, lookup=lookup,
                            cluster_credential=cluster_credential(self.secret),
                            decoy_key=decoy_key(self.secret))


def load_cluster_credential(cfg: BrokerConfig) -> ClusterCredential:
    """The :class:`ClusterCredential` read from a broker's ``cluster.secret.file``, which every
    broker must have (brokers authenticate each other with it, and the control plane is served
    to no one else). Reads the file on each call; raises ConfigError naming the key when it is
    unset (saying how to make one) or the file is missing, open to other users or too short."""
    if cfg.cluster_secret_file is None:
        raise ConfigError(
            "missing required config key 'cluster.secret.file': every broker of a cluster "
            "needs the same private secret file to authenticate to the others; make one "
            "with `sluice secret create FILE` (then copy it to every broker, mode 0600) "
            "and set cluster.secret.file=FILE", "cluster.secret.file")
    try:
        return ClusterCredential.from_file(cfg.cluster_secret_file)
    except ClusterSecretError as e:
        raise ConfigError(str(e), "cluster.secret.file") from None
