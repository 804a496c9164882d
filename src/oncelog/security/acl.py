"""Kafka's access-control model, and the decision whether a principal may act: a pure core.

An ACL binds a *resource pattern* (resource type, name, LITERAL or PREFIXED) to an *entry*
(principal, host, operation, ALLOW or DENY). :class:`AclAuthorizer` decides from an
immutable :class:`AclTable` the way Kafka 3.x's ``AclAuthorizer`` does (read for the rules
in ``core/.../security/authorizer/AclAuthorizer.scala``; the code here is our own):

1. a principal listed in ``super.users`` may do anything;
2. the ACLs that concern the resource are those on its literal name, on the wildcard name
   ``*``, and on every PREFIXED name it starts with; if there are none at all (for anyone,
   for any operation), ``allow.everyone.if.no.acl.found`` decides;
3. a DENY entry matching the principal (or ``User:*``), the client's address (or ``*``)
   and the operation (or ``All``) refuses, whatever allows it: deny wins;
4. otherwise an ALLOW entry matching the same way grants, where Read, Write, Delete and
   Alter also grant Describe, and AlterConfigs grants DescribeConfigs (Kafka's implied
   operations; a DENY is never implied: denying Read does not deny Describe).

:meth:`AclAuthorizer.authorize_by_resource_type` answers "may this principal do the
operation on *some* resource of the type" (KIP-679: an idempotent producer needs Write on
any topic), following Kafka's ``authorizeByResourceType``.

Nothing here does I/O: the tables are replaced whole when ACLs change, so a decision
always sees one consistent set.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Self

from oncelog.security.principal import WILDCARD_PRINCIPAL, KafkaPrincipal

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclAuthorizer",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclTable",
    "InvalidAcl",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "validate_binding",
]

CLUSTER_NAME = "kafka-cluster"  # the one name of the Cluster resource
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"


class _Named(enum.IntEnum):
    """An enum with Kafka's wire code as value and Kafka's display name."""

    kafka_name: str

    def __new__(cls, code: int, kafka_name: str) -> _Named:
        member = int.__new__(cls, code)
        member._value_ = code
        member.kafka_name = kafka_name
        return member

    @classmethod
    def from_name(cls, name: str) -> Self:
        """The member whose Kafka name (or enum name) is ``name``, case-insensitively."""
        wanted = name.replace("_", "").replace("-", "").lower()
        for member in cls:
            if wanted in (member.kafka_name.lower(), member.name.replace("_", "").lower()):
                return member
        raise ValueError(f"unknown {cls.__name__} {name!r}")

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with this wire code; UNKNOWN for codes this version does not know."""
        return next((m for m in cls if m.value == code), next(iter(cls)))  # UNKNOWN is first


class ResourceType(_Named):
    """Kafka's resource types (wire code, name): what an ACL protects."""

    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    TOPIC = (2, "Topic")
    GROUP = (3, "Group")
    CLUSTER = (4, "Cluster")
    TRANSACTIONAL_ID = (5, "TransactionalId")
    DELEGATION_TOKEN = (6, "DelegationToken")
    USER = (7, "User")


class PatternType(_Named):
    """How an ACL's resource name matches: LITERAL (or the * wildcard) or PREFIXED; ANY and
    MATCH only in filters."""

    UNKNOWN = (0, "UNKNOWN")
    ANY = (1, "ANY")
    MATCH = (2, "MATCH")
    LITERAL = (3, "LITERAL")
    PREFIXED = (4, "PREFIXED")


class AclOperation(_Named):
    """Kafka's ACL operations (wire code, name); some imply others (Read implies Describe)."""

    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    ALL = (2, "All")
    READ = (3, "Read")
    WRITE = (4, "Write")
    CREATE = (5, "Create")
    DELETE = (6, "Delete")
    ALTER = (7, "Alter")
    DESCRIBE = (8, "Describe")
    CLUSTER_ACTION = (9, "ClusterAction")
    DESCRIBE_CONFIGS = (10, "DescribeConfigs")
    ALTER_CONFIGS = (11, "AlterConfigs")
    IDEMPOTENT_WRITE = (12, "IdempotentWrite")
    CREATE_TOKENS = (13, "CreateTokens")
    DESCRIBE_TOKENS = (14, "DescribeTokens")


