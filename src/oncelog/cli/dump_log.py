"""`oncelog dump-log`: what a segment `.log` file holds, batch by batch.

Reads the file directly (no broker needed), so it works on a stopped broker's data and
on damaged files: a bad CRC is shown per batch and bytes after the last whole batch are
reported as a torn tail, the same cut recovery would make.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from oncelog.cli.output import json_option, print_json, print_table, render_bytes
from oncelog.protocol import record_batch as rb
from oncelog.protocol.compression import CODEC_NAMES

DECODE_ERRORS = ValueError  # what decode_records raises for any batch it cannot read


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes without reading a 1 GiB segment into memory (mmap cannot map 0 bytes)."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def dump(buf: bytes | mmap.mmap, with_records: bool) -> dict[str, Any]:
    """Every whole batch of a segment, and the torn tail after them if any."""
    batches = []
    end = 0
    for position, header in rb.iter_stored_batches(buf):
        batch = buf[position : position + header.size]  # a copy: no view outlives the mmap
        batches.append(_describe(position, header, batch, with_records))
        end = position + header.size
    torn = None if end == len(buf) else {"position": end, "bytes": len(buf) - end}
    return {"size_bytes": len(buf), "batches": batches, "torn_tail": torn}


def _describe(
    position: int, header: rb.BatchHeader, batch: bytes, with_records: bool
) -> dict[str, Any]:
    crc_valid = rb.crc_is_valid(batch)
    try:
        marker = rb.describe_control(batch)
    except DECODE_ERRORS:
        marker = None
    described: dict[str, Any] = {
        "position": position,
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "record_count": header.record_count,
        "size": header.size,
        "partition_leader_epoch": header.partition_leader_epoch,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "transactional": header.is_transactional,
        "control": header.is_control,
        "marker": marker,
        "compression": CODEC_NAMES.get(header.compression, str(header.compression)),
        "timestamp_type": "LogAppendTime" if header.timestamp_type else "CreateTime",
        "max_timestamp": header.max_timestamp,
        "crc": header.crc,
        "crc_valid": crc_valid,
    }
    if with_records:
        described["records"], described["decode_error"] = _records(batch, header)
    return described


def _records(
    batch: bytes, header: rb.BatchHeader
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Decoded data records; a control batch's record is its marker, shown above."""
    if header.is_control:
        return [], None
    try:
        records = rb.decode_records(batch)
    except DECODE_ERRORS as exc:
        return None, str(exc)
    return [
        {
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": render_bytes(r.key),
            "value": render_bytes(r.value),
            "headers": [{"key": k, "value": render_bytes(v)} for k, v in r.headers],
        }
        for r in records
    ], None


@click.command("dump-log", short_help="Describe the batches of a segment .log file.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--records", "with_records", is_flag=True, help="Also decode and print every record.")
@json_option
def dump_log(file: Path, with_records: bool, as_json: bool) -> None:
    """Describe each batch of a segment FILE (`<topic>-<partition>/<offset>.log`).

    Per batch: offsets, record count, size, producer id, epoch, base sequence,
    transactional and control flags (with the COMMIT/ABORT marker), codec and whether the
    CRC matches; --records decodes gzip, snappy, lz4 and zstd batches too. A torn tail
    (bytes after the last whole batch) is reported.
    """
    with _mapped(file) as buf:
        report = {"file": str(file), **dump(buf, with_records)}
    if as_json:
        print_json(report)
        return
    _print_report(report, with_records)


def _print_report(report: dict[str, Any], with_records: bool) -> None:
    batches = report["batches"]
    plural = "" if len(batches) == 1 else "es"
    click.echo(f"{report['file']}: {report['size_bytes']} bytes, {len(batches)} batch{plural}")
    print_table(
        [
            "Position",
            "Base offset",
            "Last offset",
            "Records",
            "Size",
            "Producer id",
            "Epoch",
            "Base seq",
            "Txn",
            "Control",
            "Codec",
            "CRC",
        ],
        [
            (
                b["position"],
                b["base_offset"],
                b["last_offset"],
                b["record_count"],
                b["size"],
                b["producer_id"],
                b["producer_epoch"],
                b["base_sequence"],
                "yes" if b["transactional"] else "",
                _control(b),
                b["compression"],
                "ok" if b["crc_valid"] else "INVALID",
            )
            for b in batches
        ],
        right=[
            "Position",
            "Base offset",
            "Last offset",
            "Records",
            "Size",
            "Producer id",
            "Epoch",
            "Base seq",
        ],
    )
    if with_records:
        rows = []
        for b in batches:
            if b["decode_error"] is not None:
                rows.append((b["base_offset"], "", "", f"cannot decode: {b['decode_error']}", ""))
            rows += [
                (
                    r["offset"],
                    r["timestamp"],
                    r["key"],
                    r["value"],
                    ", ".join(f"{h['key']}={h['value']}" for h in r["headers"]),
                )
                for r in b["records"] or []
            ]
        click.echo("Records:")
        print_table(
            ["Offset", "Timestamp", "Key", "Value", "Headers"], rows, right=["Offset", "Timestamp"]
        )
    torn = report["torn_tail"]
    if torn is not None:
        click.echo(
            f"Torn tail: {torn['bytes']} bytes at position {torn['position']}"
            " are not a whole batch."
        )


def _control(batch: dict[str, Any]) -> str:
    if not batch["control"]:
        return ""
    return batch["marker"] or "yes"
