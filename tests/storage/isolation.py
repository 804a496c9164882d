"""A storage test's own process-wide file cache.

Every log in the process shares one file cache (`oncelog.storage.file_cache.open_files`).
Files other tests left in it (written ones, deleted ones) change what it closes and when it
is crowded, and a crowded cache changes which files a flush fsyncs together: a test that
asserts fsync rounds or evictions takes a cache of its own.
"""

from __future__ import annotations

import pytest

import oncelog.storage.log as log_module
from oncelog.storage import file_cache, offset_index, segment, txn_index
from oncelog.storage.file_cache import FileCache


def fresh_file_cache(monkeypatch: pytest.MonkeyPatch) -> FileCache:
    """A new, empty cache in place of the shared one, for the rest of the test."""
    fresh = FileCache()
    for module in (file_cache, log_module, segment, offset_index, txn_index):
        monkeypatch.setattr(module, "open_files", fresh)
    return fresh
