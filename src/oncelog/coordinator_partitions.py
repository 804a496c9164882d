"""Which partition of an internal topic coordinates a key (group id, transactional id).

Kafka's rule, so a client tool or a cluster agrees with us: ``Utils.abs(key.hashCode()) %
partitions``, where ``hashCode`` is Java's ``String.hashCode`` and ``Utils.abs`` maps
Integer.MIN_VALUE to 0 and negates other negative values (it does not mask the sign bit).
"""

from __future__ import annotations

_INT_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: 31*h + c over the UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"the number of partitions must be positive, got {num_partitions}")
    h = java_string_hash(key)
    return (0 if h == _INT_MIN else abs(h)) % num_partitions
