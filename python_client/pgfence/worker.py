"""The worker runtime: claim in batches, run handlers on threads, report in batches.

Threads, each with its own pooled connection:

* the claimer (the thread that calls :meth:`Worker.run`) claims up to the free
  capacity (``concurrency + prefetch``) whenever a slot frees, a NOTIFY arrives or
  ``poll_interval`` passes;
* ``concurrency`` handler threads run handlers;
* the flusher reports outcomes with ``complete_many``/``fail_many`` every few
  milliseconds; a job stays in flight (and heartbeated) until the database has
  accepted or refused its outcome;
* the heartbeat thread extends every in-flight lease in one ``heartbeat_many``
  call every ``lease / 3``; a refused heartbeat sets ``job.lease_lost`` and the
  attempt's result is never reported;
* the listener (:mod:`pgfence.listener`) wakes the claimer on ``NOTIFY pgfence_enqueue``
  carrying one of its queues' tags;
* optionally a sweeper (:mod:`pgfence.sweeper`) calls ``CALL pgfence.sweep()`` when
  pg_cron does not.

SIGTERM/SIGINT and the stop state are :mod:`pgfence.stopping`'s; which errors are
retried, :mod:`pgfence.retries`'.

Every decision (retry or dead letter, backoff, fencing) is made by the database.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import socket
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping, Optional, Sequence

from psycopg_pool import PoolTimeout

from . import sweeper
from ._text import escaped_logger
from .client import Client, RawJson
from .limits import Limits
from .listener import Listener
from .models import Job, Outcome
from .retries import RETRYABLE, is_data_error, retryable
from .stopping import Stop, install_signals

log = escaped_logger("pgfence.worker")

Handler = Callable[[Job], Any]

#: Error texts are truncated to this many characters (the end of a traceback is kept).
MAX_ERROR_CHARS = 50_000
#: How long a shutdown waits for a connection to look up a claim whose reply was lost.
SHUTDOWN_LOOKUP_WAIT = 5.0
#: After a claim that found nothing, the next one waits at least this long (seconds), so
#: that wake-ups arriving together (a burst of enqueues, or a NOTIFY flood) cost one claim;
#: a claim after a quiet moment is never delayed.
CLAIM_HOLDOFF = 0.005
#: Outcomes per complete_many/fail_many call at most (a worker's choice, within the
#: database's Limits.batch).
MAX_REPORT_BATCH = 1000
# A NUL character escaped in JSON text (an odd number of backslashes before u0000):
# jsonb cannot store it.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class _GiveUp(Exception):
    """A second signal arrived while a call waited for the database: stop retrying."""


class PermanentFailure(Exception):
    """Raise from a handler to dead-letter the job now (no retry)."""


class Interrupted(Exception):
    """Raise from a handler that stops early because ``job.should_stop()`` became true
    (shutdown, or a lost lease). The worker gives the job back with a fenced
    ``release`` (by the reclaim rule: an ``auto`` job returns to the queue, a
    ``manual`` one goes to ``manual_review``) instead of completing it.
    Returning normally means the work is done: the return value is the result."""


class RetryAfter(Exception):
    """Raise from a handler to retry after ``delay`` instead of the default backoff
    (the database still dead-letters the job when its attempts are exhausted)."""

    def __init__(self, delay: timedelta, message: str = "") -> None:
        super().__init__(message or f"retry after {delay}")
        self.delay = delay


@dataclass
class _Result:
    job: Job
    ok: bool
    value: Optional[str] = None          # JSON text of the result (ok) or the error text
    retry_in: Optional[timedelta] = None
    permanent: bool = False
    interrupted: bool = False


def _error_text(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as broken:  # an exception whose __str__ raises, say
        text = f"{type(exc).__name__}: (its message could not be formatted: {type(broken).__name__})"
    return _storable_text(text)


def _storable_text(text: str) -> str:
    """An error text PostgreSQL can store: NUL characters (text cannot hold them) and
    lone surrogates (no UTF-8 for them, e.g. from os.fsdecode) are escaped; truncated
    to MAX_ERROR_CHARS, keeping the end of a traceback."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_ERROR_CHARS:
        text = "...[truncated]\n" + text[-MAX_ERROR_CHARS:]
    return text


