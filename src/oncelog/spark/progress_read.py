"""Reading a sink slot's progress (its group's committed offset and metadata) through the
worker's kept admin client.

A consumer reads only its own group's offsets, so reading them with one costs every new
sink a new consumer: a connection to the bootstrap server, a Metadata request, its group
coordinator lookup and a second connection, before the OffsetFetch. The worker's admin
client is connected already and asks any group's offsets (an OffsetFetch after finding the
group's coordinator), so a new sink's first read is two round trips.

A stable read is KIP-447's `require_stable`, as a read_committed consumer's: the broker
answers UNSTABLE_OFFSET_COMMIT while a transaction holds an offset of the group for the
partition (or its markers are being written). A consumer's `committed()` asks again until
its timeout; the admin client answers the error, so `committed` here asks again itself,
after a pause that doubles from `FIRST_PAUSE_S` to `MAX_PAUSE_S`.
"""

from __future__ import annotations

import time

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

FIRST_PAUSE_S = 0.01
MAX_PAUSE_S = 0.2
# answers that a later try may not give: the offset is held, the coordinator is moving or
# loading, or the cluster did not answer in time; any other error fails at once
RETRIED = frozenset(
    {
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
    }
)


class ProgressNotRead(RuntimeError):
    """The slot's progress could not be read within the time given: a transaction held it,
    or the cluster did not answer (a consumer's `committed()` times out alike)."""


def committed(
    admin: AdminClient, group: str, slot: TopicPartition, stable: bool, timeout_s: float
) -> TopicPartition:
    """`group`'s committed offset of `slot`, with its metadata (offset negative: none). A
    stable read waits for the transactions that hold it, up to `timeout_s`; then, or on an
    error that asking again may clear, `ProgressNotRead`; any other error is raised."""
    deadline = time.monotonic() + timeout_s
    pause = FIRST_PAUSE_S
    while True:
        remaining = deadline - time.monotonic()
        answer = _ask(admin, group, slot, stable, max(remaining, 0.001))
        if isinstance(answer, TopicPartition):
            return answer
        error = answer
        if error.code() not in RETRIED:
            raise KafkaException(error)
        if time.monotonic() + pause >= deadline:
            raise ProgressNotRead(
                f"the committed offset of {slot.topic}-{slot.partition} for group {group} was "
                f"not read within {timeout_s:g} s: {error.str()}"
            )
        time.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE_S)


def _ask(
    admin: AdminClient, group: str, slot: TopicPartition, stable: bool, timeout_s: float
) -> TopicPartition | KafkaError:
    """One OffsetFetch: the partition's answer, or the error it or the request got."""
    wanted = TopicPartition(slot.topic, slot.partition)
    try:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [wanted])],
            require_stable=stable,
            request_timeout=timeout_s,
        )
        (answer,) = futures[group].result().topic_partitions
    except KafkaException as exc:
        return exc.args[0]
    return answer if answer.error is None else answer.error
