"""The order-enrichment Structured Streaming job.

    python -m oncelog.pipeline.job --bootstrap-servers HOST:PORT --checkpoint DIR

reads `orders` with `format("oncelog")` under read_committed, looks up each order's
customer (name, tier, country), derives `amount_with_tax` and `priority`, and writes
`enriched-orders` with `format("oncelog")`, exactly once by default (stable `sink.id`,
checkpoint in DIR). The trigger is availableNow: the query processes every order committed
when it starts, in micro-batches of `--max-offsets-per-trigger`, then stops. Started again
on the same checkpoint (after a crash, say) it goes on from the last committed batch and
replays a batch that was planned but not committed.

One JSON line per finished micro-batch goes to stdout (batch id, rows, end offsets), so a
supervisor can follow the job; the exit code is 0 when the query ended without an error.
Nothing here depends on oncelog being the cluster: any Kafka-protocol cluster works.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.pipeline import ENRICHED_TOPIC, ORDERS_TOPIC, PARTITIONS
from oncelog.pipeline.orders import GOLD_OR_LARGE, TAX_RATES, customers

ORDER_SCHEMA = "order_id long, customer_id int, amount double, ts long"
ORDER_COLUMNS = ("order_id", "customer_id", "amount", "ts")
CUSTOMER_COLUMNS = (
    ("name", "string"),
    ("tier", "string"),
    ("country", "string"),
    ("tax_rate", "double"),
)
CUSTOMER_FIELDS = tuple(name for name, _ in CUSTOMER_COLUMNS)
CUSTOMER_TYPE = "struct<" + ", ".join(f"{name}: {kind}" for name, kind in CUSTOMER_COLUMNS) + ">"
# Above this many customers the job joins the table instead of looking each order's customer
# up in a constant, which the optimizer folds again in every micro-batch (O(table) each
# time). rate -> the job's shape -> noop, ms a micro-batch in the first 10 micro-batches
# of a fresh session: 163 looked up at 1,000 (the join not measured there); 275 looked up
# against 272 joined at 5,000; 885 against 307 at 50,000. The join's cost over a long
# query is not measured (docs/spark.md, the lookup's bound), hence 1,000 and not 5,000.
LOOKUP_MAX_CUSTOMERS = 1000
DEFAULT_SINK_ID = "order-enrichment"


@dataclass
class JobConfig:
    """The streaming job's settings, passed from the demo to the driver process."""

    bootstrap_servers: str
    checkpoint: str
    sink_id: str = DEFAULT_SINK_ID
    source_topic: str = ORDERS_TOPIC
    target_topic: str = ENRICHED_TOPIC
    guarantee: str = "exactly_once"
    max_offsets_per_trigger: int = 2000
    fail_after: int | None = None  # the writer's fault injection: every task's first attempt dies
    trigger: str = "availableNow"  # or a processingTime interval such as "1 second"
    client: dict[str, str] = field(default_factory=dict)  # extra kafka.* settings
    hold_commits_while: str | None = None  # with fail_after: a batch's commit waits while it exists


