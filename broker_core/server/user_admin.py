"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): Kafka's user
management over the user store (:mod:`broker_core.security.user_store`).

The store-level functions (:func:`alter_credentials`, :func:`describe_credentials`) hold
Kafka's semantics and are shared by the broker's handlers (:class:`UserAdminApis`, mixed into
:class:`~broker_core.server.handlers.RequestHandler`) and by ``sluice users --zookeeper``.

Alter, per user named (one result each; a user's changes apply together or not at all), in
Kafka's order of checks:

1. an empty, reserved (``__`` first) or otherwise invalid name, iterations outside
   4096..16384, a salt or salted password of the wrong size → ``UNACCEPTABLE_CREDENTIAL``; a
   mechanism other than SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2) → ``UNSUPPORTED_SASL_MECHANISM``;
2. the same user and mechanism twice in one request → ``DUPLICATE_RESOURCE``;
3. deleting a credential the user does not have → ``RESOURCE_NOT_FOUND``;
4. a new user when :data:`~broker_core.security.user_store.MAX_USERS` are stored →
   ``POLICY_VIOLATION``;
5. otherwise the user's node is written with a conditional write (created; replaced; deleted
   once nothing is left in it) and the user gets 0.

Describe: a null or empty list describes every user that has a credential, in name order;
named users get ``RESOURCE_NOT_FOUND`` when they have none (or the name is invalid) and
``DUPLICATE_RESOURCE`` when named twice. Only mechanisms and iteration counts are answered,
never a salt or a key. Nothing here logs a password or a salted password.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker_core import metadata_paths as paths
from broker_core.metadata import BadVersion, MetadataStoreError, NodeExists, NoNode
from broker_core.security.scram_credential import MECHANISMS, ScramCredential
from broker_core.security.user_store import MAX_USERS, UserConfig, validate_user_name
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_user_scram_credentials import (
    MECHANISM_CODES,
    MECHANISM_TYPES,
)

#: Most users one request may name (its deletions and upsertions, or the users it describes):
#: each is a store read and write, so this bounds one request to seconds of store work; Kafka's
#: own tools send one or two. Beyond it every user named gets INVALID_REQUEST.
MAX_REQUEST_ENTRIES = 1000
#: How often a user's read-modify-write is tried when another admin changes the same user
#: between the read and the conditional write.
MAX_WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class Deletion:
    """Remove ``name``'s credential for Kafka's mechanism type ``mechanism``."""

    name: str
    mechanism: int


