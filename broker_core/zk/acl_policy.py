"""Which ZooKeeper ACL each znode gets when ``zookeeper.set.acl=true``, and the credential
brokers authenticate to ZooKeeper with.

Kafka's model: the brokers' identity gets every permission on what they create, and everyone
else may read it, so monitoring tools and ``sluice ... --zookeeper`` reads keep working while
only brokers (and operators holding the brokers' credential) can change the cluster. Nodes
that hold secrets (:data:`SENSITIVE_PATHS` and everything below them) are not readable by
anyone else at all, not even their names.

The credential uses ZooKeeper's built-in ``digest`` scheme (``addauth digest user:password``),
which every ZooKeeper server accepts without server-side configuration; SASL DIGEST-MD5 would
need a JAAS file on every ZooKeeper server and the ``pure-sasl`` package in every broker. The
ACL names the identity as ``user:base64(sha1(user:password))``, an unsalted hash: ZooKeeper
(3.5 and later) shows it only to clients with ADMIN on the node (others see ``user:x``), but it
sits in ZooKeeper's data files and older servers show it to readers, so the password must be
long and random: see :data:`MIN_PASSWORD_LENGTH`.

Sans-IO: no kazoo here. ACL entries are plain :class:`AclEntry` values; ``broker_core.zk.store``
turns them into kazoo's.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from broker_core.security.secret_file import SecretFileError, read_secret_file
from broker_core.zk import paths

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
#: readers by old servers); a password of 32 random characters makes guessing it hopeless.
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
    """The brokers' ZooKeeper identity (one for the whole cluster). ``repr`` hides the
    password, so a logged config or a traceback does not leak it."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"ZkCredential(username={self.username!r}, password=<hidden>)"

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
    def parse(cls, text: str, what: str = "zookeeper.auth.file") -> ZkCredential:
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
                f"{MIN_PASSWORD_LENGTH} random ones are needed (the ACL on every znode shows "
                "an unsalted hash of it): e.g. openssl rand -hex 32")
        return cls(username, password)

    @classmethod
    def from_file(cls, path: str, what: str = "zookeeper.auth.file") -> ZkCredential:
        """Read and check ``path`` (:func:`read_secret_file`'s checks, then :meth:`parse`);
        raises :class:`ZkAuthFileError` (a :class:`SecretFileError`)."""
        try:
            text = read_secret_file(path, what)
        except ZkAuthFileError:
            raise
        except SecretFileError as e:
            raise ZkAuthFileError(str(e)) from None
        return cls.parse(text, f"{what} {path!r}")


def is_sensitive(path: str) -> bool:
    """Whether ``path`` (relative to the chroot) is or lies under a :data:`SENSITIVE_PATHS`."""
    return any(path == p or path.startswith(p + "/") for p in SENSITIVE_PATHS)


def secure_acl(path: str, credential: ZkCredential) -> tuple[AclEntry, ...]:
    """The ACL of ``path`` in a secured cluster: the brokers' identity has ALL; everyone else
    may READ (list and get), except on sensitive paths."""
    owner = AclEntry(ALL, "digest", credential.digest_id)
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
