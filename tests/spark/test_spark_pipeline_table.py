"""The order-enrichment job's customer table: broadcast to every micro-batch's join, so the
driver holds it (a local relation): made from Python rows, it is a Python RDD, and each
micro-batch's broadcast runs Python workers to turn its pickled rows into Spark's."""

from __future__ import annotations

from typing import Any

import pytest

from oncelog.pipeline import job
from oncelog.pipeline.job import customer_table
from oncelog.pipeline.orders import TAX_RATES, customers

SCHEMA = "struct<customer_id:int,name:string,tier:string,country:string,tax_rate:double>"


def _optimized_plan(frame: Any) -> str:
    return str(frame._jdf.queryExecution().optimizedPlan().toString())


def test_the_customer_table_is_a_local_relation_of_every_customer(spark: Any) -> None:
    expected = [
        (c["customer_id"], c["name"], c["tier"], c["country"], TAX_RATES[c["country"]])
        for c in customers()
    ]
    table = customer_table(spark)
    assert table.schema.simpleString() == SCHEMA
    assert [tuple(row) for row in table.collect()] == expected
    assert _optimized_plan(table).startswith("LocalRelation")
    # the control: the same rows made from Python rows are a Python RDD
    from_python = spark.createDataFrame(expected, table.schema)
    assert not _optimized_plan(from_python).startswith("LocalRelation")


def test_the_customer_table_keeps_values_spark_sql_would_rewrite_in_its_text(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark.sql substitutes ${...} inside string literals and reads a literal's backslashes
    by a setting: the values are parameters, never text. Written into the query's text
    (the code before), this name came back as O'Brien \\ oncelog-tests <the home directory>."""
    name = "O'Brien \\ ${spark.app.name} ${env:HOME}"
    country = next(iter(TAX_RATES))
    monkeypatch.setattr(
        job,
        "customers",
        lambda: [{"customer_id": 7, "name": name, "tier": "gold", "country": country}],
    )
    table = customer_table(spark)
    assert [tuple(row) for row in table.collect()] == [
        (7, name, "gold", country, TAX_RATES[country])
    ]
    assert _optimized_plan(table).startswith("LocalRelation")


def test_an_inline_table_without_rows_is_refused_before_any_sql() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        job.local_table(None, ("customer_id", "name"), [])


@pytest.mark.parametrize(
    ("value", "error"),
    [(float("nan"), ValueError), (float("inf"), ValueError), (True, TypeError), (b"x", TypeError)],
)
def test_an_inline_table_refuses_values_it_has_no_literal_for(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="no SQL literal"):
        job.local_table(None, ("v",), [(value,)])
