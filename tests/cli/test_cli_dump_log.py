"""`oncelog dump-log` on a real segment, on damaged copies of it and on a marker batch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from oncelog.protocol.record_batch import Record, build_batch, build_control_batch
from oncelog.testing import EmbeddedBroker

from .batches import produce_groups_as_batches

BATCHES = [[b"a0", b"a1"], [b"b0", b"b1", b"b2"], [b"c0"]]


@pytest.fixture(scope="module")
def segment(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a real segment holding three batches (2, 3 and 1 records)."""
    from click.testing import CliRunner

    from oncelog.cli.main import main

    created = CliRunner().invoke(
        main,
        [
            "topics",
            "create",
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--topic",
            "dumped",
            "--partitions",
            "1",
        ],
    )
    assert created.exit_code == 0, created.output
    produce_groups_as_batches(broker.bootstrap_servers, "dumped", BATCHES)
    copy = tmp_path_factory.mktemp("dump") / "00000000000000000000.log"
    shutil.copyfile(broker.data_dir / "dumped-0" / "00000000000000000000.log", copy)
    return copy


def _dump(cli, path: Path, *extra: str) -> dict:
    result = cli("dump-log", str(path), "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _damaged(segment: Path, tmp_path: Path, edit) -> Path:
    data = bytearray(segment.read_bytes())
    edit(data)
    path = tmp_path / segment.name
    path.write_bytes(data)
    return path


def test_real_segment(cli, segment: Path) -> None:
    report = _dump(cli, segment, "--records")
    batches = report["batches"]
    assert [b["base_offset"] for b in batches] == [0, 2, 5]
    assert [b["last_offset"] for b in batches] == [1, 4, 5]
    assert [b["record_count"] for b in batches] == [2, 3, 1]
    assert all(b["crc_valid"] for b in batches)
    assert [b["position"] for b in batches][1:] == [b["position"] + b["size"] for b in batches[:-1]]
    assert sum(b["size"] for b in batches) == report["size_bytes"] == segment.stat().st_size
    assert report["torn_tail"] is None
    assert [[r["value"] for r in b["records"]] for b in batches] == [
        [v.decode() for v in values] for values in BATCHES
    ]
    assert [r["offset"] for r in batches[1]["records"]] == [2, 3, 4]

    table = cli("dump-log", str(segment))
    assert table.exit_code == 0 and "3 batches" in table.stdout and "INVALID" not in table.stdout


def test_corrupted_byte_fails_only_its_batch(cli, segment: Path, tmp_path: Path) -> None:
    second = _dump(cli, segment)["batches"][1]

    def flip(data: bytearray) -> None:
        data[second["position"] + second["size"] - 1] ^= 0xFF  # last byte of its last record

    damaged = _damaged(segment, tmp_path, flip)
    assert [b["crc_valid"] for b in _dump(cli, damaged)["batches"]] == [True, False, True]
    table = cli("dump-log", str(damaged))
    assert table.exit_code == 0 and "INVALID" in table.stdout


def test_torn_tail_is_reported(cli, segment: Path, tmp_path: Path) -> None:
    third = _dump(cli, segment)["batches"][2]
    torn = _damaged(segment, tmp_path, lambda data: data.__delitem__(slice(-10, None)))
    report = _dump(cli, torn)
    assert [b["base_offset"] for b in report["batches"]] == [0, 2]
    assert report["torn_tail"] == {"position": third["position"], "bytes": third["size"] - 10}
    table = cli("dump-log", str(torn))
    assert table.exit_code == 0
    assert f"Torn tail: {third['size'] - 10} bytes at position {third['position']}" in table.stdout


def test_garbage_and_empty_files(cli, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(b"\x01\x02\x03")
    assert _dump(cli, garbage) == {
        "file": str(garbage),
        "size_bytes": 3,
        "batches": [],
        "torn_tail": {"position": 0, "bytes": 3},
    }
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert _dump(cli, empty)["batches"] == [] and _dump(cli, empty)["torn_tail"] is None


def test_transaction_marker(cli, tmp_path: Path) -> None:
    data = build_batch(
        [Record(b"k", b"v")],
        base_offset=0,
        producer_id=7,
        producer_epoch=2,
        base_sequence=0,
        transactional=True,
        timestamp_ms=1000,
    )
    marker = build_control_batch(
        True, producer_id=7, producer_epoch=2, coordinator_epoch=0, base_offset=1, timestamp_ms=1001
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + marker)
    report = _dump(cli, path, "--records")
    data_batch, marker_batch = report["batches"]
    assert (
        data_batch["producer_id"],
        data_batch["producer_epoch"],
        data_batch["base_sequence"],
        data_batch["transactional"],
        data_batch["control"],
    ) == (7, 2, 0, True, False)
    assert marker_batch["control"] and marker_batch["marker"] == "COMMIT"
    assert marker_batch["records"] == [] and data_batch["records"][0]["value"] == "v"
    assert "COMMIT" in cli("dump-log", str(path)).stdout
