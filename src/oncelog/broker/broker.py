"""The Broker: wires configuration, storage, the cores and the network server together."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.broker import handlers
from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.broker.coordinator_log import InternalTopicLog
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.broker.dynamic_config import DynamicConfigs, DynamicConfigStore
from oncelog.broker.group_coordinator import GroupCoordinator, OffsetExpiry
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.broker.log_cleaner import LogCleaner
from oncelog.broker.maintenance import Maintenance
from oncelog.broker.metrics import BrokerMetrics, MetricsServer
from oncelog.broker.server import ConnectionInfo, ConnectionLimits, KafkaServer
from oncelog.broker.topics import CATALOGUE_FILE, TopicRegistry
from oncelog.broker.transaction_coordinator import TransactionCoordinator, TxnSettings
from oncelog.broker.txn_markers import LocalMarkerWriter
from oncelog.clock import wall_clock_ms
from oncelog.groups import GroupConfig
from oncelog.producers.pid_allocator import ProducerIdAllocator
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS
from oncelog.protocol.codec import RequestHeader
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import BatchHeader

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".oncelog_cleanshutdown"
CLUSTER_ID = "oncelog-single-node"

Handler = Callable[["Broker", RequestHeader, Any], Awaitable[Any]]


class Broker:
    """A single-node broker. Start it with `await start()`, stop it with `await stop()`."""

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 9092,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """``metrics_port``: serve Prometheus metrics there (on ``host``; 0 picks a free
        port); None serves none (they are still kept in ``metrics``)."""
        self.config = config
        self.data_dir = data_dir
        self.node_id: int = config.broker_id
        self.cluster_id = CLUSTER_ID
        # Cluster mode (zookeeper.connect set); None: a single node, none of it started.
        self.cluster: ClusterNode | None = None
        self.dynamic_configs: DynamicConfigStore
        if config.cluster_mode:
            from oncelog.cluster.node import ClusterNode  # kazoo only where it is used

            self.cluster = ClusterNode(config, self.node_id)
            self.cluster.configs.on_change(self.configs_changed)
            self.dynamic_configs = self.cluster.configs
        else:
            self.dynamic_configs = DynamicConfigs(
                data_dir, config, self.node_id, on_change=self.configs_changed
            )
        self.topics = TopicRegistry(data_dir, config)
        self.hosted = HostedPartitions(self)
        self.flusher = GroupCommitFlusher()
        self.producer_ids: ProducerIdAllocator | None = None
        self.groups = _group_coordinator(config, self.topics, self.flusher, self.now_ms)
        self.markers = LocalMarkerWriter(
            self.topics, self.flusher, self.groups.complete_transaction, self.now_ms
        )
        self.transactions = _transaction_coordinator(
            config,
            self.topics,
            self.flusher,
            self.now_ms,
            self._allocate_producer_id,
            self.markers,
            self.groups.locate,
        )
        self.cleaner = LogCleaner(self.hosted, config, clock_ms=self.now_ms)
        if self.cluster is not None:
            self.cluster.on_truncation(self.cleaner.truncated)
        self.metrics = BrokerMetrics(self)
        self.flusher.on_fsync = self.metrics.fsync_time.observe
        self._metrics_server = (
            None if metrics_port is None else MetricsServer(self.metrics, host, metrics_port)
        )
        self._server = KafkaServer(self, host, port, ConnectionLimits.from_config(config))
        self._host = host
        if advertised_host is None and advertised_port is None and config.advertised_listeners:
            advertised_host, advertised_port = _parse_advertised_listener(
                config.advertised_listeners
            )
        self._advertised = (advertised_host, advertised_port)
        self._handlers: dict[int, Handler] = handlers.by_api_key()
        self._maintenance: asyncio.Task[None] | None = None
        missing = set(SUPPORTED_VERSIONS) - set(self._handlers)
        assert not missing, f"advertised APIs without a handler: {missing}"

    def now_ms(self) -> int:
        return wall_clock_ms()

    def _allocate_producer_id(self) -> int:
        assert self.producer_ids is not None, "producer ids are allocated once started"
        return self.producer_ids.allocate()

    # -- addresses -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def server(self) -> KafkaServer:
        return self._server

    @property
    def advertised_address(self) -> tuple[str, int]:
        """What Metadata tells clients; a fault-injection proxy can stand in front."""
        host, port = self._advertised
        return host or self._host, port or self.port

    def advertise(self, host: str, port: int) -> None:
        self._advertised = (host, port)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self._host}:{self.port}"

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self.cluster is not None:
            await self._start_in_cluster(self.cluster)
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        if not clean and (self.data_dir / CATALOGUE_FILE).exists():
            log.warning("no clean-shutdown marker in %s: recovering logs", self.data_dir)
        # The marker is removed before anything is written, so a crash from here on is
        # seen as unclean at the next start.
        marker.unlink(missing_ok=True)
        assert isinstance(self.dynamic_configs, DynamicConfigs)
        self.dynamic_configs.load()
        self.topics.load(clean_shutdown=clean, now_ms=self.now_ms())
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.flusher.start()
        await self.groups.start()
        await self.transactions.start()
        await self._server.start()
        if self._metrics_server is not None:
            await self._metrics_server.start()
        maintenance = Maintenance(self.topics, self.flusher, self.config, self.now_ms)
        self._maintenance = asyncio.create_task(maintenance.run(), name="log-maintenance")
        if self.config.log_cleaner_enable:
            self.cleaner.start()

    async def _start_in_cluster(self, cluster: ClusterNode) -> None:
        """Serve, then join the cluster under the address clients and peers must use; the
        replicas ZooKeeper assigns to this broker open as their states arrive. If joining
        fails (ZooKeeper unreachable, broker.id taken) everything stops again."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        marker.unlink(missing_ok=True)
        self.flusher.start()
        await self._server.start()
        try:
            await cluster.start(*self.advertised_address, self.data_dir, self.flusher, clean)
        except BaseException:
            await self._server.stop()
            await self.flusher.stop()
            raise
        self.cluster_id = cluster.cluster_id
        if self._metrics_server is not None:
            await self._metrics_server.start()
        maintenance = Maintenance(self.hosted, self.flusher, self.config, self.now_ms)
        self._maintenance = asyncio.create_task(maintenance.run(), name="log-maintenance")
        if self.config.log_cleaner_enable:
            self.cleaner.start()

    def partition_for_clients(self, topic: str, index: int, leader_epoch: int = -1) -> Partition:
        """The partition a producer or consumer may use here: on a single node any, in a
        cluster only one this broker leads (KafkaError NOT_LEADER_OR_FOLLOWER, or a leader
        epoch error when the client's ``leader_epoch`` is not ours)."""
        if self.cluster is None:
            return self.topics.partition(topic, index)
        assert self.cluster.replicas is not None
        return self.cluster.replicas.leader_partition(topic, index, leader_epoch)

    async def stop(self) -> None:
        """Stop serving, flush everything, and leave the clean-shutdown marker."""
        # The log upkeep first: a cluster broker closes its replicas when it leaves.
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        await self.cleaner.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        await self._server.stop()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        await self.transactions.stop()
        await self.groups.stop()
        await self.flusher.stop()
        self.topics.close()
        (self.data_dir / CLEAN_SHUTDOWN_MARKER).touch()
        log.info("broker stopped cleanly")

    def configs_changed(self, topics: frozenset[str] | None = None) -> None:
        """The overrides of ``topics`` changed, or (None) a dynamic broker key: partitions
        act on the new values from now on, and the cleaner looks again (a log may have
        become compacted)."""
        if self.cluster is None:
            if topics is None:
                self.topics.refresh_settings()
        elif self.cluster.replicas is not None:
            self.cluster.replicas.refresh_settings(topics)
        self.cleaner.wake()

    # -- transactions --------------------------------------------------------------------

    def check_transactional_write(
        self, transactional_id: str | None, header: BatchHeader, topic: str, partition: int
    ) -> None:
        """Refuse a transactional batch that is not part of an ongoing transaction."""
        if transactional_id is None:
            raise KafkaError(
                ErrorCode.transactional_id_authorization_failed,
                "a transactional batch needs the request's transactional id",
            )
        self.transactions.check_write(
            transactional_id, header.producer_id, header.producer_epoch, topic, partition
        )

    # -- dispatch ------------------------------------------------------------------------

    def dispatch(
        self, header: RequestHeader, request: Any, connection: ConnectionInfo
    ) -> Awaitable[Any]:
        handling = self._handlers[header.api_key](self, header, request)
        return self._measured(header.api_key, request, handling)

    async def _measured(self, api_key: int, request: Any, handling: Awaitable[Any]) -> Any:
        started = time.monotonic()
        response = await handling
        self.metrics.observe_request(api_key, request, response, time.monotonic() - started)
        return response

    @property
    def metrics_port(self) -> int | None:
        return None if self._metrics_server is None else self._metrics_server.port


