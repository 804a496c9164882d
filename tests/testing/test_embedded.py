"""EmbeddedBroker removes the temporary directory it made, and nothing else: after a stop,
a start that fails, a stop that fails; never before it starts, never a given one."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from oncelog.broker.broker import Broker
from oncelog.broker.config import ConfigError
from oncelog.testing import EmbeddedBroker

BAD_CONFIG = {"advertised.listeners": "PLAINTEXT://127.0.0.1:0"}


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where tempfile makes directories during the test (so we can see them all)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_the_temporary_directory_lives_from_start_to_stop(temp_root: Path) -> None:
    broker = EmbeddedBroker()
    assert list(temp_root.iterdir()) == [], "nothing is made before the start"
    with broker:
        assert broker.data_dir.parent == temp_root and broker.data_dir.is_dir()
        broker.restart()  # a restart keeps it
        assert broker.data_dir.is_dir()
    assert list(temp_root.iterdir()) == []


def test_a_failed_start_removes_its_temporary_directory(temp_root: Path) -> None:
    with pytest.raises(ConfigError):
        EmbeddedBroker(BAD_CONFIG).start()
    assert list(temp_root.iterdir()) == []


def test_a_failed_stop_still_ends_the_thread_and_removes_the_directory(
    temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = EmbeddedBroker().start()
    thread = broker._loop_thread.thread
    assert thread is not None

    async def failing_stop(self: Broker) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(Broker, "stop", failing_stop)
    with pytest.raises(OSError, match="disk gone"):
        broker.stop()
    assert not thread.is_alive()
    assert list(temp_root.iterdir()) == []


def test_a_given_directory_is_never_removed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with EmbeddedBroker(data_dir=data_dir) as broker:
        assert broker.data_dir == data_dir
    assert data_dir.is_dir()
    with pytest.raises(ConfigError):
        EmbeddedBroker(BAD_CONFIG, data_dir=data_dir).start()
    assert data_dir.is_dir()
