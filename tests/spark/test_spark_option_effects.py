"""Options of Spark's Kafka source shown taking effect in real reads, not only parsed:
`endingOffsetsByTimestamp` (where each partition's batch stops), `fetchOffset.numRetries`
and `fetchOffset.retryIntervalMs` (offset lookups a broker fails, seen on the wire) and
`groupIdPrefix` / `kafka.group.id` (the group id the consumers send to the broker).

The last two read through a fault-injection proxy in front of a broker of their own: the
proxy answers ListOffsets with an error on demand and records the requests the clients
send. A consumer that only assigns partitions and never commits, as Spark's and ours do,
leaves no group on the broker (ListGroups shows none, on Kafka too): the group id is seen
only in the FindCoordinator requests its client sends.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import EmbeddedBroker, FaultInjectionProxy

from .spark_helpers import create_topic, run_available_now, unique

NOT_LEADER_OR_FOLLOWER = 6  # retriable in Kafka's table; librdkafka does not retry it itself
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
FIND_COORDINATOR_WAIT_S = 30.0


@pytest.fixture(scope="module")
def proxy() -> Iterator[FaultInjectionProxy]:
    with (
        EmbeddedBroker() as broker,
        FaultInjectionProxy(
            record_api_keys=[ApiKey.LIST_OFFSETS, ApiKey.FIND_COORDINATOR]
        ) as proxy,
    ):
        proxy.attach(broker)
        yield proxy


def _batch(spark, bootstrap: str, topic: str, **options: str):  # type: ignore[no-untyped-def]
    return _load(spark.read, bootstrap, topic, options)


def _load(reader, bootstrap: str, topic: str, options: dict[str, str]):  # type: ignore[no-untyped-def]
    """`reader` (spark.read or spark.readStream) of `topic` with `options`, loaded."""
    reader = reader.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in {"subscribe": topic, **options}.items():
        reader = reader.option(name, value)
    return reader.load()


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, int]]) -> None:
    """(partition, value, CreateTime) each, acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, value, timestamp in records:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp)
    assert producer.flush(30) == 0


def _rows(df) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def test_ending_offsets_by_timestamp_stop_each_partition_where_its_timestamp_says(
    spark, bootstrap: str
) -> None:
    topic = create_topic(bootstrap, unique("end-by-time"), partitions=3)
    base = int(time.time() * 1000) - 3_600_000

    def stamp(partition: int, i: int) -> int:  # record i of a partition: offset i
        return base + 100 * i + 10 * partition

    _produce(
        bootstrap, topic, [(p, b"%d-%d" % (p, i), stamp(p, i)) for p in range(3) for i in range(10)]
    )
    ends = {
        "0": stamp(0, 4),  # a record's own timestamp: ends before it, at offset 4
        "1": stamp(1, 7) - 50,  # between records 6 and 7: the first at or after it is 7
        "2": base + 7_200_000,  # no record is that late: Spark's latest, offset 10
    }
    ending = {"endingOffsetsByTimestamp": f'{{"{topic}": {_json(ends)}}}'}
    assert _rows(_batch(spark, bootstrap, topic, **ending)) == [
        *((0, o) for o in range(4)),
        *((1, o) for o in range(7)),
        *((2, o) for o in range(10)),
    ]
    starts = {"0": stamp(0, 1), "1": 0, "2": stamp(2, 5)}
    both = {**ending, "startingOffsetsByTimestamp": f'{{"{topic}": {_json(starts)}}}'}
    assert _rows(_batch(spark, bootstrap, topic, **both)) == [
        *((0, o) for o in range(1, 4)),
        *((1, o) for o in range(7)),
        *((2, o) for o in range(5, 10)),
    ]
    # every partition read must be named, as in Spark
    partial = f'{{"{topic}": {{"0": {stamp(0, 4)}}}}}'
    with pytest.raises(Exception, match="option endingOffsetsByTimestamp must give every"):
        _batch(spark, bootstrap, topic, endingOffsetsByTimestamp=partial).collect()


def test_timestamps_inside_an_open_transaction_match_nothing_as_on_kafka(
    spark, bootstrap: str
) -> None:
    """Kafka answers no match for a timestamp whose first record is at or past the LSO.
    An ending timestamp then ends at the latest offset (the LSO): the records before the
    open transaction are read, nothing after it is asked for. A starting timestamp fails
    under startingOffsetsByTimestampStrategy=error, saying why, and starts at the LSO under
    latest."""
    topic = create_topic(bootstrap, unique("open-time"), partitions=1)
    base = int(time.time() * 1000) - 3_600_000
    _produce(bootstrap, topic, [(0, b"before-%d" % i, base + i) for i in range(5)])  # 0..4
    open_txn = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique("open"),
            "transaction.timeout.ms": 900_000,  # open across the Spark jobs, however slow
        }
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    try:
        open_txn.produce(topic, value=b"open", partition=0, timestamp=base + 100)  # offset 5
        assert open_txn.flush(30) == 0
        _produce(bootstrap, topic, [(0, b"after-%d" % i, base + 200 + i) for i in range(2)])
        # offsets 6..7: past the LSO (5), as is the open record itself

        ending = f'{{"{topic}": {{"0": {base + 200}}}}}'
        rows = _batch(spark, bootstrap, topic, endingOffsetsByTimestamp=ending).collect()
        assert sorted(r.value for r in rows) == [b"before-%d" % i for i in range(5)]

        starting = {"startingOffsetsByTimestamp": f'{{"{topic}": {{"0": {base + 100}}}}}'}
        with pytest.raises(Exception, match="no record that late below the last stable offset"):
            _batch(spark, bootstrap, topic, **starting).collect()
        latest = {**starting, "startingOffsetsByTimestampStrategy": "latest"}
        assert _batch(spark, bootstrap, topic, **latest).collect() == []  # from the LSO on
    finally:
        open_txn.abort_transaction(30)


