"""Producer ids come from durable blocks: none is ever handed out twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.producers.pid_allocator import BLOCK_FILE, ProducerIdAllocator


def test_ids_are_unique_across_restarts_and_crashes(tmp_path: Path) -> None:
    issued: list[int] = []
    for _ in range(5):
        allocator = ProducerIdAllocator(tmp_path, block_size=10)
        issued += [allocator.allocate() for _ in range(13)]  # spans two blocks
        # Dropping the allocator without any shutdown is a crash: the rest of the
        # reserved block is skipped, never reused.
    assert len(issued) == len(set(issued)) == 65
    assert issued == sorted(issued)


def test_the_block_end_is_persisted_before_the_first_id_of_the_block(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path, block_size=1000)
    assert allocator.allocate() == 0
    assert (tmp_path / BLOCK_FILE).read_text().strip() == "1000"
    assert ProducerIdAllocator(tmp_path).allocate() == 1000


def test_a_corrupt_block_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / BLOCK_FILE).write_text("garbage")
    with pytest.raises(RuntimeError, match="refusing to reuse ids"):
        ProducerIdAllocator(tmp_path)
