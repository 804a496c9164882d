"""`oncelog demo`: seed 001's order-enrichment pipeline end to end, with injected faults.

1. start a broker (a `BrokerProcess`, so it can be restarted by pid), or a local cluster
   of `brokers` brokers on ZooKeeper with replication factor 3 (`brokers.py`), or use the
   cluster given by `bootstrap_servers`; create `orders` and `enriched-orders`
   (3 partitions); with `security`, the single broker listens on SASL_SSL only
   (SCRAM-SHA-512, certificates made for the run, ACLs for the demo's principal:
   `security.py`) and every client below connects through it;
2. generate N numbered orders with a transactional producer (deterministic from a seed);
3. run the streaming job as a subprocess (``python -m oncelog.pipeline.job``), with faults:
   (a) every task's first attempt in the first driver run fails half-way through its
       writes (the testing sink's `failAfter`, `oncelog.testing.spark`), and Spark retries it;
   (b) the first driver is killed with SIGKILL, aimed at the moment after a batch's tasks
       committed their output and before Spark recorded the batch as done, then started
       again on the same checkpoint (the batch is replayed);
   (c) the broker is restarted while the second driver runs; on a local cluster, the
       leader of `enriched-orders`-0 and then a sink writer's transaction coordinator are
       SIGKILLed and restarted instead;
   a driver that exits with an error is restarted on its checkpoint (up to 3 times);
4. verify with a plain consumer under read_committed: orders in, orders out, duplicates,
   missing, enrichment. Exit code 0 only if out == in with none duplicated or missing.

Every process started is stopped by its pid; the work directory is removed at the end.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.pipeline import ENRICHED_TOPIC, ORDERS_TOPIC, PARTITIONS
from oncelog.pipeline.brokers import ClusterUnderFaults, SingleBroker
from oncelog.pipeline.driver import Driver, SinkProgress, client_log, planned_not_committed
from oncelog.pipeline.job import DEFAULT_SINK_ID
from oncelog.pipeline.orders import produce_orders
from oncelog.pipeline.security import DemoSecurity
from oncelog.pipeline.verify import Verification, verify

DRIVER_RESTARTS = 3  # unplanned restarts of a failed driver, beyond the planned ones
# How long to wait for the aimed-at moment (every task of the held batch committed) before
# killing anyway: the held commit keeps the moment, so only a batch whose tasks take longer
# than this (a very loaded machine: retried first attempts) is killed half-committed.
KILL_WINDOW_S = 120.0


@dataclass
class DemoResult:
    """What a demonstration run did and found; ``code`` is the command's exit code."""

    code: int
    verification: Verification | None = None
    events: list[str] = field(default_factory=list)
    task_failures: int = 0
    driver_runs: int = 0
    seconds: float = 0.0
    work_dir: Path | None = None  # kept (keep_work_dir): broker data, checkpoint, driver log


# -- the demonstration ---------------------------------------------------------------------

Brokers = SingleBroker | ClusterUnderFaults


