"""What AlterConfigs and IncrementalAlterConfigs change, decided without touching the
broker: pure functions from a resource's current settings and the request's operations
to its new settings, or the error Kafka 4.x answers (``ConfigAdminManager.preprocess``,
``prepareIncrementalConfigs``, ``ControllerConfigurationValidator``).

The caller (``handlers/configs.py``) applies a result: persists it and brings the
running partitions and services up to date.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from oncelog.protocol.configs import OpType
from oncelog.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ConfigChange",
    "OpType",
    "apply_ops",
    "check_broker_name",
    "duplicate_resources",
    "preflight",
]


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One entry of a request: AlterConfigs entries are all SET."""

    name: str
    value: str | None
    op: int = OpType.SET


def duplicate_resources(resources: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
    """Resources named more than once: Kafka refuses each of them."""
    seen: set[tuple[int, str]] = set()
    twice = set()
    for resource in resources:
        if resource in seen:
            twice.add(resource)
        seen.add(resource)
    return twice


def preflight(changes: Sequence[ConfigChange]) -> None:
    """The checks Kafka makes before looking at any value: INVALID_REQUEST."""
    names = [c.name for c in changes]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    unknown_ops = [c.op for c in changes if c.op not in OpType._value2member_map_]
    if unknown_ops:
        raise KafkaError(ErrorCode.invalid_request, f"Unknown operations type {unknown_ops[0]}")
    nulls = [c.name for c in changes if c.value is None and c.op != OpType.DELETE]
    if nulls:
        raise KafkaError(
            ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls)
        )


def check_broker_name(name: str, node_id: int) -> bool:
    """Whether the broker resource ``name`` is this node (True) or the cluster-wide
    default (False, the empty name); INVALID_REQUEST otherwise."""
    if name == "":
        return False
    try:
        named = int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
        ) from None
    if named != node_id:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id}, but received {name}",
        )
    return True


def apply_ops(
    current: Mapping[str, str],
    changes: Sequence[ConfigChange],
    *,
    is_list: Callable[[str], bool | None],
    effective: Callable[[str], str | None],
) -> dict[str, str]:
    """The settings after applying ``changes`` in order (Kafka's
    ``prepareIncrementalConfigs``): SET replaces, DELETE removes (the default returns),
    APPEND adds list items not yet there, SUBTRACT removes list items. APPEND and
    SUBTRACT start from the current value, or the effective one when the key is not set
    here. ``is_list`` answers None for an unknown name."""
    result = dict(current)
    for change in changes:
        if change.op == OpType.SET:
            assert change.value is not None
            result[change.name] = change.value
        elif change.op == OpType.DELETE:
            result.pop(change.name, None)
        else:
            verb = "append" if change.op == OpType.APPEND else "subtract"
            kind = is_list(change.name)
            if kind is None:
                raise KafkaError(ErrorCode.invalid_config, f"Unknown config name: {change.name}")
            if not kind:
                raise KafkaError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {change.name}",
                )
            old = result.get(change.name, effective(change.name) or "")
            items = [i for i in old.split(",") if i]
            given = [i for i in (change.value or "").split(",") if i]
            if change.op == OpType.APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            result[change.name] = ",".join(items)
    return result
