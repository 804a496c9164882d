"""The ACL authorizer, rule by rule (each with an allowed and a denied case), and against
a brute-force reading of Kafka's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclTable,
    InvalidAcl,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
)
from oncelog.security.principal import KafkaPrincipal

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
ALICE, BOB = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
HOST = "10.0.0.1"


def acl(
    resource: ResourceType,
    name: str,
    op: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource, name, pattern),
        AccessControlEntry(principal, host, op, permission),
    )


def authorizer(*bindings: AclBinding, **options: object) -> AclAuthorizer:
    return AclAuthorizer(AclTable(bindings), **options)  # type: ignore[arg-type]


def may(
    auth: AclAuthorizer,
    op: AclOperation,
    resource: ResourceType,
    name: str,
    principal: KafkaPrincipal = ALICE,
    host: str = HOST,
) -> bool:
    return auth.authorize(principal, host, op, resource, name)


def test_literal_allow_grants_only_that_resource_and_operation() -> None:
    auth = authorizer(acl(TOPIC, "orders", Op.WRITE))
    assert may(auth, Op.WRITE, TOPIC, "orders")
    assert not may(auth, Op.READ, TOPIC, "orders")
    assert not may(auth, Op.WRITE, TOPIC, "orders2")
    assert not may(auth, Op.WRITE, GROUP, "orders")
    assert not may(auth, Op.WRITE, TOPIC, "orders", principal=BOB)


def test_prefixed_allow_grants_names_that_start_with_it() -> None:
    auth = authorizer(acl(TOPIC, "etl-", Op.READ, pattern=PREFIXED))
    assert may(auth, Op.READ, TOPIC, "etl-orders")
    assert may(auth, Op.READ, TOPIC, "etl-")
    assert not may(auth, Op.READ, TOPIC, "etl")
    assert not may(auth, Op.READ, TOPIC, "x-etl-orders")


def test_wildcard_resource_and_wildcard_principal() -> None:
    auth = authorizer(acl(GROUP, "*", Op.READ, principal="User:*"))
    assert may(auth, Op.READ, GROUP, "any-group", principal=BOB)
    assert not may(auth, Op.READ, TOPIC, "any-group", principal=BOB)


def test_host_must_match_or_be_the_wildcard() -> None:
    auth = authorizer(acl(TOPIC, "t", Op.READ, host="10.0.0.2"))
    assert may(auth, Op.READ, TOPIC, "t", host="10.0.0.2")
    assert not may(auth, Op.READ, TOPIC, "t", host=HOST)


def test_all_operation_grants_every_operation() -> None:
    auth = authorizer(acl(TOPIC, "t", Op.ALL))
    assert all(may(auth, op, TOPIC, "t") for op in (Op.READ, Op.WRITE, Op.DELETE, Op.DESCRIBE))


@pytest.mark.parametrize("granting", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied(granting: AclOperation) -> None:
    assert may(authorizer(acl(TOPIC, "t", granting)), Op.DESCRIBE, TOPIC, "t")


def test_describe_is_not_implied_by_create_and_does_not_imply_the_others() -> None:
    assert not may(authorizer(acl(TOPIC, "t", Op.CREATE)), Op.DESCRIBE, TOPIC, "t")
    assert not may(authorizer(acl(TOPIC, "t", Op.DESCRIBE)), Op.READ, TOPIC, "t")


def test_alter_configs_implies_describe_configs() -> None:
    assert may(authorizer(acl(TOPIC, "t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not may(authorizer(acl(TOPIC, "t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, TOPIC, "t")


def test_deny_wins_over_allow() -> None:
    auth = authorizer(
        acl(TOPIC, "*", Op.ALL, principal="User:*"),
        acl(TOPIC, "secret", Op.READ, DENY),
    )
    assert not may(auth, Op.READ, TOPIC, "secret")
    assert may(auth, Op.READ, TOPIC, "secret", principal=BOB)
    assert may(auth, Op.READ, TOPIC, "public")


def test_prefixed_deny_wins_over_literal_allow() -> None:
    auth = authorizer(
        acl(TOPIC, "hr-payroll", Op.READ), acl(TOPIC, "hr-", Op.READ, DENY, pattern=PREFIXED)
    )
    assert not may(auth, Op.READ, TOPIC, "hr-payroll")


def test_a_deny_is_not_implied() -> None:
    """Denying Read does not deny Describe, which Write still grants."""
    auth = authorizer(acl(TOPIC, "t", Op.WRITE), acl(TOPIC, "t", Op.READ, DENY))
    assert may(auth, Op.DESCRIBE, TOPIC, "t")
    assert not may(auth, Op.READ, TOPIC, "t")


def test_deny_from_one_host_only() -> None:
    auth = authorizer(acl(TOPIC, "t", Op.READ), acl(TOPIC, "t", Op.READ, DENY, host="10.9.9.9"))
    assert may(auth, Op.READ, TOPIC, "t")
    assert not may(auth, Op.READ, TOPIC, "t", host="10.9.9.9")


def test_super_users_may_do_anything_even_when_denied() -> None:
    auth = authorizer(
        acl(CLUSTER, "kafka-cluster", Op.ALL, DENY, principal="User:admin"),
        super_users=frozenset({KafkaPrincipal.user("admin")}),
    )
    assert may(auth, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster", KafkaPrincipal.user("admin"))
    assert not may(auth, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")


def test_no_acl_on_a_resource_denies_unless_everyone_is_allowed() -> None:
    unrelated = acl(TOPIC, "other", Op.READ, principal="User:bob")
    assert not may(authorizer(unrelated), Op.READ, TOPIC, "t")
    open_auth = authorizer(unrelated, allow_everyone_if_no_acl_found=True)
    assert may(open_auth, Op.READ, TOPIC, "t")
    # An ACL for someone else on the resource makes it guarded: no longer open.
    assert not may(open_auth, Op.READ, TOPIC, "other")


def test_write_on_any_topic_by_resource_type() -> None:
    """KIP-679: an idempotent producer needs Write on some topic."""
    assert authorizer(acl(TOPIC, "orders", Op.WRITE)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, TOPIC
    )
    assert authorizer(acl(TOPIC, "etl-", Op.WRITE, pattern=PREFIXED)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, TOPIC
    )
    assert not authorizer(acl(TOPIC, "orders", Op.READ)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, TOPIC
    )
    assert not authorizer(acl(TOPIC, "orders", Op.WRITE)).authorize_by_resource_type(
        BOB, HOST, Op.WRITE, TOPIC
    )


def test_by_resource_type_respects_denies_that_cover_every_allow() -> None:
    def by_type(*bindings: AclBinding) -> bool:
        return authorizer(*bindings).authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)

    assert not by_type(acl(TOPIC, "orders", Op.WRITE), acl(TOPIC, "orders", Op.WRITE, DENY))
    assert not by_type(
        acl(TOPIC, "etl-x", Op.WRITE), acl(TOPIC, "etl", Op.WRITE, DENY, pattern=PREFIXED)
    )
    assert not by_type(acl(TOPIC, "a", Op.WRITE), acl(TOPIC, "*", Op.WRITE, DENY))
    assert by_type(acl(TOPIC, "a", Op.WRITE), acl(TOPIC, "b", Op.WRITE, DENY))
    assert by_type(acl(TOPIC, "*", Op.WRITE), acl(TOPIC, "b", Op.WRITE, DENY))


def test_validation_of_new_acls() -> None:
    validate_binding(acl(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
    bad = [
        (acl(CLUSTER, "other", Op.ALTER), "only valid name for the CLUSTER"),
        (acl(TOPIC, "", Op.READ), "empty resource name"),
        (acl(TOPIC, "a/b", Op.READ), "invalid resource name"),
        (acl(TOPIC, "t", Op.ANY), "unknown elements"),
        (acl(TOPIC, "t", Op.READ, AclPermissionType.ANY), "unknown elements"),
        (acl(TOPIC, "t", Op.READ, pattern=PatternType.MATCH), "unknown elements"),
        (acl(TOPIC, "t", Op.READ, principal="alice"), "principalType:principalName"),
    ]
    for binding, message in bad:
        with pytest.raises(InvalidAcl, match=message):
            validate_binding(binding)


def test_filters_as_describe_and_delete_use_them() -> None:
    table = AclTable(
        [
            acl(TOPIC, "orders", Op.READ),
            acl(TOPIC, "*", Op.READ),
            acl(TOPIC, "ord", Op.WRITE, pattern=PREFIXED),
            acl(TOPIC, "x", Op.READ, principal="User:bob"),
            acl(GROUP, "orders", Op.READ),
        ]
    )
    any_entry = AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY)

    def names(
        pattern: ResourcePatternFilter, entry: AccessControlEntryFilter = any_entry
    ) -> set[str]:
        return {str(b.pattern) for b in table.matching(AclBindingFilter(pattern, entry))}

    assert names(ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH)) == {
        "Topic:LITERAL:orders",
        "Topic:LITERAL:*",
        "Topic:PREFIXED:ord",
    }
    assert names(ResourcePatternFilter(TOPIC, "orders", PatternType.ANY)) == {
        "Topic:LITERAL:orders"
    }
    assert names(ResourcePatternFilter(ResourceType.ANY, "orders", LITERAL)) == {
        "Topic:LITERAL:orders",
        "Group:LITERAL:orders",
    }
    assert names(ResourcePatternFilter(TOPIC, None, PREFIXED)) == {"Topic:PREFIXED:ord"}
    bob_only = AccessControlEntryFilter("User:bob", None, Op.ANY, AclPermissionType.ANY)
    assert names(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY), bob_only) == {
        "Topic:LITERAL:x"
    }


# -- against a brute-force model -----------------------------------------------------------

NAMES = st.sampled_from(["a", "ab", "abc", "b", "*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
OPS = st.sampled_from(
    [
        Op.READ,
        Op.WRITE,
        Op.DESCRIBE,
        Op.ALL,
        Op.ALTER,
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
        Op.CREATE,
    ]
)
BINDINGS = st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBinding(
        ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm)
    ),
    st.sampled_from([TOPIC, GROUP]),
    NAMES,
    st.sampled_from([LITERAL, PREFIXED]),
    PRINCIPALS,
    st.sampled_from(["*", HOST, "10.0.0.2"]),
    OPS,
    st.sampled_from([ALLOW, DENY]),
)


def model_authorize(
    bindings: list[AclBinding],
    principal: str,
    host: str,
    op: AclOperation,
    resource: ResourceType,
    name: str,
    allow_everyone: bool,
) -> bool:
    """Kafka's rules read literally, over every binding, without any index."""
    applies = [
        b
        for b in bindings
        if ResourcePatternFilter(resource, name, PatternType.MATCH).matches(b.pattern)
    ]
    if not applies:
        return allow_everyone

    def matching(perm: AclPermissionType, ops: set[AclOperation]) -> bool:
        return any(
            b.entry.permission == perm
            and b.entry.principal in (principal, "User:*")
            and b.entry.host in (host, "*")
            and (b.entry.operation in ops or b.entry.operation == Op.ALL)
            for b in applies
        )

    if matching(DENY, {op}):
        return False
    implied = {
        Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    }.get(op, {op})
    return matching(ALLOW, implied)


@settings(max_examples=400, deadline=None)
@given(
    bindings=st.lists(BINDINGS, max_size=8),
    principal=st.sampled_from(["User:alice", "User:bob"]),
    host=st.sampled_from([HOST, "10.0.0.2"]),
    op=OPS.filter(lambda o: o is not Op.ALL),
    resource=st.sampled_from([TOPIC, GROUP]),
    name=st.sampled_from(["a", "ab", "abc", "abcd", "b", "c"]),
    allow_everyone=st.booleans(),
)
def test_authorize_agrees_with_the_model(
    bindings: list[AclBinding],
    principal: str,
    host: str,
    op: AclOperation,
    resource: ResourceType,
    name: str,
    allow_everyone: bool,
) -> None:
    auth = AclAuthorizer(AclTable(bindings), allow_everyone_if_no_acl_found=allow_everyone)
    expected = model_authorize(bindings, principal, host, op, resource, name, allow_everyone)
    assert auth.authorize(KafkaPrincipal.parse(principal), host, op, resource, name) == expected
