"""The asyncio flavour of the suite's clients and workers, behind the sync interfaces.

A test parametrized over both flavours keeps its sync body: :class:`Blocking` runs each
:class:`pgfence.aio.AsyncClient` coroutine method to completion on a :class:`LoopThread`,
and :class:`AsyncWorkerOnLoop` runs a :class:`pgfence.aio.AsyncWorker` there, with the
``run()``/``stop()``/``client``/``counters`` of a :class:`pgfence.Worker`.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, Callable, Optional, TypeVar

from pgfence.aio import AsyncClient, AsyncWorker

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread; ``run(coro)`` waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class Blocking:
    """An AsyncClient whose coroutine methods are called like the sync Client's (each run
    to completion on ``loop``); other attributes pass through."""

    def __init__(self, client: AsyncClient, loop: LoopThread, *, owns_loop: bool = False) -> None:
        self.aio = client
        self._loop = loop
        self._owns_loop = owns_loop

    @classmethod
    def connect(cls, dsn: str, **options: Any) -> "Blocking":
        loop = LoopThread()
        return cls(loop.run(AsyncClient.connect(dsn, **options)), loop, owns_loop=True)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.aio, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(attr(*args, **kwargs))
        return call

    def close(self) -> None:
        self._loop.run(self.aio.close())
        if self._owns_loop:
            self._loop.close()


class AsyncWorkerOnLoop:
    """An AsyncWorker (and its AsyncClient) on a loop thread of its own, driven like a
    Worker: ``run()`` blocks until the worker stops; ``close()`` closes its pool."""

    def __init__(self, dsn: str, handlers: dict[str, Any], **options: Any) -> None:
        self.loop = LoopThread()
        self.client = self.loop.run(AsyncClient.connect(dsn, max_size=8))
        self.worker = AsyncWorker(self.client, handlers, **options)

    def __getattr__(self, name: str) -> Any:
        # counters, _ledger, ...: the worker's (a test's peek from its own thread)
        return getattr(self.worker, name)

    def run(self) -> None:
        self.loop.run(self.worker.run(handle_signals=False))

    def stop(self) -> None:
        self.worker.stop()

    def close(self) -> None:
        self.loop.run(self.client.close())
        self.loop.close()


def as_async(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` as an ``async def`` (run on the loop: for handlers that do not block)."""
    async def run(job: Any) -> Any:
        return handler(job)
    return run
