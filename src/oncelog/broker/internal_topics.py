"""The internal topics the coordinators keep their state in.

Both are compacted and created on first need, when a client first looks for a coordinator,
with their own partition counts from the broker configuration
(`offsets.topic.num.partitions`, `transaction.state.log.num.partitions`). Nothing else
creates them: Metadata does not auto-create them, CreateTopics refuses them, and clients
cannot produce to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.broker.topics import Topic

if TYPE_CHECKING:
    from oncelog.broker.topics import TopicRegistry

TRANSACTION_STATE = "__transaction_state"
CONSUMER_OFFSETS = "__consumer_offsets"
# Kafka's transaction.state.log.segment.bytes and offsets.topic.segment.bytes default.
INTERNAL_SEGMENT_BYTES = 100 * 1024 * 1024
_INTERNAL_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(INTERNAL_SEGMENT_BYTES)}


def ensure_internal_topic(topics: TopicRegistry, name: str, partitions: int, now_ms: int) -> Topic:
    """The internal topic `name`, created with `partitions` partitions if missing."""
    topic = topics.get(name)
    if topic is None:
        topic = topics.create(name, partitions, dict(_INTERNAL_CONFIGS), now_ms, internal=True)
    return topic
