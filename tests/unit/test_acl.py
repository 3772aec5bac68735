"""The ACL model and the authorizer (``broker_core.security.acl``): matching by LITERAL,
wildcard and PREFIXED patterns, DENY over ALLOW, ALL, the operations that imply DESCRIBE and
DESCRIBE_CONFIGS, super users, ``allow.everyone.if.no.acl.found``, and validation of what may
be stored."""

from __future__ import annotations

import pytest

from broker_core.security.acl import (
    AccessEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    InvalidAcl,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding,
    parse_super_users,
)
from broker_core.security.principal import Principal

Op, Perm, RT, PT = AclOperation, AclPermission, ResourceType, PatternType
ALICE, BOB = Principal("User", "alice"), Principal("User", "bob")


def entry(principal="User:alice", op=Op.READ, perm=Perm.ALLOW, host="*") -> AccessEntry:
    return AccessEntry(principal, host, op, perm)


def topic(name: str, pattern=PT.LITERAL) -> ResourcePattern:
    return ResourcePattern(RT.TOPIC, pattern, name)


def authorizer(*pairs, **kw) -> Authorizer:
    a = Authorizer(**kw)
    grouped: dict = {}
    for pattern, e in pairs:
        grouped.setdefault(pattern, []).append(e)
    for pattern, entries in grouped.items():
        a.replace_resource(pattern, entries)
    return a


def test_a_literal_allow_covers_its_topic_only():
    a = authorizer((topic("orders"), entry()))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, RT.TOPIC, "orders2")
    assert not a.authorize(BOB, "10.0.0.1", Op.READ, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.WRITE, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, RT.GROUP, "orders")


def test_the_wildcard_name_covers_every_resource_of_its_type():
    a = authorizer((topic("*"), entry()))
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "anything")
    assert not a.authorize(ALICE, "h", Op.READ, RT.GROUP, "anything")


def test_a_prefixed_pattern_covers_names_starting_with_it():
    a = authorizer((topic("fin-", PT.PREFIXED), entry()), (topic("f", PT.PREFIXED),
                                                           entry("User:bob")))
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin-ledger")
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin-")
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin")
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "hr-fin-x")
    assert a.authorize(BOB, "h", Op.READ, RT.TOPIC, "fin")
    # Removing the longer prefix leaves the shorter one working.
    a.replace_resource(topic("fin-", PT.PREFIXED), [])
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin-ledger")
    assert a.authorize(BOB, "h", Op.READ, RT.TOPIC, "fin-ledger")


def test_deny_wins_over_any_allow():
    a = authorizer((topic("*"), entry(op=Op.ALL)),
                   (topic("secret", PT.PREFIXED), entry(op=Op.READ, perm=Perm.DENY)))
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "public")
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "secret-plans")
    # A DENY of READ does not deny what only READ's ALLOW would imply.
    assert a.authorize(ALICE, "h", Op.DESCRIBE, RT.TOPIC, "secret-plans")
    a.replace_resource(topic("secret", PT.PREFIXED), [entry(op=Op.ALL, perm=Perm.DENY)])
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, RT.TOPIC, "secret-plans")


def test_a_deny_for_every_user_denies_each_of_them():
    a = authorizer((topic("t"), entry(op=Op.ALL)),
                   (topic("t"), entry("User:*", op=Op.WRITE, perm=Perm.DENY)))
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "t")
    assert not a.authorize(ALICE, "h", Op.WRITE, RT.TOPIC, "t")


def test_all_allows_every_operation():
    a = authorizer((topic("t"), entry(op=Op.ALL)))
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
               Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert a.authorize(ALICE, "h", op, RT.TOPIC, "t"), op


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_alter_imply_describe(op):
    a = authorizer((topic("t"), entry(op=op)))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, RT.TOPIC, "t")
    assert not a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")


def test_create_does_not_imply_describe_and_alter_configs_implies_describe_configs():
    a = authorizer((topic("t"), entry(op=Op.CREATE)), (topic("u"), entry(op=Op.ALTER_CONFIGS)))
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, RT.TOPIC, "t")
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "u")
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, RT.TOPIC, "u")


def test_host_restricts_an_entry():
    a = authorizer((topic("t"), entry(host="10.0.0.1")))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, RT.TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, RT.TOPIC, "t")


def test_acl_hosts_are_stored_and_matched_in_the_canonical_form_of_peer_hosts():
    """An IPv4 host written as IPv4-mapped IPv6 (or an IPv6 one in a long form) is stored as
    the connection's peer host is named (broker_core.security.principal.canonical_host), so
    an entry for an IPv4 client matches whichever listener family accepted it."""
    b = binding(RT.TOPIC, PT.LITERAL, "t", "User:alice", "::ffff:10.0.0.5", Op.READ,
                Perm.ALLOW)
    assert b.entry.host == "10.0.0.5"
    assert entry(host="2001:DB8:0::1").host == "2001:db8::1"
    a = authorizer((topic("t"), b.entry))
    assert a.authorize(ALICE, "10.0.0.5", Op.READ, RT.TOPIC, "t")
    # A filter names the host the same way.
    f = AclFilter(RT.ANY, PT.ANY, None, None, "::ffff:10.0.0.5", Op.ANY, Perm.ANY)
    assert f.host == "10.0.0.5" and f.matches(b)


