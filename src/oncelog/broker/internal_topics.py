"""The internal topics the coordinators keep their state in.

Both are compacted and created on first need, when a client first looks for a coordinator,
with their own partition counts from the broker configuration
(`offsets.topic.num.partitions`, `transaction.state.log.num.partitions`). Nothing else
creates them: Metadata does not auto-create them, CreateTopics refuses them, and clients
cannot produce to them.

They get Kafka's segment sizes from the broker configuration
(``offsets.topic.segment.bytes``, ``transaction.state.log.segment.bytes``) and, from oncelog,
``segment.ms`` of one hour (Kafka leaves them at ``log.roll.hours``, a week): only inactive
segments are compacted, and a coordinator replays its whole partition at start-up, so a
quiet coordinator partition must roll for its history to shrink. Both are ordinary topic
overrides an operator may alter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.broker.topics import Topic

if TYPE_CHECKING:
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.topics import TopicRegistry

TRANSACTION_STATE = "__transaction_state"
CONSUMER_OFFSETS = "__consumer_offsets"
INTERNAL_SEGMENT_MS = 3_600_000
_SEGMENT_BYTES_KEYS = {
    CONSUMER_OFFSETS: "offsets.topic.segment.bytes",
    TRANSACTION_STATE: "transaction.state.log.segment.bytes",
}


def internal_topic_configs(name: str, broker_config: BrokerConfig) -> dict[str, str]:
    """The overrides an internal topic is created with (on one node and in a cluster)."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(broker_config.get(_SEGMENT_BYTES_KEYS[name])),
        "segment.ms": str(INTERNAL_SEGMENT_MS),
    }


async def ensure_internal_topic(
    topics: TopicRegistry, name: str, partitions: int, now_ms: int
) -> Topic:
    """The internal topic `name`, created with `partitions` partitions if missing."""
    topic = topics.get(name)
    if topic is None:
        configs = internal_topic_configs(name, topics.broker_config)
        topic = await topics.create(name, partitions, configs, now_ms, internal=True)
    return topic
