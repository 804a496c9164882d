"""The order-enrichment job's customer table: broadcast to every micro-batch's join, so the
driver holds it (a local relation): made from Python rows, it is a Python RDD, and each
micro-batch's broadcast runs Python workers to turn its pickled rows into Spark's."""

from __future__ import annotations

from typing import Any

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
