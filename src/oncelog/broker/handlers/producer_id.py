"""InitProducerId for idempotent producers (no transactional.id)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader


async def handle(broker: "Broker", header: "RequestHeader", request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        # Transactions need the transaction coordinator, which this broker does not run
        # yet; the non-retriable code makes the client fail fast instead of looping.
        return _error(ErrorCode.transactional_id_authorization_failed)
    assert broker.producer_ids is not None
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": broker.producer_ids.allocate(),
        "producer_epoch": 0,
    }


def _error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
