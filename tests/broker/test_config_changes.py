"""The pure rules of AlterConfigs / IncrementalAlterConfigs (Kafka 4.x's errors)."""

from __future__ import annotations

import pytest

from oncelog.broker.config import BrokerConfig, ConfigError, validate_dynamic
from oncelog.broker.config_changes import (
    ConfigChange,
    OpType,
    apply_ops,
    check_broker_name,
    duplicate_resources,
    preflight,
)
from oncelog.protocol.errors import ErrorCode, KafkaError


def ops(current: dict[str, str], *changes: ConfigChange) -> dict[str, str]:
    return apply_ops(
        current,
        changes,
        is_list=lambda key: {"cleanup.policy": True, "segment.ms": False}.get(key),
        effective=lambda key: {"cleanup.policy": "delete"}.get(key),
    )


def test_set_delete_append_subtract() -> None:
    assert ops({"segment.ms": "1"}, ConfigChange("segment.ms", "2")) == {"segment.ms": "2"}
    assert ops({"segment.ms": "1"}, ConfigChange("segment.ms", None, OpType.DELETE)) == {}
    assert ops({}, ConfigChange("cleanup.policy", "compact", OpType.APPEND)) == {
        "cleanup.policy": "delete,compact"
    }
    assert ops(
        {"cleanup.policy": "delete,compact"},
        ConfigChange("cleanup.policy", "compact,delete", OpType.APPEND),
    ) == {"cleanup.policy": "delete,compact"}
    assert ops(
        {"cleanup.policy": "delete,compact"},
        ConfigChange("cleanup.policy", "delete", OpType.SUBTRACT),
    ) == {"cleanup.policy": "compact"}


def test_append_to_a_scalar_or_unknown_key_is_invalid_config() -> None:
    for name in ("segment.ms", "no.such.key"):
        with pytest.raises(KafkaError) as refused:
            ops({}, ConfigChange(name, "1", OpType.APPEND))
        assert refused.value.code == ErrorCode.invalid_config


@pytest.mark.parametrize(
    "changes",
    [
        [ConfigChange("a", "1"), ConfigChange("a", "2")],
        [ConfigChange("a", None)],
        [ConfigChange("a", "1", 9)],
    ],
)
def test_preflight_refusals_are_invalid_request(changes: list[ConfigChange]) -> None:
    with pytest.raises(KafkaError) as refused:
        preflight(changes)
    assert refused.value.code == ErrorCode.invalid_request


def test_resources_named_twice_and_broker_names() -> None:
    assert duplicate_resources([(2, "t"), (4, ""), (2, "t")]) == {(2, "t")}
    assert check_broker_name("", 0) is False and check_broker_name("0", 0) is True
    for name in ("1", "zero"):
        with pytest.raises(KafkaError) as refused:
            check_broker_name(name, 0)
        assert refused.value.code == ErrorCode.invalid_request


def test_dynamic_layers_take_precedence_and_only_dynamic_keys() -> None:
    config = BrokerConfig.load(None, {"log.retention.ms": "1000"})
    config.set_dynamic(validate_dynamic({"log.retention.ms": "2000"}), per_broker=False)
    assert config.get("log.retention.ms") == 2000
    config.set_dynamic(validate_dynamic({"log.retention.ms": "3000"}), per_broker=True)
    assert config.get("log.retention.ms") == 3000
    assert [value for _, value in config.layers("log.retention.ms")] == [3000, 2000, 1000]
    for bad in ({"num.partitions": "3"}, {"no.such": "1"}, {"log.retention.ms": "x"}):
        with pytest.raises(ConfigError):
            validate_dynamic(bad)
