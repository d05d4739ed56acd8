"""The claimer: claim jobs up to the worker's free capacity, and find those of a lost reply.

It claims (one ``claim`` call, at most ``Limits.max_jobs``) whenever the free capacity
(``concurrency + prefetch`` less the attempts held and not finishing) reaches half the
capacity or a handler thread is idle; then sleeps until a slot frees, a NOTIFY arrives or
``poll_interval`` passes (each idle wait drawn from ``[poll_interval / 2, poll_interval]``).
Claimed jobs enter the ledger and wake the handler threads.

A claim that raised after it may have reached the database (the connection failed) may
have committed: its jobs are leased to this worker, which does not know them. Each claim
carries a fresh request id; the lost one is looked up with ``claimed`` before the next
claim, and its jobs run (or, at shutdown, go back unstarted), until its leases would have
expired: a claim stuck in the server keeps its lock, and the worker must not stop
claiming for it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from datetime import timedelta
from typing import Optional, Sequence, Sized

from psycopg_pool import PoolTimeout

from ._text import escaped_logger
from .client import Client
from .ledger import Ledger
from .limits import Limits
from .models import Job
from .retries import RETRYABLE
from .stopping import Stop

log = escaped_logger("pgfence.worker")

#: After a claim that a wake-up prompted and that found less than it asked for, the next
#: one waits at least this long (seconds), so that wake-ups arriving together (a burst of
#: enqueues, or a NOTIFY flood) cost one claim per CLAIM_HOLDOFF (see ``holdoff``).
CLAIM_HOLDOFF = 0.005
#: How long a shutdown waits for a connection to look up a claim whose reply was lost.
SHUTDOWN_LOOKUP_WAIT = 5.0


def claim_size(free: int, threshold: int, idle: bool, max_jobs: int) -> int:
    """How many jobs to claim now: none unless the ``free`` capacity reaches ``threshold``
    (half the capacity) or a handler is ``idle``; at most ``max_jobs`` (Limits.max_jobs)."""
    return min(free, max_jobs) if free > 0 and (free >= threshold or idle) else 0


def idle_wait(drained: bool, free: int, poll_interval: float) -> float:
    """How long to sleep unless woken: after a claim that found less than it asked for,
    or with no room, the poll, drawn from ``[poll_interval / 2, poll_interval]``; else a
    short wait for a slot to free. Workers that a NOTIFY woke together do not keep
    polling in step, so an expired lease meets the next claim sooner (recovery p95,
    2 workers polling at 0.1 s: 96 -> 54-71 ms)."""
    return poll_interval * random.uniform(0.5, 1.0) if drained or free <= 0 else 0.05


def holdoff(drained: bool, after_wake: bool, waited: float) -> float:
    """How much longer to wait before the next claim, the wait after the last one having
    lasted ``waited`` s: the rest of CLAIM_HOLDOFF when that claim found less than it asked
    for (``drained``) and a wake-up had prompted it (``after_wake``: the wait before it
    ended by a wake-up, not by its timeout), else 0. So a flood of wake-ups costs one claim
    per CLAIM_HOLDOFF (and one per poll), while the first wake-up after a quiet moment, or
    after a poll's claim that found nothing, is never held up: a NOTIFY within 5 ms of an
    idle poll waited out the rest of the 5 ms (in the latency step, the wake-up to claim
    step at p90 was 3.5 ms, its median 0.15)."""
    return max(0.0, CLAIM_HOLDOFF - waited) if drained and after_wake else 0.0


def may_have_claimed(exc: BaseException) -> bool:
    """A claim that raised ``exc`` (a RETRYABLE error) may have committed, its reply lost:
    look it up. Not when no connection was had (the claim was never sent)."""
    return not isinstance(exc, PoolTimeout)


class ReadyBell:
    """What the threaded worker's handler threads sleep on while no job is ready:
    ``ring(n)`` wakes at most ``n`` of them (``n`` jobs entered ``ready``: one thread each),
    ``ring_all()`` every one (the worker is stopping). A threading.Event woke all of them
    for one job, and the thread that took it started behind the others' wake-ups:
    claim reply -> handler start in a Worker at concurrency 8, median 194-207 us against
    101-108 at concurrency 1 (bench/latency_budget.py, 100 jobs at 20/s)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())

    def ring(self, n: int) -> None:
        with self._cond:
            self._cond.notify(n)

    def ring_all(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, ready: Sized, stopping: threading.Event, timeout: float) -> None:
        """Sleep up to ``timeout`` s unless ``ready`` has entries or ``stopping`` is set.
        Both are read under the bell's lock, and whoever fills ``ready`` (or sets
        ``stopping``) rings after, under the same lock: a ring is never missed."""
        with self._cond:
            if not ready and not stopping.is_set():
                self._cond.wait(timeout)


