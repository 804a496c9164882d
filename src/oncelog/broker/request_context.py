"""What a handler knows about a request beyond its body: its header and who sent it.

Kafka's ``RequestContext``: the header, the authenticated principal, the client's address
(ACLs may name hosts) and the listener it came in on (Metadata answers with that
listener's addresses). Handlers receive it where they used to receive the bare header.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.protocol.codec import RequestHeader
from oncelog.security.principal import ANONYMOUS, KafkaPrincipal

__all__ = ["RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext(RequestHeader):
    """A request's header with who sent it: the authenticated principal, the client's
    address and the listener it came in on (what the authorizer decides on)."""

    principal: KafkaPrincipal = ANONYMOUS
    client_address: str = "127.0.0.1"
    listener: str = "PLAINTEXT"