def test_super_users_bypass_every_acl_even_a_deny():
    a = authorizer((topic("t"), entry("User:root", op=Op.ALL, perm=Perm.DENY)),
                   super_users=parse_super_users("User:root; User:admin"))
    assert a.authorize(Principal("User", "root"), "h", Op.DELETE, RT.TOPIC, "t")
    assert a.authorize("User:admin", "h", Op.ALTER, RT.CLUSTER, "kafka-cluster")
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "t")


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls():
    open_ = authorizer((topic("guarded"), entry("User:bob")), allow_if_no_acl=True)
    assert open_.authorize(ALICE, "h", Op.WRITE, RT.TOPIC, "unguarded")
    assert not open_.authorize(ALICE, "h", Op.READ, RT.TOPIC, "guarded")
    closed = authorizer((topic("guarded"), entry("User:bob")))
    assert not closed.authorize(ALICE, "h", Op.WRITE, RT.TOPIC, "unguarded")


def test_the_memo_is_dropped_on_every_change():
    a = authorizer()
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "t")
    a.replace_resource(topic("t"), [entry()])
    assert a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "t")
    a.replace_resource(topic("t"), [])
    assert not a.authorize(ALICE, "h", Op.READ, RT.TOPIC, "t")


@pytest.mark.parametrize("args, why", [
    ((RT.TRANSACTIONAL_ID, PT.LITERAL, "x"), "only TOPIC, GROUP and CLUSTER"),
    ((RT.TOPIC, PT.MATCH, "x"), "for filters"),
    ((RT.TOPIC, PT.PREFIXED, "*"), "LITERAL wildcard"),
    ((RT.TOPIC, PT.LITERAL, "a/b"), "contain '/'"),
    ((RT.TOPIC, PT.LITERAL, ".."), "'..'"),
    ((RT.TOPIC, PT.LITERAL, "spa ce"), "characters other than"),
    ((RT.TOPIC, PT.LITERAL, "x" * 250), "the limit is 249"),
    ((RT.CLUSTER, PT.LITERAL, "other"), "kafka-cluster"),
    ((RT.GROUP, PT.LITERAL, ""), "empty"),
])
def test_invalid_patterns_are_refused_with_the_reason(args, why):
    with pytest.raises(InvalidAcl, match=why):
        ResourcePattern(*args).validate()


@pytest.mark.parametrize("kw, why", [
    ({"principal": "alice"}, "TYPE:NAME"),
    ({"host": "example.com"}, "neither"),
    ({"op": Op.ANY}, "for filters"),
    ({"perm": Perm.ANY}, "for filters"),
])
def test_invalid_entries_are_refused_with_the_reason(kw, why):
    with pytest.raises(InvalidAcl, match=why):
        entry(**kw).validate()


def test_binding_from_unknown_wire_codes_is_refused():
    with pytest.raises(InvalidAcl, match="unknown code"):
        binding(2, 3, "t", "User:a", "*", 99, 3)
    b = binding(2, 4, "t-", "User:a", "::1", 3, 2)
    assert b.entry.permission is Perm.DENY and b.pattern.pattern_type is PT.PREFIXED


def test_filters_match_any_literal_prefixed_and_match_patterns():
    lit = AclBinding(topic("orders"), entry())
    wild = AclBinding(topic("*"), entry())
    pre = AclBinding(topic("ord", PT.PREFIXED), entry("User:bob", Op.WRITE))
    group = AclBinding(ResourcePattern(RT.GROUP, PT.LITERAL, "orders"), entry())
    every = [lit, wild, pre, group]

    def f(rt=RT.ANY, pt=PT.ANY, name=None, principal=None, op=Op.ANY, perm=Perm.ANY):
        return AclFilter(rt, pt, name, principal, None, op, perm)

    assert [b for b in every if f().matches(b)] == every
    assert [b for b in every if f(RT.TOPIC, name="orders").matches(b)] == [lit]
    assert [b for b in every if f(RT.TOPIC, PT.MATCH, "orders").matches(b)] == [lit, wild, pre]
    assert [b for b in every if f(pt=PT.PREFIXED).matches(b)] == [pre]
    assert [b for b in every if f(principal="User:bob").matches(b)] == [pre]
    assert [b for b in every if f(op=Op.READ, rt=RT.GROUP).matches(b)] == [group]
    with pytest.raises(InvalidAcl):
        AclFilter.from_wire(0, 1, None, None, None, 1, 1)


def test_bindings_lists_everything_in_a_stable_order():
    a = authorizer((topic("b"), entry("User:z")), (topic("a"), entry("User:y")),
                   (topic("a"), entry("User:x")))
    assert [(b.pattern.name, b.entry.principal) for b in a.bindings()] == [
        ("a", "User:x"), ("a", "User:y"), ("b", "User:z")]
