"""The user store: every user's SCRAM credentials, kept in the metadata store, cached per broker.

Layout (Kafka's, in both metadata stores): ``/config/users/[sanitized name]`` holds
``{"version":1,"config":{"SCRAM-SHA-512":"salt=..,stored_key=..,server_key=..,iterations=..",
"SCRAM-SHA-256":...}}`` (:class:`UserConfig`; the name is URL-encoded by
:func:`~broker_core.metadata_paths.sanitize_user`). Keys other than SCRAM mechanisms (Kafka keeps a
user's quotas in the same value) are kept as they are and never read.

Every broker keeps a :class:`UserCredentialCache`: a children watch on ``/config/users`` and a
data watch on each user's node, so a login is checked against memory, never with a round trip
to the store, and a credential changed or removed on any broker reaches every broker's cache
as soon as its watch fires.

Invariants:

- the cache holds only users whose name passes :func:`validate_user_name` and whose node name
  is the canonical encoding of that name; it never holds a name starting with ``__`` (reserved
  for the cluster's own login, which is checked against the cluster secret, never here);
- it holds at most ``max_users`` users (:data:`MAX_USERS`), the first in name order;
- a value that cannot be read (not JSON, too long, a credential that does not parse, a SCRAM
  mechanism this broker does not know) is logged once and counts as no credential: the user
  cannot log in with it; nothing a peer writes in the store can crash the cache;
- a password is never logged, nor a whole stored credential.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.security.scram_credential import (
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    salted_password,
)

#: The longest user name, in UTF-8 bytes. Kafka sets none; 256 bytes keeps a node name (up to
#: three times as long once URL-encoded) well inside both stores' path limits.
MAX_USER_NAME_BYTES = 256
#: Names starting with this are the cluster's own (``__sluice_broker``); user management
#: refuses them, so no stored credential can ever stand for the broker login.
RESERVED_USER_PREFIX = "__"
#: Most users a broker caches. Each costs one watch and about 1 KiB of memory (two
#: credentials with their keys and salts): 10,000 users are some 10 MiB and 10,000 watches
#: per broker, and the ``/config/users`` child list (at most ~7 MiB of names, typically a few
#: hundred KiB) stays readable in one answer. Beyond it, users after the first 10,000 in name
#: order cannot log in (logged), and AlterUserScramCredentials refuses new users.
MAX_USERS = 10_000
#: Largest value of a user node read: two credentials with the largest salts are under 4 KiB;
#: room is left for Kafka's quota keys.
MAX_USER_CONFIG_BYTES = 16 * 1024


def validate_user_name(name: str) -> None:
    """Raise ValueError saying why ``name`` cannot be a SCRAM user: empty, longer than
    :data:`MAX_USER_NAME_BYTES` in UTF-8, not valid UTF-8 (a lone surrogate), a control
    character, ``.`` or ``..`` (not a node name), or reserved (``__`` first)."""
    if not name:
        raise ValueError("the user name is empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("the user name is not valid UTF-8") from None
    if size > MAX_USER_NAME_BYTES:
        raise ValueError(f"the user name is {size} bytes; the limit is {MAX_USER_NAME_BYTES}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise ValueError("the user name has control characters")
    if name in (".", ".."):
        raise ValueError(f"the user name cannot be {name!r}")
    if name.startswith(RESERVED_USER_PREFIX):
        raise ValueError(f"user names starting with {RESERVED_USER_PREFIX!r} are reserved for "
                         "the cluster's own login")


def _printable(name: str) -> str:
    """A name as it may appear in a log line (bounded, control characters escaped)."""
    return repr(name[:80])


@dataclass(frozen=True)
class UserConfig:
    """The value of ``/config/users/[name]``.

    ``credentials`` holds the SCRAM credentials that parse; ``other`` every other key, kept
    verbatim (quotas, and a SCRAM entry that did not parse, so that altering one mechanism
    never loses what another key held); ``problems`` says why an entry was not taken.
    """

    credentials: dict[str, ScramCredential] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.credentials and not self.other

    def to_bytes(self) -> bytes:
        config = dict(self.other)
        config.update({m: c.to_text() for m, c in self.credentials.items()})
        return json.dumps({"version": 1, "config": config}, separators=(",", ":"),
                          sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> UserConfig:
        """Parse a stored value. The whole value is refused (ValueError) when it is too long,
        not JSON or has no ``config`` object of strings; one bad SCRAM entry only makes that
        mechanism a problem."""
        if len(data) > MAX_USER_CONFIG_BYTES:
            raise ValueError(f"the value is {len(data)} bytes; the limit is "
                             f"{MAX_USER_CONFIG_BYTES}")
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"not valid JSON ({e})") from None
        config = value.get("config") if isinstance(value, dict) else None
        if not isinstance(config, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
            raise ValueError("no 'config' object of strings")
        credentials: dict[str, ScramCredential] = {}
        other: dict[str, str] = {}
        problems: list[str] = []
        for key, text in config.items():
            if key in MECHANISMS:
                try:
                    credentials[key] = ScramCredential.from_text(key, text)
                    continue
                except ValueError as e:
                    problems.append(f"{key}: {e}")
            elif key.upper().startswith("SCRAM-"):
                problems.append(f"unknown SCRAM mechanism {key[:40]!r}")
            other[key] = text
        return cls(credentials, other, tuple(problems))


class UserCredentialCache:
    """Every user's SCRAM credentials as this broker knows them; see the module docstring.

    Usage::

        users = UserCredentialCache(store)
        await users.start()        # fires once every user's first value has been read
        users.lookup("SCRAM-SHA-512", "alice")   # -> ScramCredential | None
        users.check_plain("alice", password)     # -> bool
        users.stop()

    ``lookup`` is the ``CredentialLookup`` seam of the SASL exchanges. Callbacks run on the
    reactor thread, one at a time (the store's contract), so no lock is needed.
    """

    log = Logger(namespace="sluice.security.users")

    def __init__(self, store: Any, *, max_users: int = MAX_USERS) -> None:
        self.store = store
        self.max_users = max_users
        self._credentials: dict[str, dict[str, ScramCredential]] = {}
        self._watches: dict[str, Any] = {}  # user name -> its data watch
        self._children_watch: Any = None
        #: Per user, the value last reported as unreadable (reported once, not per delivery).
        self._reported: dict[str, bytes] = {}
        self._reported_children: set[str] = set()
        self._over_cap = False
        self._pending: set[str] = set()  # users whose first value has not arrived yet
        self._ready: defer.Deferred | None = None
        self._listed = False
        # A credential no user has, checked when a PLAIN login names an unknown user, so that
        # an unknown user costs the same time as a wrong password.
        self._decoy = ScramCredential.from_password("SCRAM-SHA-512", os.urandom(16).hex(),
                                                    iterations=MIN_ITERATIONS)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> defer.Deferred:
        """Watch ``/config/users`` (it must exist: a broker ensures it at start). Returns a
        Deferred that fires once the user list and each listed user's value have been read
        for the first time."""
        self._ready = defer.Deferred()
        self._children_watch = self.store.watch_children(paths.USER_CONFIGS, self._on_children)
        return self._ready

    def stop(self) -> None:
        """Cancel every watch; the cache keeps its last contents."""
        if self._children_watch is not None:
            self._children_watch.cancel()
            self._children_watch = None
        for w in self._watches.values():
            w.cancel()
        self._watches.clear()

    # -- the seam ------------------------------------------------------------------------------

    def lookup(self, mechanism: str, username: str) -> ScramCredential | None:
        """The stored ``mechanism`` credential of ``username``, or None."""
        return self._credentials.get(username, {}).get(mechanism)

    def check_plain(self, username: str, password: str) -> bool:
        """Whether ``password`` is ``username``'s, checked against the stored SCRAM-SHA-512
        credential (else SCRAM-SHA-256): the salted password is recomputed with the stored
        salt and iterations and both derived keys are compared in constant time. An unknown
        user is checked against a decoy credential, so the answer takes as long."""
        stored = self.lookup("SCRAM-SHA-512", username) or self.lookup("SCRAM-SHA-256",
                                                                        username)
        known = stored is not None
        cred = stored if stored is not None else self._decoy
        salted = salted_password(cred.mechanism, password, cred.salt, cred.iterations)
        derived = ScramCredential.from_salted_password(cred.mechanism, cred.salt, salted,
                                                       cred.iterations)
        same = (hmac.compare_digest(derived.stored_key, cred.stored_key)
                & hmac.compare_digest(derived.server_key, cred.server_key))
        return known and same

    def users(self) -> dict[str, tuple[str, ...]]:
        """User name → the mechanisms it has a usable credential for (for tools and tests)."""
        return {u: tuple(sorted(c)) for u, c in sorted(self._credentials.items()) if c}

    # -- watches -------------------------------------------------------------------------------

    def _on_children(self, children: list[str] | None) -> None:
        wanted: dict[str, str] = {}
        for child in sorted(children or ()):
            name = paths.desanitize_user(child)
            problem = "not the encoding of a user name" if name is None else None
            if name is not None:
                try:
                    validate_user_name(name)
                except ValueError as e:
                    problem = str(e)
            if problem is not None:
                if child not in self._reported_children:
                    self._reported_children.add(child)
                    self.log.warn("ignoring {path}/{child}: {why}", path=paths.USER_CONFIGS,
                                  child=_printable(child), why=problem)
                continue
            wanted[name] = child
        if len(wanted) > self.max_users:
            if not self._over_cap:
                self.log.error("{n} users are stored but a broker caches at most {cap}: the "
                               "users after {last} in name order cannot log in",
                               n=len(wanted), cap=self.max_users,
                               last=_printable(sorted(wanted)[self.max_users - 1]))
            self._over_cap = True
            wanted = dict(sorted(wanted.items())[:self.max_users])
        else:
            self._over_cap = False
        for name in list(self._watches):
            if name not in wanted:
                self._watches.pop(name).cancel()
                self._credentials.pop(name, None)
                self._reported.pop(name, None)
                self._pending.discard(name)
        for name in wanted:
            if name not in self._watches:
                self._pending.add(name)
                self._watches[name] = self.store.watch_data(
                    paths.user_config(name), self._data_callback(name))
        self._listed = True
        self._check_ready()

    def _data_callback(self, name: str) -> Callable[[bytes | None, Any], None]:
        def on_data(data: bytes | None, stat: Any) -> None:
            if name in self._watches:  # not removed meanwhile
                self._on_data(name, data)
            self._pending.discard(name)
            self._check_ready()
        return on_data

    def _on_data(self, name: str, data: bytes | None) -> None:
        if data is None:
            self._credentials.pop(name, None)
            return
        try:
            config = UserConfig.from_bytes(data)
        except ValueError as e:
            self._credentials.pop(name, None)
            self._report(name, data, str(e))
            return
        if config.problems:
            self._report(name, data, "; ".join(config.problems))
        else:
            self._reported.pop(name, None)
        self._credentials[name] = dict(config.credentials)

    def _report(self, name: str, data: bytes, why: str) -> None:
        digest = hashlib.sha256(data).digest()
        if self._reported.get(name) != digest:
            self._reported[name] = digest
            self.log.warn("the stored credentials of user {user} are unreadable and not used: "
                          "{why}", user=_printable(name), why=why[:300])

    def _check_ready(self) -> None:
        if self._ready is not None and self._listed and not self._pending:
            ready, self._ready = self._ready, None
            ready.callback(None)
