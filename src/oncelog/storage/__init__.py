"""Segmented partition logs on disk, in Kafka's file layout (synchronous; no asyncio)."""

from oncelog.storage.log import AppendResult, LogConfig, PartitionLog, SegmentInfo
from oncelog.storage.recovery import RecoveryReport

__all__ = ["AppendResult", "LogConfig", "PartitionLog", "RecoveryReport", "SegmentInfo"]
