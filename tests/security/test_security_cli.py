"""`oncelog users` and `oncelog acls` against secured brokers, with --command-config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient

from oncelog.cli.main import main
from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import SecurityKit


def properties(tmp_path: Path, kit: SecurityKit, user: str) -> Path:
    """A client properties file in Kafka's Java names, as kafka-configs would take it."""
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{kit.users[user]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={kit.authority.ca_file}\n"
    )
    return path


def as_admin(broker: EmbeddedBroker, kit: SecurityKit, tmp_path: Path) -> list[str]:
    """The options that point a command at the SASL_SSL listener as the admin user."""
    return [
        "--bootstrap-server",
        broker.bootstrap_servers_for("SASL_SSL"),
        "--command-config",
        str(properties(tmp_path, kit, "admin")),
    ]


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_users_set_list_and_delete(
    secure_broker: EmbeddedBroker, kit: SecurityKit, tmp_path: Path
) -> None:
    target = as_admin(secure_broker, kit, tmp_path)
    set_result = run(
        "users",
        "set",
        *target,
        "--user",
        "erin",
        "--password",
        "e-secret",
        "--mechanism",
        "SCRAM-SHA-512",
        "--iterations",
        "8192",
    )
    assert set_result.exit_code == 0, set_result.output
    listed = run("users", "list", *target, "--user", "erin", "--json")
    assert json.loads(listed.output) == [
        {
            "user": "erin",
            "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}],
            "error": None,
        }
    ]
    erin = {
        "bootstrap.servers": secure_broker.bootstrap_servers_for("SASL_SSL"),
        **kit.client("SASL_SSL", "alice", "SCRAM-SHA-512").librdkafka(),
        "sasl.username": "erin",
        "sasl.password": "e-secret",
    }
    assert AdminClient(erin).list_topics(timeout=10).brokers  # erin can log in
    assert run("users", "delete", *target, "--user", "erin").exit_code == 0
    gone = run("users", "list", *target, "--user", "erin", "--json")
    assert "RESOURCE_NOT_FOUND" in json.loads(gone.output)[0]["error"]


def test_users_set_gives_both_mechanisms_by_default(
    secure_broker: EmbeddedBroker, kit: SecurityKit, tmp_path: Path
) -> None:
    target = as_admin(secure_broker, kit, tmp_path)
    for mechanisms in ([], ["--mechanism", "SCRAM-SHA-256", "--mechanism", "scram-sha-256"]):
        result = run("users", "set", *target, "--user", "frank", "--password", "f", *mechanisms)
        assert result.exit_code == 0, result.output
    listed = run("users", "list", *target, "--user", "frank", "--json")
    (frank,) = json.loads(listed.output)
    assert [c["mechanism"] for c in frank["credentials"]] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert run("users", "delete", *target, "--user", "frank").exit_code == 0
    gone = run("users", "list", *target, "--user", "frank", "--json")
    assert "RESOURCE_NOT_FOUND" in json.loads(gone.output)[0]["error"]


def test_users_set_refuses_too_few_iterations(
    secure_broker: EmbeddedBroker, kit: SecurityKit, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "users",
            "set",
            "--bootstrap-server",
            secure_broker.bootstrap_servers_for("SASL_SSL"),
            "--command-config",
            str(properties(tmp_path, kit, "admin")),
            "--user",
            "dave",
            "--password",
            "x",
            "--iterations",
            "100",
        ],
    )
    assert result.exit_code == 2 and "4096" in result.output


def test_a_wrong_command_config_is_one_clear_error(
    secure_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    result = CliRunner().invoke(
        main,
        [
            "topics",
            "list",
            "--bootstrap-server",
            secure_broker.bootstrap_servers_for("SASL_SSL"),
            "--command-config",
            str(bad),
        ],
    )
    assert result.exit_code == 2 and "sasl.mechanism=GSSAPI" in result.output


@pytest.fixture
def admin_plain(tmp_path: Path, kit: SecurityKit) -> Path:
    path = tmp_path / "admin-plain.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
        f"sasl.password={kit.users['admin']}\n"
    )
    return path


def test_acls_add_list_and_remove(
    acl_broker: EmbeddedBroker, admin_plain: Path, topic_name: str
) -> None:
    target = [
        "--bootstrap-server",
        acl_broker.bootstrap_servers,
        "--command-config",
        str(admin_plain),
    ]
    added = run(
        "acls",
        "add",
        *target,
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Write",
        "--topic",
        topic_name,
        "--resource-pattern-type",
        "prefixed",
    )
    assert added.exit_code == 0, added.output
    listed = json.loads(run("acls", "list", *target, "--topic", topic_name, "--json").output)
    assert sorted(a["operation"] for a in listed) == ["Read", "Write"]
    assert {a["pattern_type"] for a in listed} == {"PREFIXED"}
    # MATCH finds the prefixed ACLs that apply to a topic under the prefix.
    matching = run(
        "acls",
        "list",
        *target,
        "--topic",
        f"{topic_name}-x",
        "--resource-pattern-type",
        "match",
        "--json",
    )
    assert len(json.loads(matching.output)) == 2
    removed = run(
        "acls", "remove", *target, "--topic", topic_name, "--operation", "Write", "--json"
    )
    assert [a["operation"] for a in json.loads(removed.output)] == ["Write"]
    left = json.loads(run("acls", "list", *target, "--topic", topic_name, "--json").output)
    assert [a["operation"] for a in left] == ["Read"]


def test_acls_refused_for_a_principal_without_alter(
    acl_broker: EmbeddedBroker, kit: SecurityKit, tmp_path: Path, topic_name: str
) -> None:
    bob = tmp_path / "bob.properties"
    bob.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username=bob\nsasl.password={kit.users['bob']}\n"
    )
    result = CliRunner().invoke(
        main,
        [
            "acls",
            "add",
            "--bootstrap-server",
            acl_broker.bootstrap_servers,
            "--command-config",
            str(bob),
            "--allow-principal",
            "User:bob",
            "--operation",
            "All",
            "--cluster",
        ],
    )
    assert result.exit_code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in result.output


@pytest.mark.parametrize(
    "narrowing", [[], ["--operation", "Write"], ["--resource-pattern-type", "prefixed"]]
)
def test_acls_remove_refuses_to_remove_every_acl(narrowing: list[str]) -> None:
    """Without a resource or a principal the filter would match every ACL of the cluster:
    refused before anything is sent (the bootstrap address has no broker)."""
    result = CliRunner().invoke(
        main, ["acls", "remove", "--bootstrap-server", "127.0.0.1:1", *narrowing]
    )
    assert result.exit_code == 2 and "removing every ACL is refused" in result.output