class Claimer:
    """Claims for one worker into ``ledger`` (see the module's docstring).

    ``wake``: set by whoever frees a slot or hears a NOTIFY; ``work``: rung here, once
    per job, when jobs are ready for the handler threads; ``counters``: the worker's (``claimed``, and
    ``lease_lost`` for an older attempt the database handed out again)."""

    def __init__(self, client: Client, ledger: Ledger, stop: Stop, *, worker_id: str,
                 queues: Optional[Sequence[str]], lease: timedelta, capacity: int, poll_interval: float,
                 counters: dict[str, int], wake: threading.Event, work: ReadyBell,
                 limits: Limits = Limits(), queue_set: Optional[str] = None) -> None:
        self.client = client
        self.ledger = ledger
        self.stop = stop
        self.worker_id = worker_id
        self.queues = None if queues is None else list(queues)
        self.queue_set = queue_set
        self.lease = lease
        self.capacity = capacity
        self.poll_interval = poll_interval
        self.counters = counters
        self.wake = wake
        self.work = work
        self.limits = limits
        # The request id of a claim whose reply was lost, and until when (monotonic) to look it up.
        self.unanswered: Optional[uuid.UUID] = None
        self.unanswered_until = 0.0

    def run(self) -> None:
        """Claim until the worker is stopping."""
        backoff = 0.1
        threshold = max(1, self.capacity // 2)
        stopping, wake, ledger = self.stop.stopping, self.wake, self.ledger
        max_jobs = self.limits.max_jobs
        after_wake = False  # the next claim follows a wake-up (see holdoff)
        while not stopping.is_set():
            wake.clear()
            free = ledger.free(self.capacity)
            idle_threads = not ledger.ready
            drained = False
            if self.unanswered is not None and time.monotonic() > self.unanswered_until:
                log.warning("worker %s: gave up looking up the claim whose reply was lost (request %s) after its "
                            "lease; its jobs, if it took any, are reclaimed as their leases expire",
                            self.worker_id, self.unanswered)
                self.unanswered = None
            if self.unanswered is not None:
                try:
                    self.recover_unanswered()
                    backoff = 0.1
                except RETRYABLE as exc:
                    log.warning("worker %s: looking up a claim whose reply was lost failed (%s); retrying in %.1fs",
                                self.worker_id, str(exc).strip(), backoff)
                    stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                continue
            want = claim_size(free, threshold, idle_threads, max_jobs)
            if want:
                request_id = uuid.uuid4()
                try:
                    jobs = self.client.claim(self.worker_id, self.queues, lease=self.lease,
                                             max_jobs=want, request_id=request_id, queue_set=self.queue_set)
                    backoff = 0.1
                except RETRYABLE as exc:
                    if may_have_claimed(exc):
                        self.unanswered = request_id
                        self.unanswered_until = time.monotonic() + self.lease.total_seconds()
                    log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id,
                                str(exc).strip(), backoff)
                    stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self.dispatch(jobs)
                if len(jobs) == want:
                    continue
                drained = True
            # Nothing to claim, or no room: sleep until a slot frees, a NOTIFY, or the poll.
            waited_from = time.monotonic()
            woken = wake.wait(idle_wait(drained, free, self.poll_interval))
            rest = holdoff(drained, after_wake, time.monotonic() - waited_from)
            if rest > 0:
                stopping.wait(rest)
            after_wake = woken

    def recover_unanswered(self, wait: Optional[float] = None) -> None:
        """Take over the jobs the unanswered claim took, if it committed: they are leased to
        this worker, and would otherwise wait out their leases with the attempt counted.
        ``claimed`` renews their leases. A retryable error propagates (ask again later);
        any other (say the role may not call ``claimed``) is logged, and the jobs, if any,
        are left to their leases, as before a lookup existed. ``wait``: at most this long
        for a pool connection (else the pool's timeout)."""
        assert self.unanswered is not None and self.client.pool is not None
        try:
            if wait is None:
                jobs = self.client.claim_results(self.worker_id, [self.unanswered], lease=self.lease)
            else:
                with self.client.pool.connection(timeout=wait) as conn:
                    jobs = Client(conn, check_schema=False).claim_results(self.worker_id, [self.unanswered],
                                                                    lease=self.lease)
        except RETRYABLE:
            raise
        except Exception:
            log.exception("worker %s: could not look up the claim whose reply was lost (request %s); its jobs, "
                          "if it took any, wait for their leases to expire", self.worker_id, self.unanswered)
            jobs = []
        self.unanswered = None
        if jobs:
            log.warning("worker %s: the claim whose reply was lost had taken %s jobs (%s)",
                        self.worker_id, len(jobs), [j.id for j in jobs][:20])
        self.dispatch(jobs)

    def recover_at_shutdown(self) -> None:
        """The shutdown's look-up of a claim whose reply was lost, so that its jobs go back
        with the other unstarted ones: one try, waiting SHUTDOWN_LOOKUP_WAIT at most for a
        connection, none after a second signal (the database may be unreachable, and then
        those jobs wait for their leases, as after a crash)."""
        if self.unanswered is not None and not self.stop.hurry.is_set():
            try:
                self.recover_unanswered(wait=SHUTDOWN_LOOKUP_WAIT)
            except RETRYABLE as exc:
                log.warning("worker %s: could not look up a claim whose reply was lost (%s); its jobs, if any, "
                            "wait for their leases to expire", self.worker_id, str(exc).strip())
        self.unanswered = None

    def dispatch(self, jobs: list[Job]) -> None:
        """Enter claimed jobs in the ledger and wake a handler thread for each."""
        if jobs:
            admit(self.ledger, jobs, self.counters)
            self.work.ring(len(jobs))


def admit(ledger: Ledger, jobs: list[Job], counters: dict[str, int]) -> None:
    """Enter claimed jobs in ``ledger``, counting them (``claimed``), and each older attempt
    of the same job that still ran or waited here as a lost lease."""
    _, displaced = ledger.admit(jobs)
    for old, new in displaced:
        # The old attempt still ran or waited here (an operator requeued the job, or its
        # lease expired meanwhile): its lease is gone. Its handler learns it from
        # should_stop(), and its outcome is discarded.
        counters["lease_lost"] += 1
        log.warning("job %s kind=%s attempt=%s: lease lost (claimed again as attempt %s)",
                    old.job.id, old.job.kind, old.job.attempts, new.job.attempts)
    counters["claimed"] += len(jobs)
    if log.isEnabledFor(logging.INFO):
        for job in jobs:
            log.info("claimed job %s kind=%s attempt=%s/%s", job.id, job.kind, job.attempts, job.max_attempts)
