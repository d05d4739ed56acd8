"""The options :class:`pgfence.Worker` and :class:`pgfence.aio.AsyncWorker` share: one
definition, every option checked when the worker is made.

A bad option raises :class:`WorkerOptionError` naming it, with the value it got and a hint
of what it takes, before the worker connects, listens or claims anything (so a bad value
never runs: a negative ``poll_interval`` polled in a busy loop, a queue name given as a
string was claimed from as its letters, a handler that is not callable failed each job of
its kind). The database has the last word on names and on the lease (``pgfence.limits()``
may allow other bounds than the defaults); these checks are what the worker itself needs.
"""

from __future__ import annotations

import math
import os
import random
import socket
import threading
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Callable, Optional

from .limits import Limits

__all__ = ["WorkerOptionError", "WorkerOptions", "worker_options"]

#: Longest poll_interval, sweep_interval, shutdown_grace and flush_interval, in seconds
#: (a day: beyond it a threading wait overflows on some platforms, and nothing needs it).
MAX_SECONDS = 86_400.0
#: Shortest poll_interval (1 ms: below it an idle worker polls in a busy loop, a claim
#: call after the other) and sweep_interval (10 ms, the shortest pass_interval of the
#: database's background sweeper), in seconds.
MIN_POLL_SECONDS = 0.001
MIN_SWEEP_SECONDS = 0.01


class WorkerOptionError(ValueError, TypeError):
    """A worker option the worker cannot run with: ``option`` names it, ``problem`` says what
    is wrong with ``value`` (``message`` says all three), ``hint`` what it takes. Both a ValueError and a TypeError (a value
    of the wrong type raises it too)."""

    def __init__(self, option: str, value: Any, problem: str, hint: str) -> None:
        self.option = option
        self.value = value
        self.problem = problem
        self.hint = hint
        self.message = f"invalid worker option {option}={_shown(value)}: {problem}"
        super().__init__(f"{self.message} ({hint})")


def worker_options(handlers: Any, *, queues: Any, queue_set: Any, concurrency: Any, prefetch: Any, lease: Any,
                   poll_interval: Any, shutdown_grace: Any, run_sweeper: Any, sweep_interval: Any,
                   flush_interval: Any, flush_batch: Any, worker_id: Any, listen: Any,
                   limits: Any) -> "WorkerOptions":
    """The options checked, as a :class:`WorkerOptions` of their own (what the workers'
    constructors do, through :meth:`WorkerOptions._check_options`)."""
    options = WorkerOptions()
    options._check_options(handlers, queues=queues, queue_set=queue_set, concurrency=concurrency, prefetch=prefetch,
                           lease=lease, poll_interval=poll_interval, shutdown_grace=shutdown_grace,
                           run_sweeper=run_sweeper, sweep_interval=sweep_interval, flush_interval=flush_interval,
                           flush_batch=flush_batch, worker_id=worker_id, listen=listen, limits=limits)
    return options


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _handlers(handlers: Any) -> dict[str, Callable[..., Any]]:
    if not isinstance(handlers, Mapping):
        raise WorkerOptionError("handlers", handlers, "is not a mapping", "pass {kind: callable(job)}")
    out: dict[str, Callable[..., Any]] = {}
    for kind, handler in handlers.items():
        problem = _name_problem(kind)
        if problem is not None:
            raise WorkerOptionError("handlers", kind, problem,
                                    "key each handler by its job kind, a string of 1 to 128 characters")
        if not callable(handler):
            raise WorkerOptionError(f"handlers[{kind!r}]", handler, "is not callable",
                                    "pass a function (or coroutine function) taking the job")
        out[kind] = handler
    return out


def _queues(queues: Any, queue_set: Any, most: int) -> Optional[list[str]]:
    if queues is None:
        return None
    if queue_set is not None:
        raise WorkerOptionError("queue_set", queue_set, "is given with queues",
                                "pass queues (a list of names) or queue_set (a stored set), not both")
    if isinstance(queues, (str, bytes, Mapping)) or not isinstance(queues, Iterable):
        raise WorkerOptionError("queues", queues, "is not a list of queue names",
                                "pass a list, e.g. ['emails'], or None to claim from every queue")
    names = list(queues)
    if not 1 <= len(names) <= most:
        raise WorkerOptionError("queues", queues, f"has {len(names)} names",
                                f"pass 1..{most} queue names, or None to claim from every queue")
    for i, name in enumerate(names):
        problem = _name_problem(name)
        if problem is not None:
            raise WorkerOptionError(f"queues[{i}]", name, problem,
                                    "each name is a string of 1 to 128 characters")
    return names


def _name_problem(value: Any) -> Optional[str]:
    """Why `value` is not a string the database could take as a name (None when it is):
    1..128 characters (code points, as char_length counts them), none a lone surrogate
    (not text: it cannot be sent). The rest of the rule (no control characters, no blank
    ends, ...) is the database's. Worded as the Node worker's."""
    if not isinstance(value, str):
        return "is not a name (a string)"
    if not 1 <= len(value) <= 128:
        return f"is a name of {len(value)} characters"
    if any("\ud800" <= c <= "\udfff" for c in value):
        return "holds a lone surrogate (not Unicode text)"
    return None


def _name(option: str, value: Any, or_else: str) -> Optional[str]:
    if value is None:
        return None
    problem = _name_problem(value)
    if problem is not None:
        raise WorkerOptionError(option, value, problem, f"pass a string of 1 to 128 characters, {or_else}")
    return value