class AclPermissionType(_Named):
    """Allow or Deny (Deny wins over Allow)."""

    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    DENY = (2, "Deny")
    ALLOW = (3, "Allow")


_Op = AclOperation
# An ALLOW for any of these grants the key operation (Kafka's implied operations).
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType(
    {
        _Op.DESCRIBE: frozenset({_Op.DESCRIBE, _Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER}),
        _Op.DESCRIBE_CONFIGS: frozenset({_Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}),
    }
)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL is about: ``Topic:LITERAL:orders``, ``Group:PREFIXED:etl-``."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.kafka_name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who may (or may not) do what from where. The principal stays a string, as in
    Kafka's ``AccessControlEntry``; :func:`validate_binding` checks that it parses."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.kafka_name}, "
            f"permissionType={self.permission.kafka_name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def from_codes(
        cls,
        resource_type: int,
        name: str,
        pattern_type: int,
        principal: str,
        host: str,
        operation: int,
        permission: int,
    ) -> AclBinding:
        """A binding as the ACL APIs carry it, in wire codes (a code this version does not
        know becomes UNKNOWN, which :func:`validate_binding` refuses)."""
        return cls(
            ResourcePattern(
                ResourceType.from_code(resource_type), name, PatternType.from_code(pattern_type)
            ),
            AccessControlEntry(
                principal,
                host,
                AclOperation.from_code(operation),
                AclPermissionType.from_code(permission),
            ),
        )


class InvalidAcl(ValueError):
    """An ACL that cannot be stored; CreateAcls answers INVALID_REQUEST with the message."""


def validate_binding(binding: AclBinding) -> None:
    """Kafka's checks before an ACL is created (``AclApis``, ``AclAuthorizer``)."""
    pattern, entry = binding.pattern, binding.entry
    concrete_types = (ResourceType.UNKNOWN, ResourceType.ANY)
    if pattern.resource_type in concrete_types or pattern.pattern_type not in (
        PatternType.LITERAL,
        PatternType.PREFIXED,
    ):
        raise InvalidAcl("ACL binding contains unknown elements")
    if entry.operation in (_Op.UNKNOWN, _Op.ANY) or entry.permission in (
        AclPermissionType.UNKNOWN,
        AclPermissionType.ANY,
    ):
        raise InvalidAcl("ACL binding contains unknown elements")
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise InvalidAcl("Invalid empty resource name")
    if "/" in pattern.name:  # a ZooKeeper path element in cluster mode
        raise InvalidAcl(f"ACL binding contains invalid resource name: {pattern.name}")
    try:
        KafkaPrincipal.parse(entry.principal)
    except ValueError as exc:
        raise InvalidAcl(str(exc)) from None


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Which patterns a describe or delete concerns. ``name`` None: any name. Pattern type
    ANY: literal or prefixed with exactly this name; MATCH: every pattern that applies to a
    resource of this name (its literal, the wildcard, the prefixes it starts with)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:  # MATCH
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    def unknown_element(self) -> str | None:
        """What makes the filter unusable (Kafka's ``findIndefiniteField`` for UNKNOWN)."""
        if self.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """``principal`` / ``host`` None: any; operation or permission ANY: any."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (_Op.ANY, entry.operation)
            and self.permission in (AclPermissionType.ANY, entry.permission)
        )

    def unknown_element(self) -> str | None:
        if self.operation is _Op.UNKNOWN:
            return "Operation is UNKNOWN."
        if self.permission is AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls lists or DeleteAcls removes."""

    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def unknown_element(self) -> str | None:
        return self.pattern.unknown_element() or self.entry.unknown_element()


