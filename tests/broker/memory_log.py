"""An internal topic kept in memory, for coordinator runtime tests: a partition writer, a
loader and the topic itself, whose durability the test controls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from oncelog.broker.coordinator_runtime import NO_PRODUCER, CoordinatorShard, LoadReport
from oncelog.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class Entry:
    offset: int
    producer_id: int
    key: bytes | None  # None: a transaction marker
    value: bytes | None
    committed: bool = False


@dataclass
class MemoryLog:
    """``partitions`` partitions of ``name``; ``durable[p]`` is the end of what is durable.

    With ``auto_durable`` every append is durable at once; otherwise a test calls
    ``make_durable`` (or ``fail_durability``) to resolve the waiters."""

    name: str = "__test_state"
    partitions: int = 2
    auto_durable: bool = True
    created: bool = True
    entries: dict[int, list[Entry]] = field(default_factory=dict)
    durable: dict[int, int] = field(default_factory=dict)
    refuse_appends: ErrorCode | None = None
    # An I/O error for the next append (then cleared): raised before anything is written,
    # or, with ``io_error_after_write``, once the records are in the log (a write whose
    # outcome the writer cannot know).
    io_error: OSError | None = None
    io_error_after_write: bool = False
    loads_wait_for: asyncio.Event | None = None  # a load replays only once this is set
    _waiters: list[tuple[int, int, asyncio.Future[None]]] = field(default_factory=list)

    def log(self, partition: int) -> list[Entry]:
        return self.entries.setdefault(partition, [])

    # -- InternalTopic --
    def exists(self) -> bool:
        return self.created

    def partition_count(self) -> int:
        return self.partitions

    def ensure(self) -> int:
        self.created = True
        return self.partitions

    # -- PartitionWriter --
    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        now_ms: int,
        *,
        producer_id: int = NO_PRODUCER,
        producer_epoch: int = -1,
    ) -> int:
        if self.refuse_appends is not None:
            raise KafkaError(self.refuse_appends, "refused by the test")
        self._maybe_io_error(written=False)
        log = self.log(partition)
        for key, value in records:
            log.append(Entry(len(log), producer_id, key, value))
        self._maybe_io_error(written=True)
        self._appended(partition)
        return len(log) - 1

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        if self.refuse_appends is not None:
            raise KafkaError(self.refuse_appends, "refused by the test")
        self._maybe_io_error(written=False)
        log = self.log(partition)
        log.append(Entry(len(log), producer_id, None, None, committed))
        self._maybe_io_error(written=True)
        self._appended(partition)
        return len(log) - 1

    def wait_durable(self, partition: int, end_offset: int) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        if self.durable.get(partition, 0) >= end_offset:
            future.set_result(None)
        else:
            self._waiters.append((partition, end_offset, future))
        return future

    def _maybe_io_error(self, *, written: bool) -> None:
        if self.io_error is not None and self.io_error_after_write == written:
            error, self.io_error = self.io_error, None
            raise error

    def _appended(self, partition: int) -> None:
        if self.auto_durable:
            self.durable[partition] = len(self.log(partition))

    def make_durable(self, partition: int) -> None:
        """Everything appended to ``partition`` so far is durable: wake its waiters, the
        later offsets first (as a flusher may)."""
        self.durable[partition] = len(self.log(partition))
        waiting = [w for w in self._waiters if w[0] == partition]
        for entry in sorted(waiting, key=lambda w: -w[1]):
            self._waiters.remove(entry)
            if not entry[2].done():
                entry[2].set_result(None)

    def fail_durability(self, partition: int, code: ErrorCode) -> None:
        for entry in [w for w in self._waiters if w[0] == partition]:
            self._waiters.remove(entry)
            entry[2].set_exception(KafkaError(code, "fsync failed in the test"))

    # -- CoordinatorLoader --
    async def load(self, partition: int, shard: CoordinatorShard) -> LoadReport:
        if self.loads_wait_for is not None:
            await self.loads_wait_for.wait()
        for entry in self.log(partition):
            if entry.key is None:
                shard.replay_end_transaction_marker(entry.producer_id, entry.committed)
            else:
                shard.replay(entry.offset, entry.producer_id, entry.key, entry.value)
        return LoadReport(len(self.log(partition)), 0)
