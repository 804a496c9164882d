"""Reading a segment file in chunks: ``scan_file`` (batch by batch, lazily) and
``batch_runs`` (runs of whole batches) must see the same batches as one pass over the
whole file, whatever the chunk size: batches larger than a chunk are read whole, and both
stop at a torn tail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncelog.protocol.record_batch import Record, build_batch, iter_stored_batches
from oncelog.storage.segment import batch_runs, scan_file


def write_segment(path: Path, torn: bool) -> bytes:
    batches = [
        build_batch([Record(None, b"v" * size)] * count, base_offset=i * 10, timestamp_ms=1)
        for i, (size, count) in enumerate([(10, 1), (3000, 2), (10, 3), (9000, 1), (50, 1)])
    ]
    data = b"".join(batches)
    if torn:
        data += batches[0][:30]  # half a header: what a crash mid-append leaves
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("chunk", [64, 1000, 4096, 1 << 20])
@pytest.mark.parametrize("torn", [False, True])
def test_chunked_reads_see_every_whole_batch(tmp_path: Path, chunk: int, torn: bool) -> None:
    data = write_segment(tmp_path / "seg.log", torn)
    expected = [(pos, header.base_offset) for pos, header in iter_stored_batches(data)]
    assert len(expected) == 5
    fd = os.open(tmp_path / "seg.log", os.O_RDONLY)
    try:
        scanned = [(pos, h.base_offset) for pos, h, _ in scan_file(fd, len(data), chunk=chunk)]
        runs = [
            (at + pos, h.base_offset)
            for at, run in batch_runs(fd, len(data), chunk=chunk)
            for pos, h in iter_stored_batches(run)
        ]
        from_second = list(scan_file(fd, len(data), expected[1][0], chunk=chunk))
    finally:
        os.close(fd)
    assert scanned == expected
    assert runs == expected
    assert [(pos, h.base_offset) for pos, h, _ in from_second] == expected[1:]
