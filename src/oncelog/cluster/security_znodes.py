"""Where a cluster keeps its ACLs and SCRAM credentials in ZooKeeper, in Kafka 3.x's
ZooKeeper-mode layout and formats (``ZkData.scala``), and their codecs (pure)::

    /kafka-acl/<ResourceType>/<name>                  the LITERAL ACLs of one resource
    /kafka-acl-extended/prefixed/<ResourceType>/<name> the PREFIXED ACLs of one prefix
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Write","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>             "Topic:orders" (a LITERAL resource)
    /kafka-acl-extended-changes/acl_changes_<seq>    {"version":1,"resourceType":"Topic",
                                                      "name":"etl-","patternType":"PREFIXED"}
    /config/users/<user>                             {"version":1,"config":{"SCRAM-SHA-512":
                                                      "salt=..,stored_key=..,server_key=..,
                                                      iterations=4096"}}
        with /config/changes/config_change_<seq> = {"version":2,"entity_path":"users/<user>"}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from oncelog.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from oncelog.security.scram import ScramCredential, ScramMechanism

__all__ = [
    "ACL_CHANGES",
    "ACL_CHANGE_PREFIX",
    "ACL_EXTENDED_CHANGES",
    "CONFIG_USERS",
    "acl_change",
    "acl_resource_path",
    "acl_roots",
    "acl_type_paths",
    "decode_acl_change",
    "decode_acls",
    "encode_acls",
    "scram_credentials",
    "with_scram_credentials",
]

LITERAL_ACLS = "/kafka-acl"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
CONFIG_USERS = "/config/users"
_ROOTS = {PatternType.LITERAL: LITERAL_ACLS, PatternType.PREFIXED: PREFIXED_ACLS}
_STORED_TYPES = [t for t in ResourceType if t.name not in ("ANY", "UNKNOWN")]


def acl_roots() -> dict[PatternType, str]:
    """The root of each stored pattern type."""
    return dict(_ROOTS)


def acl_type_paths() -> list[str]:
    """Every ``<root>/<ResourceType>`` znode (created at start, as Kafka's createAclPaths)."""
    return [f"{root}/{t.kafka_name}" for root in _ROOTS.values() for t in _STORED_TYPES]


def acl_resource_path(pattern: ResourcePattern) -> str:
    return f"{_ROOTS[pattern.pattern_type]}/{pattern.resource_type.kafka_name}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission.kafka_name,
            "operation": e.operation.kafka_name,
            "host": e.host,
        }
        for e in sorted(entries, key=str)
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes) -> frozenset[AccessControlEntry]:
    """ValueError (or KeyError, TypeError) on a znode this version cannot read."""
    return frozenset(
        AccessControlEntry(
            str(item["principal"]),
            str(item["host"]),
            AclOperation.from_name(item["operation"]),
            AclPermissionType.from_name(item["permissionType"]),
        )
        for item in json.loads(data)["acls"]
    )


def acl_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The notification of a change to ``pattern``'s ACLs: (sequential path prefix, data)."""
    if pattern.pattern_type is PatternType.LITERAL:
        text = f"{pattern.resource_type.kafka_name}:{pattern.name}"
        return f"{ACL_CHANGES}/{ACL_CHANGE_PREFIX}", text.encode()
    event = {
        "version": 1,
        "resourceType": pattern.resource_type.kafka_name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.kafka_name,
    }
    return f"{ACL_EXTENDED_CHANGES}/{ACL_CHANGE_PREFIX}", json.dumps(event).encode()


def decode_acl_change(data: bytes, *, extended: bool) -> ResourcePattern:
    """The resource a notification names (ValueError, KeyError: malformed)."""
    if not extended:
        type_name, separator, name = data.decode().partition(":")
        if not separator:
            raise ValueError(f"expected ResourceType:name, not {data!r}")
        return ResourcePattern(ResourceType.from_name(type_name), name, PatternType.LITERAL)
    event = json.loads(data)
    return ResourcePattern(
        ResourceType.from_name(event["resourceType"]),
        str(event["name"]),
        PatternType.from_name(event["patternType"]),
    )


def scram_credentials(configs: Mapping[str, str]) -> dict[ScramMechanism, ScramCredential]:
    """A user's SCRAM credentials among the keys of ``/config/users/<user>`` (others, such
    as quotas, are not ours)."""
    found = {}
    for key, text in configs.items():
        mechanism = ScramMechanism.by_name(key)
        if mechanism is not None:
            found[mechanism] = ScramCredential.from_text(text)
    return found


def with_scram_credentials(
    configs: Mapping[str, str], credentials: Mapping[ScramMechanism, ScramCredential]
) -> dict[str, str]:
    """``configs`` with its SCRAM keys replaced by ``credentials`` (none: removed)."""
    kept = {k: v for k, v in configs.items() if ScramMechanism.by_name(k) is None}
    return kept | {m.mechanism_name: c.to_text() for m, c in credentials.items()}
