"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

Decisions are the pure ones of security/scram_users.py; the broker's credential store
persists the users that change (in the data directory) before the answer, so an
acknowledged user survives a crash. Kafka asks for Describe (describe) and Alter (alter)
on the Cluster resource.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize_cluster
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation
from oncelog.security.scram_users import (
    Deletion,
    Upsertion,
    describe_credentials,
    plan_alteration,
)

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext


async def handle_describe_user_scram_credentials(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if not authorize_cluster(broker, header, AclOperation.DESCRIBE):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None,
            "results": [],
        }
    names = None if request.users is None else [user.name for user in request.users]
    results = describe_credentials(broker.scram.credentials, names)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": [
            {
                "user": result.user,
                "error_code": result.error,
                "error_message": result.message,
                "credential_infos": [
                    {"mechanism": mechanism.code, "iterations": iterations}
                    for mechanism, iterations in result.credentials
                ],
            }
            for result in results
        ],
    }


async def handle_alter_user_scram_credentials(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    upsertions = [
        Upsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
        for u in request.upsertions
    ]
    deletions = [Deletion(d.name, d.mechanism) for d in request.deletions]
    if not authorize_cluster(broker, header, AclOperation.ALTER):
        return _every_user_failed(upsertions, deletions, ErrorCode.cluster_authorization_failed)
    try:
        with answered_per_resource("AlterUserScramCredentials"):
            results = await broker.scram.update(
                lambda current: plan_alteration(current, upsertions, deletions)
            )
    except KafkaError as exc:
        return _every_user_failed(upsertions, deletions, exc.code, exc.message)
    return {
        "throttle_time": 0,
        "results": [
            {"user": r.user, "error_code": r.error, "error_message": r.message} for r in results
        ],
    }


def _every_user_failed(
    upsertions: list[Upsertion],
    deletions: list[Deletion],
    code: ErrorCode,
    message: str | None = None,
) -> dict[str, Any]:
    """The answer when no change of the request could be made: each user named once."""
    changes: list[Upsertion | Deletion] = [*upsertions, *deletions]
    users = dict.fromkeys(change.user for change in changes)
    return {
        "throttle_time": 0,
        "results": [{"user": u, "error_code": code, "error_message": message} for u in users],
    }