def _integer(option: str, value: Any, lo: int, hi: Optional[int], hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkerOptionError(option, value, "is not an integer", hint)
    if value < lo or (hi is not None and value > hi):
        raise WorkerOptionError(option, value, "is out of range", hint)
    return value


def _seconds(option: str, value: Any, zero_ok: bool, what: str, least: float = 0.0) -> float:
    """A number of seconds: from 0 (when zero_ok) or from `least` (inclusive; more than 0
    when `least` is 0) up to MAX_SECONDS."""
    low = "0" if zero_ok else (f"{least:g}" if least else "more than 0")
    bounds = f"{low}..{MAX_SECONDS:.0f} seconds"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkerOptionError(option, value, "is not a number of seconds", f"{what}: {bounds}")
    if (not math.isfinite(value) or value < least or value < 0 or (value == 0 and not zero_ok)
            or value > MAX_SECONDS):
        raise WorkerOptionError(option, value, "is out of range", f"{what}: {bounds}")
    return float(value)


def _flag(option: str, value: Any, none_ok: bool, hint: str) -> Optional[bool]:
    if value is None and none_ok:
        return None
    if not isinstance(value, bool):
        raise WorkerOptionError(option, value, "is not a boolean", hint)
    return value


def _lease(lease: Any, bounds: Limits) -> timedelta:
    lo, hi = timedelta(milliseconds=bounds.lease_min_ms), timedelta(milliseconds=bounds.lease_max_ms)
    hint = (f"a datetime.timedelta from {bounds.lease_min_ms} ms to {bounds.lease_max_ms / 1000:g} s,"
            " e.g. timedelta(seconds=30)")
    if not isinstance(lease, timedelta):
        raise WorkerOptionError("lease", lease, "is not a timedelta", hint)
    if not lo <= lease <= hi:
        raise WorkerOptionError("lease", lease, "is out of range", hint)
    return lease


class WorkerOptions:
    """The checked options, as both workers keep them (their names as before: code and
    tests read ``worker.queues``, ``worker.capacity``, ...): :class:`pgfence.Worker` and
    :class:`pgfence.aio.AsyncWorker` derive from it and call :meth:`_check_options` first."""

    handlers: dict[str, Callable[..., Any]]
    queues: Optional[list[str]]
    queue_set: Optional[str]
    concurrency: int
    prefetch: int
    capacity: int
    lease: timedelta
    poll_interval: float
    shutdown_grace: float
    run_sweeper: Optional[bool]
    sweep_interval: float
    flush_interval: float
    flush_batch: int
    listen: bool
    worker_id: str
    counters: dict[str, int]

    def _check_options(self, handlers: Any, *, queues: Any, queue_set: Any, concurrency: Any, prefetch: Any,
                       lease: Any, poll_interval: Any, shutdown_grace: Any, run_sweeper: Any, sweep_interval: Any,
                       flush_interval: Any, flush_batch: Any, worker_id: Any, listen: Any, limits: Any) -> None:
        """Check every option and keep it (``limits``: the database's, when the caller has
        them; else the defaults bound the lease and flush_batch); raise
        :class:`WorkerOptionError` for the first bad one (the constructor then fails)."""
        if limits is not None and not isinstance(limits, Limits):
            raise WorkerOptionError("limits", limits, "is not a pgfence.Limits", "pass None (read from the database) "
                                    "or what Client.limits() returned")
        bounds = limits if limits is not None else Limits()
        self.handlers = _handlers(handlers)
        self.queues = _queues(queues, queue_set, bounds.queues)
        self.queue_set = _name("queue_set", queue_set, "or None to claim by queues")
        self.concurrency = _integer("concurrency", concurrency, 1, None, "handler threads or tasks: 1 or more")
        self.prefetch = _integer("prefetch", prefetch, 0, None, "jobs claimed ahead of free handlers: 0 or more")
        self.lease = _lease(lease, bounds)
        self.poll_interval = _seconds("poll_interval", poll_interval, False, "the longest idle wait between claims",
                                      MIN_POLL_SECONDS)
        self.shutdown_grace = _seconds("shutdown_grace", shutdown_grace, True,
                                       "how long a stop waits for running handlers")
        self.run_sweeper = _flag("run_sweeper", run_sweeper, True, "True, False, or None (while no sweeper runs)")
        self.sweep_interval = _seconds("sweep_interval", sweep_interval, False,
                                       "how often this worker sweeps when it does", MIN_SWEEP_SECONDS)
        self.flush_interval = _seconds("flush_interval", flush_interval, True,
                                       "how long an outcome may wait to be reported")
        self.flush_batch = _integer("flush_batch", flush_batch, 1, bounds.batch,
                                    f"outcomes reported in one call: 1..{bounds.batch}")
        named = _name("worker_id", worker_id, "or None for host:pid:random")
        self.listen = bool(_flag("listen", listen, False, "True (wake on NOTIFY) or False (poll only)"))
        self.capacity = self.concurrency + self.prefetch
        self.worker_id = named or f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(24):06x}"
        self.counters = {"claimed": 0, "completed": 0, "failed": 0, "lease_lost": 0, "released": 0,
                         "snoozed": 0}
        self._once = threading.Lock()  # (taken by the one run(); see _running_once)

    def _running_once(self) -> None:
        """Called first by run(): a worker runs once (its stop state, ledger and counters are
        that run's; a second run(), after or beside the first, would share them)."""
        if not self._once.acquire(blocking=False):
            raise RuntimeError(f"worker {self.worker_id}: run() was already called; a worker runs once, "
                               "make a new one to run again")
