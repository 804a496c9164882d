"""A storage test's own file cache.

Every log opened in the process shares one file cache
(`oncelog.storage.file_cache.open_files`), the session broker's too. Files other tests left
in it (written ones, deleted ones) change what it closes and when it is crowded, and a
crowded cache changes which files a flush fsyncs together: a test that asserts fsync rounds
or evictions takes a cache of its own. A log keeps the cache it was opened with
(``PartitionLog.file_cache``), so the logs the test opens use the new cache and the logs
already open (a session broker's, still flushing and checkpointing in its thread) keep
theirs.
"""

from __future__ import annotations

import pytest

import oncelog.storage.log as log_module
from oncelog.storage.file_cache import FileCache


def fresh_file_cache(monkeypatch: pytest.MonkeyPatch) -> FileCache:
    """A new, empty cache for the logs the test opens from now on."""
    fresh = FileCache()
    monkeypatch.setattr(log_module, "open_files", fresh)
    return fresh
