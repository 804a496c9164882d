"""A tiny harness around the shard: a fake ``__transaction_state`` log and a pid allocator."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from oncelog.transactions.coordinator import CoordinatorResult, TransactionCoordinatorShard

MAX_TIMEOUT = 900_000


class Harness:
    """Writes each result's records to a list (the log) and replays them, as the broker will."""

    def __init__(self, coordinator_epoch: int = 0) -> None:
        self.shard = TransactionCoordinatorShard(0, coordinator_epoch)
        self.log: list[tuple[bytes, bytes | None]] = []
        self._pids: Iterator[int] = itertools.count(1000)
        self.now = 1_000

    def allocate(self) -> int:
        return next(self._pids)

    def write(self, result: CoordinatorResult) -> CoordinatorResult:
        self.log.extend(result.records)
        self.shard.apply(result)
        return result

    def init(
        self,
        tid: str = "tx",
        timeout: int = 60_000,
        pid: int = -1,
        epoch: int = -1,
        version_max: int = MAX_TIMEOUT,
    ) -> CoordinatorResult:
        return self.write(
            self.shard.init_producer_id(
                tid,
                timeout,
                pid,
                epoch,
                now_ms=self.now,
                allocate_producer_id=self.allocate,
                max_timeout_ms=version_max,
            )
        )

    def add(
        self, pid: int, epoch: int, *parts: tuple[str, int], tid: str = "tx"
    ) -> CoordinatorResult:
        return self.write(
            self.shard.add_partitions(tid, pid, epoch, parts or (("t", 0),), self.now)
        )

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "tx") -> CoordinatorResult:
        return self.write(self.shard.end_txn(tid, pid, epoch, commit, self.now))

    def complete(self, tid: str = "tx") -> CoordinatorResult:
        return self.write(self.shard.complete(tid, self.now))

    def reloaded(self) -> TransactionCoordinatorShard:
        fresh = TransactionCoordinatorShard(0, self.shard.coordinator_epoch, loading=True)
        for offset, (key, value) in enumerate(self.log):
            fresh.replay(offset, -1, key, value)
        return fresh
