"""Kafka clients kept for the life of a Python worker, shared by the tasks it runs.

Spark reuses its Python workers across tasks and micro-batches, so a task finds the
clients an earlier task of the same sink left: a transactional producer per (sink.id, task
partition, configuration) that keeps its transactional.id and ran `init_transactions()`
once, the consumer that reads the sink's progress, an idempotent producer for
at_least_once, and the progress topic's partition count. Making them costs a
connection, a coordinator lookup and an epoch bump each; keeping them makes a
micro-batch's fixed cost a few round trips.

A kept producer can be fenced: when a task moves to another worker, that worker's new
producer bumps the epoch of the same transactional.id. Each producer instance has an id
that it records in the progress it commits, and remembers the last commit of its slot it
saw: when the progress shows a commit by another instance since, the kept producer is
fenced, and the writer asks for a fresh one before writing anything. A worker runs one
task at a time, so the pool needs no lock.

The progress is read with `require_stable` (KIP-447, the consumer's read_committed): a
commit whose markers are still being written is waited for, never read stale. A read that
waits longer than `KEPT_PROGRESS_WAIT_S` with a kept producer means another producer of the
id holds a transaction with the slot's progress open (a dead attempt): that producer has
the newer epoch, so the kept one is fenced, and a fresh producer's `init_transactions()`
settles that transaction before the progress is read again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from oncelog.spark.client import Cluster, with_logger
from oncelog.spark.options import WriteOptions, consumer_config, producer_config

TRANSACTION_TIMEOUT_S = 60.0
KEPT_PROGRESS_WAIT_S = 10.0
# librdkafka 2.16 looks its transaction coordinator up as soon as a producer connects; an
# init_transactions() called while that lookup is in flight does not send its own ("Not
# sending coordinator query (Acquire PID): waiting for previous query to finish") and then
# waits for its 500 ms PID timer. Measured here: about half of all inits paid the 500 ms
# when called at once, none when called 50 ms after the producer was made.
COORDINATOR_SETTLE_S = 0.05
IDLE_EVICTION_S = 600.0  # a kept client unused this long is closed (Spark's producer cache)

ConfigKey = tuple[tuple[str, str], ...]


def _config_key(config: Mapping[str, str]) -> ConfigKey:
    return tuple(sorted(config.items()))


@dataclass
class TransactionalClients:
    """A task slot's producer and the consumer that reads (and commits) its progress."""

    producer: Any
    progress: Any
    fresh: bool  # made for this task: init_transactions() has just fenced older producers
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)  # recorded in progress
    last_seen: tuple[int, str | None] | None = None  # the slot's last commit, as last seen
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class IdempotentProducer:
    """An at_least_once sink's producer, kept by the worker, with the delivery errors of the
    task using it (a task fails when any of its records was not delivered)."""

    producer: Any
    failures: list[Any] = field(default_factory=list)  # delivery errors of the current task
    last_used: float = field(default_factory=time.monotonic)

    def on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failures.append(err)


class ClientPool:
    """The clients of one Python worker. `POOL` is the worker's; tests make their own to
    play several workers in one process."""

    def __init__(self) -> None:
        self._transactional: dict[tuple[str, int, ConfigKey], TransactionalClients] = {}
        self._progress: dict[tuple[str, ConfigKey], Any] = {}
        self._idempotent: dict[ConfigKey, IdempotentProducer] = {}
        self._slots: dict[tuple[str, ConfigKey], int] = {}

    def _key(self, options: WriteOptions, partition: int) -> tuple[str, int, ConfigKey]:
        return (str(options.sink_id), partition, _config_key(options.client))

    def _evict_idle(self) -> None:
        """Close kept producers no task has used for IDLE_EVICTION_S (a worker that ran
        tasks of many slots or sinks would otherwise keep all their producers)."""
        horizon = time.monotonic() - IDLE_EVICTION_S
        for key, kept in list(self._transactional.items()):
            if kept.last_used < horizon:
                del self._transactional[key]
                kept.producer.close()
        for config, idle in list(self._idempotent.items()):
            if idle.last_used < horizon:
                del self._idempotent[config]
                idle.producer.close()

    def transactional(self, options: WriteOptions, partition: int) -> TransactionalClients:
        """The kept clients of this slot, or new ones (the producer initialised)."""
        self._evict_idle()
        key = self._key(options, partition)
        clients = self._transactional.get(key)
        if clients is not None:
            clients.fresh = False
            clients.last_used = time.monotonic()
            return clients
        producer = Producer(
            with_logger(
                {
                    **producer_config(options.client),
                    "transactional.id": options.transactional_id(partition),
                }
            )
        )
        time.sleep(COORDINATOR_SETTLE_S)
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
        clients = TransactionalClients(producer, self._progress_reader(options), fresh=True)
        self._transactional[key] = clients
        return clients

    def discard(self, options: WriteOptions, partition: int) -> None:
        """Forget this slot's producer (fenced, failed, or left mid-transaction)."""
        self._transactional.pop(self._key(options, partition), None)

    def _progress_reader(self, options: WriteOptions) -> Any:
        key = (str(options.sink_id), _config_key(options.client))
        reader = self._progress.get(key)
        if reader is None:
            reader = Consumer(
                with_logger(
                    {
                        **consumer_config(options.client),
                        "group.id": options.progress_group,
                        "enable.auto.commit": False,
                        "isolation.level": "read_committed",  # require_stable
                    }
                )
            )
            self._progress[key] = reader
        return reader

    def idempotent(self, options: WriteOptions) -> IdempotentProducer:
        """The worker's plain idempotent producer for this configuration (at_least_once)."""
        self._evict_idle()
        key = _config_key(options.client)
        kept = self._idempotent.get(key)
        if kept is None:
            kept = IdempotentProducer(None)
            config = {
                "enable.idempotence": "true",
                **producer_config(options.client),
                "delivery.report.only.error": True,
                "on_delivery": kept.on_delivery,
            }
            kept.producer = Producer(with_logger(config))
            self._idempotent[key] = kept
        kept.failures.clear()
        kept.last_used = time.monotonic()
        return kept

    def progress_slots(self, options: WriteOptions) -> int:
        """Partitions of the progress topic, which is created if missing (once per worker:
        a TxnOffsetCommit needs an existing partition on Kafka)."""
        key = (options.progress_topic, _config_key(options.client))
        slots = self._slots.get(key)
        if slots is None:
            slots = Cluster(options.client).ensure_topic(
                options.progress_topic, options.progress_partitions
            )
            self._slots[key] = slots
        return slots


POOL = ClientPool()


def is_fenced(exc: BaseException) -> bool:
    """A KafkaException saying another producer with this transactional.id took over."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ) or bool(error.fatal() and "fenced" in error.str().lower())
