"""The brokers under the demonstration, and the broker faults it injects into them.

- :class:`SingleBroker`: one broker subprocess, restarted once (same port, same data).
- :class:`ClusterUnderFaults`: a local cluster (ZooKeeper and N broker processes,
  :class:`~oncelog.testing.cluster.LocalCluster`) with replication factor 3 and
  ``min.insync.replicas`` 2. Mid-run it SIGKILLs the leader of a partition of the output
  topic, waits for the controller to elect another leader, restarts the broker and waits
  until it is back in every ISR; then it does the same to the transaction coordinator of a
  sink writer (the leader of the ``__transaction_state`` partition of the transactional id
  of a Python worker's producer, as the sink's progress records it: what FindCoordinator
  answers), choosing another broker when one of the writers has its coordinator elsewhere.

The supervisor calls :meth:`fault_step` on every turn of its loop while a driver runs: a
step never blocks longer than a broker restart, so the driver's progress keeps being
followed between the phases of a fault. :meth:`settle` brings back whatever is still down
(the job may finish between a kill and the election). Every process is started and
stopped by its pid (BrokerProcess, ZooKeeperServer).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from oncelog.coordinator_partitions import partition_for
from oncelog.pipeline import PARTITIONS

Event = Callable[[str], None]

TRANSACTION_STATE = "__transaction_state"
REPLICATION_FACTOR = 3
IN_SYNC_TIMEOUT_S = 120.0  # a restarted broker not back in every ISR by then: go on anyway
CLUSTER_CONFIG = {
    "num.partitions": str(PARTITIONS),
    "default.replication.factor": str(REPLICATION_FACTOR),  # orders, enriched-orders, progress
    "min.insync.replicas": "2",  # acks=all means two copies at least, while one broker is down
    # Kafka's 50 partitions per internal topic cost three brokers on two cores a load of
    # 150 replicas at every coordinator move; a handful spreads the coordinators as well.
    "transaction.state.log.num.partitions": "6",
    "offsets.topic.num.partitions": "6",
}


class SingleBroker:
    """One broker subprocess on a data directory in the work dir, restarted once mid-run;
    ``config`` adds broker keys (the secured demo's listener, SASL, authorizer)."""

    fault_text = "broker restart"

    def __init__(self, data_dir: Path, config: Mapping[str, str] | None = None) -> None:
        from oncelog.testing.process import BrokerProcess

        config = {"num.partitions": str(PARTITIONS), **(config or {})}
        self.process = BrokerProcess(data_dir, config)
        self.faults_done = False

    def start(self) -> str:
        return self.process.start().bootstrap_servers

    def describe(self) -> str:
        return f"broker subprocess pid {self.process.pid} at {self.process.bootstrap_servers}"

    def fault_step(self, batches_this_run: int, driver_run: int, event: Event) -> None:
        """After two batches of the driver: restart the broker (clean stop, same port)."""
        if self.faults_done or batches_this_run < 2:
            return
        old = self.process.pid
        started = time.monotonic()
        self.process.restart()
        self.faults_done = True
        event(
            f"broker restarted while driver {driver_run} runs (pid {old} → {self.process.pid}, "
            f"{time.monotonic() - started:.1f} s, same port and data directory)"
        )

    def settle(self, event: Event) -> None:
        """Nothing is ever left down: the restart is one step."""

    def stop(self) -> None:
        try:
            self.process.terminate(check=False)
        except Exception:
            self.process.kill()


@dataclass
class _Kill:
    """One broker SIGKILLed for its role, followed until it is back."""

    role: str  # "leader of enriched-orders-0"
    topic: str
    partition: int
    broker: int
    pid: int
    at: float  # time.monotonic() of the kill
    restarted: bool = False


class ClusterUnderFaults:
    """A local cluster whose partition leader and sink transaction coordinator are SIGKILLed
    and restarted mid-run (module docstring)."""

    def __init__(
        self, base_dir: Path, brokers: int, output_topic: str, sink_id: str, tasks: int
    ) -> None:
        from oncelog.testing.cluster import LocalCluster

        if brokers < REPLICATION_FACTOR:
            raise ValueError(
                f"the cluster demo needs at least {REPLICATION_FACTOR} brokers "
                f"(replication factor {REPLICATION_FACTOR}), not {brokers}"
            )
        self.cluster = LocalCluster(base_dir, brokers, CLUSTER_CONFIG)
        self.output_topic = output_topic
        self.sink_id = sink_id
        self.tasks = tasks
        self.fault_text = (
            f"broker SIGKILL + restart of the leader of {output_topic}-0 "
            "and of a sink writer's transaction coordinator"
        )
        self.kills: list[_Kill] = []
        self._current: _Kill | None = None
        self._planned = ("leader", "coordinator")

    @property
    def faults_done(self) -> bool:
        return len(self.kills) == len(self._planned) and self._current is None

    def start(self) -> str:
        self.cluster.start()
        return self.cluster.bootstrap_servers

    def describe(self) -> str:
        brokers = ", ".join(f"{i} (pid {b.pid})" for i, b in self.cluster.brokers.items())
        return (
            f"{len(self.cluster.brokers)}-broker cluster, replication factor "
            f"{REPLICATION_FACTOR}, min.insync.replicas 2: ZooKeeper pid "
            f"{self.cluster.zookeeper.pid}, brokers {brokers}"
        )

    # -- the faults -----------------------------------------------------------------------

    def fault_step(self, batches_this_run: int, driver_run: int, event: Event) -> None:
        """Advance the faults by one phase if its moment came: kill once the driver finished
        a batch, restart once another leader is elected, next kill once back in sync."""
        if self.faults_done or batches_this_run < 1:
            return
        kill = self._current
        if kill is None:
            self._kill_next(driver_run, event)
        elif not kill.restarted:
            leader = self.cluster.leader(kill.topic, kill.partition)
            if leader is not None and leader != kill.broker:
                event(
                    f"{kill.topic}-{kill.partition}: broker {leader} leads it now, "
                    f"{time.monotonic() - kill.at:.1f} s after the kill"
                )
                self._restart(kill, event)
        elif self.cluster.in_sync():
            event(
                f"broker {kill.broker} is back in the ISR of every partition, "
                f"{time.monotonic() - kill.at:.1f} s after the kill"
            )
            self._current = None
        elif time.monotonic() - kill.at > IN_SYNC_TIMEOUT_S:
            event(
                f"broker {kill.broker} is still not back in every ISR after "
                f"{IN_SYNC_TIMEOUT_S:.0f} s; going on"
            )
            self._current = None

    def _kill_next(self, driver_run: int, event: Event) -> None:
        if len(self.kills) == 0:
            topic, partition = self.output_topic, 0
            role = f"leader of {topic}-0"
        else:
            coordinator = self._coordinator_partition()
            if coordinator is None:
                return  # the progress could not be read right now: try again next turn
            topic, partition, role = coordinator
        broker = self.cluster.leader(topic, partition)
        if broker is None:
            return  # no leader right now (an election in progress): try again next turn
        pid = self.cluster.brokers[broker].pid
        self.cluster.kill(broker)
        kill = _Kill(role, topic, partition, broker, pid, time.monotonic())
        self.kills.append(kill)
        self._current = kill
        event(
            f"broker {broker} (pid {pid}), {role}, killed with SIGKILL "
            f"while driver {driver_run} runs"
        )

    def _coordinator_partition(self) -> tuple[str, int, str] | None:
        """The ``__transaction_state`` partition of a sink writer's transactional id, one led
        by another broker than the first victim when there is such a writer, and its role;
        partition 0's when the sink records no writer (at_least_once has none)."""
        writers = self._writers()
        if writers is None:
            return None
        partitions = len(self.cluster.assignment(TRANSACTION_STATE))
        first_victim = self.kills[0].broker
        candidates = [
            (
                TRANSACTION_STATE,
                partition_for(tid, partitions),
                f"transaction coordinator of sink writer {tid}",
            )
            for tid in writers
        ] or [(TRANSACTION_STATE, 0, "transaction coordinator (the sink records no writer)")]
        elsewhere = [c for c in candidates if self.cluster.leader(c[0], c[1]) != first_victim]
        topic, partition, role = (elsewhere or candidates)[0]
        return topic, partition, f"{role} (leader of {topic}-{partition})"

    def _writers(self) -> list[str] | None:
        """The transactional ids of the writers of the sink's last commits, as its progress
        records them (each Python worker has a writer of its own); None if unreadable."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        from oncelog.spark.options import DEFAULT_PROGRESS_TOPIC, progress_group
        from oncelog.spark.sink import Progress

        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "group.id": progress_group(self.sink_id),
            }
        )
        slots = [TopicPartition(DEFAULT_PROGRESS_TOPIC, task) for task in range(self.tasks)]
        try:
            committed = consumer.committed(slots, timeout=10)
        except KafkaException:
            return None  # the cluster is busy electing: next turn
        finally:
            consumer.close()
        progress = [
            Progress.from_committed(
                self.sink_id, DEFAULT_PROGRESS_TOPIC, self.tasks, slot.offset, slot.metadata
            )
            for slot in committed
        ]
        return sorted({p.writer for p in progress if p.writer is not None})

    def _restart(self, kill: _Kill, event: Event) -> None:
        started = time.monotonic()
        self.cluster.restart(kill.broker)
        kill.restarted = True
        event(
            f"broker {kill.broker} restarted (pid {kill.pid} → "
            f"{self.cluster.brokers[kill.broker].pid}, serving after "
            f"{time.monotonic() - started:.1f} s, same port and data directory)"
        )

    def settle(self, event: Event) -> None:
        """Restart a broker still down (the job ended between a kill and its election)."""
        kill = self._current
        if kill is not None and not kill.restarted:
            self._restart(kill, event)
        self._current = None

    def stop(self) -> None:
        self.cluster.stop()