def new_session(
    app_name: str = "oncelog-order-enrichment",
    master: str = "local[2,3]",
    daemon_module: str | None = None,
    scratch_dir: Path | None = None,
) -> Any:
    """A SparkSession for the job: two cores, failed tasks retried (3 attempts), Python
    workers forked by `daemon_module`: `oncelog.spark.daemon` (the connector imported
    before the fork) unless another is named; "pyspark.daemon" is PySpark's own, as a
    session that does not set the option gets (for an A/B of the two in one tree).

    `scratch_dir`, when given, holds what Spark writes outside the checkpoint (its block
    manager's and the driver's temporary directories, `spark.local.dir` and the JVM's
    `java.io.tmpdir`). Spark removes them in a shutdown hook, which a SIGKILLed driver
    never runs: a supervisor that kills drivers (the demo) names a directory it removes
    itself, or each killed run leaves them in /tmp."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from oncelog.spark import register
    from oncelog.spark.daemon import DAEMON_MODULE

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
        .config("spark.python.daemon.module", daemon_module or DAEMON_MODULE)
    )
    if scratch_dir is not None:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.local.dir", str(scratch_dir)).config(
            "spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={scratch_dir}"
        )
    session = builder.getOrCreate()
    register(session)
    return session


def customer_rows() -> list[dict[str, Any]]:
    """The customer table, each row with its country's tax rate: what `customer_lookup`
    takes."""
    return [{**c, "tax_rate": TAX_RATES[c["country"]]} for c in customers()]


def customer_lookup(table: Sequence[Mapping[str, Any]]) -> str:
    """A SQL expression for the row of `table` (customer_id and `CUSTOMER_FIELDS`) whose
    customer_id is the column `customer_id`'s: a struct of `CUSTOMER_FIELDS`, NULL for an
    id the table lacks or a NULL id, as the left join it replaces gave (an empty table
    gives NULL for every id).

    Why a constant and not a join: the table is one map, which each micro-batch's
    optimizer folds into a literal, where a broadcast table made every micro-batch collect
    the table, build and broadcast its hash relation and join (docs/spark.md, issue 15's
    eighth session). Folding costs O(table) a micro-batch, hence `LOOKUP_MAX_CUSTOMERS`
    (`enrich` joins a larger table); the lookup itself is a hash probe on Spark 4.3 for
    maps above `spark.sql.optimizer.mapLookupHashThreshold` (1,000), a scan of the keys
    below it. The table is read when `enrich` is called, once per query start: a changed
    table is seen after a restart, and a batch replayed after a restart uses the table of
    then."""
    if len(table) > LOOKUP_MAX_CUSTOMERS:
        raise ValueError(
            f"{len(table)} customers: a constant lookup takes at most {LOOKUP_MAX_CUSTOMERS} "
            "(every micro-batch folds it again); `enrich` joins a table of that size "
            "(customer_relation)"
        )
    return f"try_element_at(map_from_entries({_customer_entries(table)}), customer_id)"


def customer_relation(spark: Any, table: Sequence[Mapping[str, Any]]) -> Any:
    """`table` as a relation (customer_id, customer: a struct of `CUSTOMER_FIELDS`) from the
    same literal as `customer_lookup`'s, so that a join with it gives what the lookup
    gives: for a table above `LOOKUP_MAX_CUSTOMERS`, which the job broadcasts and joins in
    every micro-batch. The literal is parsed once, when the query is planned: an inline
    table (VALUES) of one row is evaluated by Spark's analyzer into a local relation, which
    later micro-batches only explode (`inline`). Parsed in the relation's own expression
    instead, the optimizer folded it again in every micro-batch: 1,103 ms a micro-batch at
    50,000 customers, against the lookup's 758 in the same run; this way 307, against the
    lookup's 885 in its run (docs/spark.md, the lookup's bound). No Python worker takes
    part."""
    return spark.sql(
        f"SELECT inline(entries) FROM VALUES ({_customer_entries(table)}) AS t(entries)"
    )


def _customer_entries(table: Sequence[Mapping[str, Any]]) -> str:
    """A SQL expression for `table` as an array of (customer_id, customer) structs.

    The rows travel as JSON in one UTF-8 binary literal (X'..', cast to string), parsed
    FAILFAST, never in string literals: Spark substitutes `${...}` anywhere in an
    expression's text, string literals included (`spark.sql.variable.substitute`, on by
    default), and how a string literal's backslashes read depends on
    `spark.sql.parser.escapedStringLiterals`; hex digits mean the same under any setting.
    A value JSON or the schema cannot hold (NaN, a rate that is no number) fails the
    query's planning, before any row is written. A repeated or NULL customer_id is refused
    here, before any SQL: a lookup would keep one of a repeated id's rows and a join all of
    them; `map_from_entries` fails on a NULL key where a join never matches it."""
    if any(row["customer_id"] is None for row in table):
        raise ValueError("a customer id in the table is NULL")
    counts = Counter(row["customer_id"] for row in table)
    repeated = sorted(i for i, n in counts.items() if n > 1)
    if repeated:
        raise ValueError(f"customer ids appear more than once in the table: {repeated[:10]}")
    rows = [
        {"customer_id": row["customer_id"], "customer": {f: row[f] for f in CUSTOMER_FIELDS}}
        for row in table
    ]
    text = json.dumps(rows, separators=(",", ":"), allow_nan=False)
    entries = f"array<struct<customer_id: int, customer: {CUSTOMER_TYPE}>>"
    return (
        f"from_json(CAST(X'{text.encode().hex()}' AS STRING), '{entries}', map('mode', 'FAILFAST'))"
    )


def enrich(orders: Any, table: Sequence[Mapping[str, Any]]) -> Any:
    """orders (the Kafka source's rows) and the customer table (`customer_rows`) -> rows
    for the Kafka sink (key, value). Each order's customer comes from a constant lookup
    (`customer_lookup`) or, for a table above `LOOKUP_MAX_CUSTOMERS`, a broadcast left
    join (`customer_relation`): the same rows either way."""
    from pyspark.sql import functions as F

    parsed = parse_orders(orders)
    if len(table) <= LOOKUP_MAX_CUSTOMERS:
        customer = F.expr(customer_lookup(table)).alias("customer")
        with_customer = parsed.select(*ORDER_COLUMNS, customer)
    else:
        relation = F.broadcast(customer_relation(orders.sparkSession, table))
        with_customer = parsed.join(relation, "customer_id", "left").select(
            *ORDER_COLUMNS, "customer"
        )
    return enriched_records(with_customer.select(*ORDER_COLUMNS, "customer.*"))


def parse_orders(orders: Any) -> Any:
    """The Kafka source's rows -> the orders' columns (`ORDER_SCHEMA`)."""
    from pyspark.sql import functions as F

    return orders.select(
        F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")
    ).select("o.*")


def enriched_records(with_customer: Any) -> Any:
    """Orders with their customer's `CUSTOMER_FIELDS` -> the sink's rows: the order id as
    key, the enriched order (`amount_with_tax`, `priority`) as JSON value."""
    from pyspark.sql import functions as F

    enriched = with_customer.withColumn(
        "amount_with_tax", F.round(F.col("amount") * (1 + F.col("tax_rate")), 2)
    ).withColumn(
        "priority",
        F.when(
            (F.col("tier") == "gold") | (F.col("amount") >= GOLD_OR_LARGE), F.lit("high")
        ).otherwise(F.lit("normal")),
    )
    columns = [*ORDER_COLUMNS, "name", "tier", "country", "amount_with_tax", "priority"]
    return enriched.select(
        F.col("order_id").cast("string").alias("key"), F.to_json(F.struct(*columns)).alias("value")
    )


def start_query(spark: Any, config: JobConfig) -> Any:
    reader = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("subscribe", config.source_topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        # one task per partition (Spark's plan), also for small batches that would share
        # one: the demonstration's driver kill waits for each of a batch's PARTITIONS tasks.
        # In every run, with faults or not: a replayed batch must be planned as it was.
        .option("combineRangesUpTo", "0")
    )
    for key, value in config.client.items():
        reader = reader.option(f"kafka.{key}", value)
    sink_format = "oncelog"
    if config.fail_after is not None:  # the demonstration's fault: the testing data source
        from oncelog.testing.spark import FAIL_AFTER, HOLD_COMMITS_WHILE, register_faults

        register_faults(spark)
        sink_format = "oncelog_faults"
    writer = (
        enrich(reader.load(), customer_rows())
        .writeStream.format(sink_format)
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("topic", config.target_topic)
        .option("delivery.guarantee", config.guarantee)
        .option("sink.id", config.sink_id)
        .option("checkpointLocation", config.checkpoint)
        .queryName(f"order-enrichment-{config.sink_id}")
    )
    for key, value in config.client.items():
        writer = writer.option(f"kafka.{key}", value)
    if config.fail_after is not None:
        writer = writer.option(FAIL_AFTER, str(config.fail_after))
        if config.hold_commits_while is not None:
            writer = writer.option(HOLD_COMMITS_WHILE, config.hold_commits_while)
    if config.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger)
    return writer.start()


def _progress_line(progress: Any) -> dict[str, Any]:
    sources = progress.sources
    end = sources[0].endOffset if sources else None
    if isinstance(end, str):
        try:
            end = json.loads(end)
        except json.JSONDecodeError:
            pass
    return {"event": "batch", "batch": progress.batchId, "rows": progress.numInputRows, "end": end}


def run(spark: Any, config: JobConfig, *, timeout_s: float = 900.0, emit: Any = None) -> int:
    """Run the query to its end (availableNow) and return the rows it processed. `emit`
    receives one dict per finished micro-batch."""
    query = start_query(spark, config)
    seen: set[int] = set()
    rows = 0
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            finished = query.awaitTermination(0.25)
            for progress in query.recentProgress:
                if progress.batchId in seen or progress.numInputRows is None:
                    continue
                seen.add(progress.batchId)
                rows += progress.numInputRows
                if emit is not None:
                    emit(_progress_line(progress))
            if finished:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the query did not finish within {timeout_s} s")
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return rows


def _client_properties(path: Path | None) -> dict[str, str]:
    from oncelog.broker.config import parse_properties

    return {} if path is None else parse_properties(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m oncelog.pipeline.job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-id", default=DEFAULT_SINK_ID)
    parser.add_argument("--source-topic", default=ORDERS_TOPIC)
    parser.add_argument("--target-topic", default=ENRICHED_TOPIC)
    parser.add_argument(
        "--guarantee", default="exactly_once", choices=("exactly_once", "at_least_once")
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument(
        "--fail-after",
        type=int,
        default=None,
        help="fault injection: every task's first attempt fails after N records",
    )
    parser.add_argument(
        "--hold-commits-while",
        default=None,
        metavar="PATH",
        help="fault injection, with --fail-after: a batch's driver-side commit waits while "
        "PATH exists (the demo aims its driver kill at that moment)",
    )
    parser.add_argument("--trigger", default="availableNow")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--log-level", default="WARN")
    parser.add_argument(
        "--scratch-dir",
        type=Path,
        default=None,
        help="where Spark's temporary directories go (default: its own, under /tmp); "
        "a supervisor that SIGKILLs drivers names one it removes",
    )
    parser.add_argument(
        "--client-config",
        type=Path,
        default=None,
        help="Kafka client properties (security.protocol, sasl.*, ssl.*), each passed to the "
        "source and sink as a kafka.* option",
    )
    args = parser.parse_args(argv)
    config = JobConfig(
        args.bootstrap_servers,
        args.checkpoint,
        args.sink_id,
        args.source_topic,
        args.target_topic,
        args.guarantee,
        args.max_offsets_per_trigger,
        args.fail_after,
        args.trigger,
        _client_properties(args.client_config),
        args.hold_commits_while,
    )

    def emit(line: dict[str, Any]) -> None:
        print(json.dumps(line), flush=True)

    started = time.monotonic()
    spark = new_session(scratch_dir=args.scratch_dir)
    spark.sparkContext.setLogLevel(args.log_level)
    emit(
        {"event": "started", "pid": os.getpid(), "session_s": round(time.monotonic() - started, 1)}
    )
    try:
        rows = run(spark, config, timeout_s=args.timeout, emit=emit)
    except Exception as exc:  # reported to the supervisor, which may restart us
        emit({"event": "failed", "error": str(exc)[:2000]})
        return 1
    finally:
        spark.stop()
    emit({"event": "finished", "rows": rows, "seconds": round(time.monotonic() - started, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
