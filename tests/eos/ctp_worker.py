"""Seed 001's consume-transform-produce loop, as a process the EOS tests kill and restart.

    python tests/eos/ctp_worker.py --bootstrap 127.0.0.1:9092 --client confluent \
        --transactional-id ctp-1 --group ctp-group --progress-file run.progress

Reads ``--input`` with a consumer group under read_committed, turns each record's value
into ``value + b"|done"`` (same key, same partition number), and writes it to ``--output``.

``--mode eos`` (default): every batch is one transaction holding the output records and
the consumer's positions (send_offsets_to_transaction with the consumer's group
metadata), then committed. ``--mode plain`` is the control: a plain producer, and the
input offsets committed with ``consumer.commit()`` only every ``--commit-every`` records,
so a kill between producing and committing leaves duplicates.

The loop ends (status 0, ``DONE`` in the progress file) once it owns every input
partition, has consumed up to each partition's end, and has nothing left to commit.
Each committed batch appends one line to the progress file, which the test reads to
time its kills; in eos mode an ``in txn`` line marks a transaction whose records are
produced (with ``--flush-in-txn``: in the log) but not yet committed. Any unexpected failure
exits nonzero.

A client call that hangs past its own timeout ends the process with status 4 and a
``HUNG`` progress line: a supervisor starts a new instance, which fences this one, as an
operator's would. Seen with broker kills: librdkafka's send_offsets_to_transaction waits
forever for a group coordinator it cached on a broker that left the metadata
(confluentinc/librdkafka#5511; its timeout is never checked, #5456), and kafka-python's
send_offsets_to_transaction/commit_transaction, which take no timeout, wait for ever once
its Sender dropped their request: kafka/producer/sender.py ``_maybe_send_pending_request``
looks the coordinator up again when it is not ready (just killed, still named by
FindCoordinator) but re-enqueues the request only ``if target_node is None``, and
``target_node`` still holds the dead coordinator (kafka-python 3.0.12). Its
init_transactions (which would time out after 60 s) is bounded the same way, and a flush
inside a transaction (its AddPartitionsToTxn dropped, the records wait) aborts the
transaction after the same bound and redoes the batch.

The kafka-python consumer learns its input's partitions before it first polls (see
``know_partitions_before_joining``): kafka-python 3.0.12 loses a rebalance that a metadata
change starts, and its leader would otherwise start one right after its first assignment.
Its group coordinator and transaction manager are traced (DEBUG, without the per-poll and
heartbeat lines) to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

DONE_SUFFIX = b"|done"


def transform(value: bytes) -> bytes:
    return value + DONE_SUFFIX


class Progress:
    def __init__(self, path: str | None) -> None:
        self._file = open(path, "a", buffering=1) if path else None  # line buffered
        self.records = 0
        self.batches = 0

    def note(self, kind: str, n: int) -> None:
        self.records += n
        self.batches += 1
        self.line(f"{kind} n={n} total={self.records} pid={os.getpid()}")

    def line(self, text: str) -> None:
        if self._file is not None:
            self._file.write(f"{time.monotonic():.3f} {text}\n")


# A killed broker is back within seconds: both clients try it again at least every second,
# as Kafka's Java client does by default (reconnect.backoff.max.ms 1000). With their own
# defaults (kafka-python 30 s, librdkafka 10 s) the backoff, doubling with each refused
# connection, can outlast the broker's restart.
RECONNECT_BACKOFF_MAX_MS = 1000

HUNG_EXIT = 4
# Well above what these calls take through a coordinator failover: in four runs of the
# cluster kill loop at load 8-25, 3,406 send_offsets_to_transaction + commit_transaction
# pairs took at most 6.4 s (99.9 % under 4.9 s), 63 init_transactions at most 6.7 s. A call
# stuck longer is a client that will not recover by itself (both kinds above); one cut short
# only costs a restart.
HUNG_AFTER_S = 12.0


# Leaving the group on the way out spares the next instance's join the wait for this
# member's session timeout (the coordinator would wait that long for it to rejoin).
LEAVE_TIMEOUT_S = 5.0


def bounded(
    progress: Progress,
    timeout_s: float,
    call: Callable[..., Any],
    *args: Any,
    leave: Callable[[], Any] | None = None,
) -> Any:
    """``call(*args)``'s result or exception, if it returns within ``timeout_s``; otherwise
    the process exits with HUNG_EXIT (see the module docstring), after ``leave()`` (the
    consumer's close: it leaves the group) if that returns within LEAVE_TIMEOUT_S."""
    what = getattr(call, "__name__", repr(call))
    outcome = _within(timeout_s, call, *args)
    if not outcome:
        progress.line(f"HUNG in {what} for {timeout_s:.0f} s: exiting")
        if leave is not None:
            _within(LEAVE_TIMEOUT_S, leave)
        os._exit(HUNG_EXIT)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _within(timeout_s: float, call: Callable[..., Any], *args: Any) -> list[tuple[bool, Any]]:
    """``[(True, result)]`` or ``[(False, exception)]`` of ``call(*args)`` run in a daemon
    thread, or ``[]`` if it did not return within ``timeout_s``."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call(*args)))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=getattr(call, "__name__", "call"), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    p.add_argument("--mode", choices=["eos", "plain"], default="eos")
    p.add_argument("--transactional-id", default="ctp-worker")
    p.add_argument("--group", default="ctp-group")
    p.add_argument("--input", default="input")
    p.add_argument("--output", default="output")
    p.add_argument(
        "--partitions", type=int, default=3, help="input partitions to own before idling out"
    )
    p.add_argument("--batch", type=int, default=200, help="most records per transaction")
    p.add_argument(
        "--commit-every", type=int, default=600, help="plain mode: records between offset commits"
    )
    p.add_argument(
        "--work-s",
        type=float,
        default=0.0,
        help="pause after producing a batch, before committing (the 'transform work')",
    )
    p.add_argument(
        "--flush-in-txn",
        action="store_true",
        help="eos mode: flush the batch's records before the pause, so they are in the "
        "log (uncommitted) when the 'in txn' progress line appears",
    )
    p.add_argument("--session-timeout-ms", type=int, default=4000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--max-poll-interval-ms", type=int, default=30000)
    p.add_argument(
        "--idle-s", type=float, default=1.0, help="no records for this long, and at the end: exit"
    )
    p.add_argument(
        "--max-run-s", type=float, default=300.0, help="give up (status 3) after this long"
    )
    p.add_argument("--progress-file")
    p.add_argument(
        "--debug",
        action="store_true",
        help="librdkafka debug eos,protocol,cgrp / kafka-python logging DEBUG, to stderr",
    )
    return p.parse_args(argv)


# -- confluent-kafka ----------------------------------------------------------------------


def run_confluent(a: argparse.Namespace, progress: Progress) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer

    debug = {"debug": "eos,protocol,cgrp"} if a.debug else {}
    common = {
        "bootstrap.servers": a.bootstrap,
        "broker.address.family": "v4",
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        **debug,
    }
    if a.mode == "eos":
        producer = Producer(
            {
                **common,
                "transactional.id": a.transactional_id,
                "linger.ms": 5,
                "transaction.timeout.ms": 60000,
            }
        )
        producer.init_transactions(60)  # fences the killed instance, aborts its transaction
    else:
        producer = Producer({**common, "linger.ms": 5, "acks": "all", "enable.idempotence": False})
    progress.line("producer ready")

    consumer = Consumer(
        {
            **common,
            "group.id": a.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": a.session_timeout_ms,
            "heartbeat.interval.ms": a.heartbeat_interval_ms,
            "max.poll.interval.ms": a.max_poll_interval_ms,
        }
    )
    consumer.subscribe(
        [a.input],
        on_assign=lambda c, ps: progress.line(f"assigned {len(ps)}"),
        on_revoke=lambda c, ps: progress.line(f"revoked {len(ps)}"),
    )

    def rewind() -> None:
        """After an aborted transaction: back to the group's committed offsets."""
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.committed(assignment, timeout=30):
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)

    def positions() -> list[Any]:
        return [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]

    last_status = [0.0]

    def at_end() -> bool:
        assignment = consumer.assignment()
        if len(assignment) < a.partitions:
            return False
        status, done = [], True
        unknown = [tp for tp in consumer.position(assignment) if tp.offset < 0]
        # nothing consumed from these in this run: where the group's committed offset is
        known = (
            {tp.partition: tp.offset for tp in consumer.committed(unknown, timeout=10)}
            if unknown
            else {}
        )
        for tp in consumer.position(assignment):
            if tp.offset < 0:
                tp.offset = known.get(tp.partition, -1)
            _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            status.append(f"{tp.partition}:{tp.offset}/{high}")
            if (tp.offset < 0 and high > 0) or (tp.offset >= 0 and tp.offset < high):
                done = False
        if not done and time.monotonic() - last_status[0] > 5:
            last_status[0] = time.monotonic()
            progress.line("idle, not at the end: position/end " + " ".join(status))
        return done

    def produce(msgs: list[Any]) -> None:
        for m in msgs:
            while True:
                try:
                    producer.produce(
                        a.output, key=m.key(), value=transform(m.value()), partition=m.partition()
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)

    uncommitted = 0  # plain mode: records produced since the last offset commit
    deadline = time.monotonic() + a.max_run_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = consumer.consume(a.batch, timeout=0.2)
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
            elif err.fatal() or (not err.retriable() and err.code() != KafkaError._PARTITION_EOF):
                raise KafkaException(err)
        if not good:
            if a.mode == "plain" and uncommitted:
                consumer.commit(offsets=positions(), asynchronous=False)
                progress.line(f"offsets committed after {uncommitted}")
                uncommitted = 0
            if time.monotonic() - idle_since >= a.idle_s and at_end():
                progress.line("DONE")
                break
            continue
        idle_since = time.monotonic()

        if a.mode == "plain":
            produce(good)
            if producer.flush(30) != 0:
                raise RuntimeError("plain producer did not flush")
            if a.work_s:
                time.sleep(a.work_s)
            uncommitted += len(good)
            progress.note("produced", len(good))
            if uncommitted >= a.commit_every:
                consumer.commit(offsets=positions(), asynchronous=False)
                progress.line(f"offsets committed after {uncommitted}")
                uncommitted = 0
            continue

        try:
            producer.begin_transaction()
            produce(good)
            if a.flush_in_txn and producer.flush(30) != 0:
                raise RuntimeError("transactional producer did not flush")
            progress.line(f"in txn n={len(good)} flushed={a.flush_in_txn}")
            if a.work_s:
                time.sleep(a.work_s)
                producer.poll(0)
            bounded(
                progress,
                HUNG_AFTER_S,
                producer.send_offsets_to_transaction,
                positions(),
                consumer.consumer_group_metadata(),
                30,
                leave=consumer.close,
            )
            producer.commit_transaction(60)
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                progress.line(f"abort after {err}")
                producer.abort_transaction(60)
                rewind()
                continue
            if err.retriable():  # commit_transaction may be retried as is
                progress.line(f"retrying commit after {err}")
                producer.commit_transaction(60)
            else:
                raise
        progress.note("committed", len(good))
    else:
        progress.line("TIMEOUT")
        return 3
    consumer.close()
    producer.flush(10)
    return 0


