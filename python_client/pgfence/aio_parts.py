"""The asyncio worker's parts around the shared decisions (see :mod:`pgfence.aio_worker`).

* :class:`AsyncReporter`: the reporter's steps (:class:`pgfence.reporter.Reporting`:
  what to send, what the answers mean), awaited on an AsyncClient, retried through
  connection failures until a second signal;
* :class:`HandlerThreads`: the daemon threads that run sync handlers for the loop;
* :class:`BlockingCalls`: the AsyncClient's calls the stand-in sweeper makes from its thread;
* :func:`wait_event`.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Optional, TypeVar

from .aio_client import AsyncClient
from .handlers import Pending
from .ledger import Entry, Ledger, Result
from .limits import Limits
from .models import SweeperHealth
from .reporter import Reporting, Steps

if TYPE_CHECKING:
    from .worker_metrics import WorkerMetrics

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True when it is set. A cancellation
    of the caller always propagates: ``asyncio.wait_for`` (before Python 3.12) returned the
    result instead when the event was set in the same turn of the loop as the cancel, so a
    worker whose ``run()`` was cancelled as a job finished (the job sets the claimer's
    event) went on claiming."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        if not waiter.done():
            waiter.cancel()
    return bool(done)


class AsyncReporter(Reporting):
    """The reporter's steps (:class:`~pgfence.reporter.Reporting`), awaited on an
    :class:`AsyncClient` (the arguments of :class:`pgfence.reporter.Reporter`, with
    ``wait(seconds)`` awaited: the pause between retries, which ends early when hurried)."""

    def __init__(self, client: AsyncClient, ledger: Ledger, *, worker_id: str, counters: dict[str, int],
                 hurried: Callable[[], bool], wait: Callable[[float], Awaitable[Any]],
                 limits: Limits = Limits(), metrics: Optional[WorkerMetrics] = None) -> None:
        super().__init__(ledger, worker_id=worker_id, counters=counters, hurried=hurried, limits=limits,
                         metrics=metrics)
        self.client = client
        self.wait = wait

    async def report(self, batch: list[Result]) -> None:
        """Report one batch; never raises (see :meth:`pgfence.reporter.Reporter.report`)."""
        try:
            await self.drive(self.report_steps(batch))
        except Exception:
            self.report_failed(batch)

    async def release(self, entries: list[Entry], *, started: bool) -> None:
        """Give these attempts back (see :meth:`Reporting.release_steps`)."""
        await self.drive(self.release_steps(entries, started=started))

    async def retrying(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``await call()``, tried again through connection failures (see :meth:`Reporting.retry_wait`)."""
        backoff = 0.05
        while True:
            try:
                return await call()
            except Exception as exc:
                await self.wait(self.retry_wait(exc, backoff))
                backoff = min(backoff * 2, 5.0)

    async def drive(self, steps: Steps[T]) -> T:
        """Run ``steps``, awaiting each call it asks for (retrying), until it returns."""
        answer: Any = None
        error: Optional[Exception] = None
        while True:
            try:
                request = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            method = getattr(self.client, request.method)
            try:
                answer, error = await self.retrying(lambda: method(*request.args, **request.kwargs)), None
            except Exception as exc:
                answer, error = None, exc


class HandlerThreads:
    """``size`` daemon threads that run blocking (sync) handlers for the event loop.

    Not a ThreadPoolExecutor: its threads keep the process alive after ``run()``
    returns, and a handler that ignores ``should_stop()`` would then hold the process
    until it returns. These are abandoned at exit, as the threaded Worker's are (their
    attempts were given back; their late results are void)."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tasks: queue.SimpleQueue[Optional[tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]]]] = \
            queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"pgfence-handler-{i}", daemon=True)
                        for i in range(size)]
        for t in self.threads:
            t.start()

    def run(self, fn: Callable[..., T], *args: Any) -> "asyncio.Future[T]":
        """``fn(*args)`` on one of the threads; await the returned future for its result."""
        future: asyncio.Future[T] = self.loop.create_future()
        self.tasks.put((future, fn, args))
        return future

    def close(self) -> None:
        """Let idle threads exit (a busy one exits after its handler returns)."""
        for _ in self.threads:
            self.tasks.put(None)

    def _work(self) -> None:
        while True:
            task = self.tasks.get()
            if task is None:
                return
            future, fn, args = task
            try:
                outcome, error = fn(*args), None
            except BaseException as exc:  # noqa: B036 - (run_handler never raises; handed over all the same)
                outcome, error = None, exc
            try:
                self.loop.call_soon_threadsafe(_settle, future, outcome, error)
            except RuntimeError:  # the loop is closed: run() is over, the outcome is void
                return


def _settle(future: "asyncio.Future[Any]", outcome: Any, error: Optional[BaseException]) -> None:
    if future.done():  # (its runner was cancelled by the shutdown)
        if isinstance(outcome, Pending) and inspect.iscoroutine(outcome.awaitable):
            outcome.awaitable.close()  # (a plain handler's coroutine, never to be awaited)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(outcome)


class BlockingCalls:
    """The AsyncClient's calls the sweeper makes, made from the sweeper's thread through the loop."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop

    def sweeper_health(self) -> SweeperHealth:
        return asyncio.run_coroutine_threadsafe(self.client.sweeper_health(), self.loop).result()

    def sweep(self) -> int:
        return asyncio.run_coroutine_threadsafe(self.client.sweep(), self.loop).result()


__all__ = ["AsyncReporter", "HandlerThreads", "BlockingCalls", "wait_event"]
