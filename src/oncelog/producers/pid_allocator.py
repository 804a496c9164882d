"""Producer ids handed out from durable blocks, so no id is ever issued twice.

A block is reserved by persisting the end of the block before its first id is handed
out. After a crash the ids left in the reserved block are skipped: wasting a few ids is
cheap, reissuing one would let two producers share sequence state.
"""

from __future__ import annotations

from pathlib import Path

from oncelog.storage.atomic_file import write_atomically

BLOCK_SIZE = 1000
BLOCK_FILE = "producer-id-block"


class ProducerIdAllocator:
    """Hands out producer ids, reserving them on disk a block at a time so that no id is
    given twice across restarts."""

    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        self._path = data_dir / BLOCK_FILE
        self._block_size = block_size
        self._reserved_until = self._read_reserved()
        self._next = self._reserved_until

    def _read_reserved(self) -> int:
        if not self._path.exists():
            return 0
        text = self._path.read_text().strip()
        try:
            return int(text)
        except ValueError as exc:
            raise RuntimeError(
                f"{self._path} is corrupt ({text!r}): refusing to reuse ids"
            ) from exc

    def allocate(self) -> int:
        if self._next >= self._reserved_until:
            self._reserved_until = self._next + self._block_size
            write_atomically(self._path, f"{self._reserved_until}\n".encode())
        producer_id = self._next
        self._next += 1
        return producer_id
