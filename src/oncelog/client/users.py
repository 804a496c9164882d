"""SCRAM users through the broker: DescribeUserScramCredentials and
AlterUserScramCredentials, as Kafka's admin client sends them (the password is salted and
hashed here, on the client: only the salted password travels, never the password)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.scram import DEFAULT_ITERATIONS, ScramMechanism, salted_password

__all__ = [
    "ScramUser",
    "UserChangeError",
    "delete_scram_credentials",
    "describe_scram_users",
    "upsert_scram_credentials",
]


class UserChangeError(ProtocolClientError):
    """The broker refused a change of some users; the message names each."""


@dataclass(frozen=True)
class ScramUser:
    """One user as DescribeUserScramCredentials reports it: its mechanisms and iterations."""

    user: str
    credentials: tuple[tuple[str, int], ...]  # (mechanism name, iterations)
    error: str | None = None  # the broker's refusal, e.g. an unknown user


def _mechanism(name: str) -> ScramMechanism:
    mechanism = ScramMechanism.by_name(name.upper())
    if mechanism is None:
        raise ProtocolClientError(f"{name} is not SCRAM-SHA-256 or SCRAM-SHA-512")
    return mechanism


def _check(response: object) -> None:
    failures = [
        f"{r.user}: {r.error_code.name.upper()} {r.error_message or ''}".strip()
        for r in response.results  # type: ignore[attr-defined]
        if r.error_code != ErrorCode.none
    ]
    if failures:
        raise UserChangeError("; ".join(failures))


def upsert_scram_credentials(
    connection: KafkaConnection,
    passwords: Mapping[str, str],
    mechanism: str,
    iterations: int = DEFAULT_ITERATIONS,
) -> None:
    """Create or replace the ``mechanism`` credential of each user with its password."""
    scram = _mechanism(mechanism)
    upsertions = []
    for user, password in passwords.items():
        salt = secrets.token_bytes(32)
        upsertions.append(
            {
                "name": user,
                "mechanism": scram.code,
                "iterations": iterations,
                "salt": salt,
                "salted_password": salted_password(scram, password, salt, iterations),
            }
        )
    request = {"deletions": [], "upsertions": upsertions}
    _check(connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request))


def delete_scram_credentials(
    connection: KafkaConnection, users: Sequence[str], mechanism: str
) -> None:
    scram = _mechanism(mechanism)
    deletions = [{"name": user, "mechanism": scram.code} for user in users]
    request = {"deletions": deletions, "upsertions": []}
    _check(connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request))


def describe_scram_users(
    connection: KafkaConnection, users: Sequence[str] | None = None
) -> list[ScramUser]:
    """Every user with SCRAM credentials (``users`` None), or those named."""
    named = None if users is None else [{"name": user} for user in users]
    response = connection.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": named})
    if response.error_code != ErrorCode.none:
        raise ProtocolClientError(
            f"DescribeUserScramCredentials: {response.error_code.name.upper()} "
            f"{response.error_message or ''}".strip()
        )
    found = []
    for result in response.results:
        mechanisms = tuple(
            (_name(info.mechanism), info.iterations) for info in result.credential_infos
        )
        error = None
        if result.error_code != ErrorCode.none:
            error = f"{result.error_code.name.upper()} {result.error_message or ''}".strip()
        found.append(ScramUser(result.user, mechanisms, error))
    return found


def _name(code: int) -> str:
    mechanism = ScramMechanism.by_code(code)
    return mechanism.mechanism_name if mechanism else f"UNKNOWN({code})"