class AclTable:
    """Every ACL, by resource pattern; immutable (changes return a new table)."""

    __slots__ = ("_by_pattern", "_prefix_lengths")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        self._by_pattern: Mapping[ResourcePattern, frozenset[AccessControlEntry]] = (
            MappingProxyType({p: frozenset(e) for p, e in by_pattern.items()})
        )
        # The lengths of the PREFIXED names of each resource type, longest first: a
        # resource is looked up once per length instead of once per prefixed pattern.
        lengths: dict[ResourceType, set[int]] = {}
        for pattern in self._by_pattern:
            if pattern.pattern_type is PatternType.PREFIXED:
                lengths.setdefault(pattern.resource_type, set()).add(len(pattern.name))
        self._prefix_lengths = {t: sorted(n, reverse=True) for t, n in lengths.items()}

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_pattern.values())

    def __iter__(self) -> Iterator[AclBinding]:
        for pattern, entries in self._by_pattern.items():
            for entry in entries:
                yield AclBinding(pattern, entry)

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._by_pattern.get(pattern, frozenset())

    def patterns(self) -> Iterable[ResourcePattern]:
        return self._by_pattern.keys()

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [binding for binding in self if acl_filter.matches(binding)]

    def with_added(self, bindings: Iterable[AclBinding]) -> AclTable:
        return AclTable([*self, *bindings])

    def without(self, bindings: Iterable[AclBinding]) -> AclTable:
        gone = set(bindings)
        return AclTable(binding for binding in self if binding not in gone)

    def concerning(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries that apply to one resource: on its literal name, on the wildcard,
        and on every prefix of its name that has PREFIXED ACLs."""
        found: list[AccessControlEntry] = []
        for pattern_name in (name, WILDCARD_RESOURCE):
            found += self.entries(ResourcePattern(resource_type, pattern_name, PatternType.LITERAL))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                prefixed = ResourcePattern(resource_type, name[:length], PatternType.PREFIXED)
                found += self.entries(prefixed)
        return found


def _entry_applies(
    entry: AccessControlEntry,
    principals: tuple[str, str],
    host: str,
    operations: frozenset[AclOperation],
    permission: AclPermissionType,
) -> bool:
    return (
        entry.permission is permission
        and entry.principal in principals
        and entry.host in (host, WILDCARD_HOST)
        and (entry.operation in operations or entry.operation is _Op.ALL)
    )


@dataclass(frozen=True, slots=True)
class AclAuthorizer:
    """Decisions over one ACL table (see the module docstring for the rules)."""

    table: AclTable
    super_users: frozenset[KafkaPrincipal] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May ``principal``, connected from ``host`` (an IP address), do ``operation`` on
        the resource ``resource_type``/``name``?"""
        if principal in self.super_users:
            return True
        entries = self.table.concerning(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals = (str(principal), str(WILDCARD_PRINCIPAL))
        deny = AclPermissionType.DENY
        if any(_entry_applies(e, principals, host, frozenset({operation}), deny) for e in entries):
            return False
        granting = IMPLIED_BY.get(operation, frozenset({operation}))
        allow = AclPermissionType.ALLOW
        return any(_entry_applies(e, principals, host, granting, allow) for e in entries)

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of this type?

        Kafka's ``authorizeByResourceType``: true when an ALLOW (literal or prefixed) for
        the principal, host and operation exists that no DENY covers: a literal DENY on
        the same name, a prefixed DENY on a prefix of it, or a literal DENY on ``*``. The
        implied operations do not apply here, as in Kafka.
        """
        if principal in self.super_users:
            return True
        principals = (str(principal), str(WILDCARD_PRINCIPAL))
        names: dict[tuple[AclPermissionType, PatternType], set[str]] = {}
        for pattern in self.table.patterns():
            if pattern.resource_type is not resource_type:
                continue
            for entry in self.table.entries(pattern):
                if entry.permission in (AclPermissionType.ALLOW, AclPermissionType.DENY) and (
                    _entry_applies(
                        entry, principals, host, frozenset({operation}), entry.permission
                    )
                ):
                    names.setdefault((entry.permission, pattern.pattern_type), set()).add(
                        pattern.name
                    )
        deny_literal = names.get((AclPermissionType.DENY, PatternType.LITERAL), set())
        if WILDCARD_RESOURCE in deny_literal:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixed = names.get((AclPermissionType.DENY, PatternType.PREFIXED), set())

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(prefix) for prefix in deny_prefixed)

        allow_prefixed = names.get((AclPermissionType.ALLOW, PatternType.PREFIXED), set())
        allow_literal = names.get((AclPermissionType.ALLOW, PatternType.LITERAL), set())
        return any(not denied_by_prefix(prefix) for prefix in allow_prefixed) or any(
            name == WILDCARD_RESOURCE or (name not in deny_literal and not denied_by_prefix(name))
            for name in allow_literal
        )
