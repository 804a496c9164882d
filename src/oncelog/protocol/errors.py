"""Kafka error codes and the exception that carries one.

The code table itself is kio's (generated from Kafka's own ``Errors`` list, with the
retriable flag and the message); this module is the one place the rest of oncelog
imports it from, so the codec can be replaced without touching callers.

``ErrorCode`` is imported from kio when first asked for, not with this module: importing
any of kio imports its static types, and with them hypothesis's strategies when hypothesis
is installed (every development venv). The record batch and its codecs, which Spark's
Python workers use to read compressed batches, raise these errors only on a fault, so a
worker reading good batches never imports kio (tests/protocol/test_kio_free.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.lazy_names import lazy_names

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]

__getattr__, __dir__ = lazy_names(__name__, {"ErrorCode": "kio.schema.errors"}, globals())


class KafkaError(Exception):
    """A request-level failure that maps to one Kafka error code.

    Raised by cores and storage; the broker converts it into the response's error
    field, so the message reaches logs and (where the API has one) the client.
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        self.message = message or code.name.replace("_", " ")
        super().__init__(f"{code.name.upper()}: {self.message}")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as what it holds, not as a call of its constructor with ``args``:
        ``args`` is the formatted text, and subclasses take other parameters (a codec, a
        message alone), so the default pickling raised on load. A worker process hands
        its error to its parent this way (multiprocessing, concurrent.futures)."""
        return (_unpickled, (type(self), self.args, self.__dict__))


def _unpickled(
    cls: type[KafkaError], args: tuple[object, ...], state: dict[str, object]
) -> KafkaError:
    """``cls`` as `KafkaError.__reduce__` pickled it, without calling its constructor."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
