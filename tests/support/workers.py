"""In-process workers (a pgfence.Worker on its own pool, run on a thread) and waits.

Waits poll with a deadline (never a bare sleep that decides the outcome); a worker
thread is always stopped, and a worker's pool closed (the ``workers`` fixture), even
when a test fails.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional, TypeVar

from pgfence import Client, JobRecord, Worker

from .db import app_dsn

T = TypeVar("T")


def wait_for(predicate: Callable[[], Optional[T]], timeout: float, what: str,
             interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def start_and_join(threads: list[threading.Thread], timeout: float = 120.0) -> None:
    """Start the threads, join each (timeout s at most) and fail if one still runs."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads)


class WorkerThread:
    """Runs ``worker.run()`` on a thread; ``stop()`` asks for a graceful shutdown and joins."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> "WorkerThread":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"worker did not stop within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"worker.run() raised {self.error!r}") from self.error


@contextmanager
def running(worker: Worker) -> Iterator[WorkerThread]:
    """Run ``worker`` on a thread for the ``with`` block; stop it (gracefully) afterwards."""
    wt = WorkerThread(worker).start()
    try:
        yield wt
    finally:
        if wt.thread.is_alive():
            wt.stop()


def make_worker(dsn: str, queue: str, handlers: dict[str, Any], *, app: Optional[str] = None,
                **options: Any) -> tuple[Worker, Client]:
    """A Worker on its own pool (closed by the caller), claiming only from ``queue`` (or,
    given ``queue_set=``, from that stored set)."""
    wclient = Client.connect(app_dsn(dsn, app) if app else dsn, max_size=8)
    options.setdefault("poll_interval", 0.2)
    options.setdefault("run_sweeper", False)
    options.setdefault("queues", None if "queue_set" in options else [queue])
    return Worker(wclient, handlers, **options), wclient


def start(dsn: str, queue: str, handlers: dict[str, Any], owned: list[Any], *, flavor: str = "threads",
          app: Optional[str] = None, **options: Any) -> Any:
    """make_worker, its pool added to ``owned`` (the ``workers`` fixture closes them).
    ``flavor="asyncio"``: a pgfence.aio.AsyncWorker on a loop thread of its own, driven
    like a Worker (support.aio.AsyncWorkerOnLoop)."""
    if flavor == "asyncio":
        from .aio import AsyncWorkerOnLoop
        options.setdefault("poll_interval", 0.2)
        options.setdefault("run_sweeper", False)
        options.setdefault("queues", None if "queue_set" in options else [queue])
        aworker = AsyncWorkerOnLoop(app_dsn(dsn, app) if app else dsn, handlers, **options)
        owned.append(aworker)
        return aworker
    worker, wclient = make_worker(dsn, queue, handlers, app=app, **options)
    owned.append(wclient)
    return worker


def job_in(client: Client, job_id: int, *statuses: str) -> Optional[JobRecord]:
    row = client.get_job(job_id)
    return row if row.status in statuses else None


def wait_status(client: Client, job_id: int, *statuses: str, timeout: float = 15.0) -> JobRecord:
    return wait_for(lambda: job_in(client, job_id, *statuses), timeout,
                    f"job {job_id} to be {'/'.join(statuses)}")
