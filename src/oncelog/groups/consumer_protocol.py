"""The topics a classic consumer group's members subscribe to, read from their
ConsumerProtocolSubscription (the JoinGroup metadata of protocol type "consumer").

Kafka's ``ClassicGroup.isSubscribedToTopic`` decides with it whether OffsetDelete may
delete a partition's offset and whether offset expiry may expire it: a member still
consuming the topic would commit it again. Versions 0-3 share the leading fields
(version int16, topics [string], user data bytes); only the topics are read. Metadata that
does not parse subscribes to nothing, as in Kafka.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["CONSUMER_PROTOCOL_TYPE", "subscribed_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadatas: Iterable[bytes]) -> frozenset[str]:
    """Union of the topics named by the members' subscriptions."""
    topics: set[str] = set()
    for metadata in metadatas:
        topics |= _topics(metadata)
    return frozenset(topics)


def _topics(data: bytes) -> set[str]:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            return set()
        (count,) = _I32.unpack_from(data, 2)
        pos = 6
        found = set()
        for _ in range(max(count, 0)):
            (size,) = _I16.unpack_from(data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return set()
            found.add(data[pos : pos + size].decode("utf-8"))
            pos += size
        return found
    except (struct.error, UnicodeDecodeError):
        return set()
