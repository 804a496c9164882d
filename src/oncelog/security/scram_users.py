"""DescribeUserScramCredentials and AlterUserScramCredentials decided over the stored
credentials: pure (the store persists what :func:`plan_alteration` returns).

The rules and messages are those of Kafka 3.x's ``ZkAdminManager`` (read for the rules):
an empty user name, an unknown mechanism or an iteration count outside 4096..16384 fail
that user; a (user, mechanism) pair named twice fails that user with DUPLICATE_RESOURCE
(Kafka 4 refuses any user named twice; oncelog, like Kafka 3, lets one request set both
SCRAM mechanisms of a user); deleting a credential that does not exist fails that user
with RESOURCE_NOT_FOUND. A user is altered entirely or not at all. The broker derives the
stored keys from the salt and salted password the client sends: passwords never travel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode
from oncelog.security.scram import MAX_ITERATIONS, ScramCredential, ScramMechanism

__all__ = [
    "Credentials",
    "Deletion",
    "DescribeResult",
    "Upsertion",
    "UserResult",
    "describe_credentials",
    "plan_alteration",
]

Credentials = Mapping[str, Mapping[ScramMechanism, ScramCredential]]

_EMPTY_USER = "Username must not be empty"
_UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
_TWICE = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True, slots=True)
class Upsertion:
    """An AlterUserScramCredentials upsertion: a user's salted password for one mechanism."""

    user: str
    mechanism: int  # the wire code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    """An AlterUserScramCredentials deletion: a user's credential for one mechanism."""

    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class UserResult:
    """The outcome of AlterUserScramCredentials for one user."""

    user: str
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeResult:
    """The outcome of DescribeUserScramCredentials for one user."""

    user: str
    error: ErrorCode
    message: str | None
    credentials: tuple[tuple[ScramMechanism, int], ...]  # (mechanism, iterations)


def _upsertion_error(upsertion: Upsertion) -> str | None:
    if not upsertion.user:
        return _EMPTY_USER
    mechanism = ScramMechanism.by_code(upsertion.mechanism)
    if mechanism is None:
        return _UNKNOWN_MECHANISM
    if upsertion.iterations > MAX_ITERATIONS:
        return "Too many iterations"
    if upsertion.iterations < mechanism.min_iterations:
        return "Too few iterations"
    return None


def _deletion_error(deletion: Deletion) -> str | None:
    if not deletion.user:
        return _EMPTY_USER
    return None if ScramMechanism.by_code(deletion.mechanism) else _UNKNOWN_MECHANISM


def plan_alteration(
    current: Credentials, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]
) -> tuple[dict[str, dict[ScramMechanism, ScramCredential]], list[UserResult]]:
    """The new credentials of every user that changes (an empty mapping: the user has no
    SCRAM credential left), and one result per user named."""
    results: dict[str, UserResult] = {}
    checked: list[tuple[Upsertion | Deletion, str | None]] = [
        *((d, _deletion_error(d)) for d in deletions),
        *((u, _upsertion_error(u)) for u in upsertions),
    ]
    changes: list[Upsertion | Deletion] = [*upsertions, *deletions]
    for change, message in checked:
        if message is not None:
            code = (
                ErrorCode.unsupported_sasl_mechanism
                if message == _UNKNOWN_MECHANISM
                else ErrorCode.unacceptable_credential
            )
            results[change.user] = UserResult(change.user, code, message)
    pairs = Counter(
        (change.user, change.mechanism) for change in changes if change.user not in results
    )
    for (user, _), count in pairs.items():
        if count > 1:
            results[user] = UserResult(user, ErrorCode.duplicate_resource, _TWICE)
    changed: dict[str, dict[ScramMechanism, ScramCredential]] = {}
    for user in dict.fromkeys(u for u, _ in pairs):
        if user not in results:
            changed[user] = dict(current.get(user, {}))
    for deletion in deletions:
        if deletion.user in changed:
            mechanism = ScramMechanism.by_code(deletion.mechanism)
            assert mechanism is not None
            if changed[deletion.user].pop(mechanism, None) is None:
                results[deletion.user] = UserResult(
                    deletion.user,
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
    for upsertion in upsertions:
        if upsertion.user in changed:
            mechanism = ScramMechanism.by_code(upsertion.mechanism)
            assert mechanism is not None
            changed[upsertion.user][mechanism] = ScramCredential.from_salted_password(
                mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
    for user in list(changed):
        if user in results:
            del changed[user]
        else:
            results[user] = UserResult(user, ErrorCode.none)
    return changed, list(results.values())


def _described(user: str, credentials: Mapping[ScramMechanism, ScramCredential]) -> DescribeResult:
    infos = tuple((m, credentials[m].iterations) for m in ScramMechanism if m in credentials)
    return DescribeResult(user, ErrorCode.none, None, infos)


def describe_credentials(current: Credentials, users: Sequence[str] | None) -> list[DescribeResult]:
    """Every user with a SCRAM credential (sorted) when ``users`` is None or empty, else
    one result per distinct user named, in the order named."""
    if not users:
        return [_described(user, current[user]) for user in sorted(current) if current[user]]
    counts = Counter(users)
    results = []
    for user in dict.fromkeys(users):
        if not user:
            results.append(DescribeResult(user, ErrorCode.resource_not_found, _EMPTY_USER, ()))
        elif counts[user] > 1:
            message = (
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}"
            )
            results.append(DescribeResult(user, ErrorCode.duplicate_resource, message, ()))
        elif current.get(user):
            results.append(_described(user, current[user]))
        else:
            message = f"Attempt to describe a user credential that does not exist: {user}"
            results.append(DescribeResult(user, ErrorCode.resource_not_found, message, ()))
    return results
