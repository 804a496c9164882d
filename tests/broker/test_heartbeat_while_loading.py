"""A heartbeat that reaches a coordinator while the group's partition loads (a new
coordinator just after a failover) is answered NONE, as Kafka's group coordinator answers
it: the member keeps its place. Any other refusal reaches the member as it is."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.broker.handlers.groups import handle_heartbeat
from oncelog.protocol.errors import ErrorCode


def heartbeat_answer(refusal: ErrorCode) -> Any:
    async def run(group_id: str, operation: Any) -> ErrorCode:
        raise CoordinatorError(refusal, "refused")

    broker: Any = SimpleNamespace(authorizer=None, groups=SimpleNamespace(run=run))
    request = SimpleNamespace(group_id="g", generation_id=1, member_id="m")
    return asyncio.run(handle_heartbeat(broker, SimpleNamespace(), request))["error_code"]


def test_a_heartbeat_while_the_partition_loads_is_answered_none() -> None:
    assert heartbeat_answer(ErrorCode.coordinator_load_in_progress) == ErrorCode.none


def test_other_refusals_pass_through() -> None:
    assert heartbeat_answer(ErrorCode.not_coordinator) == ErrorCode.not_coordinator
    assert heartbeat_answer(ErrorCode.coordinator_not_available) == (
        ErrorCode.coordinator_not_available
    )
