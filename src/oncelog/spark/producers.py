"""Kafka clients kept for the life of a Python worker, shared by the tasks it runs.

Spark reuses its Python workers across tasks and micro-batches, so a task finds the
clients an earlier task left: one transactional producer per client configuration (a
*writer*, with a transactional.id of its own, `oncelog-sink-<uuid>`, that serves every task
slot and every sink: `claims` fences zombies without a transactional.id per slot), the
consumers that read each sink's progress and claims, an idempotent producer for
at_least_once, and the progress topic's partition count. Making a writer costs a connection,
a coordinator lookup and `init_transactions()`; keeping it makes a micro-batch's fixed cost
a few round trips, wherever PySpark runs the task.

A writer whose claim did not end in its own commit is retired (`retire`) and closed: a
later attempt of that slot may fence its transactional.id. A fence can also reach a kept
writer whose claim committed (`claims` says when); the task that next uses it finds it
fenced at its claim, before writing anything, and claims again with a new writer. A worker
runs one task at a time, so the pool needs no lock.
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from oncelog.spark import claims
from oncelog.spark.client import Cluster, ClusterError, with_logger
from oncelog.spark.options import (
    WriteOptions,
    client_timeout_s,
    consumer_config,
    producer_config,
)

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_S = 60.0
# a stable progress read that waits longer is held by another writer's open transaction
# (a dead attempt's): the writer reads the last materialised progress instead, fences the
# claims after it, and then waits for the stable one (`claims.Wait.SHORT`)
PENDING_PROGRESS_WAIT_S = 10.0
# librdkafka 2.16 looks its transaction coordinator up as soon as a producer connects; an
# init_transactions() called while that lookup is in flight does not send its own ("Not
# sending coordinator query (Acquire PID): waiting for previous query to finish") and then
# waits for its 500 ms PID timer. Measured here: about half of all inits paid the 500 ms
# when called at once, none when called 50 ms after the producer was made.
COORDINATOR_SETTLE_S = 0.05
# A new librdkafka 2.16 client drops its bootstrap connection once the first Metadata
# answer names the brokers, and a FindCoordinator sent on it meanwhile fails and is retried
# only after its "sparse connection" pause, half of reconnect.backoff.ms (100 ms by default):
# bench/first_progress_read.py (10 tries each, 2026-11-24 03:23 UTC, load 2.7-2.9): a new
# sink consumer's first progress read took a median 55.2 ms, 6 of 10 over 40 ms, with the
# default, and 15.7 ms, none over 40 ms, with 20 ms. The sink's consumers start with it;
# `kafka.reconnect.backoff.ms` overrides it.
RECONNECT_BACKOFF_MS = 20
IDLE_EVICTION_S = 600.0  # a kept client unused this long is closed (Spark's producer cache)

ConfigKey = tuple[tuple[str, str], ...]


def _config_key(config: Mapping[str, str]) -> ConfigKey:
    return tuple(sorted(config.items()))


@dataclass
class Writer:
    """A worker's transactional producer and its transactional.id."""

    producer: Producer
    transactional_id: str
    fresh: bool  # made for this task
    connections: ConnectionWatch
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class ConnectionWatch:
    """Whether a producer lost a broker connection (its `error_cb`): a writer that did is
    not reused. librdkafka 2.16's send_offsets_to_transaction waits forever, whatever its
    timeout, when the group coordinator it has cached went away (librdkafka #5456,
    #5511): a writer kept across a broker restart hung there in every task (9 of 9 in a
    probe; tests/spark/test_spark_producer_reuse.py has the case with its control) until
    `writer._bounded` gave up after 70 s. A new producer looks its coordinators up afresh."""

    lost: bool = False

    def on_error(self, error: KafkaError) -> None:
        if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self.lost = True