class HostedPartitions:
    """The partitions this broker holds, for its maintenance, cleaner and metrics: the
    topic registry's on a single node, the replica manager's in a cluster (none until the
    broker has joined)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def partitions(self) -> list[Partition]:
        cluster = self._broker.cluster
        if cluster is None:
            return self._broker.topics.partitions()
        return [] if cluster.replicas is None else cluster.replicas.partitions()


def _group_coordinator(
    config: BrokerConfig,
    topics: TopicRegistry,
    flusher: GroupCommitFlusher,
    clock: Callable[[], int],
) -> GroupCoordinator:
    offsets = InternalTopicLog(
        topics, flusher, CONSUMER_OFFSETS, config.offsets_topic_num_partitions, clock
    )
    group_config = GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
    )
    expiry = OffsetExpiry(
        retention_ms=config.offsets_retention_minutes * 60_000,
        check_interval_ms=config.offsets_retention_check_interval_ms,
    )
    # In a cluster no partition is led until elected: nothing is created or loaded here
    # (coordinators that follow leadership are issue 11's).
    return GroupCoordinator(
        offsets,
        offsets,
        offsets,
        clock,
        group_config,
        expiry=expiry,
        single_node=not config.cluster_mode,
    )


def _transaction_coordinator(
    config: BrokerConfig,
    topics: TopicRegistry,
    flusher: GroupCommitFlusher,
    clock: Callable[[], int],
    allocate_producer_id: Callable[[], int],
    markers: LocalMarkerWriter,
    offsets_partition: Callable[[str], Awaitable[int]],
) -> TransactionCoordinator:
    state = InternalTopicLog(
        topics, flusher, TRANSACTION_STATE, config.transaction_state_log_num_partitions, clock
    )
    settings = TxnSettings(
        max_timeout_ms=config.transaction_max_timeout_ms,
        abort_timed_out_interval_ms=(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        ),
        remove_expired_interval_ms=config.transaction_remove_expired_transaction_cleanup_interval_ms,
        id_expiration_ms=config.transactional_id_expiration_ms,
    )
    return TransactionCoordinator(
        state,
        state,
        state,
        clock,
        settings,
        allocate_producer_id,
        markers,
        offsets_partition,
        single_node=not config.cluster_mode,
    )


def _parse_advertised_listener(listeners: list[str]) -> tuple[str | None, int]:
    """The one `advertised.listeners` entry, ``PLAINTEXT://host:port``, as (host, port).

    oncelog has a single plaintext listener, so exactly one entry is accepted. An empty
    host (``PLAINTEXT://:9093``) keeps the listen host, as Kafka uses its default there;
    a port is required and cannot be 0 (clients cannot connect to port 0)."""
    raw = ",".join(listeners)
    if len(listeners) != 1:
        raise ConfigError("advertised.listeners", raw, "oncelog has one listener: give one entry")
    name, sep, address = listeners[0].partition("://")
    host, colon, port_text = address.rpartition(":")
    if not sep or name.upper() != "PLAINTEXT" or not colon:
        raise ConfigError("advertised.listeners", raw, "expected PLAINTEXT://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ConfigError("advertised.listeners", raw, "the port must be 1..65535")
    return host or None, int(port_text)
