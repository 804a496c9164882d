"""The ZooKeeper adapter: the one module that knows kazoo and the znode layout.

The layout is Kafka's ZooKeeper mode (3.x ``ZkData.scala``), so ``zkCli.sh`` shows a
cluster the way a Kafka operator expects::

    /brokers/ids/<id>                         ephemeral: a live broker and its address
    /brokers/topics/<t>                       a topic's id and replica assignment
    /brokers/topics/<t>/partitions/<p>/state  leader, leader epoch, ISR, controller epoch
    /brokers/offline_replicas/<id>:<t>:<p>    ephemeral: broker <id>'s replica of <t>-<p> is
                                              offline (its log failed; oncelog's own, see
                                              mark_replica_offline)
    /config/topics/<t>                        a topic's configuration overrides
    /config/brokers/<id>, /config/brokers/<default>
                                              dynamic broker configuration (KIP-226)
    /config/changes/config_change_<seq>       "this entity's configuration changed"
    /controller                               ephemeral: the controller's broker id
    /controller_epoch                         how many controllers there have been
    /cluster/id                               the cluster id

Everything else in oncelog sees typed values (:class:`BrokerRegistration`,
:class:`PartitionState`, :class:`TopicAssignment`) and awaitable operations; kazoo's threads
never reach the event loop except through :meth:`ZooKeeperSession._bridge` and the watch
callbacks, which are handed to the loop with ``call_soon_threadsafe`` in the order kazoo
delivers them.

Why kazoo: it is the maintained pure-Python ZooKeeper client (2.11, 2026), supports
multi-op transactions (needed for the controller-epoch fencing below), session events and
re-armed watches, and has no native dependency.

Fencing: every controller write is a multi-op transaction that first checks the version of
``/controller_epoch`` (Kafka's ``checkControllerAndUpdate``), so a controller that lost its
place can write nothing. Partition states are only ever written with the version read
(compare-and-set), by the controller (elections) or by the partition's leader (ISR changes).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

log = logging.getLogger(__name__)

# -- the layout ------------------------------------------------------------------------------

BROKER_IDS = "/brokers/ids"
OFFLINE_REPLICAS = "/brokers/offline_replicas"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DEFAULT_BROKER_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# Created at start, as Kafka's ZkData.PersistentZkPaths, so watches have parents to sit on.
PERSISTENT_PATHS = (
    BROKER_IDS,
    OFFLINE_REPLICAS,
    TOPICS,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CHANGES,
    "/admin/delete_topics",
    "/cluster",
)

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
INITIAL_LEADER_EPOCH = 0
NEW_ZNODE = -1  # the version of a state not written yet


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def offline_replica_name(broker_id: int, topic: str, partition: int) -> str:
    """The child of OFFLINE_REPLICAS naming one offline replica (a topic name has no ':')."""
    return f"{broker_id}:{topic}:{partition}"


def offline_replica_path(broker_id: int, topic: str, partition: int) -> str:
    return f"{OFFLINE_REPLICAS}/{offline_replica_name(broker_id, topic, partition)}"


def parse_offline_replica(name: str) -> tuple[int, str, int] | None:
    """(broker id, topic, partition) of an OFFLINE_REPLICAS child; None if it is not one."""
    broker, _, rest = name.partition(":")
    topic, _, partition = rest.rpartition(":")
    if not (broker.isdigit() and topic and partition.isdigit()):
        return None
    return int(broker), topic, int(partition)


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """``entity``: a broker id, or DEFAULT_BROKER_ENTITY for the cluster-wide layer."""
    return f"{CONFIG_BROKERS}/{entity}"


def entity_config_path(entity_path: str) -> str:
    """The znode of a config change notification's ``entity_path`` (``topics/<t>``,
    ``brokers/<id>``)."""
    return f"/config/{entity_path}"


# -- typed values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker. ``epoch`` is the creation zxid of its znode (Kafka's broker epoch,
    KIP-380): a broker that restarts gets a larger one, so a restart is never mistaken
    for the same incarnation."""

    broker_id: int
    host: str  # the inter-broker listener's advertised address: where peers connect
    port: int
    epoch: int = -1
    # Every listener: (listener name, security protocol, advertised host, port).
    endpoints: tuple[tuple[str, str, str, int], ...] = ()

    def address_for(self, listener: str) -> tuple[str, int]:
        """The advertised address of ``listener`` (a client's listener: Metadata answers
        each broker's address on the listener the client came in on); the inter-broker
        address when the broker did not register that listener."""
        for name, _, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's LeaderIsrAndControllerEpoch, plus where it stands in ZooKeeper: ``version``
    (for compare-and-set writes) and ``modified_zxid`` (when it was last written, compared
    with broker epochs to tell a restarted broker from the one the state was written for)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = NEW_ZNODE
    modified_zxid: int = -1

    def same_decision(self, other: PartitionState) -> bool:
        """Equal leader, leader epoch and ISR (what a lost write acknowledgement leaves)."""
        return (self.leader, self.leader_epoch, self.isr) == (
            other.leader,
            other.leader_epoch,
            other.isr,
        )


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's id and, for each partition, its replicas in preference order."""

    name: str
    topic_id: uuid.UUID
    replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", MappingProxyType(dict(self.replicas)))


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """The epoch this broker won the controller role with, and the znode version that a
    fenced write checks."""

    epoch: int
    version: int


