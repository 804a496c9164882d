"""A batch read's ranges through Fetch requests of the reader's own (`oncelog.spark.fetch`),
decoded natively into Arrow (`record_columns`): the same rows as Kafka's consumer returns.

The pure tests build record batches and check the selection rules of Kafka's consumer
(`CompletedFetch`): positions and ends inside batches, control batches, aborted
transactions under read_committed (with the read_uncommitted control showing the aborted
records are there), compressed and LogAppendTime batches, and malformed records refused.
The broker tests read ranges through the Fetch path with the confluent-kafka path made to
fail (so the rows come from the Fetch path only), compare them with the values produced
and with what the confluent-kafka path returns, and show the hand-over to librdkafka when
the range's first offsets are gone (data loss)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog.protocol import compression, record_batch, record_rewrite
from oncelog.protocol.record_batch import Record, build_batch, build_control_batch
from oncelog.spark import consume, fetch, record_columns
from oncelog.spark.consume import DataLossError, read_range
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import ReadOptions, parse_read_options
from oncelog.spark.schema import arrow_schema

from .spark_helpers import (
    committed_aborted_committed,
    create_topic,
    fetch_read_options,
    hand_over,
    refuse_librdkafka,
    unique,
)

SCHEMA = arrow_schema(False)
T0 = 1_700_000_000_000


def _rows(parts: list[record_columns.Part]) -> list[tuple]:
    batch = record_columns.arrow_batch(parts, "t", 0, SCHEMA)
    return list(
        zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            [t.timestamp() * 1000 for t in batch.column("timestamp").to_pylist()],
            batch.column("timestampType").to_pylist(),
            strict=True,
        )
    )


def _decoded(batches: list[bytes], low: int, high: int) -> list[tuple]:
    """The reference: the broker's own (pure-Python) decoder."""
    rows = []
    for batch in batches:
        kind = record_batch.parse_header(batch).timestamp_type
        for r in record_batch.decode_records(batch):
            if low <= r.offset < high:
                rows.append((r.offset, r.key, r.value, float(r.timestamp), kind))
    return rows


def _data(base: int, n: int, codec: int = record_batch.COMPRESSION_NONE, **kw: object) -> bytes:
    records = [
        Record(
            None if i % 5 == 1 else b"k%d" % (base + i),
            None if i % 7 == 3 else b"v%d" % (base + i) * (1 + i % 3),
            headers=(("h", b"x"),) if i % 4 == 0 else (),
            timestamp_ms=T0 + base + i,
        )
        for i in range(n)
    ]
    return build_batch(records, base_offset=base, timestamp_ms=T0, compression=codec, **kw)  # type: ignore[arg-type]


def test_columns_are_the_records_of_every_kind_of_batch() -> None:
    batches = [
        _data(0, 10),
        _data(10, 20, compression.GZIP),
        _data(30, 5, compression.LZ4),
        _data(35, 7, compression.ZSTD),
        _data(42, 9, compression.SNAPPY),
        record_batch.assign_offsets(_data(51, 4), 51, log_append_time=T0 + 999),
    ]
    chosen = record_columns.select(b"".join(batches), 0, 1000, None)
    assert chosen.position == 55
    rows = _rows(chosen.parts)
    assert rows == _decoded(batches, 0, 1000)
    assert [r[4] for r in rows[-4:]] == [1] * 4  # LogAppendTime: Spark's 1
    assert {r[3] for r in rows[-4:]} == {float(T0 + 999)}
    assert any(r[1] is None for r in rows) and any(r[2] is None for r in rows)


def test_records_below_the_position_and_from_the_end_on_are_left_out() -> None:
    batches = [_data(0, 10), _data(10, 10), _data(20, 10)]
    records = b"".join(batches)
    chosen = record_columns.select(records, 4, 15, None)
    assert [r[0] for r in _rows(chosen.parts)] == list(range(4, 15))
    assert chosen.position == 20  # past the last batch read: the range is done
    # a batch wholly past the end is not decoded
    chosen = record_columns.select(records, 0, 10, None)
    assert len(chosen.parts) == 1 and chosen.position == 10
    # a fetch from the middle of the last batch
    chosen = record_columns.select(records, 25, 100, None)
    assert [r[0] for r in _rows(chosen.parts)] == list(range(25, 30))


def test_a_torn_last_batch_is_left_for_the_next_fetch() -> None:
    batches = [_data(0, 10), _data(10, 10)]
    records = b"".join(batches)
    chosen = record_columns.select(records[:-3], 0, 100, None)
    assert [r[0] for r in _rows(chosen.parts)] == list(range(10))
    assert chosen.position == 10
    nothing = record_columns.select(records[:30], 0, 100, None)
    assert nothing.parts == [] and nothing.position == 0


