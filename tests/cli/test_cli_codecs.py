"""`oncelog produce --compression`, `oncelog consume` and `oncelog dump-log --records` with
every codec: the batches are stored compressed and both tools read them back."""

from __future__ import annotations

import json

import pytest

from oncelog.testing import EmbeddedBroker

# Compressible enough that even a batch of one line is smaller compressed: librdkafka sends
# a batch uncompressed when compressing does not shrink it (small batches under load).
LINES = [b"line %d of compressible text " % i + b"text " * 40 for i in range(50)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_through_the_cli(broker: EmbeddedBroker, cli, codec: str) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    topic = f"cli-{codec}"
    created = cli("topics", "create", *bootstrap, "--topic", topic, "--partitions", "1")
    assert created.exit_code == 0, created.output
    produced = cli(
        "produce", *bootstrap, "--topic", topic, "--compression", codec, input=b"\n".join(LINES)
    )
    assert produced.exit_code == 0, produced.output

    consumed = cli(
        "consume",
        *bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(len(LINES)),
        "--timeout-ms",
        "10000",
    )
    assert consumed.exit_code == 0, consumed.output
    assert consumed.stdout.encode().splitlines() == LINES

    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    dumped = cli("dump-log", str(segment), "--records", "--json")
    assert dumped.exit_code == 0, dumped.output
    batches = json.loads(dumped.stdout)["batches"]
    assert {b["compression"] for b in batches} == {codec}
    assert all(b["decode_error"] is None for b in batches)
    values = [r["value"] for b in batches for r in b["records"]]
    assert values == [line.decode() for line in LINES]
    text = cli("dump-log", str(segment))
    assert codec in text.stdout
