"""Offsets and offset ranges: plain data, no clients, no Spark.

A streaming offset is the JSON object Spark keeps in its checkpoint:
`{"topic": {"0": 42, "1": 7}}`, the next offset to read per partition (exclusive end
of the batch that produced it). Inside Python it is `dict[(topic, partition), offset]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    if not data:
        return {}
    return {(topic, int(p)): int(o) for topic, per in data.items() for p, o in per.items()}


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition: the unit of one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
    new_partition_start: Mapping[TopicPartitionKey, int],
) -> list[OffsetRange]:
    """One range per partition of `end`, in a stable order. A partition missing from `start`
    is new and starts where `new_partition_start` says (its earliest offset)."""
    ranges = []
    for tp in sorted(end):
        first = start.get(tp, new_partition_start.get(tp, 0))
        ranges.append(OffsetRange(tp[0], tp[1], first, max(first, end[tp])))
    return ranges


def rate_limit(
    start: Mapping[TopicPartitionKey, int], available: Mapping[TopicPartitionKey, int], limit: int
) -> Offsets:
    """Cap the total offsets of a trigger at `limit`, shared in proportion to each partition's
    backlog (as Spark's Kafka source does), never moving a partition backwards. Deterministic."""
    lag = {tp: max(0, available[tp] - start.get(tp, available[tp])) for tp in available}
    total = sum(lag.values())
    if total <= limit:
        return dict(available)
    capped: Offsets = {}
    granted = 0
    for tp in sorted(available):
        share = (lag[tp] * limit) // total
        granted += share
        capped[tp] = start.get(tp, available[tp]) + share
    # hand out the rounding remainder one offset at a time, in partition order
    remainder = limit - granted
    for tp in sorted(available):
        if remainder <= 0:
            break
        if capped[tp] < available[tp]:
            capped[tp] += 1
            remainder -= 1
    return capped