# -- kafka-python ---------------------------------------------------------------------------

KNOW_PARTITIONS_TIMEOUT_S = 60.0


def know_partitions_before_joining(
    consumer: Any, topic: str, partitions: int, timeout_s: float = KNOW_PARTITIONS_TIMEOUT_S
) -> None:
    """Return once the kafka-python ``consumer``, subscribed to ``topic`` but not polled yet,
    has metadata listing ``topic``'s ``partitions``: its first join then assigns them all.

    Why (kafka-python 3.0.12, kafka/coordinator/): the leader records the metadata it
    assigned from (``_perform_assignment`` sets ``_assignment_snapshot``) and rejoins when
    the metadata differs; ``need_rejoin()`` says so from the snapshots alone, without
    setting ``rejoin_needed``. ``poll()`` drives a rebalance only while ``need_rejoin()`` is
    true, and ``join_group_async`` leaves a JoinGroup+SyncGroup task that outlives the
    poll's timeout in flight for the next poll. When that task is the leader's, it takes
    the new snapshot during the task: from the next poll on ``need_rejoin()`` is false, the
    finished task is never collected, and the consumer stays REBALANCING with no partitions
    and its heartbeats disabled while the coordinator expires it, for ever. A consumer
    that joins before its first metadata response lists the topic assigns nothing ("No
    partition metadata for topic"), then starts such a rebalance at once; a SyncGroup
    slower than what is left of a 200 ms poll (its group record is written to every
    in-sync replica) then loses it. (Java sets ``rejoinNeeded`` there and counts a pending
    join as a reason to poll on: KAFKA-9815.) ``topics()`` always fetches the metadata, so
    the snapshot taken after ``subscribe`` holds the topic's partitions."""
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    failure: KafkaError | None = None
    while True:
        try:
            if (
                topic in consumer.topics()
                and len(consumer.partitions_for_topic(topic)) >= partitions
            ):
                return
        except KafkaError as exc:  # a broker died under the request: ask again
            failure = exc
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the consumer never learnt the {partitions} partitions of {topic} (last "
                f"error: {failure!r})"
            )
        time.sleep(0.1)