def _result_json(value: Any) -> str:
    """The JSON text of a handler's result, or ValueError when jsonb could not store it."""
    if isinstance(value, RawJson):
        text = str(value)  # the handler's own JSON text: the database checks it
        text.encode("utf-8")  # (UnicodeEncodeError is a ValueError)
        return text
    text = json.dumps(value, allow_nan=False)  # NaN and Infinity are not JSON
    # The two escapes jsonb refuses, looked for only when their prefix occurs: \u0000,
    # and a lone surrogate (json.dumps writes it as \udXXX; a pair, e.g. an emoji, is
    # one character in Python and encodes).
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValueError("it contains a NUL character, which jsonb cannot store")
    if "\\ud" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"it contains a lone surrogate, which has no UTF-8 encoding: {exc}") from None
    return text


class Worker:
    """Runs handlers for claimed jobs until stopped.

    Options (defaults in brackets):

    * ``handlers``: ``{kind: callable(job) -> JSON-able result}``.
    * ``queues`` [all queues]: queue names to claim from.
    * ``concurrency`` [8]: handler threads.
    * ``prefetch`` [0]: extra jobs claimed ahead of free threads (they are leased
      and heartbeated while they wait); raises throughput for short jobs.
    * ``lease`` [30 s]: lease per claim; heartbeats every ``lease / 3``.
    * ``poll_interval`` [1 s]: longest wait between claims when no NOTIFY arrives (each
      idle wait is drawn from ``[poll_interval / 2, poll_interval]``, so that workers do
      not poll in step).
    * ``shutdown_grace`` [30 s]: how long SIGTERM/SIGINT waits for running
      handlers before giving their jobs back (fenced ``release``).
    * ``run_sweeper`` [None = while ``pgfence.sweeper_health()`` says no background sweeper
      runs (no pass in 2 minutes, and not paused by an operator), looked at every minute]: run
      ``CALL pgfence.sweep()`` every ``sweep_interval`` [1 s] from this process.
    * ``flush_interval`` [5 ms] and ``flush_batch`` [500]: outcomes are reported when
      ``flush_batch`` are waiting or the oldest has waited ``flush_interval``.
    * ``worker_id`` [host:pid:random]: recorded as ``reserved_by``.
    * ``limits`` [``Limits()``, today's]: the database's limits (claim size, batch size).
    """

    def __init__(self, client: Client, handlers: Mapping[str, Handler], *,
                 queues: Optional[Sequence[str]] = None, concurrency: int = 8, prefetch: int = 0,
                 lease: timedelta = timedelta(seconds=30), poll_interval: float = 1.0,
                 shutdown_grace: float = 30.0, run_sweeper: Optional[bool] = None,
                 sweep_interval: float = 1.0, flush_interval: float = 0.005, flush_batch: int = 500,
                 worker_id: Optional[str] = None, listen: bool = True, limits: Limits = Limits()) -> None:
        if client.pool is None:
            raise TypeError("Worker needs a Client with its own pool: Client.connect(dsn)")
        if concurrency < 1 or prefetch < 0:
            raise ValueError("concurrency must be >= 1 and prefetch >= 0")
        self.client = client
        self.handlers = dict(handlers)
        self.queues = None if queues is None else list(queues)
        self.concurrency = concurrency
        self.capacity = concurrency + prefetch
        self.lease = lease
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        self.run_sweeper = run_sweeper
        self.sweep_interval = sweep_interval
        self.flush_interval = flush_interval
        self.flush_batch = flush_batch
        self.listen = listen
        self.limits = limits
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(24):06x}"

        self._lock = threading.Lock()
        self._inflight: dict[int, Job] = {}     # claimed and not yet settled in the database
        # Handed to a handler, handler not returned. By id, holding the attempt: a stale
        # attempt of a job may still run while this worker runs its next one.
        self._running: dict[int, Job] = {}
        self._given_back: dict[int, Job] = {}  # running attempts the shutdown released
        self._finishing: set[int] = set()       # handler returned, outcome not yet settled
        # Hand-offs are deques (append/popleft are atomic under the GIL) plus one
        # event per batch, not a lock and a wake-up per job.
        self._ready: deque[Job] = deque()       # claimed, waiting for a handler thread
        self._work = threading.Event()          # set when jobs were added to _ready
        self._results: deque[_Result] = deque()  # handler outcomes waiting for the flusher
        self._outcome = threading.Event()        # set when an outcome was added to _results
        self._wake = threading.Event()
        self._stop = Stop()                     # stopping, hurry (a second signal), done (threads: exit)
        self._threads: list[threading.Thread] = []
        # The request id of a claim that raised after it may have reached the database (the
        # connection failed): if it committed, it holds jobs this worker does not know of.
        # Looked up with claimed() before the next claim, and run (or given back at shutdown),
        # until its leases would have expired (_unanswered_until, monotonic): a claim stuck
        # in the server keeps its lock, and the worker must not stop claiming for it.
        self._unanswered: Optional[uuid.UUID] = None
        self._unanswered_until = 0.0
        self.counters = {"claimed": 0, "completed": 0, "failed": 0, "lease_lost": 0, "released": 0}

    # -- public -----------------------------------------------------------

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM/SIGINT do): stop claiming, let running
        handlers finish within ``shutdown_grace``, give the rest back."""
        self._stop.stopping.set()
        self._wake.set()
        self._work.set()

    def run(self) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT when called from the main thread)."""
        restore = install_signals(self._on_signal)
        try:
            self._start_threads()
            log.info("worker %s started: queues=%s concurrency=%s prefetch=%s lease=%s",
                     self.worker_id, self.queues or "all", self.concurrency,
                     self.capacity - self.concurrency, self.lease)
            try:
                self._claim_loop()
            except BaseException:
                log.exception("worker %s: claiming failed; shutting down", self.worker_id)
                self._stop.stopping.set()
                self._work.set()
                self._shutdown()
                raise
            self._shutdown()
        finally:
            self._stop.done.set()
            self._outcome.set()  # wake an idle flusher to see _done
            for t in self._threads:
                if t.name.startswith("pgfence-flusher") or t.name.startswith("pgfence-heartbeat"):
                    t.join(timeout=5)
            restore()
            log.info("worker %s stopped: %s", self.worker_id, self.counters)

    # -- threads ----------------------------------------------------------

    def _start_threads(self) -> None:
        specs: list[tuple[str, Callable[[], None]]] = [
            ("pgfence-flusher", self._flush_loop), ("pgfence-heartbeat", self._heartbeat_loop)]
        specs += [(f"pgfence-handler-{i}", self._handler_loop) for i in range(self.concurrency)]
        if self.listen:
            listener = Listener(self.client, self.queues, worker_id=self.worker_id, wake=self._wake.set,
                                done=self._stop.done)
            specs.append(("pgfence-listener", listener.run))
        if self.run_sweeper is not False:
            specs.append(("pgfence-sweeper", self._sweep_loop))
        for name, target in specs:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _claim_loop(self) -> None:
        backoff = 0.1
        threshold = max(1, self.capacity // 2)
        while not self._stop.stopping.is_set():
            self._wake.clear()
            with self._lock:
                # Jobs whose handler has returned are only waiting for the flusher: they
                # hold no thread, so they do not count against the capacity.
                free = self.capacity - (len(self._inflight) - len(self._finishing))
            idle_threads = not self._ready
            drained = False
            if self._unanswered is not None and time.monotonic() > self._unanswered_until:
                log.warning("worker %s: gave up looking up the claim whose reply was lost (request %s) after its "
                            "lease; its jobs, if it took any, are reclaimed as their leases expire",
                            self.worker_id, self._unanswered)
                self._unanswered = None
            if self._unanswered is not None:
                try:
                    self._recover_unanswered()
                    backoff = 0.1
                except RETRYABLE as exc:
                    log.warning("worker %s: looking up a claim whose reply was lost failed (%s); retrying in %.1fs",
                                self.worker_id, str(exc).strip(), backoff)
                    self._stop.stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                continue
            if free > 0 and (free >= threshold or idle_threads):
                request_id = uuid.uuid4()
                want = min(free, self.limits.max_jobs)
                try:
                    jobs = self.client.claim(self.worker_id, self.queues, lease=self.lease,
                                             max_jobs=want, request_id=request_id)
                    backoff = 0.1
                except RETRYABLE as exc:
                    if not isinstance(exc, PoolTimeout):  # (no connection: the claim was never sent)
                        self._unanswered = request_id
                        self._unanswered_until = time.monotonic() + self.lease.total_seconds()
                    log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id,
                                str(exc).strip(), backoff)
                    self._stop.stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self._dispatch(jobs)
                if len(jobs) == want:
                    continue
                drained = True
            # Nothing to claim, or no room: sleep until a slot frees, a NOTIFY, or the poll.
            # The idle poll is drawn from [poll_interval / 2, poll_interval]: workers that a
            # NOTIFY woke together do not keep polling in step, so an expired lease meets
            # the next claim sooner (recovery p95, 2 workers polling at 0.1 s: 96 -> 54-71 ms).
            waited_from = time.monotonic()
            self._wake.wait(self.poll_interval * random.uniform(0.5, 1.0) if drained or free <= 0 else 0.05)
            if drained:  # see CLAIM_HOLDOFF
                rest = CLAIM_HOLDOFF - (time.monotonic() - waited_from)
                if rest > 0:
                    self._stop.stopping.wait(rest)

    def _recover_unanswered(self, wait: Optional[float] = None) -> None:
        """Take over the jobs the unanswered claim took, if it committed: they are leased to
        this worker, and would otherwise wait out their leases with the attempt counted.
        ``claimed`` renews their leases. A retryable error propagates (ask again later);
        any other (say the role may not call ``claimed``) is logged, and the jobs, if any,
        are left to their leases, as before a lookup existed. ``wait``: at most this long
        for a pool connection (else the pool's timeout)."""
        assert self._unanswered is not None and self.client.pool is not None
        try:
            if wait is None:
                jobs = self.client.claimed(self.worker_id, [self._unanswered], lease=self.lease)
            else:
                with self.client.pool.connection(timeout=wait) as conn:
                    jobs = Client(conn, check_schema=False).claimed(self.worker_id, [self._unanswered],
                                                                    lease=self.lease)
        except RETRYABLE:
            raise
        except Exception:
            log.exception("worker %s: could not look up the claim whose reply was lost (request %s); its jobs, "
                          "if it took any, wait for their leases to expire", self.worker_id, self._unanswered)
            jobs = []
        self._unanswered = None
        if jobs:
            log.warning("worker %s: the claim whose reply was lost had taken %s jobs (%s)",
                        self.worker_id, len(jobs), [j.id for j in jobs][:20])
        self._dispatch(jobs)

    def _dispatch(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        with self._lock:
            for job in jobs:
                object.__setattr__(job, "_stopping", self._stop.stopping)
                old = self._inflight.get(job.id)
                if old is not None:
                    # The database handed this job out again: the job's in-flight state is
                    # the new attempt's from now on.
                    if job.id in self._finishing:
                        # The old handler has returned and its outcome is on its way: the
                        # flusher learns from the database whether it was accepted (a
                        # failure that requeued the job at once) or refused (lease lost).
                        self._finishing.discard(job.id)
                    else:
                        # The old attempt still runs (an operator requeued the job, or its
                        # lease expired meanwhile): its lease is gone. Its handler learns it
                        # from should_stop(), and its outcome is discarded.
                        old._mark_lease_lost()
                        self.counters["lease_lost"] += 1
                        log.warning("job %s kind=%s attempt=%s: lease lost (claimed again as attempt %s)",
                                    old.id, old.kind, old.attempts, job.attempts)
                self._inflight[job.id] = job
        self.counters["claimed"] += len(jobs)
        if log.isEnabledFor(logging.INFO):
            for job in jobs:
                log.info("claimed job %s kind=%s attempt=%s/%s", job.id, job.kind, job.attempts, job.max_attempts)
        self._ready.extend(jobs)
        self._work.set()

    def _handler_loop(self) -> None:
        ready, work, lock, outcome = self._ready, self._work, self._lock, self._outcome
        while not self._stop.done.is_set():
            # Taking a job and marking it running is one step under the lock, so the
            # shutdown sees every job as either running or still waiting (to release).
            with lock:
                if self._stop.stopping.is_set():
                    return
                job = ready.popleft() if ready else None
                if job is not None:
                    if self._inflight.get(job.id) is not job:
                        continue  # this attempt's lease was lost while it waited: never started
                    self._running[job.id] = job
            if job is None:
                work.clear()
                if not ready:
                    work.wait(0.2)
                continue
            result = self._run_handler(job)
            with lock:
                if self._running.get(job.id) is job:
                    del self._running[job.id]
                if self._inflight.get(job.id) is job:
                    self._finishing.add(job.id)
                # else the shutdown gave this attempt back while it ran: its outcome is
                # void (the flusher only logs it), and nothing is left to settle.
            self._results.append(result)
            if not outcome.is_set():  # the flusher clears it, then re-checks _results
                outcome.set()
            if len(ready) < self.concurrency:
                self._wake.set()  # a slot is free: the claimer may fetch more
            # No time.sleep(0) here: yielding the GIL after every job cost a system call and
            # a thread switch per job (measured: 22 -> 12 us of worker CPU per no-op job, one
            # process, 500 prefetch); the interpreter's switch interval already lets the
            # claimer and flusher in.

    def _run_handler(self, job: Job) -> _Result:
        """Run the handler; always returns its outcome (a handler thread never dies of it:
        a SystemExit, or an exception that cannot even be formatted, fails the attempt)."""
        if job.payload_error is not None:
            return _Result(job, False, _storable_text(
                f"PayloadNotDecodable: the job's payload cannot be decoded in worker {self.worker_id} "
                f"({job.payload_error}); no handler ran"), permanent=True)
        handler = self.handlers.get(job.kind)
        if handler is None:
            return _Result(job, False, _storable_text(f"UnknownKind: no handler for kind {job.kind!r} in worker "
                           f"{self.worker_id} (known: {sorted(self.handlers)})"), permanent=True)
        try:
            value = handler(job)
        except Interrupted:
            return _Result(job, False, None, interrupted=True)
        except PermanentFailure as exc:
            return _Result(job, False, _error_text(exc), permanent=True)
        except RetryAfter as exc:
            delay = exc.delay
            if isinstance(delay, timedelta) and timedelta(0) <= delay <= self.limits.max_retry_in:
                return _Result(job, False, _error_text(exc), retry_in=delay)
            return _Result(job, False, _storable_text(
                f"RetryAfter with delay {delay!r} outside 0..{self.limits.retry_in_max_days} days, failed with the "
                "default backoff instead\n" + _error_text(exc)))
        except BaseException as exc:  # noqa: B036 - SystemExit from a handler too: it ends the attempt
            return _Result(job, False, _error_text(exc))
        if value is None:
            return _Result(job, True, None)
        try:
            text = _result_json(value)
        except Exception as exc:  # TypeError, ValueError, RecursionError; a mapping whose items() raises
            return _Result(job, False, _storable_text(
                f"ResultNotJSON: handler for {job.kind!r} returned a value that cannot be stored as JSON: "
                f"{type(exc).__name__}: {exc}"), permanent=True)
        return _Result(job, True, RawJson(text))

    def _flush_loop(self) -> None:
        results = self._results
        max_batch = min(MAX_REPORT_BATCH, self.limits.batch)
        pending_since: Optional[float] = None
        while True:
            if not results:
                if self._stop.done.is_set():
                    return
                pending_since = None
                # Idle: sleep until a handler reports an outcome (no polling while idle).
                self._outcome.clear()
                if not results:
                    self._outcome.wait(0.2)
                continue
            # Gather up to flush_interval after the first outcome arrived (or until a
            # full batch), so that busy workers report in few, large calls.
            now = time.monotonic()
            if pending_since is None:
                pending_since = now
            if (len(results) < self.flush_batch and now - pending_since < self.flush_interval
                    and not self._stop.stopping.is_set()):
                time.sleep(min(self.flush_interval / 4, pending_since + self.flush_interval - now))
                continue
            pending_since = None
            # One outcome per job id per batch: two attempts of one job (the job was
            # claimed again while its old attempt still ran here) go in separate calls,
            # which refuse duplicate ids.
            batch: list[_Result] = []
            ids: set[int] = set()
            while results and len(batch) < max_batch and results[0].job.id not in ids:
                r = results.popleft()
                ids.add(r.job.id)
                batch.append(r)
            try:
                self._flush(batch)
            except Exception:  # never let the flusher die: its outcomes would never settle
                log.exception("worker %s: reporting %s outcomes failed; their jobs are dropped from this "
                              "worker and their leases will expire", self.worker_id, len(batch))
                self._settle([r.job for r in batch])

    def _flush(self, batch: list[_Result]) -> None:
        # A lost lease makes the attempt's result void: never report it.
        lost = [r for r in batch if r.job.lease_lost]
        for r in lost:
            if self._given_back.get(r.job.id) is r.job:
                log.info("job %s kind=%s attempt=%s: returned after the shutdown gave it back, result discarded",
                         r.job.id, r.job.kind, r.job.attempts)
            else:
                log.warning("job %s kind=%s attempt=%s: lease lost, result discarded", r.job.id, r.job.kind,
                            r.job.attempts)
        self._settle([r.job for r in lost])
        batch = [r for r in batch if not r.job.lease_lost]
        interrupted = [r.job for r in batch if r.interrupted]
        done = [r for r in batch if r.ok]
        failed = [r for r in batch if not r.ok and not r.interrupted]
        if interrupted:
            self._release(interrupted, started=True)
        if done:
            self._complete(done)
        if failed:
            self._fail(failed)

    def _complete(self, done: list[_Result]) -> None:
        refused = self._send(done, self._complete, self._result_refused, lambda: self.client.complete_many(
            [r.job.id for r in done], [r.job.attempt_token for r in done],
            [None if r.value is None else RawJson(r.value) for r in done], refused_only=True))
        if refused is not None:
            self._report(done, refused, "completed")

    def _fail(self, failed: list[_Result]) -> None:
        outcomes = self._send(failed, self._fail, self._failure_refused, lambda: self.client.fail_many(
            [r.job.id for r in failed], [r.job.attempt_token for r in failed],
            [r.value or "" for r in failed], retry_ins=[r.retry_in for r in failed],
            permanents=[r.permanent for r in failed]))
        if outcomes is not None:
            self._report(failed, outcomes, "failed")

    def _send(self, results: list[_Result], each: Callable[[list[_Result]], None],
              refused_one: Callable[[_Result, Exception], None],
              call: Callable[[], list[Outcome]]) -> Optional[list[Outcome]]:
        """The outcomes of ``call`` (complete_many or fail_many for ``results``), through
        _retrying; None when they were dealt with here instead: given up after a second
        signal, or refused for their values (not their tokens), when each result goes
        alone through ``each`` to find the one refused, which ``refused_one`` handles."""
        try:
            return self._retrying(call)
        except _GiveUp:
            self._abandon(results)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            if len(results) > 1:
                for r in results:
                    each([r])
            else:
                refused_one(results[0], exc)
        return None

    def _result_refused(self, r: _Result, exc: Exception) -> None:
        """The database refused a result itself (a handler's RawJson that is not JSON,
        say): the attempt fails instead."""
        log.error("job %s kind=%s attempt=%s: the database refused its result (%s); failing the attempt",
                  r.job.id, r.job.kind, r.job.attempts, str(exc).strip())
        self._fail([_Result(r.job, False, _storable_text(
            f"ResultNotStorable: the database refused the handler's result: {type(exc).__name__}: {exc}"),
            permanent=True)])

    def _failure_refused(self, r: _Result, exc: Exception) -> None:
        """The database refused a failure: fail again with a plain text and the default
        backoff; if that is refused too, leave the job to its lease."""
        if r.value is not None and r.value.startswith("FailureNotStorable:"):
            log.error("job %s kind=%s attempt=%s: the database refused its failure (%s); its lease will "
                      "expire and the reclaim rule applies", r.job.id, r.job.kind, r.job.attempts,
                      str(exc).strip())
            self._settle([r.job])
            return
        self._fail([_Result(r.job, False, _storable_text(
            f"FailureNotStorable: the database refused this failure ({type(exc).__name__}: {exc})"),
            permanent=r.permanent)])

    def _abandon(self, results: list[_Result]) -> None:
        """A second signal during an outage: these outcomes are not reported (their leases
        expire and the reclaim rule applies, as after a crash)."""
        log.error("worker %s: gave up reporting %s outcomes (jobs %s) after a second signal; their leases will "
                  "expire", self.worker_id, len(results), [r.job.id for r in results][:20])
        self._settle([r.job for r in results])

    def _report(self, results: list[_Result], outcomes: list[Outcome], verb: str) -> None:
        """Log and count each outcome; ``outcomes`` may hold only the refused rows
        (an input without an outcome row was accepted)."""
        by_id = {o.id: o for o in outcomes}
        if not by_id and verb == "completed" and not log.isEnabledFor(logging.INFO):
            self.counters[verb] += len(results)  # all accepted, nothing to log: the busy path
            self._settle([r.job for r in results])
            return
        for r in results:
            job = r.job
            o = by_id.get(job.id)
            if o is None or o.accepted:
                self.counters[verb] += 1
                if verb == "completed":
                    log.info("completed job %s kind=%s attempt=%s", job.id, job.kind, job.attempts)
                else:
                    log.info("failed job %s kind=%s attempt=%s -> %s: %s", job.id, job.kind, job.attempts,
                             o.status if o else "?", (r.value or "").splitlines()[0][:200])
            else:
                job._mark_lease_lost()
                self.counters["lease_lost"] += 1
                log.warning("job %s kind=%s attempt=%s: lease lost, %s refused: %s", job.id, job.kind,
                            job.attempts, "complete" if verb == "completed" else "fail", o.detail)
        self._settle([r.job for r in results])

    def _settle(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        with self._lock:
            for job in jobs:
                # Keyed by job id, but only this attempt: the job may have been claimed again.
                if self._inflight.get(job.id) is job:
                    del self._inflight[job.id]
                    self._finishing.discard(job.id)
        self._wake.set()

    def _retrying(self, call: Callable[[], list[Outcome]]) -> list[Outcome]:
        """Retry a fenced batch call through connection failures. Safe: complete, fail
        and release (started) are idempotent for the token (a repeat is accepted, changes
        nothing; a repeated release of a never-started job is refused, and logged); a
        lease that expired meanwhile is refused by the database, never silently lost.
        Raises _GiveUp when a second signal asks the shutdown not to wait any longer."""
        backoff = 0.05
        while True:
            try:
                return call()
            except Exception as exc:
                if not retryable(exc):
                    raise
                # (A call already waiting for a pool connection when the second signal
                # comes still waits out the pool's timeout, 30 s by default.)
                if self._stop.hurry.is_set():
                    raise _GiveUp() from exc
                log.warning("worker %s: reporting outcomes failed (%s); retrying in %.2fs", self.worker_id,
                            str(exc).strip(), backoff)
                self._stop.hurry.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _heartbeat_loop(self) -> None:
        interval = max(self.lease.total_seconds() / 3.0, 0.01)
        while not self._stop.done.wait(interval):
            with self._lock:
                jobs = list(self._inflight.values())
            batch = self.limits.batch
            for start in range(0, len(jobs), batch):
                chunk = jobs[start:start + batch]
                try:
                    outcomes = self.client.heartbeat_many([j.id for j in chunk], [j.attempt_token for j in chunk],
                                                          lease=self.lease)
                except RETRYABLE as exc:
                    log.warning("worker %s: heartbeat failed (%s); next try in %.1fs", self.worker_id,
                                str(exc).strip(), interval)
                    break
                for job, o in zip(chunk, outcomes):
                    if o.accepted:
                        continue
                    with self._lock:
                        current = self._inflight.get(job.id) is job
                        settling = not current or job.id in self._finishing
                    if settling:
                        continue  # its outcome is being reported: the flusher learns the truth
                    job._mark_lease_lost()
                    self.counters["lease_lost"] += 1
                    log.warning("job %s kind=%s attempt=%s: lease lost on heartbeat: %s", job.id, job.kind,
                                job.attempts, o.detail)
                    with self._lock:
                        if self._running.get(job.id) is not job and self._inflight.get(job.id) is job:
                            del self._inflight[job.id]  # never started: drop it here

    # -- shutdown ---------------------------------------------------------

    def _shutdown(self) -> None:
        log.info("worker %s stopping: releasing unstarted jobs, waiting up to %ss for running handlers",
                 self.worker_id, self.shutdown_grace)
        # 1. Jobs claimed but never started go back without counting the attempt, with
        # those of a claim whose reply was lost. Handler threads take no job once
        # _stopping is set (checked under the lock).
        # (One try, waiting SHUTDOWN_LOOKUP_WAIT at most for a connection, none after a
        # second signal: the database may be unreachable, and then those jobs wait for
        # their leases, as after a crash.)
        if self._unanswered is not None and not self._stop.hurry.is_set():
            try:
                self._recover_unanswered(wait=SHUTDOWN_LOOKUP_WAIT)
            except RETRYABLE as exc:
                log.warning("worker %s: could not look up a claim whose reply was lost (%s); its jobs, if any, "
                            "wait for their leases to expire", self.worker_id, str(exc).strip())
        self._unanswered = None
        with self._lock:
            unstarted = [job for job in self._ready if self._inflight.get(job.id) is job]
            self._ready.clear()
        self._release(unstarted, started=False)
        # 2. Let running handlers finish within the grace period.
        began = time.monotonic()
        while time.monotonic() < began + self.shutdown_grace:  # a second signal sets the grace to 0
            with self._lock:
                if not self._running:
                    break
            time.sleep(0.02)
        # 3. Give back what is still running; its late result is void.
        with self._lock:
            running = [job for job in self._running.values() if self._inflight.get(job.id) is job]
        for job in running:
            if not job.lease_lost:  # (a lost lease stays reported as one)
                self._given_back[job.id] = job
            job._mark_lease_lost()  # stops a handler that polls should_stop; voids its result
        self._release(running, started=True)
        # 4. Report every outcome already produced before leaving (a second signal stops
        # the flusher's retries while the database is unreachable, and so this wait).
        while True:
            with self._lock:
                pending = bool(self._finishing) or bool(self._results)
            if not pending:
                break
            time.sleep(0.01)

    def _release(self, jobs: list[Job], *, started: bool) -> None:
        if not jobs:
            return
        try:
            outcomes = self._retrying(lambda: self.client.release_many(
                [j.id for j in jobs], [j.attempt_token for j in jobs], started=started))
        except _GiveUp:
            log.error("worker %s: gave up releasing %s jobs (%s) after a second signal; their leases will expire",
                      self.worker_id, len(jobs), [j.id for j in jobs][:20])
            self._settle(jobs)
            return
        for job, o in zip(jobs, outcomes):
            if o.accepted:
                self.counters["released"] += 1
                log.info("released job %s kind=%s attempt=%s (%s) -> %s", job.id, job.kind, job.attempts,
                         "started" if started else "not started", o.status)
            else:
                log.warning("job %s: release refused: %s", job.id, o.detail)
                if self._given_back.get(job.id) is job:  # not given back: its lease was lost
                    del self._given_back[job.id]
        self._settle(jobs)

    def _on_signal(self, signum: int) -> None:
        if self._stop.signal(signum, self.worker_id):
            self.shutdown_grace = 0
        self.stop()

    def _sweep_loop(self) -> None:
        sweeper.run(self.client, self.run_sweeper, sweep_interval=self.sweep_interval, worker_id=self.worker_id,
                    done=self._stop.done)


__all__ = ["Worker", "Interrupted", "PermanentFailure", "RetryAfter", "Handler"]
