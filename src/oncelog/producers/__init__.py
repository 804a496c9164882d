"""Producer state per partition (Kafka's ProducerStateManager): each producer id's epoch
and last five batches, validated before an append and committed after it, snapshots, and
the allocation of producer ids. Pure: the partition wires it to its log."""

from oncelog.producers.loader import load_producer_state
from oncelog.producers.pid_allocator import ProducerIdAllocator
from oncelog.producers.snapshot import CorruptSnapshot
from oncelog.producers.state import (
    Append,
    Decision,
    Duplicate,
    ProducerStateEntry,
    ProducerStateManager,
    Refuse,
)

__all__ = [
    "Append",
    "CorruptSnapshot",
    "Decision",
    "Duplicate",
    "ProducerIdAllocator",
    "ProducerStateEntry",
    "ProducerStateManager",
    "Refuse",
    "load_producer_state",
]
