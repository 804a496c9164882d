"""A broker's membership of a ZooKeeper-coordinated cluster.

It owns the broker's ZooKeeper session and everything granted under it: the registration
in /brokers/ids (the broker epoch), the lease (lease.py), the candidacy for controller (and
the controller while elected), and the metadata watcher feeding the cache the request
handlers and the replica manager read.

Session loss (``lost``): the lease is revoked at once, so the broker stops leading. kazoo
opens a new session; the broker registers again (a new broker epoch) and the controller,
seeing it come back, elects it again where it should lead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.broker.config import BrokerConfig
from oncelog.client.security import ClientSecurity
from oncelog.cluster.configs import ClusterConfigs
from oncelog.cluster.controller import Controller
from oncelog.cluster.lease import SessionLease
from oncelog.cluster.metadata import Change, MetadataCache, MetadataWatcher
from oncelog.cluster.producer_ids import ProducerIdBlocks
from oncelog.cluster.replica_manager import ReplicaManager
from oncelog.cluster.topic_admin import TopicAdmin
from oncelog.cluster.zookeeper import (
    BrokerRegistration,
    ControllerEpoch,
    SessionExpired,
    ZooKeeperError,
    ZooKeeperSession,
    broker_path,
)
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000  # Kafka's block size

# Past the session timeout, how long a restarted broker waits for ZooKeeper to expire the
# registration its killed predecessor left.
EXPIRY_GRACE_S = 10.0
CATCH_UP_S = 10.0  # to read the cluster's brokers and topics once registered


class ClusterNode:
    """A broker's membership of the cluster: its ZooKeeper session, registration, lease,
    controller candidacy and the metadata cache (see the module docstring)."""

    def __init__(
        self, config: BrokerConfig, broker_id: int, peer_security: ClientSecurity | None = None
    ) -> None:
        """``peer_security``: how this broker connects to the others' inter-broker
        listener (default PLAINTEXT)."""
        self.config = config
        self.broker_id = broker_id
        self.peer_security = peer_security or ClientSecurity()
        self.cache = MetadataCache()
        self.cluster_id = ""
        self.registration: BrokerRegistration | None = None
        self.controller: Controller | None = None
        self.lease = SessionLease(config.zookeeper_session_timeout_ms / 1000)
        self.zk = ZooKeeperSession(
            str(config.zookeeper_connect),
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            on_state=self._session_state,
        )
        self._watcher = MetadataWatcher(self.zk, self.cache, broker_id)
        self.configs = ClusterConfigs(self.zk, self.cache, config, broker_id)
        self.topic_admin = TopicAdmin(self)
        self._address: tuple[str, int] | None = None  # the inter-broker listener's
        self._endpoints: tuple[tuple[str, str, str, int], ...] = ()
        self._tasks: list[asyncio.Task[None]] = []
        self._reregistering: asyncio.Task[None] | None = None
        self._lease_listeners: list[Callable[[], None]] = []
        self._truncation_listeners: list[Callable[[Partition, int], None]] = []
        self._session_lost = asyncio.Event()
        self.replicas: ReplicaManager | None = None
        self.producer_ids = ProducerIdBlocks(
            partial(self.zk.allocate_producer_ids, broker_id, PRODUCER_ID_BLOCK)
        )
        self._registered_session: int | None = None
        self._connected = False
        self._catch_up_deadline = 0.0  # set by start(): Metadata waits until then at most

    # -- lifecycle ------------------------------------------------------------------------

    async def start(
        self,
        host: str,
        port: int,
        data_dir: Path,
        flusher: GroupCommitFlusher,
        clean_start: bool,
        endpoints: tuple[tuple[str, str, str, int], ...] = (),
    ) -> None:
        """Connect, register (this broker's address, as clients must reach it), watch, and
        host the replicas ZooKeeper assigns to this broker.

        Raises ZooKeeperError (unreachable) or BrokerIdInUse; the broker then refuses to
        start with that message."""
        self._catch_up_deadline = time.monotonic() + self._longest_join_s()
        self._address = (host, port)
        self._endpoints = endpoints
        await self.connect()
        await self._register()
        self.replicas = ReplicaManager(self, data_dir, flusher, clean_start)
        self.replicas.start()
        self._watcher.start()
        self.configs.start()
        self._tasks = [
            asyncio.create_task(self._run_for_controller(), name="controller-candidacy"),
            asyncio.create_task(self._keep_lease(), name="zookeeper-lease"),
        ]
        log.info(
            "broker %d joined cluster %s via ZooKeeper %s (broker epoch %d)",
            self.broker_id,
            self.cluster_id,
            self.zk.connect,
            self.registration.epoch if self.registration else -1,
        )

    async def connect(self) -> None:
        """Open the ZooKeeper session and read what the broker needs before it serves: the
        cluster id and this broker's dynamic layers (once; ``start`` calls it too)."""
        if self._connected:
            return
        await self.zk.start()
        self.cluster_id = await self.zk.cluster_id()
        await self.configs.load_broker_layers()
        self._connected = True

    async def stop(self) -> None:
        """Leave: closing the session deletes our registration (and /controller if ours)
        at once, so the controller moves our leaderships without waiting for a timeout."""
        for task in [*self._tasks, self._reregistering]:
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in [*self._tasks, self._reregistering] if t is not None),
            return_exceptions=True,
        )
        await self.producer_ids.stop()
        self._watcher.stop()
        await self.configs.stop()
        self.lease.revoke()
        await self.zk.close()
        if self.replicas is not None:
            await self.replicas.stop()

    def on_lease_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when the lease is revoked or granted (the replica manager
        re-derives its roles)."""
        self._lease_listeners.append(listener)

    def on_truncation(self, listener: Callable[[Partition, int], None]) -> None:
        """Call ``listener(partition, offset)`` before a hosted replica's log is cut at
        ``offset`` (the log cleaner aborts its pass over it). A dropped replica needs no call:
        the cleaner throws away a pass over a partition the broker no longer holds."""
        self._truncation_listeners.append(listener)

    def truncating(self, partition: Partition, offset: int) -> None:
        for listener in list(self._truncation_listeners):
            try:
                listener(partition, offset)
            except Exception:
                log.exception("truncation listener %r failed", listener)

    async def caught_up(self) -> bool:
        """Whether this broker's metadata cache describes the whole cluster, waiting for its
        first complete read after joining, at most as long as joining may take. A broker
        still joining knows no broker, and a Metadata answer listing none makes librdkafka
        (2.10 and later) drop every broker it knows, in-flight requests included, and start
        again from its bootstrap servers: it once left an idempotent producer stuck for
        five minutes. Kafka's broker serves only once it has caught up with the cluster's
        metadata."""
        remaining = self._catch_up_deadline - time.monotonic()
        if remaining > 0 and not self._watcher.caught_up.is_set():
            try:
                async with asyncio.timeout(remaining):
                    await self._watcher.caught_up.wait()
            except TimeoutError:
                pass
        return self._watcher.caught_up.is_set()

    def holds_lease(self) -> bool:
        return self.lease.holds(time.monotonic())

    def hosting(self) -> ReplicaManager:
        """The replica manager, for a request about a partition. The listener serves a
        moment before the replicas open (the address this broker registers must be bound):
        meanwhile NOT_LEADER_OR_FOLLOWER, which clients and peers retry, as Kafka answers
        for a partition whose leadership it has not yet been told."""
        if self.replicas is None:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} is still joining the cluster",
            )
        return self.replicas

    # -- registration and lease --------------------------------------------------------

    def _expiry_wait_s(self) -> float:
        """How long registering waits for a previous run's registration to expire."""
        return self.config.zookeeper_session_timeout_ms / 1000 + EXPIRY_GRACE_S

    def _longest_join_s(self) -> float:
        """How long joining may take: the wait for a previous registration to expire, and
        time to read the cluster's metadata after it."""
        return self._expiry_wait_s() + CATCH_UP_S

    async def _register(self) -> None:
        assert self._address is not None
        host, port = self._address
        if self.replicas is not None:  # a new session: its marks first, then the broker
            await self.replicas.write_offline_marks()
        sent_at = time.monotonic()
        self.registration = await self.zk.register_broker(
            BrokerRegistration(self.broker_id, host, port, endpoints=self._endpoints),
            expiry_wait_s=self._expiry_wait_s(),
        )
        session = self.zk.session_id
        assert session is not None
        self._registered_session = session
        self.lease.grant(session, sent_at)
        self._lease_changed()

    async def _keep_lease(self) -> None:
        """Renew the lease with a cheap read every quarter of the session timeout."""
        period = self.lease.timeout_s / 4
        while True:
            await asyncio.sleep(period)
            session, sent_at = self.zk.session_id, time.monotonic()
            try:
                if await self.zk.read(broker_path(self.broker_id)) is not None:
                    self.lease.renew(session, sent_at)
            except (ZooKeeperError, SessionExpired) as exc:
                log.debug("lease renewal failed: %s", exc)

    def _session_state(self, state: str) -> None:
        if state == "lost":
            log.warning("ZooKeeper session lost: no longer leading any partition")
            self._session_lost.set()
            self.lease.revoke()
            self._lease_changed()
        elif state == "connected" and self._registered_session not in (None, self.zk.session_id):
            if self._reregistering is None or self._reregistering.done():
                self._reregistering = asyncio.create_task(self._register_again())

    async def _register_again(self) -> None:
        while True:
            try:
                await self._register()
            except SessionExpired:
                await asyncio.sleep(0.2)
                continue
            except ZooKeeperError as exc:
                log.error("could not register again in ZooKeeper: %s", exc)
                await asyncio.sleep(1.0)
                continue
            log.info(
                "registered again with broker epoch %d",
                self.registration.epoch if self.registration else -1,
            )
            return

    def _lease_changed(self) -> None:
        for listener in list(self._lease_listeners):
            try:
                listener()
            except Exception:
                log.exception("lease listener %r failed", listener)

    # -- controller candidacy ----------------------------------------------------------

    async def _run_for_controller(self) -> None:
        """Whenever /controller is free, try to take it; while elected, control."""
        vacancy = asyncio.Event()

        def watch(change: Change) -> None:
            if change.controller and self.cache.controller_id is None:
                vacancy.set()

        self.cache.subscribe(watch)
        vacancy.set()
        try:
            while True:
                await vacancy.wait()
                vacancy.clear()
                if not self.holds_lease():
                    await asyncio.sleep(0.2)
                    vacancy.set()
                    continue
                try:
                    epoch = await self.zk.elect_controller(self.broker_id)
                except (ZooKeeperError, SessionExpired) as exc:
                    log.warning("controller election failed: %s", exc)
                    await asyncio.sleep(0.5)
                    vacancy.set()
                    continue
                if epoch is None:
                    if self.cache.controller_id is None:
                        # Someone holds /controller but our watch has not seen it yet.
                        await asyncio.sleep(0.2)
                        if self.cache.controller_id is None:
                            vacancy.set()
                    continue
                await self._control(epoch)
                if self.cache.controller_id is None:
                    vacancy.set()
        finally:
            self.cache.unsubscribe(watch)

    async def _control(self, epoch: ControllerEpoch) -> None:
        """Act as controller until replaced, or until our session is lost (our /controller
        znode went with it; a stale epoch could write nothing anyway)."""
        unclean = bool(self.config.get("unclean.leader.election.enable"))
        self.controller = Controller(self.zk, self.cache, epoch, unclean)
        self._session_lost.clear()
        running = asyncio.ensure_future(self.controller.run())
        lost = asyncio.ensure_future(self._session_lost.wait())
        try:
            await asyncio.wait((running, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (running, lost):
                task.cancel()
            await asyncio.gather(running, lost, return_exceptions=True)
            self.controller = None
