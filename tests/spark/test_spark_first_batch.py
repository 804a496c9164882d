"""The first micro-batch of a streaming query reads the ranges it was planned with, in its
first attempt and in a replay after a restart, although Spark asks the source for the
batch's start again each time (it keeps only end offsets in its offset log)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .spark_helpers import create_topic, produce_transaction, unique

Row = tuple[int, int, bytes]  # partition, offset, value


def _wait(what: str, done: Callable[[], bool], query: object, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        assert query.exception() is None, query.exception()  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"waited {limit_s} s for {what}"
        time.sleep(0.05)


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """Spark's commit-log entry of `batch` removed: the driver died after the batch's tasks
    ran and before Spark recorded it as done, so a restart replays it."""
    os.remove(checkpoint / "commits" / str(batch))
    crc = checkpoint / "commits" / f".{batch}.crc"  # Hadoop's checksum would block the rewrite
    if crc.exists():
        os.remove(crc)


@pytest.mark.slow
def test_the_first_batch_at_latest_reads_its_planned_ranges_also_when_replayed(
    spark, bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(bootstrap, unique("first"), partitions=2)
    produce_transaction(bootstrap, topic, [b"before-%d" % i for i in range(10)])
    checkpoint, hold = tmp_path / "ck", tmp_path / "hold"
    hold.mkdir()
    (hold / "hold").touch()
    seen: dict[int, list[list[Row]]] = {}

    def collect(batch_df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows = [(r.partition, r.offset, r.value) for r in batch_df.collect()]
        seen.setdefault(batch_id, []).append(sorted(rows))

    def start(fmt: str, trigger: dict[str, object], **options: str):  # type: ignore[no-untyped-def]
        reader = (
            spark.readStream.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        return (
            reader.load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    # (a) records arrive after the query took its start (the latest offsets) and before
    # its first batch is planned: they are that batch's, in its first attempt
    query = start(
        "oncelog_faults",
        {"processingTime": "200 milliseconds"},
        holdAfterInitialOffset=str(hold),
    )
    try:
        _wait("the first batch's start", (hold / "initial.json").exists, query)
        first = [b"first-%d" % i for i in range(20)]
        produce_transaction(bootstrap, topic, first)
        os.remove(hold / "hold")
        _wait("batch 0 to be recorded as done", (checkpoint / "commits" / "0").exists, query)
        # a later trigger: it plans batch 1 (offsets/1) or finds no new data
        _wait(
            "a trigger after batch 0",
            lambda: (checkpoint / "offsets" / "1").exists() or not query.status["isDataAvailable"],
            query,
        )
    finally:
        query.stop()
    assert sorted(v for _p, _o, v in seen[0][0]) == sorted(first)
    offsets_log = sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert offsets_log == ["0"]  # no empty batch after it

    # (b) batch 0 is replayed after more records arrived: Spark asks for its start again
    # (now later than the batch's end under "latest"); it reads what it read before
    _forget_commit(checkpoint, 0)
    second = [b"second-%d" % i for i in range(15)]
    produce_transaction(bootstrap, topic, second)
    query = start("oncelog", {"availableNow": True})
    try:
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert len(seen[0]) == 2 and seen[0][1] == seen[0][0]
    assert sorted(v for _p, _o, v in seen[1][0]) == sorted(second)