@dataclass(frozen=True, slots=True)
class Znode:
    """A znode's bytes and the facts of its stat we use."""

    data: bytes
    version: int
    modified_zxid: int
    created_ms: int = 0


@dataclass(frozen=True, slots=True)
class EntityConfig:
    """An entity's configuration overrides (``/config/<type>/<name>``) and the zxid of
    their last write, which orders two reads of the same znode."""

    configs: Mapping[str, str]
    modified_zxid: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))


# -- errors ----------------------------------------------------------------------------------


class ZooKeeperError(Exception):
    """ZooKeeper could not be reached in time, or refused an operation unexpectedly."""


class BrokerIdInUse(ZooKeeperError):
    """Another live broker holds this broker.id."""


class ControllerMoved(ZooKeeperError):
    """The controller epoch changed: this broker is no longer (or never was) the controller."""


class TopicExists(ZooKeeperError):
    """The topic's znode already exists: another create won (TOPIC_ALREADY_EXISTS)."""


class NoSuchNode(ZooKeeperError):
    """A znode an operation needs (a topic's) does not exist."""


class SessionExpired(ZooKeeperError):
    """The ZooKeeper session ended: registration and everything granted under it are gone."""


# -- JSON codecs (Kafka's formats) -----------------------------------------------------------


def encode_broker(registration: BrokerRegistration, now_ms: int) -> bytes:
    """Kafka's v5 registration; ``host``/``port`` hold the inter-broker listener's address
    (Kafka writes the PLAINTEXT listener's there, or none), which is where peers connect."""
    endpoints = registration.endpoints or (
        ("PLAINTEXT", "PLAINTEXT", registration.host, registration.port),
    )
    return _json(
        {
            "version": 5,
            "host": registration.host,
            "port": registration.port,
            "endpoints": [f"{name}://{host}:{port}" for name, _, host, port in endpoints],
            "listener_security_protocol_map": {name: proto for name, proto, _, _ in endpoints},
            "jmx_port": -1,
            "timestamp": str(now_ms),
            "features": {},
        }
    )


def decode_broker(broker_id: int, data: bytes, epoch: int) -> BrokerRegistration:
    fields = json.loads(data)
    protocols = fields.get("listener_security_protocol_map", {})
    endpoints = []
    for endpoint in fields.get("endpoints", ()):
        name, _, address = endpoint.partition("://")
        host, _, port_text = address.rpartition(":")
        endpoints.append((name, str(protocols.get(name, name)), host.strip("[]"), int(port_text)))
    return BrokerRegistration(
        broker_id, str(fields["host"]), int(fields["port"]), epoch, tuple(endpoints)
    )


