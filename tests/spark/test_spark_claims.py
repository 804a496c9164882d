"""The sink's claims, pure: what a claim record says, whose claims an attempt must fence.
(The protocol against a broker, with its controls: test_spark_producer_reuse.py.)"""

from __future__ import annotations

from oncelog.spark.claims import Claim, foreign_claims, writers_to_fence


def test_a_claim_round_trips_and_other_records_are_not_claims() -> None:
    claim = Claim("orders", 3, 41, "oncelog-sink-ab12")
    assert Claim.decode(claim.encode()) == claim
    for other in (None, b"", b"not json", b"[1, 2]", b'{"sink": "orders", "slot": "3"}'):
        assert Claim.decode(other) is None


def test_only_other_writers_of_the_same_sink_and_slot_are_foreign() -> None:
    records = [
        (10, Claim("orders", 3, 41, "w-a").encode()),
        (11, None),  # a record that is no claim
        (12, Claim("other-sink", 3, 41, "w-b").encode()),
        (13, Claim("orders", 4, 41, "w-c").encode()),  # another slot
        (14, Claim("orders", 3, 41, "me").encode()),  # this attempt's own writer
        (15, Claim("orders", 3, 40, "w-d").encode()),  # an earlier batch's claim counts too
        (16, Claim("orders", 3, 41, "w-a").encode()),
    ]
    assert foreign_claims(records, "orders", 3, "me") == [(10, "w-a"), (15, "w-d"), (16, "w-a")]


def test_claims_below_the_committed_claim_are_settled() -> None:
    found = [(10, "w-a"), (15, "w-d"), (16, "w-a"), (20, "w-e")]
    assert writers_to_fence(found, None) == ["w-a", "w-d", "w-e"]  # each writer once
    assert writers_to_fence(found, 15) == ["w-a", "w-e"]  # w-a claimed again after 15
    assert writers_to_fence(found, 20) == []
