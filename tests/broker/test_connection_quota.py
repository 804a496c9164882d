"""Connection limits: Kafka's max.connections, max.connections.per.ip and its overrides."""

from __future__ import annotations

import pytest

from oncelog.broker.config import ConfigError
from oncelog.broker.connection_quota import ConnectionQuota, parse_overrides, resolve_overrides


def test_the_broker_wide_limit_refuses_one_more_until_one_closes() -> None:
    quota = ConnectionQuota(2, 10, {})
    assert quota.admit("10.0.0.1") is None and quota.admit("10.0.0.2") is None
    refusal = quota.admit("10.0.0.3")
    assert refusal is not None and "maximum of 2 connections" in refusal
    quota.release("10.0.0.1")
    assert quota.admit("10.0.0.3") is None and quota.total == 2


def test_each_address_has_its_own_limit_and_overrides_replace_it() -> None:
    quota = ConnectionQuota(100, 1, {"10.0.0.9": 3})
    assert quota.admit("10.0.0.1") is None
    refusal = quota.admit("10.0.0.1")
    assert refusal is not None and refusal.startswith("10.0.0.1 already has")
    assert quota.admit("10.0.0.2") is None, "another address is not affected"
    assert [quota.admit("10.0.0.9") for _ in range(4)][-1] is not None
    assert quota.count("10.0.0.9") == 3 and quota.total == 5


def test_overrides_are_parsed_as_kafka_writes_them() -> None:
    assert parse_overrides("") == {}
    assert parse_overrides("hostA:10, 127.0.0.1:200,[::1]:5") == {
        "hostA": 10,
        "127.0.0.1": 200,
        "::1": 5,
    }


@pytest.mark.parametrize("text", ["hostA", "hostA:", ":5", "hostA:-1", "hostA:ten"])
def test_a_malformed_override_names_the_entry(text: str) -> None:
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        parse_overrides(text)


def test_a_host_name_counts_for_its_addresses() -> None:
    assert resolve_overrides({"localhost": 7}).get("127.0.0.1") == 7
    with pytest.raises(ConfigError, match="cannot resolve"):
        resolve_overrides({"no-such-host.invalid": 1})