def test_batches_the_log_cleaner_rewrote_keep_their_offsets() -> None:
    """Compaction keeps a retained record's offset delta (Kafka's buildRetainedRecordsInto):
    offsets have gaps inside a batch, and a batch may keep no record at all."""
    batch = _data(100, 10)
    header = record_batch.parse_header(batch)
    raw = record_rewrite.read_raw_records(batch)
    rewritten = [
        record_rewrite.retained_batch(header, kept, delete_horizon_ms=None)
        for kept in (raw[1:], raw[:4] + raw[6:], raw[:-1], raw[3:4])
    ]
    for compacted in rewritten:
        chosen = record_columns.select(compacted, 100, 1000, None)
        assert _rows(chosen.parts) == _decoded([compacted], 100, 1000)
        assert chosen.position == 110  # past the batch's last offset, removed or not
    emptied = record_rewrite.empty_batch(header)
    chosen = record_columns.select(emptied + _data(110, 2), 100, 1000, None)
    assert [r[0] for r in _rows(chosen.parts)] == [110, 111]
    # deltas must grow and stay within the batch's last offset delta
    body = rewritten[1][record_batch.HEADER_SIZE :]
    beyond = (body, 8, 100, 5, T0, T0, False, 0, 1000)  # last offset delta 5 < 9
    with pytest.raises(ValueError, match="offset delta"):
        record_columns.arrow_batch([beyond], "t", 0, SCHEMA)
    one = record_rewrite.retained_batch(header, raw[:1], delete_horizon_ms=None)
    twice = one[record_batch.HEADER_SIZE :] * 2  # two records of delta 0
    with pytest.raises(ValueError, match="offset delta"):
        record_columns.arrow_batch([(twice, 2, 100, 9, T0, T0, False, 0, 1000)], "t", 0, SCHEMA)


def _kept(batch: bytes, keep: slice) -> bytes:
    """`batch` as the log cleaner leaves it with the records `keep` selects (all gone:
    only the header, as Kafka's writeEmptyHeader)."""
    header = record_batch.parse_header(batch)
    raw = record_rewrite.read_raw_records(batch)[keep]
    if not raw:
        return record_rewrite.empty_batch(header)
    return record_rewrite.retained_batch(header, raw, delete_horizon_ms=None)


def test_read_committed_reads_a_log_the_cleaner_compacted() -> None:
    """Producer 7's aborted batch 0-4 emptied, its ABORT marker (5) and the aborted entry
    kept; producer 8's batch 6-8 without 7, its COMMIT marker (9) removed; an lz4 batch
    10-13 without 10 (recompressed); producer 7 commits 14-15, its marker (16) emptied."""
    log = b"".join(
        [
            _kept(_txn(7, 0, 5), slice(0, 0)),
            _marker(7, 5, commit=False),
            _kept(_txn(8, 6, 3), slice(0, 3, 2)),
            _kept(_data(10, 4, compression.LZ4), slice(1, None)),
            _txn(7, 14, 2),
            _kept(_marker(7, 16, commit=True), slice(0, 0)),
        ]
    )
    chosen = record_columns.select(log, 0, 17, [(0, 7)])
    assert [r[0] for r in _rows(chosen.parts)] == [6, 8, 11, 12, 13, 14, 15]
    assert chosen.position == 17
    for start in range(17):  # from every offset, removed ones included
        # a broker lists the transactions whose marker is at or past the fetch offset
        chosen = record_columns.select(log, start, 17, [(0, 7)] if start <= 5 else [])
        assert [r[0] for r in _rows(chosen.parts)] == [
            o for o in (6, 8, 11, 12, 13, 14, 15) if o >= start
        ]


