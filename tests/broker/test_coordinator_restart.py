"""Coordinator state comes back after a restart: committed offsets, transactional ids."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.testing import EmbeddedBroker

from .group_clients import committed

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def transactional_metadata(broker: EmbeddedBroker, transactional_id: str) -> tuple[int, int]:
    assert broker.broker is not None
    (md,) = [
        md
        for shard in broker.broker.transactions.shards.values()
        for tid, md in shard.metadata.items()
        if tid == transactional_id
    ]
    return md.producer_id, md.producer_epoch


def test_offsets_and_transactional_ids_survive_restarts(tmp_path: Path) -> None:
    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "restart-tx"})
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("data", b"%d" % i, partition=0)
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False}
        )
        producer.send_offsets_to_transaction(
            [TopicPartition("data", 0, 7)], consumer.consumer_group_metadata(), 10
        )
        producer.commit_transaction(10)
        consumer.close()
        deadline = time.monotonic() + 10
        while committed(bootstrap, "g", "data") != 7 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert committed(bootstrap, "g", "data") == 7
        pid, epoch = transactional_metadata(broker, "restart-tx")
        del producer

    for clean in (True, False):
        if not clean:  # a crash: no clean-shutdown marker, coordinators reload from logs
            (tmp_path / ".oncelog_cleanshutdown").unlink()
        with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
            assert committed(broker.bootstrap_servers, "g", "data") == 7
            assert transactional_metadata(broker, "restart-tx") == (pid, epoch)
            # the id is known: a new instance bumps the epoch, fencing the previous one
            again = Producer(
                {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "restart-tx"}
            )
            again.init_transactions(10)
            pid_now, epoch_now = transactional_metadata(broker, "restart-tx")
            assert (pid_now, epoch_now) == (pid, epoch + 1)
            epoch = epoch_now
            del again
