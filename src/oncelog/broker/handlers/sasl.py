"""SaslHandshake (17) and SaslAuthenticate (36) that reach the broker.

On a SASL listener the connection's authenticator takes these requests itself while the
client authenticates or re-authenticates (security/sasl.py). They reach a handler only
where no authentication can happen: on a PLAINTEXT or SSL listener, or once a SASL
connection is authenticated and re-authentication is not possible (no session lifetime,
or a second attempt within a second). Kafka answers ILLEGAL_SASL_STATE there, as here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext


async def handle_sasl_handshake(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}


async def handle_sasl_authenticate(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
