"""Prometheus metrics of one broker, under Kafka's metric names where Kafka has one.

Kafka's JMX names become Prometheus names the way the Prometheus JMX exporter's usual
Kafka rules spell them: ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T``
becomes ``kafka_server_brokertopicmetrics_bytesin_total{topic="T"}``; times are in
seconds, as Prometheus wants. Names with an ``oncelog_`` prefix have no Kafka counterpart.
The README lists them all.

Counters and histograms are updated where things happen (requests in ``Broker.dispatch``,
appended bytes and records in the produce handler, fsyncs in the flusher), all on the event
loop, so they are loop_instruments.py's plain numbers, not prometheus_client's locked
instruments (a cost on every request); everything that
is a state (offsets, producers, transactions, the cleaner) is read when the endpoint is
scraped, on the event loop, so a scrape sees one consistent moment and nothing is counted
twice. The endpoint is a minimal HTTP server on
the broker's own event loop (``--metrics-port``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from oncelog.broker.loop_instruments import (
    CounterFamily,
    HistogramFamily,
    LoopCounter,
    LoopHistogram,
)
from oncelog.protocol.api_versions import ApiKey

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition

log = logging.getLogger(__name__)

# Request latencies from 100 µs to 30 s; fsyncs from 50 µs to 10 s.
_REQUEST_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                    1.0, 2.5, 5.0, 10.0, 30.0)  # fmt: skip
_FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                  0.1, 0.25, 0.5, 1.0, 10.0)  # fmt: skip


class BrokerMetrics:
    """The registry of one broker and the instruments its code updates."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.registry = CollectorRegistry()
        self.bytes_in = CounterFamily(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes of record batches appended by Produce requests (BytesInPerSec).",
            ["topic"],
        )
        self.messages_in = CounterFamily(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by Produce requests (MessagesInPerSec).",
            ["topic"],
        )
        self.bytes_out = CounterFamily(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes of record batches returned by Fetch requests (BytesOutPerSec).",
            ["topic"],
        )
        self.requests = CounterFamily(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by API (RequestsPerSec).",
            ["request"],
        )
        self.request_time = HistogramFamily(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time the broker took to answer a request once decoded, by API (TotalTimeMs).",
            ["request"],
            buckets=_REQUEST_BUCKETS,
        )
        fsync_time = HistogramFamily(
            "kafka_log_logflushstats_logflush_seconds",
            "Duration of one fsync round of the group-commit flusher (LogFlushRateAndTimeMs).",
            buckets=_FSYNC_BUCKETS,
        )
        self.fsync_time = fsync_time.labels()  # unlabelled: reported from the start
        for family in (
            self.bytes_in,
            self.messages_in,
            self.bytes_out,
            self.requests,
            self.request_time,
            fsync_time,
        ):
            self.registry.register(family)
        self.registry.register(_StateCollector(broker))
        # The labelled instruments each request updates, looked up once per API or topic:
        # ``labels()`` and the API's name cost more than the update itself, on the event
        # loop, for every request (no label is ever removed, so a child stays valid).
        self._per_api: dict[int, tuple[LoopCounter, LoopHistogram]] = {}
        self._per_topic_in: dict[str, tuple[LoopCounter, LoopCounter]] = {}

    # -- what the request path reports -------------------------------------------------------

    def observe_request(self, api_key: int, response: Any, seconds: float) -> None:
        instruments = self._per_api.get(api_key)
        if instruments is None:
            name = _api_name(api_key)
            instruments = (self.requests.labels(name), self.request_time.labels(name))
            self._per_api[api_key] = instruments
        count, duration = instruments
        count.inc()
        duration.observe(seconds)
        if api_key == ApiKey.FETCH and isinstance(response, dict):
            self._count_fetch(response)

    def count_produced(self, topic: str, size: int, records: int) -> None:
        """A Produce batch of ``size`` bytes and ``records`` records was appended to
        ``topic`` (Kafka marks BytesIn and MessagesIn on the append too). The produce path
        reports what it already parsed: re-reading the request here cost a copy of every
        batch and a second walk of its headers."""
        bytes_in, messages_in = self._topic_in(topic)
        bytes_in.inc(size)
        messages_in.inc(records)

    def _topic_in(self, topic: str) -> tuple[LoopCounter, LoopCounter]:
        """The BytesIn and MessagesIn counters of ``topic``."""
        instruments = self._per_topic_in.get(topic)
        if instruments is None:
            instruments = (self.bytes_in.labels(topic), self.messages_in.labels(topic))
            self._per_topic_in[topic] = instruments
        return instruments

    def _count_fetch(self, response: dict[str, Any]) -> None:
        for topic in response.get("responses", ()):
            size = sum(len(p.get("records") or b"") for p in topic.get("partitions", ()))
            if size:
                self.bytes_out.labels(self._topic_name(topic)).inc(size)

    def _topic_name(self, answer: dict[str, Any]) -> str:
        """Fetch v13+ names topics by id."""
        if answer.get("topic"):
            return str(answer["topic"])
        topic_id = answer.get("topic_id")
        return self._broker.topic_name(topic_id) or str(topic_id)  # type: ignore[arg-type]

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _api_name(api_key: int) -> str:
    try:
        return "".join(part.title() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


class _StateCollector:
    """Gauges read from the broker at scrape time."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        broker = self._broker
        labels = ["topic", "partition"]
        offsets = {
            "logstartoffset": GaugeMetricFamily(
                "kafka_log_log_logstartoffset",
                "First offset of the log (LogStartOffset).",
                labels=labels,
            ),
            "logendoffset": GaugeMetricFamily(
                "kafka_log_log_logendoffset",
                "Next offset of the log (LogEndOffset).",
                labels=labels,
            ),
            "highwatermark": GaugeMetricFamily(
                "kafka_cluster_partition_highwatermark",
                "High watermark: what consumers may read up to.",
                labels=labels,
            ),
            "laststableoffset": GaugeMetricFamily(
                "kafka_cluster_partition_laststableoffset",
                "Last stable offset: what read_committed consumers may read up to.",
                labels=labels,
            ),
            "size": GaugeMetricFamily(
                "kafka_log_log_size", "Bytes of the log (Size).", labels=labels
            ),
            "segments": GaugeMetricFamily(
                "kafka_log_log_numlogsegments",
                "Segments of the log (NumLogSegments).",
                labels=labels,
            ),
            "producers": GaugeMetricFamily(
                "oncelog_log_producer_state_entries",
                "Producers whose state the partition keeps (ids, epochs, last sequences).",
                labels=labels,
            ),
            "open": GaugeMetricFamily(
                "oncelog_log_open_transactions",
                "Transactions with records in the partition and no marker yet.",
                labels=labels,
            ),
        }
        for partition in broker.hosted.partitions():
            key = [partition.topic, str(partition.index)]
            offsets["logstartoffset"].add_metric(key, partition.log_start_offset)
            offsets["logendoffset"].add_metric(key, partition.log.log_end_offset)
            offsets["highwatermark"].add_metric(key, partition.high_watermark)
            offsets["laststableoffset"].add_metric(key, partition.last_stable_offset)
            offsets["size"].add_metric(key, partition.log.size_bytes())
            offsets["segments"].add_metric(key, len(partition.log.segments()))
            producers = partition.producers
            offsets["producers"].add_metric(key, len(producers.entries))
            offsets["open"].add_metric(key, len(producers.open_transactions))
        yield from offsets.values()
        yield from self._replication()
        yield from self._transactions()
        yield from self._cleaner()
        yield from self._coordinators()

    def _replication(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Kafka's ReplicaManager and KafkaController gauges. A single node leads every
        partition it has, with itself as the only replica (so none is under-replicated; it
        does not enforce min.insync.replicas), and is its own controller."""
        broker = self._broker
        cluster = broker.cluster
        led: list[tuple[Partition, tuple[int, ...], frozenset[int], int]]
        if cluster is None:
            led = [
                (p, (broker.node_id,), frozenset({broker.node_id}), 1)
                for p in broker.hosted.partitions()
            ]
            shrinks = expands = 0
            controller = True
        else:
            replicas = cluster.replicas
            led = [] if replicas is None else replicas.led()
            shrinks = 0 if replicas is None else replicas.isr_shrinks
            expands = 0 if replicas is None else replicas.isr_expands
            controller = cluster.controller is not None
        under = GaugeMetricFamily(
            "kafka_cluster_partition_underreplicated",
            "1 if this broker leads the partition and its ISR is smaller than its replicas, "
            "else 0 (UnderReplicated; a follower reports 0, as in Kafka).",
            labels=["topic", "partition"],
        )
        under_replicated = {
            (p.topic, p.index) for p, replicas_of, isr, _ in led if len(isr) < len(replicas_of)
        }
        for partition in broker.hosted.partitions():
            flag = (partition.topic, partition.index) in under_replicated
            under.add_metric([partition.topic, str(partition.index)], int(flag))
        yield under
        under_count = len(under_replicated)
        under_min = sum(1 for _, _, isr, min_insync in led if len(isr) < min_insync)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replicas "
            "(UnderReplicatedPartitions).",
            value=under_count,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads with fewer in-sync replicas than min.insync.replicas "
            "(UnderMinIsrPartitionCount).",
            value=under_min,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads (LeaderCount).",
            value=len(led),
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions this broker hosts, leading or following (PartitionCount).",
            value=len(broker.hosted.partitions()),
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks this broker wrote as leader (IsrShrinksPerSec).",
            value=shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions this broker wrote as leader (IsrExpandsPerSec).",
            value=expands,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that is the active controller, 0 elsewhere (ActiveControllerCount).",
            value=int(controller),
        )

    def _transactions(self) -> Iterator[GaugeMetricFamily]:
        """Open transactions and those open longer than transaction.max.timeout.ms
        (Kafka's PartitionsWithLateTransactionsCount, KIP-664: hanging candidates)."""
        broker = self._broker
        now = broker.now_ms()
        late_after = broker.config.transaction_max_timeout_ms
        open_total = late = 0
        for partition in broker.hosted.partitions():
            producers = partition.producers
            for producer_id in producers.open_transactions:
                open_total += 1
                if now - producers.entries[producer_id].last_timestamp > late_after:
                    late += 1
        yield GaugeMetricFamily(
            "oncelog_transactions_open",
            "Open transactions over all partitions (one per producer and partition).",
            value=open_total,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitionswithlatetransactionscount",
            "Open transactions idle longer than transaction.max.timeout.ms (hanging).",
            value=late,
        )

    def _cleaner(self) -> Iterator[GaugeMetricFamily]:
        status = self._broker.cleaner.status
        last = status.last_pass
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "Dirtiest compacted log's dirty share, in percent (max-dirty-percent).",
            value=100 * status.max_dirty_ratio,
        )
        now = self._broker.now_ms()
        since = (now - status.last_run_ms) if status.last_run_ms else 0
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_time_since_last_run_ms",
            "Milliseconds since the cleaner last looked for work (time-since-last-run-ms).",
            value=since,
        )
        recopy = 100 * last.bytes_written / last.bytes_read if last and last.bytes_read else 0
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Share of the bytes read that the last pass wrote back (cleaner-recopy-percent).",
            value=recopy,
        )
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_max_clean_time_secs",
            "Duration of the last cleaning pass (max-clean-time-secs).",
            value=last.elapsed_s if last else 0,
        )
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_max_buffer_utilization_percent",
            "Key map use of the last pass (max-buffer-utilization-percent).",
            value=100 * last.map_utilization if last else 0,
        )
        passes = GaugeMetricFamily(
            "oncelog_log_cleaner_passes",
            "Cleaning passes swapped in, and thrown away.",
            labels=["outcome"],
        )
        passes.add_metric(["swapped"], status.passes - status.passes_discarded)
        passes.add_metric(["discarded"], status.passes_discarded)
        yield passes
        progress = GaugeMetricFamily(
            "oncelog_log_cleaner_pass_progress_bytes",
            "The pass under way: bytes done and bytes to do (0 when idle).",
            labels=["what"],
        )
        progress.add_metric(["done"], status.current_bytes_done)
        progress.add_metric(["total"], status.current_bytes_total)
        yield progress

    def _coordinators(self) -> Iterator[GaugeMetricFamily]:
        load = GaugeMetricFamily(
            "kafka_coordinator_partition_load_time_seconds",
            "How long replaying each coordinator partition took at its last load "
            "(partition-load-time).",
            labels=["coordinator", "partition"],
        )
        for name, coordinator in (
            ("group", self._broker.groups),
            ("transaction", self._broker.transactions),
        ):
            for partition, seconds in coordinator.load_seconds.items():
                load.add_metric([name, str(partition)], seconds)
        yield load


class MetricsServer:
    """``GET /metrics`` (any path, in fact) in Prometheus' text format, on the event loop."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("metrics at http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readuntil(b"\r\n\r\n")
            started = time.monotonic()
            body = self._metrics.render()
            status = b"200 OK" if request.startswith(b"GET ") else b"405 Method Not Allowed"
            head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (
                status,
                CONTENT_TYPE_LATEST.encode(),
                len(body),
            )
            writer.write(head + b"Connection: close\r\n\r\n" + body)
            await writer.drain()
            log.debug("metrics scraped in %.3f s", time.monotonic() - started)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
        ):
            pass
        finally:
            writer.close()
