"""TEMPORARY STAND-IN for `pgfence.Worker` -- NOT the pgfence client.

Used by bench/pgfence_worker.py only while `from pgfence import Client, Worker`
fails in the main venv (the Python client is being written). It exists so the
harness can be tested end to end; results produced with it are labelled
"stand-in worker" in BENCHMARKS.md and results/latest.json.

Loop: claim up to `concurrency + prefetch` jobs with pgfence.claim (lease 30 s),
run the handlers on a pool of `concurrency` threads, wait for the batch, then
finish it with one pgfence.complete_many (and pgfence.fail_many for handler
errors). Sleep `poll_interval` when a claim returns nothing. No heartbeats
(the no-op jobs finish far inside the lease).
"""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg


@dataclass(frozen=True)
class StandInJob:
    id: int
    kind: str
    payload: Any
    attempts: int
    attempt_token: Any


class StandInWorker:
    """Same constructor shape as the brief's pgfence.Worker, over a DSN instead of a Client."""

    def __init__(self, dsn: str, handlers: dict[str, Callable[[StandInJob], Any]], queues: list[str],
                 concurrency: int = 8, prefetch: int = 0, poll_interval: float = 0.05,
                 lease: str = "30 seconds") -> None:
        self.dsn = dsn
        self.handlers = handlers
        self.queues = queues
        self.concurrency = concurrency
        self.max_jobs = max(1, concurrency + prefetch)
        self.poll_interval = poll_interval
        self.lease = lease
        self.worker_id = f"standin-{socket.gethostname()}-{os.getpid()}"
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def _run_one(self, job: StandInJob) -> str | None:
        try:
            self.handlers[job.kind](job)
            return None
        except Exception as exc:  # a handler error fails the job, like a real worker
            return f"{type(exc).__name__}: {exc}"

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn, \
                ThreadPoolExecutor(self.concurrency, thread_name_prefix="standin") as pool:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT id, kind, payload, attempts, attempt_token"
                    " FROM pgfence.claim(%s, %s, %s::interval, %s)",
                    (self.worker_id, self.queues, self.lease, self.max_jobs)).fetchall()
                if not rows:
                    self._stop.wait(self.poll_interval)
                    continue
                jobs = [StandInJob(r[0], r[1], r[2], r[3], r[4]) for r in rows]
                errors = list(pool.map(self._run_one, jobs))
                ok = [j for j, e in zip(jobs, errors) if e is None]
                bad = [(j, e) for j, e in zip(jobs, errors) if e is not None]
                if ok:
                    conn.execute("SELECT count(*) FROM pgfence.complete_many(%s, %s)",
                                 ([j.id for j in ok], [j.attempt_token for j in ok]))
                if bad:
                    conn.execute("SELECT count(*) FROM pgfence.fail_many(%s, %s, %s)",
                                 ([j.id for j, _ in bad], [j.attempt_token for j, _ in bad],
                                  [e for _, e in bad]))

