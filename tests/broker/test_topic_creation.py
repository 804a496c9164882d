"""Topic creation and deletion: bounded per request, all or nothing, one catalogue file per
topic, and never adopting the data a crashed creation or deletion left behind."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.topic_catalogue import CATALOGUE_DIR, LEGACY_CATALOGUE_FILE
from oncelog.client.connection import KafkaConnection
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.storage import PartitionLog
from oncelog.testing import EmbeddedBroker

from .raw_requests import create_topics, create_topics_body, delete_topic, metadata, produce

TIMEOUT_S = 60.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path / "data") as embedded:
        yield embedded


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as connection:
        yield connection


def create(conn: KafkaConnection, **partitions: int) -> dict[str, Any]:
    return create_topics(conn, partitions)


def delete(conn: KafkaConnection, name: str) -> int:
    return int(delete_topic(conn, name).error_code)


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(f"{topic}-"))


def catalogue_entries(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / CATALOGUE_DIR).iterdir())


def produce_one(conn: KafkaConnection, topic: str, value: bytes) -> int:
    answer = produce(conn, topic, 0, build_batch([Record(None, value)], timestamp_ms=1))
    assert answer.error_code == ErrorCode.none
    return int(answer.base_offset)


def test_a_request_for_too_many_partitions_is_refused_whole(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    results = create(conn, small=1, big=6_000, bigger=4_000)
    assert {r.error_code for r in results.values()} == {ErrorCode.policy_violation}
    assert "Excessively large number of partitions per request" in results["small"].error_message
    assert partition_dirs(broker.data_dir, "small") == []
    assert not (broker.data_dir / CATALOGUE_DIR).exists()
    assert create(conn, small=1)["small"].error_code == ErrorCode.none


def test_a_creation_that_fails_half_way_leaves_nothing_behind(
    broker: EmbeddedBroker, conn: KafkaConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = PartitionLog.open

    def open_until_the_eighth(directory: Path, *args: Any, **kwargs: Any) -> PartitionLog:
        if directory.name == "half-7":
            raise OSError(24, "Too many open files")
        return opened(directory, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "open", open_until_the_eighth)
    result = create(conn, half=12)["half"]
    assert result.error_code == ErrorCode.kafka_storage_error
    assert "Too many open files" in result.error_message
    assert partition_dirs(broker.data_dir, "half") == []
    assert not (broker.data_dir / CATALOGUE_DIR / "half.json").exists()
    monkeypatch.undo()
    assert create(conn, half=12)["half"].error_code == ErrorCode.none, "the name is free again"
    assert len(partition_dirs(broker.data_dir, "half")) == 12


def test_each_topic_has_its_own_catalogue_entry(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    create(conn, first=2)
    first_entry = broker.data_dir / CATALOGUE_DIR / "first.json"
    written = os.stat(first_entry)
    create(conn, second=1, third=3)
    assert catalogue_entries(broker.data_dir) == ["first.json", "second.json", "third.json"]
    assert os.stat(first_entry).st_mtime_ns == written.st_mtime_ns, "not rewritten"
    assert os.stat(first_entry).st_ino == written.st_ino
    assert delete(conn, "second") == ErrorCode.none
    assert catalogue_entries(broker.data_dir) == ["first.json", "third.json"]
    assert partition_dirs(broker.data_dir, "second") == []
    broker.restart()
    assert broker.broker is not None
    assert {t.name: len(t.partitions) for t in broker.broker.topics.all()} == {
        "first": 2,
        "third": 3,
    }


def test_a_legacy_topics_json_is_converted_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            create(conn, kept=2)
            produce_one(conn, "kept", b"from-before")
        topic_id = str(broker.broker.topics.get("kept").topic_id)  # type: ignore[union-attr]
    # What an earlier oncelog left: one topics.json listing every topic.
    (data / CATALOGUE_DIR / "kept.json").unlink()
    (data / CATALOGUE_DIR).rmdir()
    legacy = [{"name": "kept", "id": topic_id, "partitions": 2, "configs": {}}]
    (data / LEGACY_CATALOGUE_FILE).write_text(json.dumps(legacy))
    with EmbeddedBroker(data_dir=data) as broker:
        assert broker.broker is not None
        topic = broker.broker.topics.get("kept")
        assert topic is not None and str(topic.topic_id) == topic_id
        assert topic.partitions[0].log.log_end_offset == 1
    assert not (data / LEGACY_CATALOGUE_FILE).exists()
    assert catalogue_entries(data) == ["kept.json"]


def test_a_new_topic_never_adopts_what_a_crash_left(tmp_path: Path) -> None:
    """A deletion interrupted after its catalogue entry was removed leaves partition
    directories no topic lists; a new topic of that name starts empty."""
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            create(conn, reused=1)
            produce_one(conn, "reused", b"old data")
    (data / CATALOGUE_DIR / "reused.json").unlink()
    with EmbeddedBroker(data_dir=data) as broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            assert create(conn, reused=1)["reused"].error_code == ErrorCode.none
            assert produce_one(conn, "reused", b"new data") == 0, "an empty log"
    strays = [p.name for p in data.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and strays[0].startswith("reused-0.")


def test_metadata_for_a_topic_being_created_is_retriable(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    """A Metadata request may name a topic whose partitions are still being made: it gets
    LEADER_NOT_AVAILABLE (retriable), never a second topic of that name."""
    assert broker.broker is not None
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as other:
        answers = []
        creating = _send_create(conn, "slow", 300)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            answer = metadata(other, "slow")
            answers.append(answer.error_code)
            if answer.error_code == ErrorCode.none:
                assert len(answer.partitions) == 300
                break
            time.sleep(0.05)
        assert _receive_create(conn, creating)["slow"].error_code == ErrorCode.none
    assert set(answers) <= {ErrorCode.leader_not_available, ErrorCode.none}
    assert answers[-1] == ErrorCode.none


def _send_create(conn: KafkaConnection, name: str, partitions: int) -> Any:
    api = codec.api_codec(ApiKey.CREATE_TOPICS, conn.version_for(ApiKey.CREATE_TOPICS))
    conn.send_raw(codec.encode_request(api, 7_001, "t", create_topics_body({name: partitions})))
    return api


def _receive_create(conn: KafkaConnection, api: Any) -> dict[str, Any]:
    _, response = codec.decode_response(api, conn.receive_frame())
    return {t.name: t for t in response.topics}
