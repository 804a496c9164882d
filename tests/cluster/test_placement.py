"""Replica placement: Kafka's rack-unaware round-robin, and client assignments checked."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.cluster.placement import assign_new_partitions, assign_replicas, check_assignment
from oncelog.protocol.errors import ErrorCode, KafkaError


def test_kafkas_documented_example() -> None:
    # AdminUtils' javadoc table: 5 brokers, 10 partitions, 3 replicas, start 0, shift 0.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert got[0] == (0, 1, 2)
    assert got[4] == (4, 0, 1)
    assert got[5] == (0, 2, 3)  # second round: the followers shift by one more
    assert got[9] == (4, 1, 2)


@given(
    brokers=st.integers(1, 7),
    partitions=st.integers(1, 40),
    data=st.data(),
)
def test_spread(brokers: int, partitions: int, data: st.DataObject) -> None:
    ids = list(range(10, 10 + brokers))
    rf = data.draw(st.integers(1, brokers))
    start = data.draw(st.integers(0, 100))
    shift = data.draw(st.integers(0, 100))
    got = assign_replicas(ids, partitions, rf, start_index=start, replica_shift=shift)
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= set(ids)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in ids) <= 1


def test_too_few_brokers() -> None:
    with pytest.raises(KafkaError) as refused:
        assign_replicas([1, 2], 3, 3, start_index=0, replica_shift=0)
    assert refused.value.code == ErrorCode.invalid_replication_factor
    assert "larger than the 2 live broker(s) [1, 2]" in refused.value.message


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({0: [1, 2], 2: [2, 3]}, "numbered 0..1"),
        ({0: [1, 2], 1: [2]}, "same, non-zero number"),
        ({0: [1, 1]}, "lists a broker twice"),
        ({0: [1, 9]}, "broker(s) [9], which are not live"),
    ],
)
def test_bad_assignments(assignment: dict[int, list[int]], message: str) -> None:
    with pytest.raises(KafkaError) as refused:
        check_assignment(assignment, [1, 2, 3])
    assert refused.value.code == ErrorCode.invalid_replica_assignment
    assert message in refused.value.message


def test_good_assignment() -> None:
    assert check_assignment({1: [3, 1], 0: [1, 2]}, [1, 2, 3]) == {0: (1, 2), 1: (3, 1)}


# -- CreatePartitions ------------------------------------------------------------------------


def test_new_partitions_continue_the_round_robin() -> None:
    # Worked by hand from Kafka's createNewPartitionsAssignment: partition 0 led by broker 2
    # -> start index 1 (the first broker id >= 2) and shift 1; partition 3 starts the second
    # round (shift 2).
    existing = {0: (2, 3, 1), 1: (3, 1, 2), 2: (1, 2, 3)}
    assert assign_new_partitions(existing, 6, [3, 1, 2]) == {
        3: (2, 3, 1),
        4: (3, 1, 2),
        5: (1, 2, 3),
    }
    # A broker that left since: the round-robin goes over the live ones.
    # No broker id >= 4: start index 0, shift 0.
    assert assign_new_partitions({0: (4, 1)}, 3, [1, 2, 3]) == {1: (2, 3), 2: (3, 1)}


@pytest.mark.parametrize(
    ("count", "assignments", "code", "message"),
    [
        (3, None, ErrorCode.invalid_partitions, "Topic already has 3 partitions."),
        (2, None, ErrorCode.invalid_partitions, "3 partitions, 2 would not be an increase"),
        (5, [[1, 2]], ErrorCode.invalid_replica_assignment, "by 2 but 1 assignments provided"),
        (4, [[1, 1]], ErrorCode.invalid_replica_assignment, "Duplicate brokers"),
        (4, [[1, 9]], ErrorCode.broker_not_available, "available brokers: 1, 2, 3."),
        (4, [[1]], ErrorCode.invalid_replica_assignment, "partition 0 has 2 while"),
        (4, [[]], ErrorCode.invalid_replica_assignment, "replication factor of 0"),
    ],
)
def test_new_partitions_refused_as_kafka_does(
    count: int, assignments: list[list[int]] | None, code: ErrorCode, message: str
) -> None:
    existing = {0: (1, 2), 1: (2, 3), 2: (3, 1)}
    with pytest.raises(KafkaError) as refused:
        assign_new_partitions(existing, count, [1, 2, 3], assignments)
    assert refused.value.code == code
    assert message in refused.value.message


def test_new_partitions_as_assigned() -> None:
    got = assign_new_partitions({0: (1, 2)}, 3, [1, 2, 3], [[3, 1], [2, 3]])
    assert got == {1: (3, 1), 2: (2, 3)}
