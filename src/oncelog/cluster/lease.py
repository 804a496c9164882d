"""How long this broker may still act on what its ZooKeeper session granted it.

ZooKeeper expires a session when it has heard nothing from the client for the session
timeout; the controller then moves the broker's leaderships elsewhere. A broker that was
paused (SIGSTOP, a long GC-like stall) or cut off does not know it yet: its event loop
resumes with requests queued, before its ZooKeeper client has reconnected and learnt that
the session is gone. Kafka's ZooKeeper mode has that window (a stale leader may take
acks=1 writes that are later truncated).

The lease closes it. Each successful round trip to ZooKeeper, sent at time t (monotonic)
on session s, proves ZooKeeper heard from s no earlier than t, so s cannot expire before
t + timeout: until then no other broker can have been given this broker's leaderships.
Past that instant the broker stops leading (refuses produce and consumer fetches with
NOT_LEADER_OR_FOLLOWER) until a new round trip on the same session renews the lease, or the
session is found lost. Pure: the caller passes the clock.
"""

from __future__ import annotations

__all__ = ["SessionLease"]


class SessionLease:
    """Until when this broker may act on what its ZooKeeper session granted it (see the module
    docstring); the caller passes the monotonic clock."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.session_id: int | None = None
        self._until = float("-inf")

    def grant(self, session_id: int, sent_at: float) -> None:
        """A registration made on ``session_id`` by a request sent at ``sent_at``."""
        self.session_id = session_id
        self._until = sent_at + self.timeout_s

    def renew(self, session_id: int | None, sent_at: float) -> None:
        """A round trip sent at ``sent_at`` succeeded on ``session_id``."""
        if session_id is not None and session_id == self.session_id:
            self._until = max(self._until, sent_at + self.timeout_s)

    def revoke(self) -> None:
        """The session is lost: nothing granted under it holds any more."""
        self.session_id = None
        self._until = float("-inf")

    def holds(self, now: float) -> bool:
        return now < self._until

    def remaining(self, now: float) -> float:
        return self._until - now
