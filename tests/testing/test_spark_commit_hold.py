"""The testing sink's `holdCommitsWhile`: the demonstration holds a batch's driver-side
commit so that its driver kill always lands after the tasks committed and before Spark
recorded the batch; the hold must end when its file goes, or at its bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pyspark.sql.types import BinaryType, StructField, StructType

from oncelog.testing.spark import (
    HOLD_COMMITS_WHILE,
    CommitHold,
    FaultyOncelogDataSource,
    HeldOncelogStreamWriter,
)


def test_a_commit_waits_while_the_file_exists_and_goes_on_once_it_is_removed(
    tmp_path: Path,
) -> None:
    held = tmp_path / "hold"
    held.touch()
    removed = threading.Event()

    def remove_later() -> None:
        time.sleep(0.3)
        removed.set()
        held.unlink()

    remover = threading.Thread(target=remove_later)
    remover.start()
    CommitHold(held).wait()
    assert removed.is_set()  # it returned only after the file was gone
    remover.join()


def test_a_commit_without_the_file_is_not_held_and_a_hold_ends_at_its_bound(
    tmp_path: Path,
) -> None:
    CommitHold(tmp_path / "absent").wait()  # returns at once
    held = tmp_path / "hold"
    held.touch()
    CommitHold(held, limit_s=0.2).wait()  # the file stays: the bound ends the hold
    assert held.exists()


def test_the_faulty_source_holds_only_the_stream_writer_it_was_asked_to(tmp_path: Path) -> None:
    schema = StructType([StructField("value", BinaryType())])
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "sink.id": "s"}
    plain = FaultyOncelogDataSource(options).streamWriter(schema, False)
    assert isinstance(plain, HeldOncelogStreamWriter) and plain.hold is None
    held = FaultyOncelogDataSource({**options, HOLD_COMMITS_WHILE: str(tmp_path / "h")})
    writer = held.streamWriter(schema, False)
    assert isinstance(writer, HeldOncelogStreamWriter)
    assert writer.hold == CommitHold(tmp_path / "h")
