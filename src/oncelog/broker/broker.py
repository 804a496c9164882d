"""The Broker: wires configuration, storage, the cores and the network server together."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.broker import handlers
from oncelog.broker.acl_store import AclStore, FileAclStore
from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.broker.coordinator_log import InternalTopicLog
from oncelog.broker.descriptors import apply as budget_file_descriptors
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.broker.dynamic_config import DynamicConfigs, DynamicConfigStore
from oncelog.broker.group_coordinator import GroupCoordinator, OffsetExpiry
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.broker.listener_security import (
    ListenerSecurity,
    authenticator_factory,
    inter_broker_security,
    listener_security,
)
from oncelog.broker.listeners import Endpoint, listener_plan
from oncelog.broker.log_cleaner import LogCleaner
from oncelog.broker.maintenance import Maintenance
from oncelog.broker.metrics import BrokerMetrics, MetricsServer
from oncelog.broker.request_context import RequestContext
from oncelog.broker.scram_store import FileScramStore, ScramStore
from oncelog.broker.server import ConnectionInfo, ConnectionLimits, KafkaServer, Listener
from oncelog.broker.topics import TopicRegistry
from oncelog.broker.transaction_coordinator import (
    MarkerWriter,
    TransactionCoordinator,
    TxnSettings,
)
from oncelog.broker.txn_markers import LocalMarkerWriter, NodePartitions
from oncelog.clock import wall_clock_ms
from oncelog.groups import GroupConfig
from oncelog.producers.pid_allocator import ProducerIdAllocator
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS
from oncelog.protocol.codec import RequestHeader
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclAuthorizer
from oncelog.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.broker.transactional_writes import TransactionalProducer
    from oncelog.cluster.coordinators import ClusterCoordinatorIO, ReplicatedInternalTopic
    from oncelog.cluster.node import ClusterNode
    from oncelog.cluster.txn_verification import Admission

    CoordinatorTopic = InternalTopicLog | ReplicatedInternalTopic

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".oncelog_cleanshutdown"
CLUSTER_ID = "oncelog-single-node"

Handler = Callable[["Broker", RequestContext, Any], Awaitable[Any]]


class Broker:
    """A single-node broker. Start it with `await start()`, stop it with `await stop()`."""

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        host: str | None = None,
        port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """``host`` and ``port``: one PLAINTEXT listener there (127.0.0.1:9092 when both
        are None), unless the configuration has ``listeners``. ``metrics_port``: serve
        Prometheus metrics there (on the first listener's host; 0 picks a free port);
        None serves none (they are still kept in ``metrics``)."""
        self.config = config
        self.data_dir = data_dir
        self.listeners = listener_plan(config, host, port)
        self.listener_security = {
            e.listener: listener_security(config, e) for e in self.listeners.listeners
        }
        self._authorizer_settings = _authorizer_settings(config)
        self._authorizer: AclAuthorizer | None = None
        self.node_id: int = config.broker_id
        self.cluster_id = CLUSTER_ID
        # Cluster mode (zookeeper.connect set); None: a single node, none of it started.
        self.cluster: ClusterNode | None = None
        self.dynamic_configs: DynamicConfigStore
        if config.cluster_mode:
            from oncelog.cluster.node import ClusterNode  # kazoo only where it is used

            inter_broker = self.listeners.listener(self.listeners.inter_broker_listener)
            self.cluster = ClusterNode(
                config, self.node_id, inter_broker_security(config, inter_broker)
            )
            self.cluster.configs.on_change(self.configs_changed)
            self.dynamic_configs = self.cluster.configs
        else:
            self.dynamic_configs = DynamicConfigs(
                data_dir, config, self.node_id, on_change=self.configs_changed
            )
        # SCRAM credentials and ACLs: the data directory's files, or ZooKeeper in a cluster.
        self.scram: ScramStore
        self.acls: AclStore
        if self.cluster is None:
            self.scram, self.acls = FileScramStore(data_dir), FileAclStore(data_dir)
        else:
            from oncelog.cluster.security_stores import ZkAclStore, ZkScramStore

            self.scram = ZkScramStore(self.cluster.zk, self.cluster.configs)
            self.acls = ZkAclStore(self.cluster.zk)
        self.topics = TopicRegistry(data_dir, config)
        self.hosted = HostedPartitions(self)
        self.flusher = GroupCommitFlusher(priority=config.fsync_realtime_priority)
        self.producer_ids: ProducerIdAllocator | None = None
        self._coordinators: LocalCoordinatorIO | ClusterCoordinatorIO = (
            LocalCoordinatorIO(config, self.topics, self.flusher, self.now_ms)
            if self.cluster is None
            else _cluster_coordinator_io(config, self.cluster)
        )
        self.groups = _group_coordinator(config, self._coordinators.offsets, self.now_ms)
        # Markers this broker writes itself (WriteTxnMarkers lands here); the transaction
        # coordinator's go through ``markers``, which in a cluster sends the others'.
        self.local_markers = LocalMarkerWriter(
            self._coordinators.marked, self.groups.complete_transaction, self.now_ms
        )
        self.markers = self._coordinators.marker_writer(self.local_markers)
        # A new producer id: from this node's allocator, or a block reserved in ZooKeeper.
        self.new_producer_id = self._coordinators.take_producer_id(self)
        self.transactions = _transaction_coordinator(
            config,
            self._coordinators.state,
            self.now_ms,
            self.new_producer_id,
            self.markers,
            self.groups.locate,
        )
        if isinstance(self._coordinators, LocalCoordinatorIO):
            self.groups.lead_every_partition(self._coordinators.offsets)
            self.transactions.lead_every_partition(self._coordinators.state)
        self.cleaner = LogCleaner(self.hosted, config, clock_ms=self.now_ms)
        if self.cluster is not None:
            self.cluster.on_truncation(self.cleaner.truncated)
        self.metrics = BrokerMetrics(self)
        self.flusher.on_fsync = self.metrics.fsync_time.observe
        first_host = self.listeners.listeners[0].host
        self._metrics_server = (
            None
            if metrics_port is None
            else MetricsServer(self.metrics, first_host or "0.0.0.0", metrics_port)
        )
        self._server = KafkaServer(
            self,
            [self._server_listener(s) for s in self.listener_security.values()],
            ConnectionLimits.from_config(config),
        )
        # Addresses set at run time in front of a listener (a fault-injection proxy).
        self._advertised_overrides: dict[str, tuple[str, int]] = {}
        self._handlers: dict[int, Handler] = handlers.by_api_key()
        self._maintenance: asyncio.Task[None] | None = None
        missing = set(SUPPORTED_VERSIONS) - set(self._handlers)
        assert not missing, f"advertised APIs without a handler: {missing}"

    def now_ms(self) -> int:
        return wall_clock_ms()

    def allocate_producer_id(self) -> int:
        """A new producer id from this node's allocator (single node)."""
        assert self.producer_ids is not None, "producer ids are allocated once started"
        return self.producer_ids.allocate()

    def _server_listener(self, security: ListenerSecurity) -> Listener:
        endpoint, sasl = security.endpoint, security.sasl
        tls_principal = security.ssl_context is not None and sasl is None
        return Listener(
            name=endpoint.listener,
            host=endpoint.host,
            port=endpoint.port,
            ssl_context=security.ssl_context,
            principal_of=security.principal_from_certificate if tls_principal else None,
            new_authenticator=(
                None if sasl is None else authenticator_factory(sasl, self.scram.credential)
            ),
            failed_authentication_delay_s=security.failed_authentication_delay_ms / 1000,
        )

    @property
    def authorizer(self) -> AclAuthorizer | None:
        """The ACL authorizer over the current ACLs; None without ``authorizer.class.name``
        (everything is allowed)."""
        if self._authorizer_settings is None:
            return None
        if self._authorizer is None or self._authorizer.table is not self.acls.table:
            super_users, allow_everyone = self._authorizer_settings
            self._authorizer = AclAuthorizer(self.acls.table, super_users, allow_everyone)
        return self._authorizer

    # -- addresses -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port of the first listener."""
        return self._server.port

    @property
    def ports(self) -> dict[str, int]:
        """The port of each listener, by name."""
        return self._server.ports

    @property
    def server(self) -> KafkaServer:
        return self._server

    def bound_endpoint(self, listener: str) -> Endpoint:
        """A listener as it is bound (port 0 replaced by the port it got)."""
        endpoint = self.listeners.listener(listener)
        return Endpoint(endpoint.listener, endpoint.protocol, endpoint.host, self.ports[listener])

    def advertised_address_for(self, listener: str) -> tuple[str, int]:
        """What Metadata tells a client that came in on ``listener``: the advertised
        address of that listener (its bound address by default; an empty host is the
        listener's own); a fault-injection proxy can stand in front."""
        if listener in self._advertised_overrides:
            return self._advertised_overrides[listener]
        bound = self.bound_endpoint(listener)
        advertised = self.listeners.advertised_for(listener) or bound
        port = advertised.port or bound.port  # listeners advertised as bound: port 0 is set
        if advertised.host:
            return advertised.host, port
        if bound.host in _EVERY_INTERFACE:
            return socket.getfqdn(), port  # Kafka's canonical host name
        return bound.host, port

    @property
    def advertised_address(self) -> tuple[str, int]:
        """The first listener's advertised address."""
        return self.advertised_address_for(self.listeners.listeners[0].listener)

    def _registered_endpoints(self) -> tuple[tuple[str, str, str, int], ...]:
        """Every listener as a cluster broker registers it: name, protocol, address."""
        return tuple(
            (e.listener, e.protocol.name, *self.advertised_address_for(e.listener))
            for e in self.listeners.listeners
        )

    def advertise(self, host: str, port: int, listener: str | None = None) -> None:
        """Advertise ``host``:``port`` for ``listener`` (default: the first one)."""
        self._advertised_overrides[listener or self.listeners.listeners[0].listener] = (host, port)

    def bootstrap_servers_for(self, listener: str) -> str:
        """An address a client on this machine can connect to ``listener`` at."""
        endpoint = self.bound_endpoint(listener)
        host = _connectable(endpoint.host)
        return f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"

    @property
    def bootstrap_servers(self) -> str:
        """The first listener's address."""
        return self.bootstrap_servers_for(self.listeners.listeners[0].listener)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        descriptors = budget_file_descriptors()
        self._server.cap_connections(descriptors.connections)
        if self.cluster is not None:
            await self._start_in_cluster(self.cluster)
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        if not clean and self.topics.in_use():
            log.warning("no clean-shutdown marker in %s: recovering logs", self.data_dir)
        # The marker is removed before anything is written, so a crash from here on is
        # seen as unclean at the next start.
        marker.unlink(missing_ok=True)
        assert isinstance(self.dynamic_configs, DynamicConfigs)
        self.dynamic_configs.load()
        await self.scram.start()
        await self.acls.start()
        self.topics.load(clean_shutdown=clean, now_ms=self.now_ms())
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.flusher.start()
        await self.groups.start()
        await self.transactions.start()
        await self._server.start()
        await self._start_upkeep()

    async def _start_in_cluster(self, cluster: ClusterNode) -> None:
        """Read the cluster's credentials and ACLs, serve, then join the cluster under the
        addresses clients and peers must use (peers: the inter-broker listener's); the
        replicas ZooKeeper assigns to this broker open as their states arrive. If joining
        fails (ZooKeeper unreachable, broker.id taken) everything stops again."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        marker.unlink(missing_ok=True)
        self.flusher.start()
        try:
            # Credentials and ACLs are read before the first connection is accepted.
            await cluster.connect()
            await self.scram.start()
            await self.acls.start()
            await self._server.start()
            await cluster.start(
                *self.advertised_address_for(self.listeners.inter_broker_listener),
                self.data_dir,
                self.flusher,
                clean,
                endpoints=self._registered_endpoints(),
            )
        except BaseException:
            await self.acls.stop()
            await self.scram.stop()
            await self._server.stop()
            await cluster.zk.close()
            await self.flusher.stop()
            raise
        self.cluster_id = cluster.cluster_id
        await self.groups.start()
        await self.transactions.start()
        self._coordinators.start(self)
        await self._start_upkeep()

    async def _start_upkeep(self) -> None:
        """Metrics, log maintenance and the cleaner, over the partitions this broker hosts."""
        if self._metrics_server is not None:
            await self._metrics_server.start()
        maintenance = Maintenance(self.hosted, self.flusher, self.config, self.now_ms)
        self._maintenance = asyncio.create_task(maintenance.run(), name="log-maintenance")
        if self.config.log_cleaner_enable:
            self.cleaner.start()

    def partition_for_clients(self, topic: str, index: int, leader_epoch: int = -1) -> Partition:
        """The partition a producer or consumer may use here: on a single node any, in a
        cluster only one this broker leads (KafkaError NOT_LEADER_OR_FOLLOWER,
        KAFKA_STORAGE_ERROR when its log here failed, or a leader epoch error when the
        client's ``leader_epoch`` is not ours)."""
        if self.cluster is None:
            return self.topics.partition(topic, index)
        return self.cluster.hosting().leader_partition(topic, index, leader_epoch)

    def knows_partition(self, topic: str, index: int) -> bool:
        """Whether the partition exists in this broker's metadata: this node's topics or,
        in a cluster, its copy of ZooKeeper (Kafka's ``metadataCache.getPartitionInfo``),
        wherever it is led."""
        if self.cluster is not None:
            return index in self.cluster.cache.partitions_of(topic)
        found = self.topics.get(topic)
        return found is not None and 0 <= index < len(found.partitions)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id (None: no such topic), from this node's
        topics or, in a cluster, from its copy of ZooKeeper."""
        if self.cluster is not None:
            return self.cluster.cache.topic_name(topic_id)
        topic = self.topics.by_id(topic_id)
        return None if topic is None else topic.name

    async def stop(self) -> None:
        """Stop serving, flush everything, and leave the clean-shutdown marker, unless a
        log failed (an fsync, a torn write, an index write): then the next start must
        recover it from its recovery point."""
        hosted = self.hosted.partitions()  # a cluster broker's replicas are gone once closed
        # The log upkeep first: a cluster broker closes its replicas when it leaves.
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        await self.cleaner.stop()
        if self.cluster is not None:
            # Coordinators first: they write to replicas the cluster node closes.
            await self._coordinators.stop()
            await self.transactions.stop()
            await self.groups.stop()
            await self.acls.stop()
            await self.scram.stop()
            await self.cluster.stop()
        await self._server.stop()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        if self.cluster is None:  # a single node's coordinators, once nothing is served
            await self.transactions.stop()
            await self.groups.stop()
        await self.flusher.stop()
        self.topics.close()
        failed = [p for p in hosted if p.log.failed]
        if failed:
            log.error(
                "broker stopped; %d log(s) failed (%s): the next start recovers them",
                len(failed),
                ", ".join(f"{p.topic}-{p.index}" for p in failed[:10]),
            )
            return
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
        self,
        transactional_id: str | None,
        producer: TransactionalProducer,
        partition: Partition,
    ) -> Admission | None:
        """Refuse a transactional batch (or TxnOffsetCommit) that is not part of an ongoing
        transaction (KafkaError); in a cluster, where the coordinator may be another broker,
        the Admission the write must wait for, if any (KIP-890 part 1)."""
        if transactional_id is None:
            raise KafkaError(
                ErrorCode.transactional_id_authorization_failed,
                "a transactional batch needs the request's transactional id",
            )
        if isinstance(self._coordinators, LocalCoordinatorIO):
            self.transactions.check_write(
                transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                partition.topic,
                partition.index,
            )
            return None
        return self._coordinators.verifier.admit(transactional_id, producer, partition)

    # -- dispatch ------------------------------------------------------------------------

    def dispatch(
        self, header: RequestHeader, request: Any, connection: ConnectionInfo
    ) -> Coroutine[Any, Any, Any]:
        context = RequestContext(
            header.api_key,
            header.api_version,
            header.correlation_id,
            header.client_id,
            principal=connection.principal,
            client_address=connection.client_address,
            listener=connection.listener,
        )
        return self._measured(header.api_key, request, context)

    async def _measured(self, api_key: int, request: Any, context: RequestContext) -> Any:
        """Handle the request and time it. The handler's coroutine is made here, not in
        dispatch: a connection that closes before this task first runs cancels it, and a
        coroutine made outside would then be dropped unawaited (a RuntimeWarning)."""
        started = time.monotonic()
        response = await self._handlers[api_key](self, context, request)
        self.metrics.observe_request(api_key, response, time.monotonic() - started)
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


class LocalCoordinatorIO:
    """What a single node's coordinators stand on: internal topics of this node, producer
    ids from its own allocator, markers written in process (``ClusterCoordinatorIO`` is a
    cluster broker's)."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicRegistry,
        flusher: GroupCommitFlusher,
        clock: Callable[[], int],
    ) -> None:
        self.offsets = InternalTopicLog(
            topics, flusher, CONSUMER_OFFSETS, config.offsets_topic_num_partitions, clock
        )
        self.state = InternalTopicLog(
            topics, flusher, TRANSACTION_STATE, config.transaction_state_log_num_partitions, clock
        )
        self.marked = NodePartitions(topics, flusher)

    def marker_writer(self, local: LocalMarkerWriter) -> MarkerWriter:
        return local

    def take_producer_id(self, broker: Broker) -> Callable[[], int]:
        return broker.allocate_producer_id

    def start(self, broker: Broker) -> None:
        pass

    async def stop(self) -> None:
        pass


def _cluster_coordinator_io(config: BrokerConfig, cluster: ClusterNode) -> ClusterCoordinatorIO:
    from oncelog.cluster.coordinators import ClusterCoordinatorIO  # kazoo only where used

    return ClusterCoordinatorIO(config, cluster)


def _group_coordinator(
    config: BrokerConfig, offsets: CoordinatorTopic, clock: Callable[[], int]
) -> GroupCoordinator:
    group_config = GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
    )
    expiry = OffsetExpiry(
        retention_ms=config.offsets_retention_minutes * 60_000,
        check_interval_ms=config.offsets_retention_check_interval_ms,
    )
    return GroupCoordinator(offsets, offsets, offsets, clock, group_config, expiry=expiry)


def _transaction_coordinator(
    config: BrokerConfig,
    state: CoordinatorTopic,
    clock: Callable[[], int],
    allocate_producer_id: Callable[[], int],
    markers: MarkerWriter,
    offsets_partition: Callable[[str], Awaitable[int]],
) -> TransactionCoordinator:
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
    )


def _authorizer_settings(
    config: BrokerConfig,
) -> tuple[frozenset[KafkaPrincipal], bool] | None:
    """``super.users`` and ``allow.everyone.if.no.acl.found`` when an authorizer is set."""
    if not config.get("authorizer.class.name"):
        return None
    raw = config.get("super.users") or ""
    try:
        super_users = frozenset(
            KafkaPrincipal.parse(p.strip()) for p in raw.split(";") if p.strip()
        )
    except ValueError as exc:
        raise ConfigError("super.users", raw, str(exc)) from None
    return super_users, config.get("allow.everyone.if.no.acl.found")


_EVERY_INTERFACE = ("", "0.0.0.0", "::")


def _connectable(host: str) -> str:
    """A host a local client can reach: a listener on every interface is reachable at
    127.0.0.1 (or ::1 when bound to IPv6's every-interface address)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    return "::1" if host == "::" else host