@dataclass
class KeptConsumer:
    """A consumer kept by the worker: a sink's progress reader (read_committed, the sink's
    group), or the claims reader of a configuration (read_uncommitted); a claims reader
    also remembers the progress topics it has looked up (`_knowing`; progress readers
    leave `known_topics` empty)."""

    consumer: Consumer
    last_used: float = field(default_factory=time.monotonic)
    known_topics: set[str] = field(default_factory=set)


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
        self._writers: dict[ConfigKey, Writer] = {}
        self._progress: dict[tuple[str, ConfigKey], KeptConsumer] = {}
        self._claims: dict[ConfigKey, KeptConsumer] = {}
        self._idempotent: dict[ConfigKey, IdempotentProducer] = {}
        self._slots: dict[tuple[str, ConfigKey], int] = {}

    def _evict_idle(self) -> None:
        """Close kept clients no task has used for IDLE_EVICTION_S."""
        horizon = time.monotonic() - IDLE_EVICTION_S
        for config, writer in list(self._writers.items()):
            if writer.last_used < horizon:
                del self._writers[config]
                writer.producer.close()
        for kept in (self._progress, self._claims):
            for key, reader in list(kept.items()):
                if reader.last_used < horizon:
                    del kept[key]  # type: ignore[arg-type]
                    reader.consumer.close()
        for config, idle in list(self._idempotent.items()):
            if idle.last_used < horizon:
                del self._idempotent[config]
                idle.producer.close()

    def writer(self, options: WriteOptions) -> Writer:
        """The worker's writer for this configuration, or a new one (initialised). Asked for
        after `progress`, which closed the idle ones."""
        key = _config_key(options.client)
        writer = self._writers.get(key)
        if writer is not None:
            writer.producer.poll(0)  # serves the errors it met while idle
            if writer.connections.lost:
                log.info(
                    "sink writer %s lost a broker connection: a new writer replaces it",
                    writer.transactional_id,
                )
                self.retire(options, close=True)
            else:
                writer.fresh = False
                writer.last_used = time.monotonic()
                return writer
        transactional_id = f"oncelog-sink-{uuid.uuid4().hex}"
        connections = ConnectionWatch()
        producer = _initialised(options, transactional_id, connections.on_error)
        producer.poll(0)
        connections.lost = False  # what it met before it was ready is no reason to drop it
        writer = Writer(producer, transactional_id, True, connections)
        self._writers[key] = writer
        return writer

    def retire(self, options: WriteOptions, close: bool) -> None:
        """Never use this configuration's writer again (its claim did not end in its
        commit: a later attempt may fence it). Closed unless it is in a call that never
        returned (`writer._bounded`): a fence settles what it left open."""
        writer = self._writers.pop(_config_key(options.client), None)
        if writer is not None and close:
            with warnings.catch_warnings():  # its abort may fail (fenced): nothing to abort
                warnings.simplefilter("ignore", RuntimeWarning)
                writer.producer.close()

    def fence(self, options: WriteOptions, transactional_id: str) -> None:
        """Fence another writer: a producer of its transactional.id bumps the epoch, which
        aborts its open transaction, or completes it if its commit had begun."""
        _initialised(options, transactional_id).close()

    def progress(self, options: WriteOptions) -> Consumer:
        """The consumer that reads this sink's progress, stable (read_committed: KIP-447's
        require_stable), and whose group metadata the progress is committed with."""
        self._evict_idle()
        key = (str(options.sink_id), _config_key(options.client))
        return _lend(self._progress, key, lambda: progress_consumer(options, "read_committed"))

    def claims(self, options: WriteOptions) -> Consumer:
        """The consumer that reads the sinks' claims (read_uncommitted), one per
        configuration: a new consumer's first fetches take up to a second (librdkafka 2.16,
        measured), so each sink having its own would cost every new sink that. It looks up
        each progress topic the first time a sink with that progress topic borrows it:
        sinks of one configuration may have progress topics of their own. If a look-up
        fails, the consumer is closed and dropped (the next task makes a new one). A task
        borrows it before its claim (`writer._ClusterSteps`), so a look-up never waits with
        the claim's transaction open."""
        key = _config_key(options.client)
        kept = self._claims.get(key)
        if kept is None:
            kept = KeptConsumer(_consumer(options, CLAIMS_GROUP, "read_uncommitted"))
        topic = options.progress_topic
        if topic not in kept.known_topics:
            self._claims.pop(key, None)  # kept again only once it knows the topic
            _knowing(kept.consumer, topic, client_timeout_s(options.client))
            kept.known_topics.add(topic)
            self._claims[key] = kept
        kept.last_used = time.monotonic()
        return kept.consumer

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
        """Partitions of the progress topic, which is created if missing (a TxnOffsetCommit
        needs an existing partition on Kafka) as the claims need it, or else checked to be
        so (`claims.check_progress_topic`): once per worker."""
        key = (options.progress_topic, _config_key(options.client))
        slots = self._slots.get(key)
        if slots is None:
            cluster = Cluster(options.client)
            slots = cluster.ensure_topic(
                options.progress_topic, options.progress_partitions, claims.PROGRESS_TOPIC_CONFIG
            )
            try:
                config = cluster.topic_config(options.progress_topic)
            except ClusterError as exc:
                raise claims.ProgressTopicError(
                    f"{exc}. The exactly-once sink checks its progress topic's configuration "
                    "(spark/claims.py): with ACLs, grant its principal DescribeConfigs on "
                    f"topic {options.progress_topic}"
                ) from exc
            claims.check_progress_topic(options.progress_topic, config)
            self._slots[key] = slots
        return slots


