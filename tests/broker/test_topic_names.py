import pytest

from oncelog.broker.topic_names import (
    INTERNAL_TOPICS,
    InvalidTopicName,
    collides,
    find_collision,
    is_internal,
    validate_topic_name,
)


@pytest.mark.parametrize(
    "name", ["a", "orders", "Orders.v2", "my_topic-1", "...", ".a", "a" * 249, "__consumer_offsets"]
)
def test_valid_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        (".", "'.'"),
        ("..", "'..'"),
        ("a" * 250, "250 characters long, the maximum is 249"),
        ("a b", "characters other than"),
        ("a/b", "characters other than"),
        ("topic\n", "characters other than"),
        ("café", "characters other than"),
        ("٣", "characters other than"),  # a non-ASCII digit
    ],
)
def test_invalid_names(name: str, says: str) -> None:
    with pytest.raises(InvalidTopicName, match="Topic name is invalid") as e:
        validate_topic_name(name)
    assert says in str(e.value)
    assert isinstance(e.value, ValueError)


def test_internal_topics() -> None:
    assert INTERNAL_TOPICS == {"__consumer_offsets", "__transaction_state"}
    assert is_internal("__transaction_state")
    assert not is_internal("__transaction_state2")


def test_collisions() -> None:
    assert collides("a.b", "a_b")
    assert collides("a.b_c", "a_b.c")
    assert not collides("a.b", "a-b")
    assert not collides("ab", "a_b")
    assert not collides("a.b", "a.b")  # the same name is not a collision
    assert find_collision("a.b", ["x", "a_b"]) == "a_b"
    assert find_collision("a.b", ["a.b", "c"]) is None
    assert find_collision("ab", ["a_b"]) is None
