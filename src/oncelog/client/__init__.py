"""A small blocking Kafka-protocol client for admin tools and tests: one connection
(:class:`KafkaConnection`) and the admin requests every ``oncelog`` command uses
(:class:`Admin`). Producing and consuming are confluent-kafka's job."""

from oncelog.client.admin import Admin, AdminError
from oncelog.client.connection import KafkaConnection, ProtocolClientError

__all__ = ["Admin", "AdminError", "KafkaConnection", "ProtocolClientError"]
