"""``oncelog.fsync.realtime.priority``: the broker's fsync threads run SCHED_FIFO at it where
the process may (default 1), at the normal policy with 0; out of 0-99 it is refused."""

from __future__ import annotations

import os

import pytest

from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.testing import EmbeddedBroker

from ..fsync_pools import fsync_threads, may_run_real_time, policies_of_new_threads


def _broker_fsync_policies(config: dict[str, str]) -> set[int]:
    before = fsync_threads()
    with EmbeddedBroker(config):
        return policies_of_new_threads(before)


def test_by_default_the_broker_fsyncs_on_sched_fifo_threads_where_it_may() -> None:
    assert BrokerConfig().fsync_realtime_priority == 1
    expected = os.SCHED_FIFO if may_run_real_time() else os.SCHED_OTHER
    assert _broker_fsync_policies({}) == {expected}


def test_priority_0_leaves_the_broker_fsync_threads_at_the_normal_policy() -> None:
    config = {"oncelog.fsync.realtime.priority": "0"}
    assert _broker_fsync_policies(config) == {os.SCHED_OTHER}


@pytest.mark.parametrize("value", ["-1", "100"])
def test_a_priority_out_of_sched_fifo_range_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"oncelog\.fsync\.realtime\.priority"):
        BrokerConfig({"oncelog.fsync.realtime.priority": value})
