"""Sequential change notifications in ZooKeeper, read in order by every broker (Kafka's
``ZkNodeChangeNotificationListener``).

A writer leaves a persistent sequential znode ``<path>/<prefix><seq>`` beside each change
(``/config/changes/config_change_``, ``/kafka-acl-changes/acl_changes_``, ...). Each
broker watches ``<path>``'s children and hands the data of every notification newer than
the last it processed to its handler, in sequence order, one at a time. Notifications
older than 15 minutes are deleted by whichever broker reads them (Kafka's
``changeExpirationMs``): a broker that starts later reads the state itself, not the
history. At start every notification present is processed once (the sequence starts
below the first).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from oncelog.cluster.zookeeper import SessionExpired, WatchHandle, ZooKeeperError

if TYPE_CHECKING:
    from oncelog.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs
RETRY_S = 0.5

# Applies one notification's data; ValueError, KeyError or TypeError: it is malformed
# (logged and skipped, as Kafka skips what it cannot parse).
NotificationHandler = Callable[[bytes], Awaitable[None]]


def sequence_of(name: str, prefix: str) -> int | None:
    """The sequence number of a ``<prefix><seq>`` child, None for anything else."""
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    return int(digits) if digits.isdigit() else None


class ChangeNotifications:
    """Watches ``path`` for ``prefix``-named sequential notifications and hands each new one
    to ``handle`` in order (see the module docstring)."""

    def __init__(
        self, zk: ZooKeeperSession, path: str, prefix: str, handle: NotificationHandler
    ) -> None:
        self._zk = zk
        self.path = path
        self._prefix = prefix
        self._handle = handle
        self._last_sequence = -1
        self._seen: dict[str, int] = {}  # processed notification -> its creation time (ms)
        self._watch: WatchHandle | None = None
        self._pending = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._watch = self._zk.watch_children(self.path, self._notified)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _notified(self, _children: list[str]) -> None:
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._process_until_idle())

    async def _process_until_idle(self) -> None:
        while self._pending:
            self._pending = False
            try:
                await self._process()
            except (ZooKeeperError, SessionExpired) as exc:
                log.warning("could not read %s: %s; retrying", self.path, exc)
                self._pending = True
                await asyncio.sleep(RETRY_S)

    async def _process(self) -> None:
        names = sorted(
            (sequence, name)
            for name in await self._zk.children(self.path)
            if (sequence := sequence_of(name, self._prefix)) is not None
        )
        for sequence, name in names:
            if sequence <= self._last_sequence:
                continue
            znode = await self._zk.read(f"{self.path}/{name}")
            if znode is not None:
                self._seen[name] = znode.created_ms
                try:
                    await self._handle(znode.data)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("ignoring malformed notification %s/%s: %r", self.path, name, exc)
            self._last_sequence = sequence
        await self._purge({name for _, name in names})

    async def _purge(self, present: set[str]) -> None:
        """Delete notifications past their expiry; forget those that are gone."""
        expired_before = int(time.time() * 1000) - NOTIFICATION_EXPIRY_MS
        for name, created_ms in list(self._seen.items()):
            if name not in present:
                del self._seen[name]
            elif created_ms < expired_before:
                await self._zk.delete_if_present(f"{self.path}/{name}")
                del self._seen[name]
