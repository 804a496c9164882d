"""ListTransactions names the state filters it does not know from the request alone, as
Kafka's TransactionStateManager.listTransactionStates does, on every broker: also on a
broker of a cluster that coordinates no partition of ``__transaction_state`` (it listed
none there, the filters being read per coordinator partition)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker.handlers.txn_admin import handle_list_transactions
from oncelog.broker.internal_topics import TRANSACTION_STATE
from oncelog.protocol.errors import ErrorCode
from oncelog.transactions.coordinator import TransactionCoordinatorShard

REQUEST = SimpleNamespace(
    state_filters=["Ongoing", "Bogus"], producer_id_filters=[], duration_filter=-1
)


def cluster_broker(shards: dict[int, TransactionCoordinatorShard]) -> Any:
    """The parts of a cluster's broker ListTransactions reads: ZooKeeper's topics (the
    coordinator topic exists) and the coordinator partitions this broker leads."""
    return SimpleNamespace(
        cluster=SimpleNamespace(cache=SimpleNamespace(topics={TRANSACTION_STATE: None})),
        transactions=SimpleNamespace(shards=shards),
        now_ms=lambda: 1_000,
    )


def listed(broker: Any) -> dict[str, Any]:
    return asyncio.run(handle_list_transactions(broker, SimpleNamespace(), REQUEST))


@pytest.mark.parametrize("coordinates", [True, False])
def test_unknown_state_filters_do_not_depend_on_the_partitions_led(coordinates: bool) -> None:
    shards = {0: TransactionCoordinatorShard(0, 4)} if coordinates else {}
    answer = listed(cluster_broker(shards))
    assert answer["error_code"] == ErrorCode.none
    assert answer["unknown_state_filters"] == ["Bogus"]
    assert answer["transaction_states"] == []


def test_a_loading_partition_answers_only_its_error() -> None:
    answer = listed(cluster_broker({0: TransactionCoordinatorShard(0, 4, loading=True)}))
    assert (answer["error_code"], answer["unknown_state_filters"]) == (
        ErrorCode.coordinator_load_in_progress,
        [],
    )