def encode_partition_state(state: PartitionState) -> bytes:
    return _json(
        {
            "version": 1,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "controller_epoch": state.controller_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, version: int, modified_zxid: int) -> PartitionState:
    fields = json.loads(data)
    return PartitionState(
        leader=int(fields["leader"]),
        leader_epoch=int(fields["leader_epoch"]),
        isr=tuple(int(r) for r in fields["isr"]),
        controller_epoch=int(fields["controller_epoch"]),
        version=version,
        modified_zxid=modified_zxid,
    )


def encode_topic(assignment: TopicAssignment) -> bytes:
    return _json(
        {
            "version": 3,
            "topic_id": kafka_uuid(assignment.topic_id),
            "partitions": {str(p): list(r) for p, r in sorted(assignment.replicas.items())},
            "adding_replicas": {},
            "removing_replicas": {},
        }
    )


def decode_topic(name: str, data: bytes) -> TopicAssignment:
    fields = json.loads(data)
    replicas = {int(p): tuple(int(r) for r in rs) for p, rs in fields["partitions"].items()}
    return TopicAssignment(name, parse_kafka_uuid(fields["topic_id"]), replicas)


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _json({"version": 1, "config": dict(configs)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """Kafka's config change notification (ConfigEntityChangeNotificationSequenceZNode)."""
    return _json({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    return str(json.loads(data)["entity_path"])


def encode_controller(broker_id: int, now_ms: int) -> bytes:
    return _json({"version": 1, "brokerid": broker_id, "timestamp": str(now_ms)})


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# -- the session -----------------------------------------------------------------------------

RETRY_BACKOFF_S = 0.1


class WatchHandle:
    """Stops a data or children watch: the next event the watch sees ends it."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = True

    def cancel(self) -> None:
        self.active = False


class ZooKeeperSession:
    """One kazoo client for the broker: operations as coroutines, watches and session
    events delivered on the event loop.

    ``on_state`` receives ``"connected"``, ``"suspended"`` (the connection dropped; the
    session may live on) and ``"lost"`` (the session expired: kazoo goes on to open a new
    one, and every ephemeral znode, registration and leadership of the old one is gone).
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int,
        connection_timeout_ms: int,
        on_state: Callable[[str], None] | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._on_state = on_state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            command_retry={"max_tries": 0},
        )
        self._client.add_listener(self._kazoo_state)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (bounded by zookeeper.connection.timeout.ms) and create the persistent
        paths; ZooKeeperError with the address if ZooKeeper cannot be reached."""
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._client.start, self._connection_timeout_s)
        except KazooTimeoutError as exc:
            await asyncio.to_thread(self._client.stop)
            raise ZooKeeperError(
                f"cannot connect to ZooKeeper at {self.connect} within "
                f"{self._connection_timeout_s:g} s (zookeeper.connection.timeout.ms)"
            ) from exc
        chroot = self._client.chroot
        if chroot:  # Kafka creates a missing chroot (zookeeper.connect=host:port/chroot)
            self._client.chroot = ""
            try:
                await self._retry(lambda: self._client.ensure_path_async(chroot))
            finally:
                self._client.chroot = chroot
        for path in PERSISTENT_PATHS:
            await self._retry(partial(self._client.ensure_path_async, path))

    async def close(self) -> None:
        """End the session: ZooKeeper deletes our ephemeral znodes at once."""
        await asyncio.to_thread(self._client.stop)
        await asyncio.to_thread(self._client.close)

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    @property
    def connected(self) -> bool:
        return bool(self._client.connected)

    # -- cluster id --------------------------------------------------------------------

    async def cluster_id(self) -> str:
        """The cluster id in /cluster/id, created (Kafka's format) by the first broker."""
        proposal = kafka_uuid(uuid.uuid4())
        try:
            await self._retry(
                lambda: self._client.create_async(
                    CLUSTER_ID, _json({"version": "1", "id": proposal})
                )
            )
        except NodeExistsError:
            pass
        znode = await self.read(CLUSTER_ID)
        assert znode is not None
        return str(json.loads(znode.data)["id"])

    # -- broker registration -----------------------------------------------------------

    async def register_broker(
        self, registration: BrokerRegistration, *, expiry_wait_s: float
    ) -> BrokerRegistration:
        """Create /brokers/ids/<id> (ephemeral) and return the registration with its epoch.

        If the znode exists and is ours (a retry), it is kept. If another session holds it
        with our own address, it is this broker's previous run, killed before its session
        expired: nobody else can be listening on our port. We wait (at most
        ``expiry_wait_s``) for ZooKeeper to expire it. Any other holder is a different live
        broker with the same id: BrokerIdInUse.
        """
        path = broker_path(registration.broker_id)
        deadline = time.monotonic() + expiry_wait_s
        while True:
            try:
                await self._retry(
                    lambda: self._client.create_async(
                        path, encode_broker(registration, _now_ms()), ephemeral=True
                    )
                )
            except NodeExistsError:
                pass
            found = await self._read_with_stat(path)
            if found is None:
                continue  # expired between our create and our read
            data, stat = found
            holder = decode_broker(registration.broker_id, data, stat.czxid)
            if stat.ephemeralOwner == self.session_id:
                return holder
            same_address = (holder.host, holder.port) == (registration.host, registration.port)
            if not same_address:
                raise BrokerIdInUse(
                    f"broker.id {registration.broker_id} is already registered in ZooKeeper "
                    f"({self.connect}) at {path} by a live broker at {holder.host}:{holder.port}"
                    f" (session 0x{stat.ephemeralOwner:x}): give this broker another broker.id"
                    " or stop that one"
                )
            if time.monotonic() > deadline:
                raise BrokerIdInUse(
                    f"broker.id {registration.broker_id} is still registered at {path} by a "
                    f"previous run of this broker (session 0x{stat.ephemeralOwner:x}) that did "
                    f"not expire within {expiry_wait_s:g} s"
                )
            log.info(
                "%s is held by a previous run of this broker (session 0x%x); waiting for "
                "ZooKeeper to expire it",
                path,
                stat.ephemeralOwner,
            )
            await asyncio.sleep(min(0.2, self.session_timeout_ms / 4000))

    async def mark_replica_offline(self, broker_id: int, topic: str, partition: int) -> None:
        """Tell the controller that this broker's replica of ``topic``-``partition`` is
        offline: its log failed, and only a restart recovers it.

        Kafka's broker writes a log directory event notification and the controller then
        asks it, with LeaderAndIsr, which replicas are offline. oncelog's controller sends
        no requests (it reconciles from ZooKeeper), so the broker names each offline
        replica itself, in an ephemeral znode of its session: it lives exactly as long as
        this run of the broker, whose restart recovers the log."""
        path = offline_replica_path(broker_id, topic, partition)
        try:
            await self._retry(lambda: self._client.create_async(path, b"", ephemeral=True))
        except NodeExistsError:
            pass  # a retry of a create that reached the server

    async def unmark_replica_offline(self, broker_id: int, topic: str, partition: int) -> None:
        """Remove the mark (the topic was deleted: a new one of that name starts healthy)."""
        await self.delete_if_present(offline_replica_path(broker_id, topic, partition))

    # -- controller --------------------------------------------------------------------

    async def elect_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Try to become the controller: create /controller and bump /controller_epoch in
        one transaction (Kafka's registerControllerAndIncrementControllerEpoch). None if
        another broker is the controller."""
        current = await self.read(CONTROLLER_EPOCH)
        if current is None:
            try:
                await self._retry(lambda: self._client.create_async(CONTROLLER_EPOCH, b"0"))
            except NodeExistsError:
                pass
            current = await self.read(CONTROLLER_EPOCH)
            assert current is not None
        epoch = int(current.data) + 1

        def transaction() -> Any:
            txn = self._client.transaction()
            txn.create(CONTROLLER, encode_controller(broker_id, _now_ms()), ephemeral=True)
            txn.set_data(CONTROLLER_EPOCH, str(epoch).encode(), current.version)
            return txn.commit_async()

        results = await self._retry(transaction)
        if isinstance(results[0], NodeExistsError) or isinstance(results[1], BadVersionError):
            return None
        _raise_first_failure(results)
        stat: ZnodeStat = results[1]
        return ControllerEpoch(epoch, stat.version)

    async def controller_id(self) -> int | None:
        znode = await self.read(CONTROLLER)
        return None if znode is None else decode_controller(znode.data)

    # -- reads -------------------------------------------------------------------------

    async def read(self, path: str) -> Znode | None:
        found = await self._read_with_stat(path)
        if found is None:
            return None
        data, stat = found
        return Znode(data, stat.version, stat.mzxid, int(stat.ctime))

    async def children(self, path: str) -> list[str]:
        try:
            return list(await self._retry(lambda: self._client.get_children_async(path)))
        except NoNodeError:
            return []

    async def live_brokers(self) -> dict[int, BrokerRegistration]:
        ids = [int(i) for i in await self.children(BROKER_IDS) if i.isdigit()]
        found = await asyncio.gather(*(self._read_with_stat(broker_path(i)) for i in ids))
        return {
            i: decode_broker(i, data, stat.czxid)
            for i, hit in zip(ids, found, strict=True)
            if hit is not None
            for data, stat in (hit,)
        }

    async def topic(self, name: str) -> TopicAssignment | None:
        znode = await self.read(topic_path(name))
        return None if znode is None else decode_topic(name, znode.data)

    async def topic_config(self, name: str) -> EntityConfig:
        return await self.entity_config(topic_config_path(name))

    async def entity_config(self, path: str) -> EntityConfig:
        """The overrides at ``/config/<type>/<name>`` (none if the znode is missing)."""
        znode = await self.read(path)
        if znode is None:
            return EntityConfig({})
        return EntityConfig(decode_topic_config(znode.data), znode.modified_zxid)

    async def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        znode = await self.read(partition_state_path(topic, partition))
        if znode is None:
            return None
        return decode_partition_state(znode.data, znode.version, znode.modified_zxid)

    # -- writes ------------------------------------------------------------------------

    async def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """Write a new topic's configuration and assignment together (TopicExists if the
        name is taken); the controller then gives its partitions their first leaders."""

        def transaction() -> Any:
            txn = self._client.transaction()
            txn.create(topic_config_path(assignment.name), encode_topic_config(configs))
            txn.create(topic_path(assignment.name), encode_topic(assignment))
            return txn.commit_async()

        results = await self._retry(transaction)
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicExists(f"topic {assignment.name!r} already exists")
        _raise_first_failure(results)

    async def change_entity_config(
        self,
        entity_path: str,
        plan: Callable[[dict[str, str]], dict[str, str]],
        *,
        exists: str | None = None,
    ) -> EntityConfig:
        """Replace the overrides of ``/config/<entity_path>`` by ``plan(current)`` and leave
        a config change notification for every broker, in one transaction (Kafka's
        ``changeEntityConfig``, which writes the two one after the other). The write is a
        compare-and-set of what ``plan`` saw: a concurrent change makes us read and plan
        again. ``exists``: a znode that must still exist (the topic), else NoSuchNode.
        ``plan`` may raise to refuse; nothing is written then."""
        path = entity_config_path(entity_path)
        while True:
            znode = await self.read(path)
            current = {} if znode is None else decode_topic_config(znode.data)
            wanted = plan(dict(current))
            data = encode_topic_config(wanted)

            def transaction(znode: Znode | None = znode, data: bytes = data) -> Any:
                txn = self._client.transaction()
                if exists is not None:
                    txn.check(exists, -1)
                if znode is None:
                    txn.create(path, data)
                else:
                    txn.set_data(path, data, znode.version)
                txn.create(
                    f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                    encode_config_change(entity_path),
                    sequence=True,
                )
                return txn.commit_async()

            results = await self._retry(transaction)
            if exists is not None and isinstance(results[0], NoNodeError):
                raise NoSuchNode(exists)
            if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
                continue  # changed (or created) meanwhile: plan again on the fresh value
            _raise_first_failure(results)
            written = results[1 if exists is not None else 0]
            zxid = written.mzxid if isinstance(written, ZnodeStat) else -1
            if zxid < 0:  # a create answers with the path: read the stat back
                fresh = await self.read(path)
                zxid = fresh.modified_zxid if fresh is not None else -1
            return EntityConfig(wanted, zxid)

    async def ensure_paths(self, paths: Iterable[str]) -> None:
        """Create persistent znodes (and their parents) that do not exist yet."""
        for path in paths:
            await self._retry(partial(self._client.ensure_path_async, path))

    async def rewrite_with_notification(
        self,
        path: str,
        plan: Callable[[bytes | None], bytes | None],
        notification: tuple[str, bytes],
    ) -> bytes | None:
        """Replace the data of ``path`` by ``plan(current)`` (None: the znode is deleted,
        or not created) and create the sequential znode ``notification`` = (path prefix,
        data) in one transaction, compare-and-set on the version ``plan`` saw: a
        concurrent change makes us read and plan again. Returns what was written. (Kafka
        writes an ACL or user change and its notification one after the other.)"""
        while True:
            znode = await self.read(path)
            wanted = plan(None if znode is None else znode.data)
            if znode is None and wanted is None:
                return None  # nothing there and nothing to write

            def transaction(znode: Znode | None = znode, wanted: bytes | None = wanted) -> Any:
                txn = self._client.transaction()
                if znode is None:
                    txn.create(path, wanted)
                elif wanted is None:
                    txn.delete(path, znode.version)
                else:
                    txn.set_data(path, wanted, znode.version)
                txn.create(notification[0], notification[1], sequence=True)
                return txn.commit_async()

            results = await self._retry(transaction)
            if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
                continue  # changed (or created, or deleted) meanwhile: plan again
            _raise_first_failure(results)
            return wanted

    async def delete_if_present(self, path: str) -> None:
        try:
            await self._retry(lambda: self._client.delete_async(path))
        except NoNodeError:
            pass

    async def update_topic_assignment(
        self,
        controller: ControllerEpoch,
        name: str,
        update: Callable[[TopicAssignment], TopicAssignment],
    ) -> TopicAssignment:
        """Rewrite a topic's assignment (CreatePartitions adds partitions to it) with
        ``update(current)``, fenced by the controller epoch and compare-and-set on the
        topic znode. NoSuchNode if the topic is gone; ``update`` may raise to refuse."""
        path = topic_path(name)
        while True:
            znode = await self.read(path)
            if znode is None:
                raise NoSuchNode(path)
            wanted = update(decode_topic(name, znode.data))

            def transaction(version: int = znode.version, wanted: TopicAssignment = wanted) -> Any:
                txn = self._client.transaction()
                txn.check(CONTROLLER_EPOCH, controller.version)
                txn.set_data(path, encode_topic(wanted), version)
                return txn.commit_async()

            results = await self._retry(transaction)
            if isinstance(results[0], BadVersionError | NoNodeError):
                raise ControllerMoved("/controller_epoch changed: another broker is the controller")
            if isinstance(results[1], BadVersionError):
                continue
            if isinstance(results[1], NoNodeError):
                raise NoSuchNode(path)
            _raise_first_failure(results)
            return wanted

    async def write_partition_states(
        self,
        controller: ControllerEpoch,
        states: Sequence[tuple[str, int, PartitionState]],
    ) -> bool:
        """The controller's fenced compare-and-set of partition states, all or none.

        A state with version NEW_ZNODE is created (with its parents); the others must still
        be at the version they carry. False if one of them changed meanwhile (re-read and
        decide again); ControllerMoved if this controller has been replaced.
        """
        topics = {topic for topic, _, _ in states}
        existing = {t: set(await self.children(partitions_path(t))) for t in topics}

        def transaction() -> Any:
            txn = self._client.transaction()
            txn.check(CONTROLLER_EPOCH, controller.version)
            for topic in sorted(topics):
                creates = any(s.version == NEW_ZNODE for t, _, s in states if t == topic)
                if creates and not existing[topic]:
                    txn.create(partitions_path(topic), b"")
            for topic, partition, state in states:
                data = encode_partition_state(state)
                path = partition_state_path(topic, partition)
                if state.version == NEW_ZNODE:
                    if str(partition) not in existing[topic]:
                        txn.create(path.rsplit("/", 1)[0], b"")
                    txn.create(path, data)
                else:
                    txn.set_data(path, data, state.version)
            return txn.commit_async()

        results = await self._retry(transaction)
        if isinstance(results[0], BadVersionError | NoNodeError):
            raise ControllerMoved("/controller_epoch changed: another broker is the controller")
        if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
            return False
        _raise_first_failure(results)
        return True

    async def update_isr(
        self, topic: str, partition: int, state: PartitionState
    ) -> PartitionState | None:
        """A leader's compare-and-set of its ISR (state.version must be the version it
        read). The written state, or None if the partition changed meanwhile: the caller
        is then likely no longer the leader and must wait for the new state."""
        path = partition_state_path(topic, partition)
        try:
            stat = await self._retry(
                lambda: self._client.set_async(path, encode_partition_state(state), state.version)
            )
        except BadVersionError:
            # After a lost connection our own write may have landed: same decision, accept.
            current = await self.partition_state(topic, partition)
            if current is not None and current.same_decision(state):
                return current
            return None
        except NoNodeError:
            return None
        return _with_stat(state, stat)

    async def delete_topic(self, controller: ControllerEpoch, topic: str) -> None:
        """Remove a topic's znodes in one fenced transaction (brokers watching it then
        delete their replicas)."""
        partitions = await self.children(partitions_path(topic))

        def transaction() -> Any:
            txn = self._client.transaction()
            txn.check(CONTROLLER_EPOCH, controller.version)
            for p in partitions:
                for child in ("state",):
                    txn.delete(f"{partitions_path(topic)}/{p}/{child}")
                txn.delete(f"{partitions_path(topic)}/{p}")
            if partitions:
                txn.delete(partitions_path(topic))
            txn.delete(topic_path(topic))
            txn.delete(topic_config_path(topic))
            return txn.commit_async()

        results = await self._retry(transaction)
        if isinstance(results[0], BadVersionError):
            raise ControllerMoved("/controller_epoch changed: another broker is the controller")
        _raise_first_failure(results)

    async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
        """Reserve the next ``count`` producer ids for this broker: (first, last). Kafka's
        /latest_producer_id_block, advanced with compare-and-set, so no two brokers ever
        get the same id, whatever crashes."""
        while True:
            current = await self.read(PRODUCER_ID_BLOCK)
            first = 0
            if current is not None and current.data:
                first = int(json.loads(current.data)["block_end"]) + 1
            last = first + count - 1
            data = _json(
                {
                    "version": 1,
                    "broker": broker_id,
                    "block_start": str(first),
                    "block_end": str(last),
                }
            )
            try:
                await self._retry(partial(self._write_block, data, current))
            except (NodeExistsError, BadVersionError):
                continue  # another broker took a block meanwhile: take the next one
            return first, last

    def _write_block(self, data: bytes, current: Znode | None) -> Any:
        if current is None:
            return self._client.create_async(PRODUCER_ID_BLOCK, data)
        return self._client.set_async(PRODUCER_ID_BLOCK, data, current.version)

    # -- watches -----------------------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(children)`` on the loop now and after every change (kazoo re-arms
        the watch, also across reconnections and new sessions)."""
        handle = WatchHandle()
        loop = self._require_loop()

        def on_change(children: list[str] | None) -> bool:
            if not handle.active:
                return False
            loop.call_soon_threadsafe(_call_if_active, handle, callback, list(children or ()))
            return True

        ChildrenWatch(self._client, path, on_change, allow_session_lost=True)
        return handle

    def watch_data(self, path: str, callback: Callable[[Znode | None], None]) -> WatchHandle:
        """Call ``callback(znode or None)`` on the loop now and after every change."""
        handle = WatchHandle()
        loop = self._require_loop()

        def on_change(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if not handle.active:
                return False
            znode = None if stat is None else Znode(data or b"", stat.version, stat.mzxid)
            loop.call_soon_threadsafe(_call_if_active, handle, callback, znode)
            return True

        DataWatch(self._client, path, on_change)
        return handle

    # -- internals ---------------------------------------------------------------------

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("ZooKeeperSession.start() has not run")
        return self._loop

    def _kazoo_state(self, state: str) -> None:
        """kazoo's listener (its own thread): hand the state to the loop."""
        name = {
            KazooState.CONNECTED: "connected",
            KazooState.SUSPENDED: "suspended",
            KazooState.LOST: "lost",
        }[state]
        if self._loop is not None and self._on_state is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._on_state, name)

    async def _read_with_stat(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = await self._retry(lambda: self._client.get_async(path))
        except NoNodeError:
            return None
        return data, stat

    async def _retry(self, start: Callable[[], Any]) -> Any:
        """Run a kazoo async operation, again after a lost connection (as Kafka's
        retryRequestUntilConnected) until the session timeout has passed, then raise
        ZooKeeperError; a session that expired is reported, never retried.

        kazoo queues a request made while it reconnects and sends it only once connected,
        with no time limit, so an outage would hold the caller (a client's request) for as
        long as it lasts. As Kafka's ZooKeeperClient waits for the connection before it
        sends, each attempt first waits for kazoo to be connected, and no attempt outlives
        the deadline: a request cut short is as undecided as one that met ConnectionLoss."""
        deadline = time.monotonic() + self.session_timeout_ms / 1000
        while True:
            try:
                await self._connected_before(deadline)
                async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                    return await self._bridge(start())
            except ConnectionLoss as exc:
                if time.monotonic() > deadline:
                    raise self._unreachable() from exc
                await asyncio.sleep(RETRY_BACKOFF_S)
            except TimeoutError as exc:
                raise self._unreachable() from exc
            except SessionExpiredError as exc:
                raise SessionExpired("the ZooKeeper session expired") from exc

    async def _connected_before(self, deadline: float) -> None:
        """Return once kazoo is connected; TimeoutError if it is not by ``deadline``."""
        while not self._client.connected:
            if time.monotonic() >= deadline:
                raise TimeoutError
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _unreachable(self) -> ZooKeeperError:
        return ZooKeeperError(
            f"ZooKeeper at {self.connect} unreachable for {self.session_timeout_ms} ms"
        )

    def _bridge(self, async_result: Any) -> asyncio.Future[Any]:
        """An asyncio future settled, on the loop, with a kazoo IAsyncResult's outcome."""
        loop = self._require_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:
            if future.done():
                return
            try:
                future.set_result(result.get_nowait())
            except Exception as exc:
                future.set_exception(exc)

        async_result.rawlink(lambda result: loop.call_soon_threadsafe(settle, result))
        return future


def _call_if_active(handle: WatchHandle, callback: Callable[[Any], None], value: Any) -> None:
    if handle.active:
        callback(value)


def _raise_first_failure(results: Iterable[Any]) -> None:
    for result in results:
        if isinstance(result, KazooException | Exception):
            raise ZooKeeperError(f"ZooKeeper refused a transaction: {result!r}") from result


def _with_stat(state: PartitionState, stat: ZnodeStat) -> PartitionState:
    return PartitionState(
        state.leader,
        state.leader_epoch,
        state.isr,
        state.controller_epoch,
        stat.version,
        stat.mzxid,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
