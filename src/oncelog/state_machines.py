"""What every state machine of the cores shares.

The transaction metadata (:mod:`oncelog.transactions.state`) and the classic consumer group
(:mod:`oncelog.groups.classic_group`) each keep a read-only table of the states a state may
be entered from. A transition the table forbids is never the client's fault: the handlers
refuse bad requests with a Kafka error code first, so reaching one is a bug in the core,
and both raise the same :class:`IllegalTransition`.
"""

from __future__ import annotations

__all__ = ["IllegalTransition"]


class IllegalTransition(RuntimeError):
    """A transition a state table forbids, or state that breaks an invariant: a bug in the
    core that raised it, never the client's (its requests are refused with error codes)."""
