"""Replica placement for new topics: Kafka's rack-unaware round-robin
(``AdminUtils.assignReplicasToBrokers``).

The first replica of each partition goes round-robin over the brokers from a starting
index; the others follow it with a shift that grows by one every time the partitions have
gone once around the brokers, so the followers of one broker's partitions spread over the
other brokers instead of always being the same ones. Pure: the caller draws the random
start and shift (Kafka draws both at random), so a test can fix them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oncelog.protocol.errors import ErrorCode, KafkaError

__all__ = ["assign_new_partitions", "assign_replicas", "check_assignment"]


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Replicas of partitions ``first_partition ..`` (``partitions`` of them), leader first.

    KafkaError INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR as CreateTopics answers them.
    """
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.invalid_replication_factor, "replication factor must be at least 1"
        )
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} is larger than the {len(brokers)} "
            f"live broker(s) {sorted(brokers)}",
        )
    ordered = list(brokers)
    count = len(ordered)
    start = start_index % count
    shift = replica_shift % count
    assignment: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % (count - 1)) % count])
        assignment[partition] = tuple(replicas)
    return assignment


def check_assignment(
    assignment: dict[int, Sequence[int]], live_brokers: Sequence[int]
) -> dict[int, tuple[int, ...]]:
    """Validate replica assignments given by a client (CreateTopics ``assignments``), as
    Kafka's ZooKeeper-mode AdminZkClient does: partitions 0..n-1, one replication factor,
    no broker twice in a partition, every broker live."""
    if not assignment:
        raise KafkaError(ErrorCode.invalid_replica_assignment, "the assignment is empty")
    if sorted(assignment) != list(range(len(assignment))):
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            f"partitions must be numbered 0..{len(assignment) - 1}, got {sorted(assignment)}",
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            "every partition needs the same, non-zero number of replicas",
        )
    live = set(live_brokers)
    checked = {}
    for partition, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"partition {partition} lists a broker twice: {list(replicas)}",
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"partition {partition} is assigned to broker(s) {unknown}, which are not "
                f"live (live: {sorted(live)})",
            )
        checked[partition] = tuple(replicas)
    return checked


def assign_new_partitions(
    existing: Mapping[int, Sequence[int]],
    count: int,
    live_brokers: Sequence[int],
    assignments: Sequence[Sequence[int]] | None = None,
) -> dict[int, tuple[int, ...]]:
    """The replicas of the partitions CreatePartitions adds to a topic with ``existing``
    assignments to reach ``count`` (Kafka's ZooKeeper-mode ``createNewPartitionsAssignment``):
    the client's ``assignments``, checked, or Kafka's round-robin continued from the
    existing partitions, starting at the first broker whose id is at least partition 0's
    first replica, with that index as the replica shift too. The new partitions keep the
    topic's replication factor.

    KafkaError as Kafka answers: INVALID_PARTITIONS (not an increase),
    INVALID_REPLICA_ASSIGNMENT (wrong number of assignments, a broker twice, another
    replication factor), BROKER_NOT_AVAILABLE (a broker not live),
    INVALID_REPLICATION_FACTOR (fewer live brokers than replicas).
    """
    current = len(existing)
    if count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    if count < current:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            "The number of partitions for a topic can only be increased. Topic currently has "
            f"{current} partitions, {count} would not be an increase.",
        )
    added = count - current
    first_replicas = tuple(existing[0])
    factor = len(first_replicas)
    if assignments is None:
        live = sorted(live_brokers)
        start = next((i for i, b in enumerate(live) if b >= first_replicas[0]), 0)
        return assign_replicas(
            live,
            added,
            factor,
            start_index=start,
            replica_shift=start,
            first_partition=current,
        )
    if len(assignments) != added:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            f"Increasing the number of partitions by {added} but {len(assignments)} "
            "assignments provided.",
        )
    live_set = set(live_brokers)
    checked = {}
    for partition, replicas in enumerate(assignments, start=current):
        if not replicas:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Cannot have replication factor of 0 for partition id {partition}.",
            )
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}.",
            )
        if not set(replicas) <= live_set:
            raise KafkaError(
                ErrorCode.broker_not_available,
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {', '.join(map(str, replicas))}, available brokers: "
                f"{', '.join(map(str, sorted(live_set)))}.",
            )
        if len(replicas) != factor:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Inconsistent replication factor between partitions, partition 0 has {factor} "
                f"while partition {partition} has {len(replicas)}.",
            )
        checked[partition] = tuple(replicas)
    return checked