def _create_topics(bootstrap: str, topics: list[str], client: dict[str, str]) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **client}, logger=client_log)
    futures = admin.create_topics([NewTopic(t, PARTITIONS, -1) for t in topics], request_timeout=60)
    for _topic, future in futures.items():
        try:
            future.result(60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _source_end(bootstrap: str, topic: str, client: dict[str, str]) -> int:
    """Sum over partitions of the last stable offset, once it reached the high watermark
    (or after 30 s): where the job's offsets end. The generator's last commit returns once
    the coordinator decided (as in Kafka), and its markers may land a moment later, on a
    cluster once the followers have them too."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, **client}, logger=client_log)

    def end(isolation: IsolationLevel) -> int:
        futures = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)},
            isolation_level=isolation,
            request_timeout=30,
        )
        return sum(f.result().offset for f in futures.values())

    deadline = time.monotonic() + 30
    while True:
        stable = end(IsolationLevel.READ_COMMITTED)
        if stable == end(IsolationLevel.READ_UNCOMMITTED) or time.monotonic() > deadline:
            return stable
        time.sleep(0.1)


def run_pipeline_demo(
    orders: int = 20000,
    *,
    faults: bool = True,
    bootstrap_servers: str | None = None,
    brokers: int = 1,
    guarantee: str = "exactly_once",
    seed: int = 1,
    run_id: str | None = None,
    max_offsets_per_trigger: int | None = None,
    console: Console | None = None,
    keep_work_dir: bool = False,
    timeout_s: float = 900.0,
    security: bool = False,
) -> DemoResult:
    """Run the demonstration; `result.code` is the exit code (0: every order exactly once).
    `brokers` > 1 runs it on a local cluster of that many brokers (at least 3); `security`
    secures the single broker of its own (SASL_SSL, SCRAM-SHA-512, ACLs)."""
    if security and (bootstrap_servers is not None or brokers > 1):
        raise ValueError("security is built for the demo's own single broker only")
    console = console or Console()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="oncelog-pipeline-"))
    external = bootstrap_servers is not None
    if run_id is None and external:
        run_id = uuid.uuid4().hex[:8]  # fresh topics on a cluster that may hold older runs
    suffix = f"-{run_id}" if run_id else ""
    source, target = ORDERS_TOPIC + suffix, ENRICHED_TOPIC + suffix
    sink_id = DEFAULT_SINK_ID + suffix
    secured = DemoSecurity(work / "security") if security else None
    client = secured.librdkafka() if secured is not None else {}
    owned: Brokers | None = None
    result = DemoResult(code=1)
    drivers: list[Driver] = []

    def event(text: str) -> None:
        result.events.append(text)
        console.print(f"  [cyan]•[/] {text}")

    try:
        owned = None if external else _brokers_of_our_own(work, brokers, target, sink_id, secured)
        bootstrap = owned.start() if owned is not None else bootstrap_servers
        assert bootstrap is not None  # no broker of our own: bootstrap_servers was given
        where = owned.describe() if owned is not None else f"cluster {bootstrap}"
        console.print(
            f"[bold]oncelog demo[/]: order enrichment on Spark, {orders:,} orders, "
            f"{guarantee}, {'faults injected' if faults else 'no faults'}; {where}"
        )
        if secured is not None:
            acls = secured.grant(bootstrap, [source, target])
            console.print(secured.describe(len(acls)))
        _create_topics(bootstrap, [source, target], client)
        per_trigger = max_offsets_per_trigger or max(orders // 10, 20)
        with Progress(
            TextColumn("{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            gen = progress.add_task(f"generating orders → {source}", total=orders)
            produce_orders(
                bootstrap,
                source,
                orders,
                seed=seed,
                transactional_id=f"oncelog-order-generator{suffix}",
                client_config={"logger": client_log, **client},
                on_progress=lambda n: progress.update(gen, completed=n),
            )
            total = _source_end(bootstrap, source, client)
            job = progress.add_task(f"enriching → {target}", total=total)
            _supervise(
                result,
                drivers,
                progress,
                job,
                event,
                work,
                bootstrap,
                source,
                target,
                sink_id,
                guarantee,
                per_trigger,
                faults,
                owned,
                total,
                client,
                _client_config_file(work, secured),
                timeout_s,
            )
            check = progress.add_task(f"verifying {target}", total=None)
            result.verification = verify(
                bootstrap, source, target, orders, seed=seed, client_config=client
            )
            progress.update(check, total=1, completed=1)
        result.task_failures = _count_task_failures(work / "driver.log")
        result.seconds = time.monotonic() - started
        result.code = _report(console, result, orders, guarantee, faults, owned)
        return result
    except BaseException:
        log_tail = _tail(work / "driver.log", 40)
        if log_tail:
            console.print(f"[red]driver log (last lines):[/]\n{log_tail}")
        raise
    finally:
        for driver in drivers:
            if driver.proc.poll() is None:
                driver.kill()
        if owned is not None:
            owned.stop()
        if keep_work_dir:
            result.work_dir = work
            console.print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _brokers_of_our_own(
    work: Path, brokers: int, target: str, sink_id: str, secured: DemoSecurity | None
) -> Brokers:
    if brokers > 1:
        return ClusterUnderFaults(work / "cluster", brokers, target, sink_id, PARTITIONS)
    if secured is None:
        return SingleBroker(work / "broker")
    secured.write_credentials(work / "broker")
    return SingleBroker(work / "broker", secured.broker_config())


def _client_config_file(work: Path, secured: DemoSecurity | None) -> Path | None:
    """The driver's client properties (Kafka's Java names: it passes each as a `kafka.*`
    option), in a file readable by this user only, so the password is not in a command
    line."""
    if secured is None:
        return None
    path = work / "client.properties"
    path.touch(mode=0o600)
    path.write_text("".join(f"{k}={v}\n" for k, v in secured.client_properties().items()))
    return path


def _supervise(
    result: DemoResult,
    drivers: list[Driver],
    progress: Progress,
    job: Any,
    event: Callable[[str], None],
    work: Path,
    bootstrap: str,
    source: str,
    target: str,
    sink_id: str,
    guarantee: str,
    per_trigger: int,
    faults: bool,
    owned: Brokers | None,
    total: int,
    client: dict[str, str],
    client_config: Path | None,
    timeout_s: float,
) -> None:
    checkpoint = work / "checkpoint"
    base = [
        "--bootstrap-servers",
        bootstrap,
        "--checkpoint",
        str(checkpoint),
        "--sink-id",
        sink_id,
        "--source-topic",
        source,
        "--target-topic",
        target,
        "--guarantee",
        guarantee,
        "--max-offsets-per-trigger",
        str(per_trigger),
        "--scratch-dir",
        str(work / "spark-scratch"),  # a killed driver's temporary dirs stay in `work`
    ] + (["--client-config", str(client_config)] if client_config is not None else [])
    fail_after = max(per_trigger // (2 * PARTITIONS), 1)  # half of a task's share of a batch
    hold = work / "hold-commits"  # while it exists, driver 1's batch commits wait (the aim)
    faulty = ["--fail-after", str(fail_after), "--hold-commits-while", str(hold)]
    sink = SinkProgress(bootstrap, sink_id, client) if guarantee == "exactly_once" else None
    deadline = time.monotonic() + timeout_s
    killed = False
    unplanned = 0
    try:
        while True:
            run = len(drivers) + 1
            first_faulty = faults and not killed
            hold.unlink(missing_ok=True)  # each run's commits go on until its aim begins
            args = base + (faulty if first_faulty else [])
            driver = Driver(args, work / "driver.log", run)
            drivers.append(driver)
            result.driver_runs = run
            progress.update(job, description=f"enriching → {target} (driver {run})")
            if first_faulty:
                event(
                    f"driver {run} started (pid {driver.pid}); every task's first attempt "
                    f"fails after {fail_after} of its records (failAfter) "
                    "and Spark retries it"
                )
            elif run > 1:
                event(f"driver {run} started (pid {driver.pid}) on the same checkpoint")
            batches_this_run = 0
            aim_since: float | None = None
            killed_now = False
            while True:
                for line in driver.poll_events():
                    if line.get("event") == "batch":
                        batches_this_run += 1
                        end = line.get("end") or {}
                        progress.update(
                            job, completed=sum(int(v) for v in end.get(source, {}).values())
                        )
                    elif line.get("event") == "failed":
                        event(f"driver {run} reported: {line.get('error', '')[:300]}")
                code = driver.proc.poll()
                if code is not None:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the pipeline did not finish within {timeout_s} s")
                if faults and not killed and batches_this_run >= 2:
                    if aim_since is None:
                        aim_since = time.monotonic()
                        hold.touch()  # the next batch commit waits: the moment lasts
                    state = _kill_moment(checkpoint, sink, aim_since)
                    if state is not None:
                        driver.kill()
                        killed = killed_now = True
                        event(f"driver {run} (pid {driver.pid}) killed with SIGKILL {state}")
                        break
                if faults and killed and owned is not None:
                    owned.fault_step(batches_this_run, run, event)
                time.sleep(0.01 if faults and not killed and batches_this_run >= 2 else 0.1)
            if killed_now:
                continue  # killed on purpose: start the next run on the same checkpoint
            code = driver.wait(60)
            for line in driver.poll_events():
                if line.get("event") == "batch":
                    end = line.get("end") or {}
                    progress.update(
                        job, completed=sum(int(v) for v in end.get(source, {}).values())
                    )
                elif line.get("event") == "failed":
                    event(f"driver {run} reported: {line.get('error', '')[:300]}")
            if code == 0:
                if faults and not killed:
                    event(
                        f"driver {run} finished before the planned kill "
                        "(too few orders for the fault)"
                    )
                if faults and owned is not None and not owned.faults_done:
                    event(
                        f"driver {run} finished before every planned broker fault "
                        "(too few orders for them)"
                    )
                    owned.settle(event)
                progress.update(job, completed=total)
                return
            unplanned += 1
            if unplanned > DRIVER_RESTARTS:
                raise RuntimeError(
                    f"the streaming driver failed {unplanned} times; see the driver log"
                )
            event(f"driver {run} exited with status {code}; restarting it on its checkpoint")
    finally:
        if sink is not None:
            sink.close()


def _kill_moment(checkpoint: Path, sink: SinkProgress | None, since: float) -> str | None:
    """A description of the driver's state if now is the moment to kill it, else None.
    The aim: a batch whose tasks committed their output (sink progress says so) and that
    Spark has not recorded as done (no commits/N in the checkpoint)."""
    batch = planned_not_committed(checkpoint)
    waited = time.monotonic() - since
    if batch is not None:
        if sink is not None:
            done = sink.tasks_done(batch)
            if batch != planned_not_committed(checkpoint):
                return None  # the batch completed meanwhile
            if len(done) == PARTITIONS:
                return (
                    f"after all {PARTITIONS} tasks of batch {batch} committed their output and "
                    f"before Spark recorded the batch as done: it is replayed on restart"
                )
            if done and waited > KILL_WINDOW_S:
                return (
                    f"with batch {batch} half-committed (tasks {done} of {PARTITIONS} done): "
                    f"the rest is written on restart"
                )
        elif waited > 1.0:
            return (
                f"in the middle of batch {batch} (planned, not recorded as done): "
                "it is replayed on restart"
            )
    if waited > KILL_WINDOW_S:
        return (
            f"between batches (batch {batch} in flight)" if batch is not None else "between batches"
        )
    return None


def _count_task_failures(log_path: Path) -> int:
    try:
        with open(log_path, errors="replace") as f:
            return sum(1 for line in f if "Lost task" in line)
    except FileNotFoundError:
        return 0


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ""


def _report(
    console: Console,
    result: DemoResult,
    orders: int,
    guarantee: str,
    faults: bool,
    owned: Brokers | None,
) -> int:
    v = result.verification
    assert v is not None
    rows = [
        ("orders in (committed in orders)", v.orders_in, v.orders_in == orders),
        ("orders out (read_committed)", v.orders_out, v.orders_out == v.orders_in),
        ("duplicates", v.duplicates, v.duplicates == 0),
        ("missing", v.missing, v.missing == 0),
        ("unknown or unreadable", v.unexpected, v.unexpected == 0),
        ("enriched wrongly", v.wrong, v.wrong == 0),
    ]
    faults_text = (
        "task failures, driver SIGKILL + restart"
        + (f", {owned.fault_text}" if owned is not None else "")
        if faults
        else "no faults"
    )
    table = Table(title=f"order enrichment, {guarantee}: {faults_text}")
    table.add_column("check")
    table.add_column("count", justify="right")
    table.add_column("ok", justify="center")
    for label, count, ok in rows:
        table.add_row(label, f"{count:,}", "[green]yes[/]" if ok else "[bold red]NO[/]")
    table.add_section()
    table.add_row("records of failed attempts (aborted txns)", f"{v.uncommitted_out:,}", "-")
    table.add_row("task attempts failed, retried by Spark", f"{result.task_failures:,}", "-")
    table.add_row("driver runs", f"{result.driver_runs:,}", "-")
    console.print(table)
    good = v.ok
    verdict = "[bold green]PASS[/]" if good else "[bold red]FAIL[/]"
    console.print(f"{verdict}: {orders:,} orders in {result.seconds:.1f} s")
    return 0 if good else 1