def run_kafka_python(a: argparse.Namespace, progress: Progress) -> int:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError, ProducerFencedError
    from kafka.structs import OffsetAndMetadata

    common: dict[str, Any] = {
        "bootstrap_servers": a.bootstrap,
        "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
    }
    if a.mode == "eos":
        producer = KafkaProducer(
            **common, transactional_id=a.transactional_id, linger_ms=5, transaction_timeout_ms=60000
        )
        # Bounded: the Sender drops InitProducerId as it drops the other transactional
        # requests (module docstring), and init_transactions would wait its 60 s max_block_ms.
        bounded(progress, HUNG_AFTER_S, producer.init_transactions)
    else:
        producer = KafkaProducer(**common, linger_ms=5, acks="all", enable_idempotence=False)
    progress.line("producer ready")

    consumer = KafkaConsumer(
        **common,
        group_id=a.group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_interval_ms,
        max_poll_interval_ms=a.max_poll_interval_ms,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: Any) -> None:
            progress.line(f"assigned {len(assigned)}")

        def on_partitions_revoked(self, revoked: Any) -> None:
            progress.line(f"revoked {len(revoked)}")

    consumer.subscribe([a.input], listener=Listener())
    bounded(
        progress,
        KNOW_PARTITIONS_TIMEOUT_S + HUNG_AFTER_S,
        know_partitions_before_joining,
        consumer,
        a.input,
        a.partitions,
    )

    def leave() -> None:
        consumer.close(autocommit=False, timeout_ms=LEAVE_TIMEOUT_S * 1000)

    def rewind() -> None:
        for tp in consumer.assignment():
            committed = consumer.committed(tp)
            if committed is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)

    def at_end() -> bool:
        assignment = consumer.assignment()
        if len(assignment) < a.partitions:
            return False
        ends = consumer.end_offsets(list(assignment))
        done = all(consumer.position(tp) >= ends[tp] for tp in assignment)
        if not done and time.monotonic() - last_status[0] > 5:
            last_status[0] = time.monotonic()
            progress.line(
                "idle, not at the end: position/end "
                + " ".join(
                    f"{tp.partition}:{consumer.position(tp)}/{ends[tp]}" for tp in assignment
                )
            )
        return done

    def produce(batches: dict[Any, list[Any]]) -> None:
        for _tp, records in batches.items():
            for r in records:
                producer.send(a.output, key=r.key, value=transform(r.value), partition=r.partition)

    def offsets(batches: dict[Any, list[Any]]) -> dict[Any, Any]:
        return {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in batches}

    last_status = [0.0]
    uncommitted_offsets: dict[Any, Any] = {}
    uncommitted = 0
    deadline = time.monotonic() + a.max_run_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=200, max_records=a.batch)
        n = sum(len(v) for v in batches.values())
        if not n:
            if a.mode == "plain" and uncommitted:
                consumer.commit(uncommitted_offsets)
                progress.line(f"offsets committed after {uncommitted}")
                uncommitted, uncommitted_offsets = 0, {}
            if time.monotonic() - idle_since >= a.idle_s and at_end():
                progress.line("DONE")
                break
            continue
        idle_since = time.monotonic()

        if a.mode == "plain":
            produce(batches)
            producer.flush(30)
            if a.work_s:
                time.sleep(a.work_s)
            uncommitted += n
            uncommitted_offsets.update(offsets(batches))
            progress.note("produced", n)
            if uncommitted >= a.commit_every:
                consumer.commit(uncommitted_offsets)
                progress.line(f"offsets committed after {uncommitted}")
                uncommitted, uncommitted_offsets = 0, {}
            continue

        try:
            producer.begin_transaction()
            produce(batches)
            if a.flush_in_txn:
                # Bounded as the calls below are: kafka-python's Sender drops the transaction's
                # AddPartitionsToTxn like the other transactional requests, and the records
                # then wait for ever. KafkaTimeoutError: abort and redo the batch.
                producer.flush(HUNG_AFTER_S)
            progress.line(f"in txn n={n} flushed={a.flush_in_txn}")
            if a.work_s:
                time.sleep(a.work_s)
            bounded(
                progress,
                HUNG_AFTER_S,
                producer.send_offsets_to_transaction,
                offsets(batches),
                consumer.group_metadata(),
                leave=leave,
            )
            bounded(progress, HUNG_AFTER_S, producer.commit_transaction, leave=leave)
        except ProducerFencedError:
            raise
        except KafkaError as exc:
            progress.line(f"abort after {exc!r}")
            producer.abort_transaction()
            rewind()
            continue
        progress.note("committed", n)
    else:
        progress.line("TIMEOUT")
        return 3
    consumer.close()
    producer.close(10)
    return 0


RUNNERS: dict[str, Callable[[argparse.Namespace, Progress], int]] = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
}


class _GroupMembershipOnly(logging.Filter):
    """kafka-python's coordinator at DEBUG without what it logs on every poll and every
    heartbeat: what a stalled rebalance or a hung transaction call needs to be understood."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return not record.name.startswith("kafka.coordinator.heartbeat") and not str(
            record.msg
        ).startswith(("need_rejoin", "coordinator.poll: timeout"))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if a.debug and a.client == "kafka-python" else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if a.client == "kafka-python" and not a.debug:
        # The group membership and the transactions are always traced, a few lines per
        # rebalance or transaction (see _GroupMembershipOnly).
        for traced in ("kafka.coordinator", "kafka.producer.transaction_manager"):
            logging.getLogger(traced).setLevel(logging.DEBUG)
        for handler in logging.getLogger().handlers:
            handler.addFilter(_GroupMembershipOnly())
    progress = Progress(a.progress_file)
    progress.line(f"start client={a.client} mode={a.mode} pid={os.getpid()}")
    return RUNNERS[a.client](a, progress)


if __name__ == "__main__":
    sys.exit(main())