def test_offset_lookups_are_tried_fetch_offset_num_retries_times_at_the_interval(
    spark, proxy: FaultInjectionProxy
) -> None:
    bootstrap = proxy.bootstrap_servers
    topic = create_topic(bootstrap, unique("retries"), partitions=2)
    _produce(bootstrap, topic, [(i % 2, b"%d" % i, int(time.time() * 1000)) for i in range(20)])
    before = len(proxy.recorded(ApiKey.LIST_OFFSETS))
    try:
        # two failed lookups, then the broker's answer: the third attempt reads everything
        proxy.answer_errors(ApiKey.LIST_OFFSETS, NOT_LEADER_OR_FOLLOWER, 2)
        retries = {"fetchOffset.numRetries": "3", "fetchOffset.retryIntervalMs": "700"}
        assert _batch(spark, bootstrap, topic, **retries).count() == 20
        assert proxy.errors_left(ApiKey.LIST_OFFSETS) == 0
        # only the read's planner sends ListOffsets through this proxy (executors read with
        # their own Fetch requests, or assign librdkafka consumers at known offsets)
        first, second, third, *_ = [at for at, _ in proxy.recorded(ApiKey.LIST_OFFSETS)[before:]]
        assert second - first >= 0.7 and third - second >= 0.7  # fetchOffset.retryIntervalMs

        # a lookup that keeps failing fails the read after numRetries attempts, naming it
        proxy.answer_errors(ApiKey.LIST_OFFSETS, NOT_LEADER_OR_FOLLOWER, 1000)
        retries = {"fetchOffset.numRetries": "2", "fetchOffset.retryIntervalMs": "10"}
        with pytest.raises(Exception) as failed:
            _batch(spark, bootstrap, topic, **retries).count()
        assert 1000 - proxy.errors_left(ApiKey.LIST_OFFSETS) == 2
    finally:  # the proxy is the module's: no error left for the next test
        proxy.answer_errors(ApiKey.LIST_OFFSETS, NOT_LEADER_OR_FOLLOWER, 0)
    assert (
        "listing earliest offsets: Broker: Not leader for partition "
        "(tried 2 times: fetchOffset.numRetries=2)"
    ) in str(failed.value)


def _groups_sent(proxy: FaultInjectionProxy, after: int) -> set[str]:
    """The group ids of the FindCoordinator requests recorded after the first `after`."""
    keys: set[str] = set()
    for _, body in proxy.recorded(ApiKey.FIND_COORDINATOR)[after:]:
        keys.update([body.key] if hasattr(body, "key") else body.coordinator_keys)
    return keys


def _new_group(proxy: FaultInjectionProxy, read) -> str:  # type: ignore[no-untyped-def]
    """The one group id a read sent that no earlier read did (consumers of earlier reads
    stay alive in the Python workers and may ask for their own coordinators again)."""
    seen = len(proxy.recorded(ApiKey.FIND_COORDINATOR))
    earlier = _groups_sent(proxy, 0)
    read()
    deadline = time.monotonic() + FIND_COORDINATOR_WAIT_S
    while not (new := _groups_sent(proxy, seen) - earlier) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(new) == 1, (new, f"within {FIND_COORDINATOR_WAIT_S} s")
    return new.pop()


def test_the_consumers_group_id_follows_group_id_prefix_or_kafka_group_id(
    spark, proxy: FaultInjectionProxy, tmp_path
) -> None:
    """Through librdkafka (headers: batch reads without them use the connector's own
    Fetch requests, which carry no group at all)."""
    bootstrap = proxy.bootstrap_servers
    topic = create_topic(bootstrap, unique("groups"), partitions=1)
    _produce(bootstrap, topic, [(0, b"%d" % i, int(time.time() * 1000)) for i in range(5)])

    def batch(**options: str):  # type: ignore[no-untyped-def]
        return lambda: _batch(spark, bootstrap, topic, includeHeaders="true", **options).count()

    default = _new_group(proxy, batch())
    assert re.fullmatch(f"spark-kafka-relation-{UUID}-executor", default), default
    prefixed = _new_group(proxy, batch(groupIdPrefix="mine"))
    assert re.fullmatch(f"mine-{UUID}-executor", prefixed), prefixed
    fixed = unique("authorised")
    assert _new_group(proxy, batch(**{"kafka.group.id": fixed, "groupIdPrefix": "p"})) == fixed

    def stream() -> None:
        run_available_now(
            _load(spark.readStream, bootstrap, topic, {"startingOffsets": "earliest"})
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck"))
        )

    streaming = _new_group(proxy, stream)
    assert re.fullmatch(f"spark-kafka-source-{UUID}-executor", streaming), streaming


def _json(partitions: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{p}": {v}' for p, v in partitions.items()) + "}"
