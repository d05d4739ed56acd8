"""Handlers for the worker processes the tests start with
``python -m pgfence worker support.handlers:HANDLERS`` (cwd = tests/; see
:class:`support.processes.WorkerProcess`).

Payload keys:

* ``started``: a file path; the handler appends its pid to it when it starts,
  so a test knows the handler is running (not merely claimed).
* ``ms``: how long ``nap`` sleeps (milliseconds).
* ``marker``: a file path; ``hold`` waits while it exists (and stops early when
  ``job.should_stop()``), ``hold_stubborn`` waits while it exists and ignores
  ``should_stop`` (a handler that overruns the shutdown grace).

The Node.js test worker (clients/node/test/fixtures/worker.js) has the same kinds with
the same payload keys, so a mixed fleet runs one queue (tests/test_mixed_fleet.py).

Every handler returns ``{"pid": <its process id>, "attempt": job.attempts}``, so
a test can tell which process completed a job.
"""
from __future__ import annotations

import os
import time
from typing import Any

from pgfence import Job

MAX_HOLD_SECONDS = 60.0


def until_stopped(job: Job, timeout: float = 15.0) -> None:
    """Return once ``job.should_stop()`` (the worker stops or lost the lease), or after timeout s."""
    deadline = time.monotonic() + timeout
    while not job.should_stop() and time.monotonic() < deadline:
        time.sleep(0.02)


def _started(job: Job) -> None:
    path = job.payload.get("started")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{os.getpid()}\n")


def _result(job: Job) -> dict[str, Any]:
    return {"pid": os.getpid(), "attempt": job.attempts}


def echo(job: Job) -> dict[str, Any]:
    _started(job)
    return _result(job)


def nap(job: Job) -> dict[str, Any]:
    time.sleep(float(job.payload.get("ms", 100)) / 1000.0)
    return _result(job)


def hold(job: Job) -> dict[str, Any]:
    _started(job)
    deadline = time.monotonic() + MAX_HOLD_SECONDS
    while os.path.exists(job.payload["marker"]) and not job.should_stop() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _result(job)


def hold_stubborn(job: Job) -> dict[str, Any]:
    _started(job)
    deadline = time.monotonic() + MAX_HOLD_SECONDS
    while os.path.exists(job.payload["marker"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _result(job)


HANDLERS = {"echo": echo, "nap": nap, "hold": hold, "hold_stubborn": hold_stubborn}
