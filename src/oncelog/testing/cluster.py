"""A local oncelog cluster: one ZooKeeper server and N broker processes on 127.0.0.1.

    with LocalCluster(tmp_path, brokers=3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        ...
        leader = cluster.wait_for_leader("events", 0)
        cluster.kill(leader)          # SIGKILL
        cluster.restart(leader)       # same data directory, same port
        cluster.pause(2); cluster.resume(2)          # SIGSTOP / SIGCONT
        cluster.partition(3); cluster.heal(3)        # needs proxied=True
        cluster.zookeeper.restart()

Brokers are numbered 1..N (``broker.id``), each with its data directory ``broker-<id>``
under ``base_dir``, ZooKeeper's in ``zookeeper``. Each is a :class:`BrokerProcess` (stdout
and stderr in its ``broker.log``) and is stopped by its own pid.

``proxied=True`` puts a :class:`FaultInjectionProxy` in front of each broker (advertised, so
clients and the other brokers go through it) and another between each broker and
ZooKeeper: :meth:`partition` then cuts a broker off from everything (all its connections
die, new ones too), :meth:`heal` reconnects it. Off by default: the proxies cost CPU.

The broker configuration defaults to short timeouts suited to tests
(``zookeeper.session.timeout.ms`` 4000, ``replica.lag.time.max.ms`` 4000); ``config``
overrides them and adds keys.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.client.security import ClientSecurity
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing.lifecycle import Lifecycle
from oncelog.testing.process import BrokerProcess
from oncelog.testing.proxy import FaultInjectionProxy
from oncelog.testing.zookeeper import ZooKeeperServer

__all__ = ["TEST_BROKER_CONFIG", "ClusterError", "LocalCluster"]

log = logging.getLogger(__name__)

TEST_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
}
_POLL_S = 0.05
_T = TypeVar("_T")


class ClusterError(RuntimeError):
    """The cluster did not reach the state waited for in time."""


class LocalCluster(Lifecycle):
    """A ZooKeeper server and N broker processes on 127.0.0.1 for tests and development (see
    the module docstring); stops everything it started on exit."""

    def __init__(
        self,
        base_dir: Path | str,
        brokers: int = 3,
        config: Mapping[str, str] | None = None,
        *,
        proxied: bool = False,
        metrics: bool = False,
        start_timeout_s: float = 60.0,
        security: ClientSecurity | None = None,
    ) -> None:
        """``security``: how the cluster's own checks connect to the brokers' first
        listener (a secured cluster's: see ``SecurityKit.client``); PLAINTEXT by default."""
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, not {brokers}")
        self.base_dir = Path(base_dir)
        self.broker_ids = tuple(range(1, brokers + 1))
        self.config = {**TEST_BROKER_CONFIG, **(config or {})}
        self.proxied = proxied
        self.metrics = metrics  # each broker serves Prometheus metrics (BrokerProcess.metrics_port)
        self.start_timeout_s = start_timeout_s
        self.security = security
        self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper")
        self.brokers: dict[int, BrokerProcess] = {}
        self._kafka_proxies: dict[int, FaultInjectionProxy] = {}
        self._zk_proxies: dict[int, FaultInjectionProxy] = {}
        self._zk_client: KazooClient | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """ZooKeeper, then every broker; return once all are registered and the controller
        counts every one of them live (it places replicas on the brokers it has seen)."""
        try:
            self.zookeeper.start()
            for broker_id in self.broker_ids:
                self.brokers[broker_id] = self._new_broker(broker_id)
            for broker_id, broker in self.brokers.items():
                broker.start()
                if self.proxied:
                    self._kafka_proxies[broker_id].set_upstream("127.0.0.1", broker.port)
            self.wait_for_brokers(self.broker_ids)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every broker (cleanly, killing any that hangs), then ZooKeeper."""
        failures: list[BaseException] = []
        for broker in self.brokers.values():
            try:
                broker.terminate(check=False)
            except Exception as exc:
                failures.append(exc)
        if self._zk_client is not None:
            self._zk_client.stop()
            self._zk_client.close()
            self._zk_client = None
        for proxy in [*self._kafka_proxies.values(), *self._zk_proxies.values()]:
            proxy.stop()
        self.zookeeper.stop()
        if failures:
            raise failures[0]

    # -- addresses ------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's address (the proxies' when proxied), comma-separated."""
        return ",".join(self.address(b) for b in self.broker_ids)

    def address(self, broker_id: int) -> str:
        if self.proxied:
            return self._kafka_proxies[broker_id].bootstrap_servers
        return self.brokers[broker_id].bootstrap_servers

    # -- faults ---------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no flush, no clean shutdown; its ZooKeeper session lives until timeout."""
        self.brokers[broker_id].kill()

    def terminate(self, broker_id: int) -> None:
        """Clean stop (SIGTERM): the broker leaves ZooKeeper at once."""
        self.brokers[broker_id].terminate()

    def restart(self, broker_id: int) -> None:
        """Start a stopped or killed broker again (a running one is stopped cleanly first)."""
        broker = self.brokers[broker_id]
        broker.restart()
        if self.proxied:
            self._kafka_proxies[broker_id].set_upstream("127.0.0.1", broker.port)

    def pause(self, broker_id: int) -> None:
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    def partition(self, broker_id: int) -> None:
        """Cut the broker off from ZooKeeper, clients and the other brokers."""
        for proxy in self._proxies_of(broker_id):
            proxy.set_faults(drop_request_rate=1.0, drop_response_rate=1.0)
            proxy.cut_all_connections()

    def heal(self, broker_id: int) -> None:
        for proxy in self._proxies_of(broker_id):
            proxy.set_faults(drop_request_rate=0.0, drop_response_rate=0.0)

    # -- what ZooKeeper says --------------------------------------------------------------

    def registered_brokers(self) -> set[int]:
        return {int(i) for i in self._ask(lambda zk: zk.get_children("/brokers/ids"))}

    def _controller_sees(self, broker_ids: set[int]) -> bool:
        controller = self.controller()
        if controller is None:
            return False
        try:
            with KafkaConnection(self.address(controller), security=self.security) as conn:
                answer = conn.request(
                    ApiKey.METADATA,
                    {
                        "topics": [],
                        "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": False,
                        "include_topic_authorized_operations": False,
                    },
                )
        except (OSError, ProtocolClientError):
            return False  # the controller moved or is still starting: ask again
        return broker_ids <= {broker.node_id for broker in answer.brokers}

    def controller(self) -> int | None:
        try:
            data, _ = self._ask(lambda zk: zk.get("/controller"))
        except Exception:
            return None
        return int(json.loads(data)["brokerid"])

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The state znode (leader, leader_epoch, isr, controller_epoch) or None."""
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            data, _ = self._ask(lambda zk: zk.get(path))
        except Exception:
            return None
        return dict(json.loads(data))

    def znode(self, path: str) -> bytes | None:
        """The data of any znode (None if it does not exist), to check what a test did."""
        try:
            data, _ = self._ask(lambda zk: zk.get(path))
        except NoNodeError:
            return None
        return bytes(data)

    def znode_children(self, path: str) -> list[str]:
        try:
            return sorted(self._ask(lambda zk: zk.get_children(path)))
        except NoNodeError:
            return []

    def assignment(self, topic: str) -> dict[int, list[int]]:
        """The replicas of each partition of ``topic`` ({} if it does not exist)."""
        data = self.znode(f"/brokers/topics/{topic}")
        if data is None:
            return {}
        return {int(p): list(r) for p, r in json.loads(data)["partitions"].items()}

    def topics(self) -> list[str]:
        return self.znode_children("/brokers/topics")

    def leader(self, topic: str, partition: int) -> int | None:
        state = self.partition_state(topic, partition)
        if state is None or int(state["leader"]) < 0:
            return None
        return int(state["leader"])

    # -- waiting --------------------------------------------------------------------------

    def wait_for_brokers(self, broker_ids: Iterable[int], timeout_s: float | None = None) -> None:
        """Until the brokers are registered in ZooKeeper and the controller has seen them:
        admin clients send CreateTopics to the controller, which places replicas on the
        brokers it has seen (a broker restarted a moment ago may be registered but not yet
        seen, and a topic of replication factor 3 then fails with INVALID_REPLICATION_FACTOR
        on 3 running brokers)."""
        wanted = set(broker_ids)
        self._wait(
            lambda: wanted <= self.registered_brokers(), f"brokers {sorted(wanted)}", timeout_s
        )
        self._wait(
            lambda: self._controller_sees(wanted),
            f"a controller seeing brokers {sorted(wanted)}",
            timeout_s,
        )

    def wait_for_leader(
        self,
        topic: str,
        partition: int,
        *,
        not_in: Iterable[int] = (),
        timeout_s: float | None = None,
    ) -> int:
        """The partition's leader once it has one outside ``not_in``."""
        excluded = set(not_in)
        found: list[int] = []

        def elected() -> bool:
            leader = self.leader(topic, partition)
            if leader is None or leader in excluded:
                return False
            found.append(leader)
            return True

        self._wait(
            elected, f"a leader of {topic}-{partition} outside {sorted(excluded)}", timeout_s
        )
        return found[-1]

    def wait_for_isr(
        self, topic: str, partition: int, isr: Iterable[int], timeout_s: float | None = None
    ) -> None:
        wanted = sorted(isr)

        def reached() -> bool:
            state = self.partition_state(topic, partition)
            return state is not None and sorted(state["isr"]) == wanted

        self._wait(reached, f"ISR {wanted} of {topic}-{partition}", timeout_s)

    def in_sync(self) -> bool:
        """Whether every partition of every topic is led, with all its replicas in its ISR
        (after a restart: the broker has caught up everywhere)."""
        for topic in self.topics():
            for partition, replicas in self.assignment(topic).items():
                state = self.partition_state(topic, partition)
                if state is None or state["leader"] < 0:
                    return False
                if sorted(state["isr"]) != sorted(replicas):
                    return False
        return True

    def wait_until_in_sync(self, timeout_s: float | None = None) -> None:
        """Wait until :meth:`in_sync`."""
        self._wait(self.in_sync, "every replica in sync", timeout_s)

    def _wait(self, condition: Callable[[], bool], what: str, timeout_s: float | None) -> None:
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while not condition():
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}")
            time.sleep(_POLL_S)

    # -- internals ------------------------------------------------------------------------

    def _new_broker(self, broker_id: int) -> BrokerProcess:
        config = {**self.config, "broker.id": str(broker_id)}
        zookeeper = self.zookeeper.connect_string
        if self.proxied:
            kafka_proxy = FaultInjectionProxy().start()
            zk_proxy = FaultInjectionProxy(upstream=("127.0.0.1", self.zookeeper.port)).start()
            self._kafka_proxies[broker_id] = kafka_proxy
            self._zk_proxies[broker_id] = zk_proxy
            config["advertised.listeners"] = kafka_proxy.advertised_listener
            zookeeper = zk_proxy.bootstrap_servers
        config["zookeeper.connect"] = zookeeper
        return BrokerProcess(
            self.base_dir / f"broker-{broker_id}", config, metrics_port=0 if self.metrics else None
        )

    def _proxies_of(self, broker_id: int) -> list[FaultInjectionProxy]:
        if not self.proxied:
            raise ClusterError("partition() needs LocalCluster(proxied=True)")
        return [self._kafka_proxies[broker_id], self._zk_proxies[broker_id]]

    def _ask(self, question: Callable[[KazooClient], _T]) -> _T:
        """Ask ZooKeeper through this harness's own session, again (for up to
        ``start_timeout_s``) when the connection drops or the session expires: a ZooKeeper
        restart slower than the session timeout on a loaded machine ends the session, and
        kazoo opens a new one. Other errors (NoNodeError...) are the caller's."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                return question(self._zk())
            except (ConnectionLoss, SessionExpiredError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(_POLL_S)

    def _zk(self) -> KazooClient:
        if self._zk_client is None:
            self._zk_client = KazooClient(self.zookeeper.connect_string, timeout=10)
            self._zk_client.start(timeout=10)
        return self._zk_client
