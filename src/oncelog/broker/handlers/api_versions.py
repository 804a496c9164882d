"""ApiVersions: what this broker speaks (unsupported versions are answered by the server)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.api_versions import SUPPORTED_VERSIONS
from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        ],
        "throttle_time": 0,
    }
