"""Access control lists in Kafka's model, and the authorizer that answers from them.

No I/O here: :mod:`broker_core.acl_store` keeps the bindings in the metadata store and
feeds an :class:`Authorizer` through :meth:`Authorizer.replace_resource`; the request handler
asks :meth:`Authorizer.authorize`.

A binding says: *principal* from *host* is ALLOWed or DENYed *operation* on the resources a
*pattern* (resource type, pattern type, name) covers. A LITERAL pattern covers the resource of
that name, or every resource of its type when the name is ``*``; a PREFIXED pattern covers
every name that starts with it. The numbers of every enum are Kafka's wire codes.

Rules (Kafka's ``AclAuthorizer``), in the order :meth:`Authorizer.authorize` applies them:

1. a super user (``super.users``) is allowed everything;
2. no binding covers the resource at all: ``allow.everyone.if.no.acl.found`` decides;
3. a DENY binding for the principal (or ``User:*``), the host (or ``*``) and the operation (or
   ALL) refuses, whatever else allows;
4. an ALLOW binding allows its operation, ALL allows every operation, and READ, WRITE, DELETE
   and ALTER each imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS;
5. otherwise refused.

Invariants: a stored :class:`AclBinding` has passed :meth:`AclBinding.validate` (so it names
a concrete resource type, pattern type, operation and permission); an :class:`Authorizer`'s
settings (super users, allow-if-no-ACL) are fixed at construction, its answers depend only on
them and its bindings, and its memo of answers is dropped whenever a binding changes.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker_core.security.principal import Principal, canonical_host

#: The one name a CLUSTER resource has (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: The wildcard resource name, principal name and host.
WILDCARD = "*"
#: Longest resource name a binding may carry (topic and group names are at most 249).
MAX_NAME_LENGTH = 249
#: Longest principal text a binding may carry.
MAX_PRINCIPAL_LENGTH = 512
#: How many authorization answers are remembered between ACL changes: the Metadata path asks
#: once per topic per request, so a large cluster asks thousands of times a second.
MEMO_ENTRIES = 65536


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes. Sluice keeps ACLs on TOPIC, GROUP and CLUSTER only:
    it has no transactional ids, delegation tokens or user resources to protect."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


#: The resource types a binding may name.
BINDABLE_TYPES = frozenset({ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER})


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes; ANY and MATCH are for filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes; ANY is for filters only."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermission(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes; ANY is for filters only."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: An operation is allowed by an ALLOW binding of any of these operations (ALL aside).
_ALLOWED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op}) for op in AclOperation}
_ALLOWED_BY[AclOperation.DESCRIBE] = frozenset({
    AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
    AclOperation.ALTER})
_ALLOWED_BY[AclOperation.DESCRIBE_CONFIGS] = frozenset({
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_CONCRETE_OPERATIONS = frozenset(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY}
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidAcl(ValueError):
    """A binding or filter that cannot be stored or applied; the message says why."""


def _name(kind: type[enum.IntEnum], code: int) -> str:
    try:
        return kind(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class ResourcePattern:
    """The resources a binding covers: a type, a pattern type (LITERAL or PREFIXED), a name."""

    resource_type: ResourceType
    pattern_type: PatternType
    name: str

    def validate(self) -> None:
        """Raise :class:`InvalidAcl` unless this pattern can be stored."""
        if self.resource_type not in BINDABLE_TYPES:
            raise InvalidAcl(f"resource type {_name(ResourceType, self.resource_type)} cannot "
                             "carry ACLs here (only TOPIC, GROUP and CLUSTER)")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"pattern type {_name(PatternType, self.pattern_type)} is for "
                             "filters; a binding is LITERAL or PREFIXED")
        name = self.name
        if not name:
            raise InvalidAcl("the resource name is empty")
        if len(name) > MAX_NAME_LENGTH:
            raise InvalidAcl(f"the resource name is {len(name)} characters; the limit is "
                             f"{MAX_NAME_LENGTH}")
        if name == WILDCARD:
            if self.pattern_type is PatternType.PREFIXED:
                raise InvalidAcl("'*' is a LITERAL wildcard; a PREFIXED '*' would match only "
                                 "names starting with '*'")
            return
        # Names become one path component in the metadata store: '.', '..' and '/' cannot.
        if name in (".", "..") or "/" in name:
            raise InvalidAcl(f"resource name {name!r} cannot be '.', '..' or contain '/'")
        if self.resource_type is ResourceType.CLUSTER:
            if name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL:
                raise InvalidAcl(f"the CLUSTER resource is the LITERAL {CLUSTER_NAME!r}")
        elif self.resource_type is ResourceType.TOPIC:
            if not _TOPIC_CHARS.match(name):
                raise InvalidAcl(f"topic name {name!r} has characters other than ASCII "
                                 "letters, digits, '.', '_' and '-'")
        elif any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
            raise InvalidAcl(f"group name {name!r} has control characters")

    def covers(self, name: str) -> bool:
        """Whether a resource of this type named ``name`` is covered by this pattern."""
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == WILDCARD or self.name == name

    def __str__(self) -> str:
        return (f"{self.resource_type.name.capitalize()}:{self.pattern_type.name}:"
                f"{self.name}")


@dataclass(frozen=True)
class AccessEntry:
    """Who may or may not do what on a pattern: Kafka's ``AccessControlEntry``."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def __post_init__(self) -> None:
        # Hosts are compared as text with the connection's canonical peer host: an address is
        # kept in that same form (``::ffff:10.0.0.5`` is ``10.0.0.5``), whoever wrote it.
        if self.host != WILDCARD:
            object.__setattr__(self, "host", canonical_host(self.host))

    def validate(self) -> None:
        """Raise :class:`InvalidAcl` unless this entry can be stored."""
        if len(self.principal) > MAX_PRINCIPAL_LENGTH:
            raise InvalidAcl(f"the principal is longer than {MAX_PRINCIPAL_LENGTH} characters")
        try:
            Principal.parse(self.principal)
        except ValueError as e:
            raise InvalidAcl(str(e)) from None
        if self.host != WILDCARD:
            try:
                ipaddress.ip_address(self.host)
            except ValueError:
                raise InvalidAcl(f"host {self.host!r} is neither '*' nor an IP address") \
                    from None
        if self.operation not in _CONCRETE_OPERATIONS:
            raise InvalidAcl(f"operation {_name(AclOperation, self.operation)} is for filters; "
                             "a binding names one operation (or ALL)")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise InvalidAcl(f"permission {_name(AclPermission, self.permission)} is for "
                             "filters; a binding ALLOWs or DENYs")

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal == principal or self.principal == "User:*") and \
            (self.host == WILDCARD or self.host == host)


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a pattern and an entry (Kafka's ``AclBinding``)."""

    pattern: ResourcePattern
    entry: AccessEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()

    def __str__(self) -> str:
        e = self.entry
        return (f"{e.permission.name} {e.principal} from {e.host} {e.operation.name} on "
                f"{self.pattern}")


def binding(resource_type: int, pattern_type: int, name: str, principal: str, host: str,
            operation: int, permission: int) -> AclBinding:
    """An :class:`AclBinding` from wire codes, validated; :class:`InvalidAcl` otherwise."""
    try:
        b = AclBinding(
            ResourcePattern(ResourceType(resource_type), PatternType(pattern_type), name),
            AccessEntry(principal, host, AclOperation(operation), AclPermission(permission)))
    except ValueError:
        raise InvalidAcl(f"unknown code among resource type {resource_type}, pattern type "
                         f"{pattern_type}, operation {operation}, permission {permission}") \
            from None
    b.validate()
    return b


@dataclass(frozen=True)
class AclFilter:
    """Which bindings a DescribeAcls or DeleteAcls request means (Kafka's ``AclBindingFilter``).

    ``None`` for a name, principal or host matches any; ANY matches any type, pattern type,
    operation or permission. Pattern type MATCH with a name matches every binding that
    covers that resource: the LITERAL name, the LITERAL ``*`` and every PREFIXED pattern the
    name starts with.
    """

    resource_type: ResourceType
    pattern_type: PatternType
    name: str | None
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def __post_init__(self) -> None:
        # The same form the bindings' hosts are stored in (AccessEntry).
        if self.host is not None and self.host != WILDCARD:
            object.__setattr__(self, "host", canonical_host(self.host))

    @classmethod
    def from_wire(cls, resource_type: int, pattern_type: int, name: str | None,
                  principal: str | None, host: str | None, operation: int,
                  permission: int) -> AclFilter:
        try:
            f = cls(ResourceType(resource_type), PatternType(pattern_type), name, principal,
                    host, AclOperation(operation), AclPermission(permission))
        except ValueError:
            raise InvalidAcl(f"unknown code among resource type {resource_type}, pattern "
                             f"type {pattern_type}, operation {operation}, permission "
                             f"{permission}") from None
        if f.resource_type is ResourceType.UNKNOWN or f.pattern_type is PatternType.UNKNOWN \
                or f.operation is AclOperation.UNKNOWN or f.permission is AclPermission.UNKNOWN:
            raise InvalidAcl("a filter cannot name UNKNOWN")
        return f

    def matches(self, b: AclBinding) -> bool:
        p, e = b.pattern, b.entry
        if self.resource_type is not ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None and not p.covers(self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and self.pattern_type != p.pattern_type:
                return False
            if self.name is not None and self.name != p.name:
                return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation is AclOperation.ANY or self.operation == e.operation)
                and (self.permission is AclPermission.ANY or self.permission == e.permission))


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: ``User:a;User:b`` → their principal texts; ValueError when malformed."""
    out = set()
    for item in (text or "").split(";"):
        item = item.strip()
        if item:
            out.add(str(Principal.parse(item)))
    return frozenset(out)


class Authorizer:
    """Answers "may this principal from this host do this on this resource?"; see the module
    docstring for the rules.

    Bindings are indexed by pattern, and PREFIXED patterns also by their length, so one
    question costs a few dictionary lookups however many bindings there are; answers are
    memoized until the next change.
    """

    def __init__(self, *, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._by_pattern: dict[ResourcePattern, frozenset[AccessEntry]] = {}
        #: resource type → lengths of its PREFIXED patterns (how many → how many patterns).
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    # -- the bindings ---------------------------------------------------------------------------

    def replace_resource(self, pattern: ResourcePattern, entries: Iterable[AccessEntry]) -> None:
        """Make ``entries`` the whole set of entries of ``pattern`` (empty: it has none)."""
        new = frozenset(entries)
        old = self._by_pattern.pop(pattern, None)
        if old is not None and pattern.pattern_type is PatternType.PREFIXED:
            self._count_prefix(pattern, -1)
        if new:
            self._by_pattern[pattern] = new
            if pattern.pattern_type is PatternType.PREFIXED:
                self._count_prefix(pattern, +1)
        self._memo.clear()

    def clear(self) -> None:
        self._by_pattern.clear()
        self._prefix_lengths.clear()
        self._memo.clear()

    def _count_prefix(self, pattern: ResourcePattern, delta: int) -> None:
        lengths = self._prefix_lengths.setdefault(pattern.resource_type, {})
        n = lengths.get(len(pattern.name), 0) + delta
        if n > 0:
            lengths[len(pattern.name)] = n
        else:
            lengths.pop(len(pattern.name), None)

    def bindings(self) -> list[AclBinding]:
        """Every binding, in a stable order (by pattern, then entry)."""
        out = []
        for pattern in sorted(self._by_pattern, key=lambda p: (p.resource_type, p.pattern_type,
                                                              p.name)):
            for e in sorted(self._by_pattern[pattern], key=lambda e: (
                    e.principal, e.host, e.operation, e.permission)):
                out.append(AclBinding(pattern, e))
        return out

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if acl_filter.matches(b)]

    # -- the question ---------------------------------------------------------------------------

    def covering(self, resource_type: ResourceType, name: str) -> list[AccessEntry]:
        """Every entry of every pattern that covers the resource."""
        found: list[AccessEntry] = []
        for key in (ResourcePattern(resource_type, PatternType.LITERAL, name),
                    ResourcePattern(resource_type, PatternType.LITERAL, WILDCARD)):
            found.extend(self._by_pattern.get(key, ()))
        for length in self._prefix_lengths.get(resource_type, {}):
            if length <= len(name):
                found.extend(self._by_pattern.get(ResourcePattern(
                    resource_type, PatternType.PREFIXED, name[:length]), ()))
        return found

    def authorize(self, principal: Principal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        key = (who, host, operation, resource_type, name)
        answer = self._memo.get(key)
        if answer is None:
            answer = self._decide(who, host, operation, resource_type, name)
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            self._memo[key] = answer
        return answer

    def authorize_any(self, principal: Principal | str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of
        ``resource_type`` (Kafka's ``authorizeByResourceType``, KIP-679: InitProducerId's
        "WRITE on any topic"): an ALLOW binding of the principal for it whose pattern no DENY
        binding of the principal covers, and no DENY on the wildcard. Without any binding of
        that type, ``allow_if_no_acl``."""
        who = str(principal)
        if who in self.super_users:
            return True
        allowed_by = _ALLOWED_BY[operation]
        allows: list[ResourcePattern] = []
        denies: list[ResourcePattern] = []
        any_binding = False
        for pattern, entries in self._by_pattern.items():
            if pattern.resource_type is not resource_type:
                continue
            any_binding = True
            for e in entries:
                if not e.applies_to(who, host):
                    continue
                if e.permission is AclPermission.DENY and (
                        e.operation is AclOperation.ALL or e.operation is operation):
                    denies.append(pattern)
                elif e.permission is AclPermission.ALLOW and (
                        e.operation is AclOperation.ALL or e.operation in allowed_by):
                    allows.append(pattern)
        if not any_binding:
            return self.allow_if_no_acl
        if any(d.pattern_type is PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False
        for a in allows:
            denied = any(
                (d.pattern_type is PatternType.LITERAL and a.pattern_type is PatternType.LITERAL
                 and d.name == a.name)
                or (d.pattern_type is PatternType.PREFIXED and a.name != WILDCARD
                    and a.name.startswith(d.name))
                for d in denies)
            if not denied:
                return True
        return False

    def _decide(self, who: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        entries = self.covering(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        mine = [e for e in entries if e.applies_to(who, host)]
        if any(e.permission is AclPermission.DENY
               and (e.operation is AclOperation.ALL or e.operation is operation) for e in mine):
            return False
        allowed_by = _ALLOWED_BY[operation]
        return any(e.permission is AclPermission.ALLOW
                   and (e.operation is AclOperation.ALL or e.operation in allowed_by)
                   for e in mine)


def group_by_pattern(bindings: Iterable[AclBinding]
                     ) -> Mapping[ResourcePattern, list[AccessEntry]]:
    out: dict[ResourcePattern, list[AccessEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, []).append(b.entry)
    return out
