"""Handlers for the chaos suite's worker processes.

Started as ``python -m pgfence worker tests.chaos.chaos_handlers:HANDLERS`` with
cwd = the repository root. Each handler execution appends two JSON lines to
``$CHAOS_RECORD_DIR/handler-<pid>.jsonl`` (flushed at once, so a SIGKILL loses
nothing already written): ``start`` when the handler begins and ``end`` when it
leaves, each with the job id, the attempt number, the attempt token, the pid
and the wall time. This record is independent of the database: the suite
checks the database's attempt history against it.

Payload keys (all optional):

* ``ms``: how long the handler works, in milliseconds (a few are longer than
  the lease, so only heartbeats keep them alive). It sleeps in small steps and
  stops early when ``job.should_stop()`` (lease lost).
* ``fail``: raise while ``job.attempts <= fail``; ``mode`` ``retry_after``
  raises ``RetryAfter(delay_ms)``, anything else a plain error (the database's
  backoff applies).
* ``perm``: raise ``PermanentFailure`` (dead-letter) after the work.
"""
from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from typing import Any, Optional, TextIO

from pgfence import Interrupted, Job, PermanentFailure, RetryAfter

_lock = threading.Lock()
_file: Optional[TextIO] = None
_file_pid = 0


def _record(event: dict[str, Any]) -> None:
    global _file, _file_pid
    line = json.dumps(event, separators=(",", ":")) + "\n"
    with _lock:
        if _file is None or _file_pid != os.getpid():
            directory = os.environ["CHAOS_RECORD_DIR"]
            _file = open(os.path.join(directory, f"handler-{os.getpid()}.jsonl"), "a", buffering=1)
            _file_pid = os.getpid()
        _file.write(line)
        _file.flush()


def chaos(job: Job) -> dict[str, Any]:
    payload = job.payload
    base = {"job": job.id, "attempt": job.attempts, "token": str(job.attempt_token), "pid": os.getpid()}
    _record({"ev": "start", **base, "t": time.time()})
    outcome = "error"
    try:
        deadline = time.monotonic() + float(payload.get("ms", 10)) / 1000.0
        stopped = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if job.should_stop():
                stopped = True
                break
            time.sleep(min(remaining, 0.05))
        if stopped:
            outcome = "stopped"
            raise Interrupted()  # give it back: returning would complete unfinished work
        if job.attempts <= int(payload.get("fail", 0)):
            if payload.get("mode") == "retry_after":
                outcome = "retry_after"
                raise RetryAfter(timedelta(milliseconds=int(payload["delay_ms"])), "chaos: retry after")
            outcome = "raise"
            raise RuntimeError(f"chaos: planned failure of attempt {job.attempts}")
        if payload.get("perm"):
            outcome = "permanent"
            raise PermanentFailure("chaos: planned permanent failure")
        outcome = "ok"
        return {"pid": os.getpid(), "attempt": job.attempts}
    finally:
        _record({"ev": "end", **base, "t": time.time(), "outcome": outcome})


HANDLERS = {"chaos": chaos}
