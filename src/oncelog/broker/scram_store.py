"""Where a single node keeps its SCRAM credentials: ``scram-credentials.json`` in the data
directory, replaced atomically (a crash leaves the old or the new file, never a mix).

The file holds, per user, the same map Kafka keeps in ZooKeeper under
``/config/users/<user>``: mechanism name -> ``salt=...,stored_key=...,server_key=...,
iterations=N`` (:meth:`ScramCredential.to_text`). Passwords are never stored. Lookups
are answered from memory, so authenticating a connection touches no disk. A cluster
broker keeps them in ZooKeeper instead, as Kafka does
(``oncelog.cluster.security_stores.ZkScramStore``); both are a :class:`ScramStore`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, TypeVar

from oncelog.security.scram import ScramCredential, ScramMechanism
from oncelog.security.scram_users import Credentials
from oncelog.storage.atomic_file import write_atomically

__all__ = ["SCRAM_CREDENTIALS_FILE", "FileScramStore", "ScramStore"]

log = logging.getLogger(__name__)

SCRAM_CREDENTIALS_FILE = "scram-credentials.json"
_VERSION = 1
T = TypeVar("T")
Changes = dict[str, dict[ScramMechanism, ScramCredential]]


class ScramStore(Protocol):
    """Where the broker's SCRAM credentials are kept: what the handlers and the SASL
    authenticator use."""

    @property
    def credentials(self) -> Credentials: ...

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None: ...

    async def start(self) -> None:
        """Read the stored credentials (before the broker serves)."""

    async def stop(self) -> None: ...

    async def update(self, change: Callable[[Credentials], tuple[Changes, T]]) -> T:
        """Apply ``change``; keep the users it changes (an empty map removes a user)."""


class FileScramStore:
    """The SCRAM credentials of a single node: loaded at start, changed atomically on disk,
    looked up from memory."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / SCRAM_CREDENTIALS_FILE
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        self._lock = asyncio.Lock()

    @property
    def credentials(self) -> Credentials:
        return MappingProxyType(self._users)

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    async def start(self) -> None:
        self.load()

    async def stop(self) -> None:
        pass

    def load(self) -> None:
        """Read the file. An unreadable file stops the start: authenticating against a
        silently emptied store would lock every SCRAM user out without saying why."""
        try:
            stored = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except ValueError as exc:
            raise ValueError(f"{self._path} is not readable JSON: {exc}") from None
        users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for user, by_name in dict(stored.get("users", {})).items():
            users[user] = {}
            for name, text in dict(by_name).items():
                mechanism = ScramMechanism.by_name(name)
                if mechanism is None:
                    log.warning("%s: skipping unknown mechanism %s of %s", self._path, name, user)
                    continue
                users[user][mechanism] = ScramCredential.from_text(text)
        self._users = users
        log.info("loaded SCRAM credentials of %d users from %s", len(users), self._path)

    async def update(self, change: Callable[[Credentials], tuple[Changes, T]]) -> T:
        """Apply ``change`` to the current credentials; persist, then apply, the users it
        changes (an empty map removes the user). Changes run one at a time."""
        async with self._lock:
            changed, outcome = change(self.credentials)
            if changed:
                users = {**self._users, **changed}
                users = {user: creds for user, creds in users.items() if creds}
                document = {
                    "version": _VERSION,
                    "users": {
                        user: {m.mechanism_name: c.to_text() for m, c in creds.items()}
                        for user, creds in sorted(users.items())
                    },
                }
                data = json.dumps(document, indent=1).encode()
                await asyncio.to_thread(write_atomically, self._path, data)
                self._users = users
            return outcome
