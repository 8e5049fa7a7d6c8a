"""The asyncio variant: the same methods as coroutines, each run on a worker thread so the event
loop never blocks on the network (standard library only)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from .client import Collection, MemoryClient


class _Async:
    def __init__(self, inner: Any):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await asyncio.to_thread(target, *args, **kwargs)
            return AsyncCollection(result) if isinstance(result, Collection) else result

        return call


class AsyncCollection(_Async):
    """``Collection`` with every method awaitable."""


class AsyncMemoryClient(_Async):
    """``MemoryClient`` with every method awaitable; ``get_collection`` is immediate."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(MemoryClient(*args, **kwargs))

    def get_collection(self, collection_name: str, project_name: str = "default") -> AsyncCollection:
        return AsyncCollection(self._inner.get_collection(collection_name, project_name))
