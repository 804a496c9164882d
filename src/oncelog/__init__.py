"""oncelog: an event log with exactly-once semantics that speaks the Kafka protocol.

The public API lives in the subpackages (each chooses it in its ``__all__``, pinned by
``tests/test_exports.py``): :mod:`oncelog.testing` for tests, :mod:`oncelog.spark` for
PySpark, :mod:`oncelog.client` for admin tools, :mod:`oncelog.broker` to run a broker.
"""

__all__: list[str] = []
