"""Request handlers, one module per API family.

A handler is `async def handle(broker, header, request) -> dict | None`, where `header`
is the request's RequestContext (header, principal, client address, listener): it reads the
versioned kio request and returns the response as a plain dict holding the newest
version's fields; the codec keeps the ones the client's version has. Handlers that change
state do so before their first `await`, so pipelined requests on one connection take
effect in the order they were sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from oncelog.broker.handlers import (
    acls,
    admin,
    api_versions,
    cluster,
    configs,
    fetch,
    find_coordinator,
    group_admin,
    groups,
    leader_epochs,
    list_offsets,
    log_dirs,
    metadata,
    partition_admin,
    produce,
    producers,
    sasl,
    scram_users,
    transactions,
    txn_admin,
)
from oncelog.protocol.api_versions import ApiKey

__all__ = ["by_api_key"]

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext


def by_api_key() -> dict[int, Callable[[Broker, RequestContext, Any], Awaitable[Any]]]:
    return {
        ApiKey.API_VERSIONS: api_versions.handle,
        ApiKey.METADATA: metadata.handle,
        ApiKey.CREATE_TOPICS: admin.handle_create_topics,
        ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
        ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
        ApiKey.PRODUCE: produce.handle,
        ApiKey.FETCH: fetch.handle,
        ApiKey.LIST_OFFSETS: list_offsets.handle,
        ApiKey.INIT_PRODUCER_ID: transactions.handle_init_producer_id,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: leader_epochs.handle,
        ApiKey.FIND_COORDINATOR: find_coordinator.handle,
        ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions,
        ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets,
        ApiKey.END_TXN: transactions.handle_end_txn,
        ApiKey.TXN_OFFSET_COMMIT: groups.handle_txn_offset_commit,
        ApiKey.JOIN_GROUP: groups.handle_join_group,
        ApiKey.SYNC_GROUP: groups.handle_sync_group,
        ApiKey.HEARTBEAT: groups.handle_heartbeat,
        ApiKey.LEAVE_GROUP: groups.handle_leave_group,
        ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
        ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
        ApiKey.LIST_GROUPS: groups.handle_list_groups,
        ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
        ApiKey.DESCRIBE_PRODUCERS: producers.handle_describe_producers,
        ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle,
        ApiKey.WRITE_TXN_MARKERS: txn_admin.handle_write_txn_markers,
        ApiKey.DESCRIBE_TRANSACTIONS: txn_admin.handle_describe_transactions,
        ApiKey.LIST_TRANSACTIONS: txn_admin.handle_list_transactions,
        ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
        ApiKey.CREATE_PARTITIONS: partition_admin.handle_create_partitions,
        ApiKey.DELETE_RECORDS: partition_admin.handle_delete_records,
        ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
        ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
        ApiKey.CREATE_ACLS: acls.handle_create_acls,
        ApiKey.DELETE_ACLS: acls.handle_delete_acls,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_users.handle_describe_user_scram_credentials,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_users.handle_alter_user_scram_credentials,
        ApiKey.DELETE_GROUPS: group_admin.handle_delete_groups,
        ApiKey.OFFSET_DELETE: group_admin.handle_offset_delete,
        ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
        ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    }
