"""The order-enrichment job's customer table: one constant map that each micro-batch's
optimizer folds (`job.customer_lookup`), not a table joined to every micro-batch, which
made every micro-batch collect, hash and broadcast it again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oncelog.pipeline import job
from oncelog.pipeline.orders import (
    CUSTOMERS_COUNT,
    TAX_RATES,
    customers,
    expected_enrichment,
    generate,
)
from oncelog.pipeline.verify import matches


def _lookup(spark: Any, ids: list[int]) -> dict[int, tuple[Any, ...] | None]:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(i,) for i in ids], "customer_id int")
    rows = frame.select("customer_id", F.expr(job.customer_lookup()).alias("c")).collect()
    return {row.customer_id: None if row.c is None else tuple(row.c) for row in rows}


def _orders(spark: Any, orders: list[dict[str, Any]]) -> Any:
    """Orders as the Kafka source gives them: JSON in a binary `value`."""
    return spark.createDataFrame(
        [(json.dumps(order).encode(),) for order in orders], "value binary"
    )


def test_the_lookup_gives_every_customer_and_null_for_an_unknown_id(spark: Any) -> None:
    expected = {
        c["customer_id"]: (c["name"], c["tier"], c["country"], TAX_RATES[c["country"]])
        for c in customers()
    }
    found = _lookup(spark, [-1, *expected, CUSTOMERS_COUNT])
    assert found == {-1: None, **expected, CUSTOMERS_COUNT: None}


def test_the_lookup_keeps_values_spark_sql_would_rewrite_in_its_text(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark substitutes ${...} inside string literals of an expression's text and reads a
    literal's backslashes by a setting. Written into the text as string literals (the
    code before 1ff7be0), this name came back as O'Brien \\ oncelog-tests <home>."""
    name = 'O\'Brien \\ ${spark.app.name} ${env:HOME} "quoted" ü'
    country = next(iter(TAX_RATES))
    monkeypatch.setattr(
        job,
        "customers",
        lambda: [{"customer_id": 7, "name": name, "tier": "gold", "country": country}],
    )
    assert _lookup(spark, [7]) == {7: (name, "gold", country, TAX_RATES[country])}


def test_enrich_folds_the_table_into_a_constant_and_joins_nothing(spark: Any) -> None:
    plan = str(job.enrich(_orders(spark, generate(3)))._jdf.queryExecution().optimizedPlan())
    assert "Join" not in plan
    # folded: a map literal, the table's JSON parsed once by the optimizer, not per row
    assert "element_at(map(keys: [0,1,2," in plan
    assert "map_from_entries" not in plan


def test_enrich_writes_what_the_verifier_expects(spark: Any) -> None:
    """Every order enriched as `orders.expected_enrichment` says (the verifier's rule);
    an order of an unknown customer keeps its own fields only, as the left join did."""
    orders = generate(300)
    unknown = {"order_id": 300, "customer_id": CUSTOMERS_COUNT + 5, "amount": 600.0, "ts": 1}
    rows = job.enrich(_orders(spark, [*orders, unknown])).collect()
    table = {c["customer_id"]: c for c in customers()}
    written = {int(row.key): json.loads(row.value) for row in rows}
    assert len(rows) == len(orders) + 1
    assert all(matches(written[o["order_id"]], expected_enrichment(o, table)) for o in orders)
    assert written[300] == {**unknown, "priority": "high"}
    # the control: the rule tells a wrong enrichment
    other = {**orders[0], "customer_id": (orders[0]["customer_id"] + 1) % CUSTOMERS_COUNT}
    assert not matches(written[0], expected_enrichment(other, table))
