"""Which ZooKeeper ACL each znode gets when ``zookeeper.set.acl=true``, and the credential
brokers authenticate to ZooKeeper with.

Kafka's model: the brokers' identity gets every permission on what they create, and everyone
else may read it, so monitoring tools and ``sluice ... --zookeeper`` reads keep working while
only brokers (and operators holding the brokers' credential) can change the cluster. Nodes
that hold secrets (:data:`SENSITIVE_PATHS` and everything below them) are not readable by
anyone else at all, not even their names.

The credential (``username:password`` in ``zookeeper.auth.file``) is proven one of two ways,
``zookeeper.auth.mechanism``:

- ``DIGEST-MD5`` (:data:`SASL_DIGEST_MD5`, the default, as Kafka does it): a SASL DIGEST-MD5
  login, a challenge-response the server checks against the user list of its JAAS ``Server``
  section. ACLs name the identity ``sasl:<username>``: no secret in them. Every ZooKeeper
  server needs that JAAS file and the ``sasl`` authentication provider (docs/zookeeper.md),
  and a login the server refuses closes the session (AUTH_FAILED).
- ``digest`` (:data:`DIGEST`): ZooKeeper's built-in ``addauth digest user:password``, for
  servers one cannot configure (managed services). The server accepts any such credential
  (a wrong password just is another identity), and ACLs name it
  ``user:base64(sha1(user:password))``, an unsalted hash: ZooKeeper (3.5 and later) shows it
  only to clients with ADMIN on the node (others see ``user:x``), but it sits in ZooKeeper's
  data files and older servers show it to readers.

Either way the password must be long and random (:data:`MIN_PASSWORD_LENGTH`): a DIGEST-MD5
exchange seen on the wire can be guessed offline just as the digest hash can.

Sans-IO: no kazoo here. ACL entries are plain :class:`AclEntry` values; ``broker_core.zk.store``
turns them, and the credential, into kazoo's.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_core import metadata_paths as paths
from broker_core.config.metadata_keys import DIGEST, MECHANISMS, SASL_DIGEST_MD5
from broker_core.config.parsing import ConfigError
from broker_core.security.secret_file import SecretFileError, read_secret_file

if TYPE_CHECKING:
    from broker_core.config.broker_config import BrokerConfig

# ZooKeeper's permission bits (org.apache.zookeeper.ZooDefs.Perms).
READ = 1
WRITE = 2
CREATE = 4
DELETE = 8
ADMIN = 16
ALL = READ | WRITE | CREATE | DELETE | ADMIN

#: Subtrees nobody but the brokers may read: users' SCRAM credentials (salted hashes, but
#: still material for an offline guess, and the list of user names).
SENSITIVE_PATHS: tuple[str, ...] = (paths.USER_CONFIGS,)

#: The ZooKeeper system subtree (quotas, config); never ours to change.
ZOOKEEPER_SYSTEM_PATH = "/zookeeper"

#: The digest in every ACL is an unsalted SHA-1 (kept in ZooKeeper's data files, shown to
#: readers by old servers), and a sniffed DIGEST-MD5 exchange allows offline guessing too; a
#: password of 32 random characters makes guessing it hopeless.
MIN_PASSWORD_LENGTH = 32

@dataclass(frozen=True)
class AclEntry:
    """One ZooKeeper ACL entry: ``perms`` (bits above) for identity ``id`` of ``scheme``."""

    perms: int
    scheme: str
    id: str

    def __str__(self) -> str:
        letters = "".join(c for bit, c in ((CREATE, "c"), (DELETE, "d"), (READ, "r"),
                                           (WRITE, "w"), (ADMIN, "a")) if self.perms & bit)
        return f"{self.scheme}:{self.id}:{letters}"


#: ZooKeeper's ``OPEN_ACL_UNSAFE``: what a node gets without ``zookeeper.set.acl``.
OPEN_ACL: tuple[AclEntry, ...] = (AclEntry(ALL, "world", "anyone"),)
WORLD_READ = AclEntry(READ, "world", "anyone")


class ZkAuthFileError(SecretFileError):
    """``zookeeper.auth.file`` cannot be used; the message says why."""


@dataclass(frozen=True)
class ZkCredential:
    """The brokers' ZooKeeper identity (one for the whole cluster) and the ``mechanism`` that
    proves it (:data:`MECHANISMS`). ``repr`` hides the password, so a logged config or a
    traceback does not leak it."""

    username: str
    password: str
    mechanism: str = SASL_DIGEST_MD5

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown ZooKeeper auth mechanism {self.mechanism!r}")

    def __repr__(self) -> str:
        return (f"ZkCredential(username={self.username!r}, password=<hidden>, "
                f"mechanism={self.mechanism!r})")

    @property
    def is_sasl(self) -> bool:
        return self.mechanism == SASL_DIGEST_MD5

    @property
    def owner(self) -> AclEntry:
        """The ACL entry giving this identity every permission: ``sasl:<username>`` (what
        ZooKeeper's SASL provider names a DIGEST-MD5 login), or ``digest:`` :attr:`digest_id`."""
        if self.is_sasl:
            return AclEntry(ALL, "sasl", self.username)
        return AclEntry(ALL, "digest", self.digest_id)

    @property
    def auth(self) -> str:
        """The ``digest`` scheme's credential, as ``addauth digest`` takes it."""
        return f"{self.username}:{self.password}"

    @property
    def digest_id(self) -> str:
        """The identity as ZooKeeper's ``DigestAuthenticationProvider`` names it in ACLs."""
        digest = hashlib.sha1(self.auth.encode("utf-8")).digest()  # noqa: S324 (ZooKeeper's)
        return f"{self.username}:{base64.b64encode(digest).decode('ascii')}"

    @classmethod
    def parse(cls, text: str, what: str = "zookeeper.auth.file",
              mechanism: str = SASL_DIGEST_MD5) -> ZkCredential:
        """``username:password`` on one line (a final newline is allowed). The username is
        non-empty, without ``:`` or whitespace; the password has at least
        :data:`MIN_PASSWORD_LENGTH` characters and no whitespace."""
        lines = text.splitlines()
        if len(lines) != 1:
            raise ZkAuthFileError(f"{what} must hold exactly one line 'username:password' "
                                  f"(it has {len(lines)})")
        username, sep, password = lines[0].partition(":")
        if not sep or not username or any(c.isspace() for c in username):
            raise ZkAuthFileError(f"{what} must hold 'username:password' with a username "
                                  "without spaces or ':'")
        if any(c.isspace() for c in password):
            raise ZkAuthFileError(f"{what}: the password must not contain whitespace")
        if len(password) < MIN_PASSWORD_LENGTH:
            raise ZkAuthFileError(
                f"{what}: the password has {len(password)} characters; at least "
                f"{MIN_PASSWORD_LENGTH} random ones are needed ({_GUESSABLE[mechanism]}): "
                "e.g. openssl rand -hex 32")
        return cls(username, password, mechanism)

    @classmethod
    def from_file(cls, path: str, what: str = "zookeeper.auth.file",
                  mechanism: str = SASL_DIGEST_MD5) -> ZkCredential:
        """Read and check ``path`` (:func:`read_secret_file`'s checks, then :meth:`parse`);
        raises :class:`ZkAuthFileError` (a :class:`SecretFileError`)."""
        try:
            text = read_secret_file(path, what)
        except ZkAuthFileError:
            raise
        except SecretFileError as e:
            raise ZkAuthFileError(str(e)) from None
        return cls.parse(text, f"{what} {path!r}", mechanism)


#: Why a short password can be guessed, per mechanism (:data:`MIN_PASSWORD_LENGTH`).
_GUESSABLE = {
    SASL_DIGEST_MD5: "a DIGEST-MD5 login seen on the network can be guessed offline",
    DIGEST: "the ACL on every znode shows an unsalted hash of it",
}


def is_sensitive(path: str) -> bool:
    """Whether ``path`` (relative to the chroot) is or lies under a :data:`SENSITIVE_PATHS`."""
    return any(path == p or path.startswith(p + "/") for p in SENSITIVE_PATHS)


def secure_acl(path: str, credential: ZkCredential) -> tuple[AclEntry, ...]:
    """The ACL of ``path`` in a secured cluster: the brokers' identity has ALL; everyone else
    may READ (list and get), except on sensitive paths."""
    owner = credential.owner
    return (owner,) if is_sensitive(path) else (owner, WORLD_READ)


@dataclass(frozen=True)
class AclPolicy:
    """What a store does about ACLs: ``credential`` (None: connect anonymously) is added to
    the session; with ``set_acl`` every node the store creates gets :func:`secure_acl`.

    Invariant: ``set_acl`` implies a credential (the ACL names it)."""

    credential: ZkCredential | None = None
    set_acl: bool = False

    def __post_init__(self) -> None:
        if self.set_acl and self.credential is None:
            raise ValueError("set_acl needs a credential: the ACL names the brokers' identity")

    def acl_for(self, path: str) -> tuple[AclEntry, ...]:
        """The ACL a node created at ``path`` gets."""
        if self.set_acl and self.credential is not None:
            return secure_acl(path, self.credential)
        return OPEN_ACL


def broker_acl_policy(cfg: BrokerConfig) -> AclPolicy:
    """A broker's ``AclPolicy`` (ZooKeeper mode): the credential read from
    ``zookeeper.auth.file`` (checked: private, one ``username:password`` line), proven by
    ``zookeeper.auth.mechanism``, and ``zookeeper.set.acl``. Reads the file on each call;
    raises ConfigError naming the key."""
    if cfg.zookeeper_auth_file is None:
        return AclPolicy()
    try:
        credential = ZkCredential.from_file(cfg.zookeeper_auth_file,
                                            mechanism=cfg.zookeeper_auth_mechanism)
    except ZkAuthFileError as e:
        raise ConfigError(str(e), "zookeeper.auth.file") from None
    return AclPolicy(credential, set_acl=cfg.zookeeper_set_acl)
