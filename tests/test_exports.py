"""Every package's public API, chosen and pinned (trio's ``test_exports`` is the model).

Each package of ``oncelog`` names its public API in ``__all__``; the table below pins it,
so adding, renaming or dropping a public name is a deliberate change made here too. A new
package fails until it chooses its API. Modules that declare ``__all__`` must export what
they list, and every public class, in every module, says what it is for in a docstring.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import oncelog

PUBLIC_API: dict[str, list[str]] = {
    "oncelog": [],
    "oncelog.broker": ["Broker", "BrokerConfig", "ConfigError", "run_forever"],
    "oncelog.broker.handlers": ["by_api_key"],
    "oncelog.cli": ["main"],
    "oncelog.client": ["Admin", "AdminError", "KafkaConnection", "ProtocolClientError"],
    "oncelog.cluster": [],
    "oncelog.groups": [
        "ClassicGroupManager",
        "Completion",
        "CoordinatorRecord",
        "GroupConfig",
        "GroupCoordinatorShard",
        "GroupState",
        "HeartbeatRequest",
        "JoinGroupRequest",
        "JoinGroupResponse",
        "LeaveGroupRequest",
        "LeaveGroupResponse",
        "LeavingMember",
        "OffsetCommitPartition",
        "OffsetCommitRequest",
        "OffsetFetchResponse",
        "OffsetManager",
        "Protocol",
        "Result",
        "SyncGroupRequest",
        "SyncGroupResponse",
        "TxnOffsetCommitRequest",
        "decode_record",
    ],
    "oncelog.pipeline": ["ENRICHED_TOPIC", "ORDERS_TOPIC", "PARTITIONS"],
    "oncelog.producers": [
        "Append",
        "CorruptSnapshot",
        "Decision",
        "Duplicate",
        "ProducerIdAllocator",
        "ProducerStateEntry",
        "ProducerStateManager",
        "Refuse",
        "load_producer_state",
    ],
    "oncelog.protocol": [
        "SUPPORTED_VERSIONS",
        "ApiKey",
        "BatchHeader",
        "DecodedRecord",
        "ErrorCode",
        "KafkaError",
        "Record",
        "build_batch",
        "build_control_batch",
        "decode_records",
        "parse_header",
    ],
    "oncelog.security": ["ANONYMOUS", "KafkaPrincipal"],
    "oncelog.spark": [
        "AT_LEAST_ONCE",
        "EXACTLY_ONCE",
        "ClusterError",
        "DataLossError",
        "OncelogDataSource",
        "OptionError",
        "SinkGuaranteeError",
        "TopicNotFoundError",
        "register",
        "spark_schema",
    ],
    "oncelog.storage": [
        "AppendResult",
        "LogConfig",
        "PartitionLog",
        "RecoveryReport",
        "SegmentInfo",
    ],
    "oncelog.testing": [
        "BrokerProcess",
        "BrokerProcessError",
        "EmbeddedBroker",
        "FaultConfig",
        "FaultInjectionProxy",
        "LocalCluster",
        "ProxyStats",
        "ZooKeeperServer",
    ],
    "oncelog.transactions": [
        "VALID_PREVIOUS_STATES",
        "CoordinatorResult",
        "MarkerRequest",
        "TransactionCoordinatorShard",
        "TransactionMetadata",
        "TxnDescription",
        "TxnListing",
        "TxnLogFormatError",
        "TxnRecord",
        "TxnResponse",
        "TxnState",
        "TxnTransition",
        "client_error",
        "decode_key",
        "decode_record",
        "decode_value",
        "encode_key",
        "encode_value",
        "is_epoch_exhausted",
    ],
}

SOURCE = Path(oncelog.__file__).parent


def _tree() -> list[pkgutil.ModuleInfo]:
    """Every module and package below oncelog, except ``__main__`` (importing it runs the
    command)."""
    found = pkgutil.walk_packages(oncelog.__path__, prefix="oncelog.")
    return [m for m in found if not m.name.endswith(".__main__")]


PACKAGES = ["oncelog", *(m.name for m in _tree() if m.ispkg)]
MODULES = [m.name for m in _tree() if not m.ispkg]


def test_every_package_has_chosen_its_public_api() -> None:
    assert sorted(PACKAGES) == sorted(PUBLIC_API)


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_package_exports_are_pinned(name: str) -> None:
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert sorted(exported) == sorted(PUBLIC_API[name])
    for attribute in exported:
        assert not attribute.startswith("_"), attribute
        assert hasattr(package, attribute), f"{name}.__all__ lists {attribute!r}, not defined"


@pytest.mark.parametrize("name", MODULES)
def test_a_module_exports_what_its_all_lists(name: str) -> None:
    module = importlib.import_module(name)
    for attribute in getattr(module, "__all__", ()):
        assert hasattr(module, attribute), f"{name}.__all__ lists {attribute!r}, not defined"


def test_every_public_class_has_a_docstring() -> None:
    """Read from the source: a dataclass without one gets a generated ``__doc__``."""
    missing = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    missing.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}")
    assert missing == []
