"""Kafka's topic name rules, so that every name oncelog accepts is one Kafka accepts too."""

from __future__ import annotations

import re
from collections.abc import Iterable

from oncelog.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249  # a partition directory "<topic>-<partition>" must fit in 255 bytes
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidTopicName(ValueError):
    """The broker answers it with INVALID_TOPIC_EXCEPTION (17)."""


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicName saying what is wrong with `name`, if anything."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"{name!r} is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        reason = f"it is {len(name)} characters long, the maximum is {MAX_NAME_LENGTH}"
    elif not _LEGAL.fullmatch(name):
        reason = f"{name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    else:
        return
    raise InvalidTopicName(f"Topic name is invalid: {reason}")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def check_creatable(name: str, *, internal: bool) -> None:
    """KafkaError as CreateTopics answers a name it refuses: INVALID_TOPIC_EXCEPTION for an
    illegal one, INVALID_REQUEST for an internal topic asked for by a client (``internal``:
    its coordinator creating it)."""
    try:
        validate_topic_name(name)
    except ValueError as exc:
        raise KafkaError(ErrorCode.invalid_topic_exception, str(exc)) from exc
    if is_internal(name) and not internal:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Creation of internal topic {name} is prohibited: the broker creates it "
            "when its coordinator is first looked up",
        )


def metric_name(name: str) -> str:
    """The name Kafka's metrics give the topic: '.' and '_' are the same there, so two
    topics whose metric names are equal collide (Kafka refuses to create the second one
    with INVALID_TOPIC_EXCEPTION)."""
    return name.replace(".", "_")


def collides(a: str, b: str) -> bool:
    return a != b and metric_name(a) == metric_name(b)


def find_collision(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic, other than `name` itself, that `name` collides with."""
    return next((t for t in existing if collides(name, t)), None)
