"""The customer table and the order generator: everything derived from a seed."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Any

CUSTOMERS_COUNT = 200
TIERS = ("gold", "silver", "bronze")
# tax rate by country, applied to the order amount
TAX_RATES = {"DE": 0.19, "FR": 0.20, "NL": 0.21, "US": 0.07, "JP": 0.10}
_FIRST = (
    "Ada",
    "Grace",
    "Linus",
    "Barbara",
    "Edsger",
    "Margaret",
    "Dennis",
    "Frances",
    "Ken",
    "Radia",
    "Leslie",
    "Shafi",
    "Tony",
    "Donald",
    "Niklaus",
    "Jean",
)
_LAST = (
    "Lovelace",
    "Hopper",
    "Torvalds",
    "Liskov",
    "Dijkstra",
    "Hamilton",
    "Ritchie",
    "Allen",
    "Thompson",
    "Perlman",
    "Lamport",
    "Goldwasser",
    "Hoare",
    "Knuth",
    "Wirth",
    "Sammet",
)
BASE_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: orders carry deterministic timestamps
GOLD_OR_LARGE = 500.0  # orders at or above this amount are high priority whatever the tier


def customers(seed: int = 1) -> list[dict[str, Any]]:
    """The customer table: `CUSTOMERS_COUNT` rows (customer_id, name, tier, country)."""
    rng = random.Random(f"customers-{seed}")
    countries = sorted(TAX_RATES)
    return [
        {
            "customer_id": i,
            "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
            "tier": TIERS[0] if i % 10 == 0 else TIERS[1] if i % 3 == 0 else TIERS[2],
            "country": rng.choice(countries),
        }
        for i in range(CUSTOMERS_COUNT)
    ]


def make_order(order_id: int, rng: random.Random) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "customer_id": rng.randrange(CUSTOMERS_COUNT),
        "amount": round(rng.uniform(5.0, 1000.0), 2),
        "ts": BASE_TS_MS + order_id * 250,
    }


def generate(count: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [make_order(i, rng) for i in range(count)]


def expected_enrichment(order: dict[str, Any], table: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What the job must write for `order` (the verifier checks every output against it)."""
    customer = table[order["customer_id"]]
    rate = TAX_RATES[customer["country"]]
    high = customer["tier"] == "gold" or order["amount"] >= GOLD_OR_LARGE
    return {
        **order,
        "name": customer["name"],
        "tier": customer["tier"],
        "country": customer["country"],
        "amount_with_tax": round(order["amount"] * (1 + rate), 2),
        "priority": "high" if high else "normal",
    }


def produce_orders(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    seed: int = 1,
    per_transaction: int = 1000,
    transactional_id: str = "oncelog-order-generator",
    client_config: Mapping[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Write `count` orders (keyed by order id) in transactions of `per_transaction`;
    return how many were committed. A transactional producer: a rerun with the same
    transactional.id fences an older generator, and an interrupted transaction is aborted,
    so readers under read_committed never see half a transaction."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **(client_config or {}),
        }
    )
    producer.init_transactions(60)
    committed = 0
    rng = random.Random(seed)
    for start in range(0, count, per_transaction):
        producer.begin_transaction()
        end = min(count, start + per_transaction)
        for order_id in range(start, end):
            order = make_order(order_id, rng)
            value = json.dumps(order, separators=(",", ":")).encode()
            while True:
                try:
                    producer.produce(topic, value, key=str(order_id).encode())
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.commit_transaction(60)
        committed = end
        if on_progress is not None:
            on_progress(committed)
    producer.flush(10)
    return committed
