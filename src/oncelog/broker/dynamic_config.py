"""Dynamic broker configuration (Kafka's KIP-226), kept in the data directory.

Kafka keeps it in ZooKeeper (``/config/brokers/<id>`` and ``/config/brokers/<default>``),
and so does a cluster broker (``cluster/configs.py``, the same ``update`` interface); a
single node keeps both layers in ``dynamic-broker-configs.json``, replaced atomically,
and loads them at start over the static configuration. A stored key that is no longer
valid (renamed, or a value a newer version refuses) is skipped with a warning, never a
failed start.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from oncelog.broker import config as cfg
from oncelog.storage.atomic_file import write_atomically

log = logging.getLogger(__name__)

DYNAMIC_CONFIG_FILE = "dynamic-broker-configs.json"
_DEFAULT = "<default>"  # Kafka's name for the cluster-wide layer


# (current layer, or a topic's current overrides) -> the new one, validated; raises
# KafkaError to refuse the change.
Plan = Callable[[dict[str, str]], dict[str, str]]


class DynamicConfigStore(Protocol):
    """Where the dynamic broker layers are kept: this file on a single node, ZooKeeper in
    a cluster (``cluster/configs.py``)."""

    async def update(self, plan: Plan, *, per_broker: bool, validate_only: bool) -> None: ...


class DynamicConfigs:
    """The broker's dynamic configuration layers (per broker and cluster-wide), stored in the
    data directory and applied to the running configuration (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        config: cfg.BrokerConfig,
        node_id: int,
        on_change: Callable[[frozenset[str] | None], None] | None = None,
    ) -> None:
        """``on_change(None)`` is called after a layer changed (the broker then brings
        its partitions and services up to date)."""
        self._path = data_dir / DYNAMIC_CONFIG_FILE
        self._config = config
        self._node = str(node_id)
        self._on_change = on_change
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Apply the stored layers to the broker configuration."""
        try:
            stored = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        except ValueError as exc:
            log.warning("ignoring unreadable %s: %s", self._path, exc)
            return
        for name, per_broker in ((self._node, True), (_DEFAULT, False)):
            layer: dict[str, str] = {}
            for key, value in dict(stored.get(name, {})).items():
                try:
                    layer |= cfg.validate_dynamic({key: value})
                except cfg.ConfigError as exc:
                    log.warning("ignoring stored dynamic config of %s: %s", name, exc)
            self._config.set_dynamic(layer, per_broker=per_broker)
            if layer:
                log.info("dynamic configuration of %s: %s", name, layer)

    async def update(self, plan: Plan, *, per_broker: bool, validate_only: bool) -> None:
        """Replace one layer by ``plan(current)``: persisted, then applied (a crash in
        between leaves the new value on disk, which the next start applies)."""
        async with self._lock:
            layer = plan(self._config.dynamic(per_broker=per_broker))
            if validate_only:
                return
            stored = {
                self._node: self._config.dynamic(per_broker=True),
                _DEFAULT: self._config.dynamic(per_broker=False),
            }
            stored[self._node if per_broker else _DEFAULT] = layer
            data = json.dumps(stored, indent=1, sort_keys=True).encode()
            await asyncio.to_thread(write_atomically, self._path, data)
            self._config.set_dynamic(layer, per_broker=per_broker)
        log.info(
            "dynamic configuration of %s now %s", self._node if per_broker else _DEFAULT, layer
        )
        if self._on_change is not None:
            self._on_change(None)
