"""Run a coordinator's load the first time anything needs it, and only once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LoadOnce:
    def __init__(self, load: Callable[[], None]) -> None:
        self._load = load
        self._loaded: asyncio.Future[None] | None = None

    @property
    def done(self) -> bool:
        return self._loaded is not None and self._loaded.done() and self._loaded.exception() is None

    async def wait(self) -> None:
        """Load on the first call; every call returns once the load finished."""
        if self._loaded is None:
            self._loaded = asyncio.get_running_loop().create_future()
            try:
                self._load()
            except BaseException as exc:
                self._loaded.set_exception(exc)
                raise
            self._loaded.set_result(None)
        await self._loaded