POOL = ClientPool()

CLAIMS_GROUP = "oncelog-sink-claims"  # never joined nor committed: assign() only


def _initialised(
    options: WriteOptions,
    transactional_id: str,
    on_error: Callable[[KafkaError], None] | None = None,
) -> Producer:
    config: dict[str, Any] = {
        **producer_config(options.client),
        "transactional.id": transactional_id,
    }
    if on_error is not None:
        config["error_cb"] = on_error
    producer = Producer(with_logger(config))
    time.sleep(COORDINATOR_SETTLE_S)
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    return producer


def _knowing(consumer: Consumer, topic: str, timeout_s: float) -> Consumer:
    """`consumer`, once it has `topic`'s metadata. A new librdkafka 2.16 consumer assigned a
    partition of a topic it has no metadata for often fetches nothing until its
    once-a-second scan of unknown topics ("Topic ... metadata information unknown"):
    bench/first_claims_read.py (10 tries each, 2026-11-24 00:06 UTC, load 3.3-3.6) read
    first in a median 8.6 ms and 4 of 10 at ~803 ms without this look-up (one Metadata
    request), a median 1.3 ms and none over 500 ms with it. The look-up waits at
    most the client timeout (`kafka.socket.timeout.ms`); if it fails, the consumer is
    closed (a long-lived Python worker would otherwise keep one more per task retry)."""
    try:
        consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        consumer.close()
        raise ClusterError(
            f"looking up the progress topic {topic} failed within {timeout_s:g} s "
            f"(kafka.socket.timeout.ms): {exc}"
        ) from exc
    except BaseException:  # closed all the same, and passed on as it is
        consumer.close()
        raise
    return consumer


def progress_consumer(options: WriteOptions, isolation_level: str) -> Consumer:
    """A consumer of the sink's progress group; read_uncommitted reads the progress as last
    materialised, without waiting for a commit whose markers are being written."""
    return _consumer(options, options.progress_group, isolation_level)


def _consumer(options: WriteOptions, group: str, isolation_level: str) -> Consumer:
    return Consumer(
        with_logger(
            {
                "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
                **consumer_config(options.client),
                "group.id": group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": isolation_level,
                "auto.offset.reset": "error",  # claims gone are an error, never skipped
                "fetch.wait.max.ms": 10,
            }
        )
    )


def _lend(kept: dict[Any, KeptConsumer], key: Any, make: Callable[[], Consumer]) -> Consumer:
    reader = kept.get(key)
    if reader is None:
        reader = kept[key] = KeptConsumer(make())
    reader.last_used = time.monotonic()
    return reader.consumer
