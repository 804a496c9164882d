"""The ids Kafka's config requests carry, shared by the broker's DescribeConfigs and
(Incremental)AlterConfigs handlers and the admin client that sends them."""

from __future__ import annotations

import enum

__all__ = ["ConfigResourceType", "OpType"]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type``: what a configuration belongs to."""

    TOPIC = 2
    BROKER = 4  # resource name: a broker id, or '' for the cluster-wide default


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs operations (Kafka's ``AlterConfigOp.OpType`` ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
