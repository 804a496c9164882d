"""Where a single node keeps its ACLs: ``acls.json`` in the data directory, replaced
atomically (a crash leaves the old or the new file, never a mix).

One entry per ACL, in Kafka's names: ``{"resourceType": "Topic", "patternType": "LITERAL",
"name": "orders", "principal": "User:alice", "host": "*", "operation": "Write",
"permissionType": "Allow"}``. A cluster broker keeps them in ZooKeeper instead, as Kafka
does (``oncelog.cluster.security_stores.ZkAclStore``); both are an :class:`AclStore`.
Decisions read the table from memory: nothing is read from disk per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclTable,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from oncelog.storage.atomic_file import write_atomically

__all__ = ["ACL_FILE", "AclStore", "FileAclStore", "binding_from_json", "binding_to_json"]

log = logging.getLogger(__name__)

ACL_FILE = "acls.json"
T = TypeVar("T")
_VERSION = 1


def binding_to_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding.pattern, binding.entry
    return {
        "resourceType": pattern.resource_type.kafka_name,
        "patternType": pattern.pattern_type.kafka_name,
        "name": pattern.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.kafka_name,
        "permissionType": entry.permission.kafka_name,
    }


def binding_from_json(item: dict[str, Any]) -> AclBinding:
    """Raise ValueError (or KeyError) on an entry this version cannot read."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_name(item["resourceType"]),
            str(item["name"]),
            PatternType.from_name(item["patternType"]),
        ),
        AccessControlEntry(
            str(item["principal"]),
            str(item["host"]),
            AclOperation.from_name(item["operation"]),
            AclPermissionType.from_name(item["permissionType"]),
        ),
    )


class AclStore(Protocol):
    """Where the broker's ACLs are kept: what the handlers and the authorizer use."""

    @property
    def table(self) -> AclTable:
        """The current ACLs (replaced, never mutated, by a change)."""

    async def start(self) -> None:
        """Read the stored ACLs (before the broker serves)."""

    async def stop(self) -> None: ...

    async def update(self, change: Callable[[AclTable], tuple[AclTable, T]]) -> T:
        """Apply ``change`` to the current table and keep the table it returns."""


class FileAclStore:
    """The ACLs of a single node: loaded at start, changed atomically on disk, read from memory."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / ACL_FILE
        self.table = AclTable()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self.load()

    async def stop(self) -> None:
        pass

    def load(self) -> None:
        """Read the file. An unreadable file or entry stops the start: enforcing a subset
        of the ACLs could allow what a DENY was written to refuse."""
        try:
            stored = json.loads(self._path.read_text(encoding="utf-8"))
            self.table = AclTable(binding_from_json(item) for item in stored.get("acls", []))
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self._path} cannot be read: {exc!r}") from None
        log.info("loaded %d ACLs from %s", len(self.table), self._path)

    async def update(self, change: Callable[[AclTable], tuple[AclTable, T]]) -> T:
        """Apply ``change`` to the current table, persist the table it returns, then make
        it current; changes run one at a time, so none is lost to a concurrent one."""
        async with self._lock:
            table, outcome = change(self.table)
            if table is not self.table:
                document = {
                    "version": _VERSION,
                    "acls": sorted(
                        (binding_to_json(b) for b in table), key=lambda b: tuple(b.values())
                    ),
                }
                data = json.dumps(document, indent=1).encode()
                await asyncio.to_thread(write_atomically, self._path, data)
                self.table = table
            return outcome
