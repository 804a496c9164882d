"""`oncelog demo`: the main job, seed 001's order-enrichment pipeline on Spark with faults."""

from __future__ import annotations

import click


@click.command("demo")
@click.option(
    "--orders",
    default=20000,
    show_default=True,
    type=click.IntRange(min=2),
    help="How many orders to generate, enrich and verify.",
)
@click.option(
    "--faults/--no-faults",
    default=True,
    show_default=True,
    help="Inject the faults: a task failing half-way through its writes, the streaming "
    "driver killed with SIGKILL and restarted, the broker restarted.",
)
@click.option(
    "--bootstrap-servers",
    default=None,
    metavar="HOST:PORT[,...]",
    help="Run against this Kafka-protocol cluster instead of an embedded broker (topics "
    "get a run suffix; the broker restart is skipped).",
)
@click.option(
    "--brokers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=9),
    help="1: one broker subprocess, restarted mid-run. 3 or more: a local cluster on "
    "ZooKeeper (replication factor 3, min.insync.replicas 2) whose leader of "
    "enriched-orders-0 and a sink writer's transaction coordinator are SIGKILLed and "
    "restarted mid-run.",
)
@click.option(
    "--guarantee",
    default="exactly_once",
    show_default=True,
    type=click.Choice(["exactly_once", "at_least_once"]),
    help="The sink's delivery.guarantee; at_least_once is the control that shows duplicates.",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    default=None,
    help="Micro-batch size (default: a tenth of the orders).",
)
@click.option(
    "--security",
    is_flag=True,
    help="Secure the demo's broker as a managed Kafka service is: one SASL_SSL listener "
    "(no PLAINTEXT; TLS with certificates made for the run, SCRAM-SHA-512) and ACLs that "
    "give the demo's user what it needs. The generator, the Spark source and sink "
    "(kafka.security.protocol, kafka.sasl.*, kafka.ssl.*) and the verifier connect "
    "through it. One broker only.",
)
@click.option("--seed", default=1, show_default=True, type=int, help="Seed of the order generator.")
@click.option(
    "--keep-work-dir", is_flag=True, help="Keep the broker data, checkpoint and driver log."
)
@click.pass_context
def demo(
    ctx: click.Context,
    orders: int,
    faults: bool,
    bootstrap_servers: str | None,
    brokers: int,
    guarantee: str,
    max_offsets_per_trigger: int | None,
    security: bool,
    seed: int,
    keep_work_dir: bool,
) -> None:
    """Generate orders, enrich them with a Spark Structured Streaming job that reads and
    writes through the exactly-once `oncelog` data source while faults are injected, and
    verify the output under read_committed: exit code 0 only if every order is there
    exactly once."""
    if brokers == 2:
        raise click.BadParameter(
            "a cluster for the demo needs at least 3 brokers (replication factor 3)",
            param_hint="--brokers",
        )
    if brokers > 1 and bootstrap_servers is not None:
        raise click.BadParameter(
            "--brokers starts a local cluster; --bootstrap-servers uses another one: "
            "give one of them",
            param_hint="--brokers",
        )
    if security and bootstrap_servers is not None:
        raise click.BadParameter(
            "--security secures the demo's own broker; another cluster's security is its "
            "own: give one of them",
            param_hint="--security",
        )
    if security and brokers > 1:
        raise click.BadParameter(
            "--security runs on one broker only (a secured local cluster for the demo is not "
            "built: its SCRAM users and inter-broker listener would have to be set up in "
            "ZooKeeper first)",
            param_hint="--security",
        )
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException(
            "the pipeline needs the spark extra: pip install 'oncelog[spark]' "
            "(scripts/demo.sh installs it), and Java 17"
        ) from None
    from oncelog.pipeline.demo import run_pipeline_demo

    result = run_pipeline_demo(
        orders,
        faults=faults,
        bootstrap_servers=bootstrap_servers,
        brokers=brokers,
        guarantee=guarantee,
        seed=seed,
        max_offsets_per_trigger=max_offsets_per_trigger,
        keep_work_dir=keep_work_dir,
        security=security,
    )
    ctx.exit(result.code)
