"""ACLs enforced on a broker with ``authorizer.class.name`` set: each rule with the case it
allows and the case it refuses, through real clients where the rule shows in their API,
and through raw requests where the exact error code matters.

Principals: ``admin`` is a super user; ``alice`` and ``bob`` get what each test grants
them, on resources named after the test, so the tests share one broker; ``carol`` and
``dave`` are each given cluster-wide permissions by one test only.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from oncelog.cli.main import main
from oncelog.client.admin import Admin, AdminError
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import SecurityKit

from ..broker.raw_requests import FETCH_BY_NAME, fetch_body
from ..cluster.coordination import init_producer_id

TIMEOUT_S = 20
Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, TXN, CLUSTER = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.CLUSTER,
)
EVERY_ACL = AclBindingFilter(
    ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
    AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY),
)
METADATA = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def named(topic: str) -> dict[str, Any]:
    return {"name": topic, "topic_id": uuid.UUID(int=0)}


def connect(broker: EmbeddedBroker, kit: SecurityKit, user: str) -> KafkaConnection:
    return KafkaConnection(
        broker.bootstrap_servers, security=kit.client("SASL_PLAINTEXT", user, "PLAIN")
    )


def grant(
    broker: EmbeddedBroker,
    kit: SecurityKit,
    user: str,
    resource: ResourceType,
    name: str,
    *operations: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
) -> None:
    with connect(broker, kit, "admin") as admin:
        Admin(admin).create_acls(
            [
                AclBinding(
                    ResourcePattern(resource, name, pattern),
                    AccessControlEntry(f"User:{user}", "*", op, permission),
                )
                for op in operations
            ],
        )


def client_config(broker: EmbeddedBroker, kit: SecurityKit, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        **kit.client("SASL_PLAINTEXT", user, "PLAIN").librdkafka(),
    }


def create_topic(broker: EmbeddedBroker, kit: SecurityKit, name: str) -> None:
    with connect(broker, kit, "admin") as admin:
        Admin(admin).create_topic(name, 1, 1, {})


def produce_error(broker: EmbeddedBroker, kit: SecurityKit, user: str, topic: str) -> Any:
    """The delivery error of one record (None: delivered)."""
    outcome: list[Any] = []
    producer = Producer(client_config(broker, kit, user) | {"message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    return outcome[0]


# -- Produce and Fetch ------------------------------------------------------------------------


def test_produce_needs_write_on_the_topic(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE)
    assert produce_error(acl_broker, kit, "alice", topic_name) is None
    refused = produce_error(acl_broker, kit, "bob", topic_name)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_prefixed_acl_and_deny_wins(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    prefix = f"{topic_name}-etl-"
    for suffix in ("a", "secret"):
        create_topic(acl_broker, kit, prefix + suffix)
    grant(acl_broker, kit, "alice", TOPIC, prefix, Op.WRITE, pattern=PatternType.PREFIXED)
    grant(acl_broker, kit, "alice", TOPIC, prefix + "secret", Op.WRITE, permission=DENY)
    assert produce_error(acl_broker, kit, "alice", prefix + "a") is None
    refused = produce_error(acl_broker, kit, "alice", prefix + "secret")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def fetch_codes(conn: KafkaConnection, topic: str, replica_id: int = -1) -> list[ErrorCode]:
    body = fetch_body(topic) | {"replica_id": replica_id}
    answer = conn.request(ApiKey.FETCH, body, version=FETCH_BY_NAME)
    return [p.error_code for t in answer.responses for p in t.partitions]


def test_fetch_needs_read_and_a_follower_fetch_needs_cluster_action(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.READ)
    with connect(acl_broker, kit, "alice") as alice, connect(acl_broker, kit, "bob") as bob:
        assert fetch_codes(alice, topic_name) == [ErrorCode.none]
        assert fetch_codes(bob, topic_name) == [ErrorCode.topic_authorization_failed]
        # As a follower (a replica id), Read is not enough: ClusterAction is needed.
        assert fetch_codes(alice, topic_name, replica_id=1) == [
            ErrorCode.topic_authorization_failed
        ]
    with connect(acl_broker, kit, "admin") as admin:  # a super user
        assert fetch_codes(admin, topic_name, replica_id=1) == [ErrorCode.none]


# -- Metadata, topic administration ----------------------------------------------------------


def test_metadata_hides_topics_the_principal_cannot_describe(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    visible, hidden = f"{topic_name}-visible", f"{topic_name}-hidden"
    for name in (visible, hidden):
        create_topic(acl_broker, kit, name)
    grant(acl_broker, kit, "alice", TOPIC, visible, Op.READ)  # Read implies Describe
    with connect(acl_broker, kit, "alice") as alice:
        listed = {
            t.name for t in alice.request(ApiKey.METADATA, METADATA | {"topics": None}).topics
        }
        assert visible in listed and hidden not in listed
        asked = alice.request(
            ApiKey.METADATA, METADATA | {"topics": [named(hidden), named(visible)]}
        ).topics
        assert [(t.name, t.error_code) for t in asked] == [
            (hidden, ErrorCode.topic_authorization_failed),
            (visible, ErrorCode.none),
        ]
        # A topic that does not exist looks the same as one that exists but is hidden.
        (missing,) = alice.request(
            ApiKey.METADATA, METADATA | {"topics": [named(f"{topic_name}-none")]}
        ).topics
        assert missing.error_code == ErrorCode.topic_authorization_failed


def create_code(conn: KafkaConnection, name: str) -> ErrorCode:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 10_000,
        "validate_only": False,
    }
    (created,) = conn.request(ApiKey.CREATE_TOPICS, body).topics
    return created.error_code


def test_create_topics_needs_create_on_the_cluster_or_the_topic(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    grant(acl_broker, kit, "alice", TOPIC, f"{topic_name}-a", Op.CREATE)
    with connect(acl_broker, kit, "alice") as alice, connect(acl_broker, kit, "bob") as bob:
        assert create_code(alice, f"{topic_name}-a") == ErrorCode.none
        assert create_code(alice, f"{topic_name}-b") == ErrorCode.topic_authorization_failed
        assert create_code(bob, f"{topic_name}-c") == ErrorCode.topic_authorization_failed


# -- idempotent and transactional producers ------------------------------------------------


def init_producer_id_code(conn: KafkaConnection, transactional_id: str | None) -> ErrorCode:
    body = {
        "transactional_id": transactional_id,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    return conn.request(ApiKey.INIT_PRODUCER_ID, body).error_code


def test_idempotent_producer_id_needs_idempotent_write_or_write_on_a_topic(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    """KIP-679: Write on any topic is enough; Read is not."""
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE)
    grant(acl_broker, kit, "carol", TOPIC, topic_name, Op.READ)
    with connect(acl_broker, kit, "alice") as alice, connect(acl_broker, kit, "carol") as carol:
        assert init_producer_id_code(alice, None) == ErrorCode.none
        assert init_producer_id_code(carol, None) == ErrorCode.cluster_authorization_failed
    grant(acl_broker, kit, "carol", CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)
    with connect(acl_broker, kit, "carol") as carol:
        assert init_producer_id_code(carol, None) == ErrorCode.none


def transactional_producer(
    broker: EmbeddedBroker, kit: SecurityKit, user: str, transactional_id: str
) -> Producer:
    return Producer(client_config(broker, kit, user) | {"transactional.id": transactional_id})


def test_a_principal_without_write_on_a_transactional_id_cannot_fence_it(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    """bob cannot take over alice's transactional id (InitProducerId would bump the epoch
    and fence her); once allowed Write on it, he can, and her transaction fails: the
    control that shows the permission is what protected her."""
    create_topic(acl_broker, kit, topic_name)
    txn_id = f"{topic_name}-txn"
    grant(acl_broker, kit, "alice", TXN, txn_id, Op.WRITE)
    for user in ("alice", "bob"):
        grant(acl_broker, kit, user, TOPIC, topic_name, Op.WRITE)
    alice = transactional_producer(acl_broker, kit, "alice", txn_id)
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce(topic_name, b"alice-1")
    alice.flush(TIMEOUT_S)

    bob = transactional_producer(acl_broker, kit, "bob", txn_id)
    with pytest.raises(KafkaException) as refused:
        bob.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with connect(acl_broker, kit, "bob") as raw:
        assert init_producer_id_code(raw, txn_id) == ErrorCode.transactional_id_authorization_failed
    alice.produce(topic_name, b"alice-2")
    alice.commit_transaction(TIMEOUT_S)  # untouched by bob

    grant(acl_broker, kit, "bob", TXN, txn_id, Op.WRITE)
    alice.begin_transaction()
    alice.produce(topic_name, b"alice-3")
    alice.flush(TIMEOUT_S)
    transactional_producer(acl_broker, kit, "bob", txn_id).init_transactions(TIMEOUT_S)
    with pytest.raises(KafkaException) as fenced:
        alice.commit_transaction(TIMEOUT_S)  # fenced by bob's epoch bump
    assert fenced.value.args[0].code() == KafkaError._FENCED


def test_a_principal_cannot_end_or_abort_another_s_transaction(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    txn_id = f"{topic_name}-txn"
    grant(acl_broker, kit, "alice", TXN, txn_id, Op.WRITE)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE)
    alice = transactional_producer(acl_broker, kit, "alice", txn_id)
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce(topic_name, b"pending")
    alice.flush(TIMEOUT_S)
    with connect(acl_broker, kit, "admin") as admin:
        (described,) = admin.request(
            ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]}
        ).transaction_states
    producer_id, epoch = described.producer_id, described.producer_epoch
    with connect(acl_broker, kit, "bob") as bob:
        end = {
            "transactional_id": txn_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "committed": False,
        }
        assert (
            bob.request(ApiKey.END_TXN, end).error_code
            == ErrorCode.transactional_id_authorization_failed
        )
        markers = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "transaction_result": False,
                    "topics": [{"name": topic_name, "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        }
        answer = bob.request(ApiKey.WRITE_TXN_MARKERS, markers)
        codes = [p.error_code for m in answer.markers for t in m.topics for p in t.partitions]
        assert codes == [ErrorCode.cluster_authorization_failed]
    alice.commit_transaction(TIMEOUT_S)  # her transaction went on as if bob did nothing
    consumer = Consumer(
        client_config(acl_broker, kit, "admin")
        | {
            "group.id": f"{topic_name}-check",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0)])
    message = consumer.poll(TIMEOUT_S)
    consumer.close()
    assert message is not None and message.value() == b"pending"


def test_oncelog_transactions_abort_needs_cluster_action(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str, tmp_path: Path
) -> None:
    create_topic(acl_broker, kit, topic_name)
    txn_id = f"{topic_name}-txn"
    grant(acl_broker, kit, "alice", TXN, txn_id, Op.WRITE)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE)
    grant(acl_broker, kit, "bob", TOPIC, topic_name, Op.ALL)  # not enough: ClusterAction is
    hanging = transactional_producer(acl_broker, kit, "alice", txn_id)
    hanging.init_transactions(TIMEOUT_S)
    hanging.begin_transaction()
    hanging.produce(topic_name, b"hanging")
    hanging.flush(TIMEOUT_S)

    def abort(user: str) -> Any:
        properties = tmp_path / f"{user}.properties"
        security = kit.client("SASL_PLAINTEXT", user, "PLAIN")
        properties.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{security.password}";\n'
        )
        return CliRunner().invoke(
            main,
            [
                "transactions",
                "abort",
                "--bootstrap-server",
                acl_broker.bootstrap_servers,
                "--command-config",
                str(properties),
                "--topic",
                topic_name,
                "--partition",
                "0",
                "--start-offset",
                "0",
                "--force",  # the coordinator still tracks it: abort it anyway
            ],
        )

    refused = abort("bob")
    assert refused.exit_code != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.output.upper(), refused.output
    done = abort("admin")
    assert done.exit_code == 0, done.output


def test_a_brokers_add_partitions_to_txn_needs_cluster_action(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    """AddPartitionsToTxn v4+ comes from partition leaders (verify_only): Kafka asks
    ClusterAction for the whole request, whatever Write the principal has."""
    create_topic(acl_broker, kit, topic_name)
    txn_id = f"{topic_name}-txn"
    grant(acl_broker, kit, "alice", TXN, txn_id, Op.WRITE)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE)
    with connect(acl_broker, kit, "alice") as alice:
        code, producer_id, epoch = init_producer_id(alice, txn_id)
        assert code == ErrorCode.none
    question = {
        "transactions": [
            {
                "transactional_id": txn_id,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "verify_only": True,
                "topics": [{"name": topic_name, "partitions": [0]}],
            }
        ]
    }
    with connect(acl_broker, kit, "alice") as alice:
        answer = alice.request(ApiKey.ADD_PARTITIONS_TO_TXN, question, version=4)
        assert answer.error_code == ErrorCode.cluster_authorization_failed
    with connect(acl_broker, kit, "admin") as admin:  # a super user, as a broker would be
        answer = admin.request(ApiKey.ADD_PARTITIONS_TO_TXN, question, version=4)
        assert answer.error_code == ErrorCode.none
        (result,) = answer.results_by_transaction
        (partition,) = result.topic_results[0].results_by_partition
        # asked and answered: the partition is not in a transaction of the producer
        assert partition.partition_error_code == ErrorCode.invalid_txn_state


def test_send_offsets_to_transaction_needs_read_on_the_group(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    txn_id, group = f"{topic_name}-txn", f"{topic_name}-group"
    grant(acl_broker, kit, "alice", TXN, txn_id, Op.WRITE)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.WRITE, Op.READ)
    with connect(acl_broker, kit, "alice") as alice:
        answer = alice.request(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": txn_id,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        add = {
            "transactional_id": txn_id,
            "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch,
            "group_id": group,
        }
        assert alice.request(ApiKey.ADD_OFFSETS_TO_TXN, add).error_code == (
            ErrorCode.group_authorization_failed
        )
        commit = {
            "transactional_id": txn_id,
            "group_id": group,
            "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic_name,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        codes = [
            p.error_code
            for t in alice.request(ApiKey.TXN_OFFSET_COMMIT, commit).topics
            for p in t.partitions
        ]
        assert codes == [ErrorCode.group_authorization_failed]
    grant(acl_broker, kit, "alice", GROUP, group, Op.READ)
    with connect(acl_broker, kit, "alice") as alice:
        assert alice.request(ApiKey.ADD_OFFSETS_TO_TXN, add).error_code == ErrorCode.none


def test_describe_and_list_transactions_show_only_what_may_be_described(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    mine, theirs = f"{topic_name}-mine", f"{topic_name}-theirs"
    for txn_id in (mine, theirs):
        with connect(acl_broker, kit, "admin") as admin:
            admin.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": txn_id,
                    "transaction_timeout": 60_000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
    grant(acl_broker, kit, "alice", TXN, mine, Op.DESCRIBE)
    with connect(acl_broker, kit, "alice") as alice:
        listed = alice.request(
            ApiKey.LIST_TRANSACTIONS,
            {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
        )
        names = {t.transactional_id for t in listed.transaction_states}
        assert mine in names and theirs not in names
        assert set(Admin(alice).describe_transactions([mine])) == {mine}
        with pytest.raises(AdminError) as refused:
            Admin(alice).describe_transactions([theirs])
        assert refused.value.code == ErrorCode.transactional_id_authorization_failed


# -- consumer groups ------------------------------------------------------------------------


def test_a_group_consumer_needs_read_on_the_group_and_the_topic(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    create_topic(acl_broker, kit, topic_name)
    group = f"{topic_name}-group"
    grant(acl_broker, kit, "admin", TOPIC, topic_name, Op.WRITE)
    assert produce_error(acl_broker, kit, "admin", topic_name) is None
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.READ)
    grant(acl_broker, kit, "bob", TOPIC, topic_name, Op.READ)
    grant(acl_broker, kit, "alice", GROUP, group, Op.READ)

    def consume(user: str) -> tuple[list[bytes], list[int]]:
        errors: list[int] = []
        consumer = Consumer(
            client_config(acl_broker, kit, user)
            | {
                "group.id": group,
                "auto.offset.reset": "earliest",
                "error_cb": lambda e: errors.append(e.code()),
            }
        )
        consumer.subscribe([topic_name])
        values: list[bytes] = []
        deadline = time.monotonic() + 10
        while not values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(message.error().code())
                break
            values.append(message.value())
        consumer.close()
        return values, errors

    assert consume("alice") == ([b"v"], [])
    values, errors = consume("bob")
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors


def test_list_groups_shows_what_may_be_described(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    group = f"{topic_name}-group"
    grant(acl_broker, kit, "alice", GROUP, group, Op.READ)
    grant(acl_broker, kit, "alice", TOPIC, topic_name, Op.READ)
    create_topic(acl_broker, kit, topic_name)
    with connect(acl_broker, kit, "alice") as alice:
        commit = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [
                {
                    "name": topic_name,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        codes = [
            p.error_code
            for t in alice.request(ApiKey.OFFSET_COMMIT, commit).topics
            for p in t.partitions
        ]
        assert codes == [ErrorCode.none]
    for user, expected in (("alice", True), ("bob", False)):
        with connect(acl_broker, kit, user) as conn:
            listed = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
            assert (group in {g.group_id for g in listed.groups}) is expected


# -- the ACL and SCRAM APIs themselves ---------------------------------------------------------


def test_acl_apis_need_the_cluster_permissions(
    acl_broker: EmbeddedBroker, kit: SecurityKit, topic_name: str
) -> None:
    binding = AclBinding(
        ResourcePattern(TOPIC, topic_name, PatternType.LITERAL),
        AccessControlEntry("User:dave", "*", Op.READ, ALLOW),
    )
    refused = ErrorCode.cluster_authorization_failed
    with connect(acl_broker, kit, "dave") as conn:
        dave = Admin(conn)
        with pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED") as caught:
            dave.describe_acls(EVERY_ACL)
        assert caught.value.code == refused
        with pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED"):
            dave.create_acls([binding])
        with pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED"):
            dave.delete_acls([EVERY_ACL])
        with pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED"):
            dave.upsert_scram_credentials({"dave": "new"}, ["SCRAM-SHA-256"])
    grant(acl_broker, kit, "dave", CLUSTER, "kafka-cluster", Op.ALTER)
    with connect(acl_broker, kit, "dave") as conn:
        dave = Admin(conn)
        dave.create_acls([binding])
        assert binding in dave.describe_acls(EVERY_ACL)  # Alter implies Describe
        bad = AclBinding(ResourcePattern(CLUSTER, "other", PatternType.LITERAL), binding.entry)
        with pytest.raises(AdminError, match=r"INVALID_REQUEST.*kafka-cluster"):
            dave.create_acls([bad])
        only_this = AclBindingFilter(
            ResourcePatternFilter(TOPIC, topic_name, PatternType.LITERAL),
            AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY),
        )
        assert dave.delete_acls([only_this]) == [binding]
        assert binding not in dave.describe_acls(EVERY_ACL)


def test_acls_survive_a_restart(kit: SecurityKit, tmp_path: Path) -> None:
    config = kit.broker_config(["SASL_PLAINTEXT"], mechanisms=["PLAIN"], authorizer=True)
    with EmbeddedBroker(config=config, data_dir=tmp_path / "data") as broker:
        create_topic(broker, kit, "kept")
        grant(broker, kit, "alice", TOPIC, "kept", Op.WRITE)
        broker.restart()
        assert produce_error(broker, kit, "alice", "kept") is None
        refused = produce_error(broker, kit, "bob", "kept")
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    security = kit.client("SASL_PLAINTEXT", "bob", "PLAIN")
    with KafkaConnection(
        secure_broker.bootstrap_servers_for("SASL_PLAINTEXT"), security=security
    ) as bob:
        with pytest.raises(AdminError, match="SECURITY_DISABLED"):
            Admin(bob).describe_acls(EVERY_ACL)
