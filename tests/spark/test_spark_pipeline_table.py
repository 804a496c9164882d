"""The order-enrichment job's customer table: one constant map that each micro-batch's
optimizer folds (`job.customer_lookup`), not a table joined to every micro-batch, which
made every micro-batch collect, hash and broadcast it again; above
`job.LOOKUP_MAX_CUSTOMERS` customers, the broadcast join again, with the same rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from oncelog.pipeline import job
from oncelog.pipeline.orders import CUSTOMERS_COUNT, customers, expected_enrichment, generate
from oncelog.pipeline.verify import matches

from .spark_helpers import run_available_now


def _lookup(
    spark: Any, ids: list[int | None], table: Sequence[Mapping[str, Any]]
) -> dict[int | None, tuple[Any, ...] | None]:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(i,) for i in ids], "customer_id int")
    rows = frame.select("customer_id", F.expr(job.customer_lookup(table)).alias("c")).collect()
    return {row.customer_id: None if row.c is None else tuple(row.c) for row in rows}


def _orders(spark: Any, orders: list[dict[str, Any]]) -> Any:
    """Orders as the Kafka source gives them: JSON in a binary `value`."""
    return spark.createDataFrame(
        [(json.dumps(order).encode(),) for order in orders], "value binary"
    )


def test_the_lookup_gives_every_customer_and_null_for_an_unknown_or_null_id(spark: Any) -> None:
    table = job.customer_rows()
    expected = {r["customer_id"]: tuple(r[f] for f in job.CUSTOMER_FIELDS) for r in table}
    found = _lookup(spark, [None, -1, *expected, CUSTOMERS_COUNT], table)
    assert found == {None: None, -1: None, **expected, CUSTOMERS_COUNT: None}


def test_the_lookup_keeps_values_spark_sql_would_rewrite_in_its_text(spark: Any) -> None:
    """Spark substitutes ${...} inside string literals of an expression's text and reads a
    literal's backslashes by a setting. Written into the text as string literals (the
    code before 1ff7be0), this name came back as O'Brien \\ oncelog-tests <home>."""
    name = 'O\'Brien \\ ${spark.app.name} ${env:HOME} "quoted" ü'
    row = {"customer_id": 7, "name": name, "tier": "gold", "country": "DE", "tax_rate": 0.19}
    assert _lookup(spark, [7], [row]) == {7: (name, "gold", "DE", 0.19)}


def test_a_malformed_table_fails_the_planning_not_the_rows(spark: Any) -> None:
    """Parsed PERMISSIVE (from_json's default), a rate that is no number became NULL and
    every order of that customer was written without its tax."""
    row = {"customer_id": 7, "name": "Ada", "tier": "gold", "country": "DE", "tax_rate": "0.19x"}
    with pytest.raises(Exception, match="MALFORMED_RECORD"):
        _lookup(spark, [7], [row])
    with pytest.raises(ValueError, match="Out of range float"):
        job.customer_lookup([{**row, "tax_rate": float("nan")}])


def test_the_lookup_refuses_repeated_or_null_ids_and_too_large_tables_before_any_sql() -> None:
    row = {"customer_id": 7, "name": "Ada", "tier": "gold", "country": "DE", "tax_rate": 0.19}
    with pytest.raises(ValueError, match=r"more than once in the table: \[7\]"):
        job.customer_lookup([row, {**row, "name": "Grace"}])
    with pytest.raises(ValueError, match="NULL"):
        job.customer_lookup([row, {**row, "customer_id": None}])
    too_many = [{**row, "customer_id": i} for i in range(job.LOOKUP_MAX_CUSTOMERS + 1)]
    with pytest.raises(ValueError, match="at most 1000"):
        job.customer_lookup(too_many)
    assert job.customer_lookup(too_many[:-1])  # the bound itself is taken


def test_enrich_folds_the_table_into_a_constant_and_joins_nothing(spark: Any) -> None:
    enriched = job.enrich(_orders(spark, generate(3)), job.customer_rows())
    plan = str(enriched._jdf.queryExecution().optimizedPlan())
    assert "Join" not in plan
    assert "map_from_entries" not in plan  # folded: parsed once by the optimizer


def test_enrich_writes_what_the_verifier_expects(spark: Any) -> None:
    """Every order enriched as `orders.expected_enrichment` says (the verifier's rule);
    an order of an unknown or missing customer keeps its own fields only, as the left
    join did."""
    orders = generate(300)
    unknown = {"order_id": 300, "customer_id": CUSTOMERS_COUNT + 5, "amount": 600.0, "ts": 1}
    no_id = {"order_id": 301, "customer_id": None, "amount": 6.0, "ts": 2}
    rows = job.enrich(_orders(spark, [*orders, unknown, no_id]), job.customer_rows()).collect()
    table = {c["customer_id"]: c for c in customers()}
    written = {int(row.key): json.loads(row.value) for row in rows}
    assert len(rows) == len(orders) + 2
    assert all(matches(written[o["order_id"]], expected_enrichment(o, table)) for o in orders)
    assert written[300] == {**unknown, "priority": "high"}
    assert written[301] == {"order_id": 301, "amount": 6.0, "ts": 2, "priority": "normal"}
    # the control: the rule tells another customer's enrichment of the same order
    first = orders[0]
    other = next(c for c in customers() if c["name"] != table[first["customer_id"]]["name"])
    wrong = {**expected_enrichment({**first, "customer_id": other["customer_id"]}, table)}
    wrong["customer_id"] = first["customer_id"]
    assert not matches(written[0], wrong)


