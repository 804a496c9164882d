"""Where a cluster broker keeps ACLs and SCRAM credentials: in ZooKeeper, shared by every
broker, in Kafka's layout (:mod:`oncelog.cluster.security_znodes`), with the interface of
the single node's files (``FileAclStore``, ``FileScramStore``), so the handlers and the
authenticator do not know which they use.

- Each broker reads everything at start (before it serves), then keeps an in-memory copy
  current from the change notifications every writer leaves (Kafka's AclAuthorizer and
  ZkConfigManager): an ACL or credential created through any broker is enforced by every
  broker as soon as its watch fires (the tests wait up to 15 s for it; not timed).
- A change made here is applied to ZooKeeper per resource (ACLs) or per user (SCRAM), as
  a compare-and-set of the znode together with its notification: ACLs added and removed
  are merged into what ZooKeeper holds, so two brokers changing the same resource at once
  lose neither change (by construction: no test races two brokers). Decisions read
  memory only: no request waits for ZooKeeper except the changes themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from oncelog.cluster.notifications import ChangeNotifications
from oncelog.cluster.security_znodes import (
    ACL_CHANGE_PREFIX,
    ACL_CHANGES,
    ACL_EXTENDED_CHANGES,
    CONFIG_USERS,
    acl_change,
    acl_resource_path,
    acl_roots,
    acl_type_paths,
    decode_acl_change,
    decode_acls,
    encode_acls,
    scram_credentials,
    with_scram_credentials,
)
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclTable,
    ResourcePattern,
    ResourceType,
)
from oncelog.security.scram import ScramCredential, ScramMechanism
from oncelog.security.scram_users import Credentials

if TYPE_CHECKING:
    from oncelog.cluster.configs import ClusterConfigs
    from oncelog.cluster.zookeeper import ZooKeeperSession

__all__ = ["ZkAclStore", "ZkScramStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Changes = dict[str, dict[ScramMechanism, ScramCredential]]


class ZkAclStore:
    """The cluster's ACLs, read from ZooKeeper and kept current by its notifications."""

    def __init__(self, zk: ZooKeeperSession) -> None:
        self._zk = zk
        self.table = AclTable()
        self._lock = asyncio.Lock()
        self._notifications = [
            ChangeNotifications(zk, ACL_CHANGES, ACL_CHANGE_PREFIX, self._literal_changed),
            ChangeNotifications(zk, ACL_EXTENDED_CHANGES, ACL_CHANGE_PREFIX, self._other_changed),
        ]

    async def start(self) -> None:
        """Read every ACL (an unreadable one stops the start: enforcing a subset could allow
        what a DENY was written to refuse), then follow the notifications."""
        await self._zk.ensure_paths([ACL_CHANGES, ACL_EXTENDED_CHANGES, *acl_type_paths()])
        bindings: list[AclBinding] = []
        for pattern_type, root in acl_roots().items():
            for type_name in await self._zk.children(root):
                resource_type = ResourceType.from_name(type_name)
                for name in await self._zk.children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries = await self._read(pattern)
                    bindings += (AclBinding(pattern, e) for e in entries)
        self.table = AclTable(bindings)
        log.info("loaded %d ACLs from ZooKeeper", len(self.table))
        for notifications in self._notifications:
            notifications.start()

    async def stop(self) -> None:
        for notifications in self._notifications:
            await notifications.stop()

    async def update(self, change: Callable[[AclTable], tuple[AclTable, T]]) -> T:
        """Apply ``change`` to the current table and write what it added and removed to
        each resource's znode (merged into what ZooKeeper holds), with a notification."""
        async with self._lock:
            table, outcome = change(self.table)
            if table is self.table:
                return outcome
            before, after = set(self.table), set(table)
            added: dict[ResourcePattern, set[AccessControlEntry]] = {}
            removed: dict[ResourcePattern, set[AccessControlEntry]] = {}
            for binding in after - before:
                added.setdefault(binding.pattern, set()).add(binding.entry)
            for binding in before - after:
                removed.setdefault(binding.pattern, set()).add(binding.entry)
            for pattern in {*added, *removed}:
                plus, minus = added.get(pattern, set()), removed.get(pattern, set())

                def merge(
                    data: bytes | None,
                    plus: set[AccessControlEntry] = plus,
                    minus: set[AccessControlEntry] = minus,
                ) -> bytes | None:
                    stored = set() if data is None else set(decode_acls(data))
                    entries = (stored | plus) - minus
                    return encode_acls(entries) if entries else None

                written = await self._zk.rewrite_with_notification(
                    acl_resource_path(pattern), merge, acl_change(pattern)
                )
                self._replace(pattern, frozenset() if written is None else decode_acls(written))
            return outcome

    async def _read(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        znode = await self._zk.read(acl_resource_path(pattern))
        return frozenset() if znode is None else decode_acls(znode.data)

    async def _literal_changed(self, data: bytes) -> None:
        await self._reload(decode_acl_change(data, extended=False))

    async def _other_changed(self, data: bytes) -> None:
        await self._reload(decode_acl_change(data, extended=True))

    async def _reload(self, pattern: ResourcePattern) -> None:
        self._replace(pattern, await self._read(pattern))

    def _replace(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        if entries == self.table.entries(pattern):
            return
        others = (b for b in self.table if b.pattern != pattern)
        self.table = AclTable([*others, *(AclBinding(pattern, e) for e in entries)])
        log.info("ACLs of %s now %d entries", pattern, len(entries))


class ZkScramStore:
    """The cluster's SCRAM credentials in ``/config/users/<user>``, read at start and kept
    current from the ``users/<user>`` config change notifications."""

    def __init__(self, zk: ZooKeeperSession, configs: ClusterConfigs) -> None:
        self._zk = zk
        self._configs = configs
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        self._zxids: dict[str, int] = {}  # the zxid of each user's last applied write
        self._lock = asyncio.Lock()

    @property
    def credentials(self) -> Credentials:
        return MappingProxyType(self._users)

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    async def start(self) -> None:
        """Read every user's credentials; then follow ``users/<user>`` notifications (the
        cluster's config change listener, started after this)."""
        await self._zk.ensure_paths([CONFIG_USERS])
        for user in await self._zk.children(CONFIG_USERS):
            await self._reload(user)
        self._configs.on_entity_change("users", self._reload)
        log.info("loaded SCRAM credentials of %d users from ZooKeeper", len(self._users))

    async def stop(self) -> None:
        pass  # the notifications are the cluster configs' to stop

    async def update(self, change: Callable[[Credentials], tuple[Changes, T]]) -> T:
        """Apply ``change``; write each user it changes (an empty map removes the user's
        SCRAM credentials, keeping any other key of the user's config)."""
        async with self._lock:
            changed, outcome = change(self.credentials)
            for user, credentials in changed.items():

                def plan(
                    current: dict[str, str],
                    credentials: dict[ScramMechanism, ScramCredential] = credentials,
                ) -> dict[str, str]:
                    return with_scram_credentials(current, credentials)

                written = await self._zk.change_entity_config(f"users/{user}", plan)
                self._apply(user, credentials, written.modified_zxid)
            return outcome

    async def _reload(self, user: str) -> None:
        found = await self._zk.entity_config(f"{CONFIG_USERS}/{user}")
        self._apply(user, scram_credentials(found.configs), found.modified_zxid)

    def _apply(
        self, user: str, credentials: dict[ScramMechanism, ScramCredential], zxid: int
    ) -> None:
        if zxid < self._zxids.get(user, -1):
            return  # a read that finished after a newer one
        self._zxids[user] = zxid
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)
