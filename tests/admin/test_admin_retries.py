"""The admin client's retry policy on its own (tests/cluster/test_admin_failover.py shows it
through a real failover): which answers are asked again, with what backoff, for how long."""

from __future__ import annotations

import pytest

from oncelog.client import admin as admin_module
from oncelog.client.admin import Admin, AdminError, BrokerUnreachable, _retried_while_moving
from oncelog.protocol.errors import ErrorCode


class Clock:
    """time.monotonic and time.sleep for the admin module: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(admin_module.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(admin_module.time, "sleep", clock.sleep)
    return clock


class Scripted(Admin):
    """An admin call that fails with the given errors, in turn, then answers."""

    def __init__(self, errors: list[AdminError], api_timeout_s: float = 60.0) -> None:
        super().__init__(None, api_timeout_s)  # type: ignore[arg-type]  # it never connects
        self.errors = errors
        self.calls = 0

    @_retried_while_moving
    def ask(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


def moved(code: ErrorCode) -> AdminError:
    return AdminError(f"group 'g': {code.name.upper()}", code)


def test_answers_that_say_something_moved_are_asked_again_with_backoff(clock: Clock) -> None:
    errors = [
        moved(ErrorCode.not_coordinator),
        BrokerUnreachable("cannot connect to 127.0.0.1:1"),
        moved(ErrorCode.coordinator_load_in_progress),
        moved(ErrorCode.not_leader_or_follower),
        moved(ErrorCode.leader_not_available),
        moved(ErrorCode.not_controller),
        moved(ErrorCode.coordinator_not_available),
    ]
    admin = Scripted(errors)
    assert admin.ask() == "answer"
    assert admin.calls == 8
    assert clock.sleeps == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]  # Kafka's backoff, capped


@pytest.mark.parametrize(
    "code",
    [ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found, ErrorCode.invalid_request],
)
def test_other_refusals_are_final(clock: Clock, code: ErrorCode) -> None:
    admin = Scripted([moved(code)])
    with pytest.raises(AdminError) as refused:
        admin.ask()
    assert refused.value.code is code
    assert admin.calls == 1
    assert clock.sleeps == []


def test_the_last_refusal_is_raised_once_the_api_timeout_is_spent(clock: Clock) -> None:
    admin = Scripted([moved(ErrorCode.not_coordinator)] * 100, api_timeout_s=3.0)
    with pytest.raises(AdminError) as refused:
        admin.ask()
    assert refused.value.code is ErrorCode.not_coordinator
    assert clock.sleeps == [0.1, 0.2, 0.4, 0.8, 1.0]  # the next 1 s would pass 3 s
    assert admin.calls == 6


def test_no_retry_with_an_api_timeout_of_zero(clock: Clock) -> None:
    admin = Scripted([moved(ErrorCode.not_coordinator)], api_timeout_s=0)
    with pytest.raises(AdminError):
        admin.ask()
    assert admin.calls == 1
