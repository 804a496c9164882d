"""Creating and deleting topics, and adding partitions, in a cluster: validate as the
single node does, place the replicas (Kafka's round-robin), write the znodes; the
controller gives the partitions their leaders and every broker's watches open (or delete)
its replicas.

As in Kafka's ZooKeeper mode, CreateTopics, CreatePartitions and DeleteTopics are the
controller's (NOT_CONTROLLER elsewhere; clients send them to the controller named in
Metadata), while a topic auto-created by Metadata is written by whichever broker the
client asked.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oncelog.broker import config as cfg
from oncelog.broker.topic_names import check_creatable, find_collision, is_internal
from oncelog.cluster.placement import assign_new_partitions, assign_replicas, check_assignment
from oncelog.cluster.zookeeper import (
    NO_LEADER,
    ControllerMoved,
    NoSuchNode,
    TopicAssignment,
    TopicExists,
)
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)

DEFAULT = -1  # CreateTopics' "use the broker default" for partitions and replication factor


class TopicAdmin:
    """CreateTopics and DeleteTopics in a cluster, as the controller does them: validate,
    place the replicas, write the znodes."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node
        self._config = node.config
        self._random = random.Random()

    async def create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
        internal: bool = False,
    ) -> tuple[TopicAssignment, dict[str, str]]:
        """The new topic's assignment and validated configs (KafkaError as CreateTopics
        answers: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, ...).
        Internal topics are their coordinators' to create (``internal=True``), as on a
        single node."""
        cache = self._node.cache
        check_creatable(name, internal=internal)
        if name in cache.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        collision = find_collision(name, cache.topics)
        if collision is not None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"topic {name!r} collides with existing topic {collision!r}: "
                "'.' and '_' are interchangeable in metric names",
            )
        try:
            overrides = cfg.TopicConfig.validate(configs)
        except cfg.ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        live = sorted(cache.brokers)
        if assignments:
            if num_partitions != DEFAULT or replication_factor != DEFAULT:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "both a replica assignment and a partition count or replication factor "
                    "were given",
                )
            replicas = check_assignment(dict(assignments), live)
        else:
            partitions = (
                self._config.num_partitions if num_partitions == DEFAULT else num_partitions
            )
            factor = (
                self._config.default_replication_factor
                if replication_factor == DEFAULT
                else replication_factor
            )
            replicas = assign_replicas(
                live,
                partitions,
                factor,
                start_index=self._random.randrange(max(len(live), 1)),
                replica_shift=self._random.randrange(max(len(live), 1)),
            )
        assignment = TopicAssignment(name, uuid.uuid4(), replicas)
        if validate_only:
            return assignment, overrides
        try:
            await self._node.zk.create_topic(assignment, overrides)
        except TopicExists as exc:
            raise KafkaError(ErrorCode.topic_already_exists, str(exc)) from exc
        log.info(
            "created topic %s: %d partitions, replicas %s",
            name,
            len(replicas),
            {p: list(r) for p, r in sorted(replicas.items())},
        )
        return assignment, overrides

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        *,
        validate_only: bool,
    ) -> dict[int, tuple[int, ...]]:
        """CreatePartitions on the controller: the new partitions' replicas, written into
        the topic znode (fenced by the controller epoch, compare-and-set on the znode); the
        controller then elects their leaders like a new topic's, and the brokers assigned
        open them. KafkaError as Kafka answers (NOT_CONTROLLER, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_PARTITIONS for internal topics, and placement's errors)."""
        self.require_controller()
        controller = self._node.controller
        assert controller is not None
        if name not in self._node.cache.topics:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            )
        if is_internal(name):
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"The number of partitions for the internal topic {name} cannot be changed.",
            )
        live = sorted(self._node.cache.brokers)
        added: dict[int, tuple[int, ...]] = {}

        def grow(current: TopicAssignment) -> TopicAssignment:
            added.clear()
            added.update(assign_new_partitions(current.replicas, count, live, assignments))
            return TopicAssignment(current.name, current.topic_id, {**current.replicas, **added})

        if validate_only:
            grow(self._node.cache.topics[name])
            return added
        try:
            await controller.update_assignment(name, grow)
        except ControllerMoved:
            raise KafkaError(
                ErrorCode.not_controller,
                f"broker {self._node.broker_id} is no longer the controller",
            ) from None
        except NoSuchNode:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            ) from None
        log.info(
            "topic %s: partitions %s added, replicas %s",
            name,
            sorted(added),
            {p: list(r) for p, r in sorted(added.items())},
        )
        return added

    async def wait_for_leaders(self, name: str, timeout_s: float, partitions: int = 1) -> bool:
        """Whether ``name`` has at least ``partitions`` partitions, every one with a leader,
        in this broker's metadata within ``timeout_s`` (CreateTopics and CreatePartitions
        answer once clients can use them, as Kafka's DelayedCreatePartitions)."""
        cache = self._node.cache

        def led() -> bool:
            replicas = cache.partitions_of(name)
            return len(replicas) >= partitions and all(
                (state := cache.states.get((name, p))) is not None and state.leader != NO_LEADER
                for p in replicas
            )

        try:
            async with asyncio.timeout(timeout_s):
                while not led():
                    await cache.changed()
        except TimeoutError:
            return False
        return True

    async def delete(self, name: str) -> uuid.UUID:
        """Delete a topic's znodes (the controller only); its topic id."""
        controller = self._node.controller
        if controller is None:
            raise KafkaError(
                ErrorCode.not_controller, f"broker {self._node.broker_id} is not the controller"
            )
        assignment = self._node.cache.topics.get(name)
        if assignment is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if is_internal(name):
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Topic {name} is an internal topic: deleting it would lose the state of "
                "its coordinator",
            )
        await controller.delete_topic(name)
        log.info("deleted topic %s", name)
        return assignment.topic_id

    def require_controller(self) -> None:
        if self._node.controller is None:
            raise KafkaError(
                ErrorCode.not_controller,
                f"broker {self._node.broker_id} is not the controller "
                f"(broker {self._node.cache.controller_id} is)",
            )
