"""The process's file-descriptor limit, shared out between segment files and connections.

At start the soft limit is raised to the hard one, as the JVM does for Kafka
(`-XX:+MaxFDLimit`, on by default on Linux). Of that limit, RESERVED descriptors are kept
for everything else (standard streams, the event loop, the listening socket, checkpoint
and snapshot writes, directory fsyncs); half the rest may be segment files open at once
(storage/file_cache.py closes the least recently used beyond it) and half connections
(`max.connections` is lowered to that share when it is larger). So neither partitions
nor clients can take the descriptors the other needs: a broker at its limit refuses a
connection or reopens a file, and never fails with "too many open files".
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

from oncelog.storage.file_cache import open_files

log = logging.getLogger(__name__)

RESERVED = 64
# Below this there is no room for a useful share of either.
MINIMUM_LIMIT = 3 * RESERVED
# The share of a huge (or unlimited) hard limit that is worth using.
CEILING = 1 << 20


@dataclass(frozen=True)
class DescriptorBudget:
    """How many descriptors segment files and connections may each hold under `limit`."""

    limit: int
    segment_files: int
    connections: int


def plan(limit: int) -> DescriptorBudget:
    """How `limit` descriptors are shared out."""
    if limit < MINIMUM_LIMIT:
        raise ValueError(
            f"the file-descriptor limit is {limit}; oncelog needs at least {MINIMUM_LIMIT}"
        )
    share = (limit - RESERVED) // 2
    return DescriptorBudget(limit, segment_files=share, connections=share)


def raise_limit() -> tuple[int, int]:
    """Raise the soft limit to the hard one; (limit before, limit now), CEILING at most."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = _finite(soft)
    wanted = _finite(hard)
    if before >= wanted:
        return before, before
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the file-descriptor limit to %d: %s", wanted, exc)
        return before, before
    return before, wanted


def _finite(limit: int) -> int:
    return CEILING if limit == resource.RLIM_INFINITY else min(limit, CEILING)


def apply() -> DescriptorBudget:
    """Raise the limit, size the segment file cache, and say what each share got."""
    before, limit = raise_limit()
    budget = plan(limit)
    open_files.configure(budget.segment_files)
    log.info(
        "file descriptors: limit %d%s; up to %d segment files open at once, %d connections",
        limit,
        f" (raised from {before})" if limit != before else "",
        budget.segment_files,
        budget.connections,
    )
    return budget