def _txn(pid: int, base: int, n: int) -> bytes:
    return _data(base, n, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    return build_control_batch(
        commit,
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        base_offset=offset,
        timestamp_ms=T0,
    )


def test_read_committed_skips_aborted_transactions_until_their_abort_marker() -> None:
    """Producer 7 aborts 0-4 (marker 8) while producer 8 commits 5-7 (marker 9); plain
    records 10-12; producer 7 commits 13-15 (marker 16)."""
    log = b"".join(
        [
            _txn(7, 0, 5),
            _txn(8, 5, 3),
            _marker(7, 8, commit=False),
            _marker(8, 9, commit=True),
            _data(10, 3),
            _txn(7, 13, 3),
            _marker(7, 16, commit=True),
        ]
    )
    committed = [5, 6, 7, 10, 11, 12, 13, 14, 15]
    chosen = record_columns.select(log, 0, 17, [(0, 7)])
    assert [r[0] for r in _rows(chosen.parts)] == committed
    assert chosen.position == 17  # the range ends on a marker: done
    # a fetch that starts inside the aborted transaction
    chosen = record_columns.select(log, 2, 17, [(0, 7)])
    assert [r[0] for r in _rows(chosen.parts)] == committed
    # the control: without the aborted list (read_uncommitted) the aborted records are there
    everything = record_columns.select(log, 0, 17, None)
    assert [r[0] for r in _rows(everything.parts)] == [0, 1, 2, 3, 4, *committed]


def test_malformed_records_are_refused_never_misread() -> None:
    batch = _data(0, 10)
    header = record_batch.parse_header(batch)
    body = batch[record_batch.HEADER_SIZE :]
    last = header.last_offset_delta
    for cut in range(len(body)):
        part = (body[:cut], header.record_count, 0, last, T0, T0, False, 0, 100)
        with pytest.raises(ValueError, match="records of the batch at offset 0"):
            record_columns.arrow_batch([part], "t", 0, SCHEMA)
    too_many = (body, 1 << 30, 0, last, T0, T0, False, 0, 100)
    with pytest.raises(ValueError):
        record_columns.arrow_batch([too_many], "t", 0, SCHEMA)
    trailing = (body + b"\0", header.record_count, 0, last, T0, T0, False, 0, 100)
    with pytest.raises(ValueError, match="trailing bytes"):
        record_columns.arrow_batch([trailing], "t", 0, SCHEMA)


def test_only_plain_reads_without_other_client_options_are_fetched_here() -> None:
    boot = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    plain = parse_read_options(boot, False)
    assert plain.own_fetch and fetch.applies(plain)
    for extra in (
        {"includeHeaders": "true"},
        {"kafka.security.protocol": "SSL"},
        {"kafka.fetch.max.bytes": "1000"},
    ):
        options = parse_read_options({**boot, **extra}, False)
        assert not fetch.applies(options), extra
    assert not fetch.applies(parse_read_options(boot, True))  # streaming: librdkafka


def _read(options: ReadOptions, topic: str, start: int, end: int) -> list[tuple]:
    rows: list[tuple] = []
    for batch in read_range(options, OffsetRange(topic, 0, start, end), "fetch-test"):
        assert batch.schema == SCHEMA
        rows.extend(zip(*(batch.column(i).to_pylist() for i in range(7)), strict=True))
    return rows


def _mixed_topic(bootstrap: str) -> tuple[str, list[bytes], dict[int, bytes]]:
    """Offsets 0-9 committed (marker 10), 11-20 aborted (marker 21), 22-31 committed
    (marker 32), then 500 plain lz4 records (33-532); the transactions' values and the
    committed value at each offset."""
    topic, values = committed_aborted_committed(bootstrap, "fetch")
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
    plain = [b"p%03d" % i for i in range(500)]
    for value in plain:
        producer.produce(topic, value=value, key=value[:2], partition=0)
    assert producer.flush(30) == 0
    offsets = list(range(10)) + list(range(22, 32)) + list(range(33, 533))
    return topic, values, dict(zip(offsets, values[:10] + values[20:] + plain, strict=True))


def test_a_batch_read_fetches_exactly_each_range_itself(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every range of the mixed topic read through the Fetch path alone, then the same
    through confluent-kafka, which must agree row for row."""
    topic, values, committed = _mixed_topic(bootstrap)
    ranges = [(0, 533), (15, 25), (5, 12), (11, 22), (22, 33), (40, 41), (100, 533)]
    options = fetch_read_options(bootstrap, topic)
    fetched = {}
    with monkeypatch.context() as patched:
        patched.setattr(consume, "_consumed", refuse_librdkafka)
        for start, end in ranges:
            rows = _read(options, topic, start, end)
            assert [(r[4], r[1]) for r in rows] == [
                (o, v) for o, v in sorted(committed.items()) if start <= o < end
            ], (start, end)
            fetched[(start, end)] = rows
    consumed = dataclasses.replace(options, own_fetch=False)
    for start, end in ranges:
        assert _read(consumed, topic, start, end) == fetched[(start, end)], (start, end)
    # answers of at most one batch each (KIP-74): many Fetches, each sent ahead
    with monkeypatch.context() as patched:
        patched.setattr(consume, "_consumed", refuse_librdkafka)
        patched.setattr(fetch, "FETCH_MAX_BYTES", 100)
        asked = []
        ask = fetch._Fetcher.ask
        patched.setattr(fetch._Fetcher, "ask", lambda f, *a: asked.append(a) or ask(f, *a))
        for start, end in ranges:
            assert _read(options, topic, start, end) == fetched[(start, end)], (start, end)
        assert len(asked) > 2 * len(ranges)
    # the control: read_uncommitted returns the aborted records, through the Fetch path too
    uncommitted = fetch_read_options(
        bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"}
    )
    with monkeypatch.context() as patched:
        patched.setattr(consume, "_consumed", refuse_librdkafka)
        assert [r[1] for r in _read(uncommitted, topic, 0, 33)] == values


def _failing_on_call(real: Callable[..., Any], k: int, error: Exception) -> Callable[..., Any]:
    calls = [0]

    def fails_once(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == k:
            raise error
        return real(*args)

    return fails_once


@pytest.mark.parametrize("fault", ["connection lost", "records not decoded"])
def test_a_range_handed_over_midway_returns_every_row_once(
    bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fault: str,
) -> None:
    """Answers of one batch each; the k-th answer is lost (the connection drops while it
    arrives) or its records do not decode, after the next Fetch went out: the Fetch path
    has yielded every row below some offset X and librdkafka reads on from X. Each k puts
    the hand-over elsewhere: inside the aborted transaction, on a marker, on the lz4 run."""
    topic, _, committed = _mixed_topic(bootstrap)
    options = fetch_read_options(bootstrap, topic)
    wanted = [(o, v) for o, v in sorted(committed.items())]
    caplog.set_level(logging.INFO, logger="oncelog.spark.consume")
    handed_over = set()
    for k in range(2, 9):
        with monkeypatch.context() as patched:
            patched.setattr(fetch, "FETCH_MAX_BYTES", 100)
            if fault == "connection lost":  # call 1 is the Metadata answer
                real = fetch._Connection.receive
                patched.setattr(
                    fetch._Connection, "receive", _failing_on_call(real, k, ConnectionError())
                )
            else:
                real = record_columns.arrow_batch
                patched.setattr(
                    record_columns, "arrow_batch", _failing_on_call(real, k - 1, ValueError())
                )
            caplog.clear()
            rows = _read(options, topic, 0, 533)
        assert [(r[4], r[1]) for r in rows] == wanted, k
        handed_over.add(hand_over(caplog.records)[0])
    # the hand-overs fell inside the range, after rows had come through the Fetch path
    assert len({x for x in handed_over if 0 < x < 533}) >= 4, handed_over


def test_a_range_whose_records_are_gone_is_handed_to_librdkafka(
    bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Offsets 0-49 deleted: the Fetch answers OFFSET_OUT_OF_RANGE, and librdkafka's path
    applies failOnDataLoss as before."""
    topic = create_topic(bootstrap, unique("fetch-lost"), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce(topic, value=b"%03d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        future.result(30)
    caplog.set_level(logging.INFO, logger="oncelog.spark.consume")
    with pytest.raises(DataLossError):
        _read(fetch_read_options(bootstrap, topic), topic, 0, 100)
    assert (
        "librdkafka reads on: offset 0: Fetch answered error code 1" in caplog.text
    )  # OFFSET_OUT_OF_RANGE
    lenient = fetch_read_options(bootstrap, topic, failOnDataLoss="false")
    assert [r[4] for r in _read(lenient, topic, 0, 100)] == list(range(50, 100))


def test_the_leader_is_found_through_the_first_bootstrap_server_that_answers(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(bootstrap, unique("fetch-seed"), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    monkeypatch.setattr(consume, "_consumed", refuse_librdkafka)
    options = fetch_read_options(f"127.0.0.1:1,{bootstrap}", topic)  # nothing listens on port 1
    assert [r[4] for r in _read(options, topic, 0, 10)] == list(range(10))


def test_a_peer_that_does_not_speak_kafka_is_left_to_librdkafka(bootstrap: str) -> None:
    """A server answering with a TLS alert, which reads as a 352 MB answer: refused before
    anything is allocated, as a hand-over (FetchUnavailable) at the range's start."""
    topic = unique("fetch-alien")
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]

        def alert() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"\x15\x03\x03\x00\x02\x02\x28")

        answering = threading.Thread(target=alert, daemon=True)
        answering.start()
        with pytest.raises(fetch.FetchUnavailable, match="announced an answer of 352"):
            list(
                fetch.read_range(
                    fetch_read_options(f"127.0.0.1:{port}", topic), OffsetRange(topic, 0, 0, 10)
                )
            )
        answering.join(10)


def _fetch_path_applies(_: Iterator[int]) -> Iterator[bool]:
    options = parse_read_options(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}, False
    )
    yield fetch.applies(options)


def test_spark_python_workers_read_batch_ranges_through_the_fetch_path(spark: Any) -> None:
    """The native decoder imports in Spark's Python workers (a stale or missing build would
    send every read to librdkafka silently, and every other test would still pass)."""
    workers = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_fetch_path_applies)
    assert workers.collect() == [True, True]