def _above_the_bound() -> list[dict[str, Any]]:
    """The job's customers and more, up to one row above `LOOKUP_MAX_CUSTOMERS`."""
    extra = [
        {"customer_id": i, "name": f"extra {i}", "tier": "gold", "country": "NL", "tax_rate": 0.21}
        for i in range(CUSTOMERS_COUNT, job.LOOKUP_MAX_CUSTOMERS + 1)
    ]
    return [*job.customer_rows(), *extra]


def test_a_table_above_the_lookups_bound_is_joined_with_the_same_rows(spark: Any) -> None:
    """Above `LOOKUP_MAX_CUSTOMERS` the job joins the table (broadcast), as it did before
    the lookup; the lookup's code (425cf3e) refused the table with a ValueError (shown on
    1cf6ed9's job.py with `enrich` given the table instead of `customer_rows()`). The
    rows are the lookup's, for known, unknown and NULL ids; an order of a customer past
    the first `LOOKUP_MAX_CUSTOMERS` rows gets that customer's fields."""
    small, large = job.customer_rows(), _above_the_bound()
    assert len(large) == job.LOOKUP_MAX_CUSTOMERS + 1
    unknown = {"order_id": 300, "customer_id": -5, "amount": 600.0, "ts": 1}
    no_id = {"order_id": 301, "customer_id": None, "amount": 6.0, "ts": 2}
    orders = _orders(spark, [*generate(300), unknown, no_id])
    joined = job.enrich(orders, large)
    assert "Join" in str(joined._jdf.queryExecution().optimizedPlan())
    assert sorted(joined.collect()) == sorted(job.enrich(orders, small).collect())
    last = large[-1]
    order = {"order_id": 302, "customer_id": last["customer_id"], "amount": 10.0, "ts": 3}
    [row] = job.enrich(_orders(spark, [order]), large).collect()
    table = {c["customer_id"]: c for c in large}
    assert matches(json.loads(row.value), expected_enrichment(order, table))


def test_the_join_refuses_what_the_lookup_refuses(spark: Any) -> None:
    """Above the bound too, a repeated or NULL id and a value JSON cannot hold are refused
    before any SQL, and a value the schema cannot hold fails when the query is made, before
    any row (the lookup's fails at its planning)."""
    large = _above_the_bound()
    orders = _orders(spark, generate(3))
    with pytest.raises(ValueError, match=r"more than once in the table: \[7\]"):
        job.enrich(orders, [*large, {**large[7], "name": "Grace"}])
    with pytest.raises(ValueError, match="NULL"):
        job.enrich(orders, [*large, {**large[7], "customer_id": None}])
    with pytest.raises(ValueError, match="Out of range float"):
        job.enrich(orders, [*large[:-1], {**large[-1], "tax_rate": float("nan")}])
    # the relation is analysed when `enrich` makes it, and its inline table parsed then
    with pytest.raises(Exception, match=r"INVALID_INLINE_TABLE\.FAILED_SQL_EXPRESSION_EVALUATION"):
        job.enrich(orders, [*large[:-1], {**large[-1], "tax_rate": "0.21x"}])


def test_a_streaming_query_joins_a_table_above_the_bound(spark: Any, tmp_path: Path) -> None:
    """The job's query is a stream-static join above the bound: Spark takes it (a left
    outer join with the stream on the left) and writes every order enriched."""
    orders = generate(50)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "orders.json").write_text("\n".join(json.dumps(o) for o in orders))
    stream = spark.readStream.format("text").load(str(tmp_path / "in"))
    enriched = job.enrich(stream, _above_the_bound())
    assert "Join" in str(enriched._jdf.queryExecution().analyzed())
    query = run_available_now(
        enriched.writeStream.format("memory")
        .queryName("enriched_above_the_bound")
        .option("checkpointLocation", str(tmp_path / "ck"))
    )
    assert query.exception() is None
    rows = spark.sql("SELECT key, value FROM enriched_above_the_bound").collect()
    table = {c["customer_id"]: c for c in customers()}
    written = {int(row.key): json.loads(row.value) for row in rows}
    assert len(rows) == len(orders)
    assert all(matches(written[o["order_id"]], expected_enrichment(o, table)) for o in orders)
