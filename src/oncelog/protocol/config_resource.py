"""Kafka's ``ConfigResource.Type`` ids, shared by the broker's DescribeConfigs and
AlterConfigs handlers and the admin client that sends them."""

from __future__ import annotations

import enum

__all__ = ["ConfigResourceType"]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type``: what a configuration belongs to."""

    TOPIC = 2
    BROKER = 4  # resource name: a broker id, or '' for the cluster-wide default