@dataclass(frozen=True)
class Upsertion:
    """Set ``name``'s credential for ``mechanism`` from a client-computed salted password.
    ``repr`` leaves the salted password out (it logs in as the user with SCRAM)."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return (f"Upsertion({self.name!r}, {MECHANISM_TYPES.get(self.mechanism, self.mechanism)}"
                f", iterations={self.iterations})")


def _result(user: str, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict:
    return {"user": user, "error_code": int(code), "error_message": message}


def _check_name(name: str) -> str | None:
    try:
        validate_user_name(name)
    except ValueError as e:
        return str(e)
    return None


async def alter_credentials(store: Any, deletions: Sequence[Deletion],
                            upsertions: Sequence[Upsertion], *,
                            max_users: int = MAX_USERS) -> list[dict]:
    """Apply a request's deletions and upsertions; one result dict (``user``,
    ``error_code``, ``error_message``) per user, in the order users first appear."""
    order: list[str] = []
    errors: dict[str, tuple[ErrorCode, str]] = {}

    def note(user: str) -> None:
        if user not in order:
            order.append(user)

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    def mechanism(user: str, code: int) -> str | None:
        name = MECHANISM_TYPES.get(code)
        if name is None:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                 f"unknown SCRAM mechanism type {code} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)")
        return name

    for d in deletions:
        note(d.name)
        problem = _check_name(d.name)
        if problem is not None:
            fail(d.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, problem)
        mechanism(d.name, d.mechanism)
    derived: dict[tuple[str, str], ScramCredential] = {}
    for u in upsertions:
        note(u.name)
        problem = _check_name(u.name)
        if problem is not None:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, problem)
        mech = mechanism(u.name, u.mechanism)
        if mech is None:
            continue
        try:
            derived[(u.name, mech)] = ScramCredential.from_salted_password(
                mech, u.salt, u.salted_password, u.iterations)
        except ValueError as e:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(e))
    pairs = Counter((e.name, e.mechanism) for e in [*deletions, *upsertions]
                    if e.name not in errors)
    for (user, _), seen in pairs.items():
        if seen > 1:
            fail(user, ErrorCode.DUPLICATE_RESOURCE,
                 "a user's credential for one mechanism is altered twice in the request")
    results = []
    for user in order:
        if user in errors:
            results.append(_result(user, *errors[user]))
            continue
        removed = [MECHANISM_TYPES[d.mechanism] for d in deletions if d.name == user]
        upserted = {m: c for (name, m), c in derived.items() if name == user}
        try:
            results.append(await _alter_user(store, user, removed, upserted, max_users))
        except MetadataStoreError as e:
            results.append(_result(user, ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"the metadata store failed: {type(e).__name__} {e}"))
    return results


async def _alter_user(store: Any, user: str, removed: list[str],
                      upserted: dict[str, ScramCredential], max_users: int) -> dict:
    """Read the user's node, apply the changes, write it back conditionally; read again when
    another writer got in between."""
    path = paths.user_config(user)
    for _ in range(MAX_WRITE_ATTEMPTS):
        try:
            data, stat = await store.get(path)
        except NoNode:
            data, stat = None, None
        config = UserConfig()
        if data is not None:
            try:
                config = UserConfig.from_bytes(data)
            except ValueError:
                pass  # unreadable as a whole: replaced by what this request sets
        credentials, other = dict(config.credentials), dict(config.other)
        for mech in removed:
            if mech in credentials:
                del credentials[mech]
            elif mech in other:  # a stored credential that does not parse may be removed
                del other[mech]
            else:
                return _result(user, ErrorCode.RESOURCE_NOT_FOUND,
                               f"no {mech} credential to delete")
        credentials.update(upserted)
        new = UserConfig(credentials, other)
        try:
            if stat is None:
                if len(await store.get_children(paths.USER_CONFIGS)) >= max_users:
                    return _result(user, ErrorCode.POLICY_VIOLATION,
                                   f"the cluster already has the maximum of {max_users} users")
                await store.create(path, new.to_bytes())
            elif new.empty:
                await store.delete(path, version=stat.version)
            else:
                await store.set(path, new.to_bytes(), version=stat.version)
        except (BadVersion, NodeExists, NoNode):
            continue  # changed meanwhile by another admin: read it again
        return _result(user)
    return _result(user, ErrorCode.UNKNOWN_SERVER_ERROR,
                   f"changed by others {MAX_WRITE_ATTEMPTS} times while this request tried "
                   "to alter it; try again")


def _describe_value(user: str, data: bytes) -> dict:
    try:
        config = UserConfig.from_bytes(data)
    except ValueError as e:
        return {**_result(user, ErrorCode.UNKNOWN_SERVER_ERROR,
                          f"the stored credentials are unreadable: {e}"),
                "credential_infos": []}
    infos = [{"mechanism": MECHANISM_CODES[m], "iterations": c.iterations}
             for m, c in sorted(config.credentials.items(), key=lambda mc: MECHANISM_CODES[mc[0]])]
    if config.problems:
        return {**_result(user, ErrorCode.UNKNOWN_SERVER_ERROR,
                          "stored credentials are unreadable: " + "; ".join(config.problems)),
                "credential_infos": infos}
    return {**_result(user), "credential_infos": infos}


def _has_credential(data: bytes) -> bool:
    """Whether a stored value names any SCRAM mechanism (readable or not)."""
    try:
        config = UserConfig.from_bytes(data)
    except ValueError:
        return True  # an unreadable value is reported, not hidden
    return bool(config.credentials) or any(k in MECHANISMS for k in config.other)


async def describe_credentials(store: Any, names: Sequence[str] | None, *,
                               max_users: int = MAX_USERS) -> list[dict]:
    """One result dict (``user``, ``error_code``, ``error_message``, ``credential_infos``)
    per user; see the module docstring. Store failures propagate (a request-level error)."""
    if not names:
        try:
            children = await store.get_children(paths.USER_CONFIGS)
        except NoNode:
            return []
        users = sorted(u for u in (paths.desanitize_user(c) for c in children)
                       if u is not None and _check_name(u) is None)[:max_users]
        found = await store.get_many([paths.user_config(u) for u in users])
        return [_describe_value(u, got[0]) for u, got in zip(users, found, strict=True)
                if got is not None and _has_credential(got[0])]
    counts = Counter(names)
    results = []
    for user in dict.fromkeys(names):  # each name once, in request order
        if counts[user] > 1:
            results.append({**_result(user, ErrorCode.DUPLICATE_RESOURCE,
                                      "named more than once in the request"),
                            "credential_infos": []})
            continue
        if _check_name(user) is not None:
            results.append({**_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                      f"no such user: {_check_name(user)}"),
                            "credential_infos": []})
            continue
        try:
            data, _ = await store.get(paths.user_config(user))
        except NoNode:
            data = None
        if data is None or not _has_credential(data):
            results.append({**_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                      "no SCRAM credential"),
                            "credential_infos": []})
        else:
            results.append(_describe_value(user, data))
    return results


class UserAdminApis:
    """The two APIs' handler methods, mixed into ``RequestHandler`` (which provides
    ``store``, ``log`` and ``authorize_cluster``). Both take the connection, whose principal
    must be allowed DESCRIBE (ALTER) on the cluster."""

    store: Any
    log: Any

    def authorize_cluster(self, proto: Any, operation: str) -> bool:
        raise NotImplementedError

    async def describe_user_scram_credentials(self, header: Any, body: Any,
                                              proto: Any) -> dict:
        if not self.authorize_cluster(proto, "DESCRIBE"):
            return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                    "error_message": "describing SCRAM credentials needs DESCRIBE on the "
                                     "cluster", "results": []}
        names = None if body.users is None else [u.name for u in body.users]
        if names is not None and len(names) > MAX_REQUEST_ENTRIES:
            return {"error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": f"{len(names)} users named; the limit is "
                                     f"{MAX_REQUEST_ENTRIES} per request", "results": []}
        try:
            results = await describe_credentials(self.store, names)
        except MetadataStoreError as e:
            return {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    "error_message": f"the metadata store failed: {type(e).__name__} {e}",
                    "results": []}
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "results": results}

    async def alter_user_scram_credentials(self, header: Any, body: Any, proto: Any) -> dict:
        deletions = [Deletion(d.name, d.mechanism) for d in body.deletions]
        upsertions = [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                                bytes(u.salted_password)) for u in body.upsertions]
        if not self.authorize_cluster(proto, "ALTER"):
            users = dict.fromkeys(e.name for e in [*deletions, *upsertions])
            return {"throttle_time_ms": 0, "results": [
                _result(u, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "altering SCRAM credentials needs ALTER on the cluster") for u in users]}
        if len(deletions) + len(upsertions) > MAX_REQUEST_ENTRIES:
            users = dict.fromkeys(e.name for e in [*deletions, *upsertions])
            return {"throttle_time_ms": 0, "results": [
                _result(u, ErrorCode.INVALID_REQUEST,
                        f"{len(deletions) + len(upsertions)} alterations in one request; the "
                        f"limit is {MAX_REQUEST_ENTRIES}") for u in users]}
        results = await alter_credentials(self.store, deletions, upsertions)
        who = getattr(getattr(proto, "security", None), "principal", "?")
        for r in results:
            changes = [f"-{MECHANISM_TYPES.get(d.mechanism, d.mechanism)}" for d in deletions
                       if d.name == r["user"]] + [
                f"+{MECHANISM_TYPES.get(u.mechanism, u.mechanism)}" for u in upsertions
                if u.name == r["user"]]
            outcome = "done" if r["error_code"] == 0 else ErrorCode(r["error_code"]).name
            self.log.info("SCRAM credentials of user {user} ({changes}) altered by {who}: "
                          "{outcome}", user=repr(r["user"][:80]), changes=" ".join(changes),
                          who=str(who), outcome=outcome)
        return {"throttle_time_ms": 0, "results": results}
