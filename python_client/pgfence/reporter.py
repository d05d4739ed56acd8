"""The reporter: who decides when to report an outcome, and what the database's answer means.

Handlers leave their outcomes in the ledger's ``results``. The reporter takes them in
batches and reports each batch with one ``complete_many``, one ``fail_many`` and one
``snooze_many`` call (an ``Interrupted`` handler's job with one fenced ``release_many``); a
job stays held (and heartbeated) until the database has accepted or refused its outcome.

* When: :func:`due`: ``flush_batch`` outcomes are waiting, the oldest has waited
  ``flush_interval``, or the worker is stopping (busy workers report in few, large calls).
* Which: :func:`take_batch`: at most ``max_batch`` outcomes, one per job id (two attempts
  of one job go in separate calls, which refuse duplicate ids).
* What: :func:`split`: a lost attempt's outcome is void and never reported; the rest
  are released, snoozed, completed or failed.
* The answers: an accepted outcome is counted, a refused one (its token was no longer
  current) marks the attempt's lease lost. A call refused for its values, not its tokens,
  is retried one outcome at a time to find the one refused: a result the database
  refuses fails the attempt instead, a refused failure is sent again as plain text, and
  a second refusal leaves the job to its lease. Connection failures are retried (the
  calls are idempotent for a token) until a second signal says to give up.

No thread, clock or connection of its own. The decisions (:class:`Reporting`) are
generator steps that yield the calls they need and are sent the answers; the threaded
worker's :class:`Reporter` makes those calls (a :class:`Calls`, the Client) blocking,
with the wait between retries and the flusher's sleeps passed in, and the asyncio
worker (:mod:`pgfence.aio_worker`) awaits them: both decide with the code here.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Generator, Optional, Protocol, Sequence, TypeVar

from ._text import escaped_logger
from .client import RawJson
from .handlers import storable_text
from .ledger import Entry, Ledger, Result
from .limits import Limits
from .models import Outcome
from .retries import is_data_error, retryable

if TYPE_CHECKING:  # (imported only by a worker given a metrics port)
    from .worker_metrics import WorkerMetrics

log = escaped_logger("pgfence.worker")

T = TypeVar("T")

#: Outcomes per complete_many/fail_many call at most (a worker's choice, within the
#: database's Limits.batch).
MAX_REPORT_BATCH = 1000


class GiveUp(Exception):
    """A second signal arrived while a call waited for the database: stop retrying."""


class Calls(Protocol):
    """The database calls the reporter makes (a :class:`~pgfence.Client` has them)."""

    def complete_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                      results: Optional[Sequence[Any]] = None, *,
                      refused_only: bool = False) -> list[Outcome]: ...

    def fail_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                  errors: Sequence[str], *, retry_ins: Optional[Sequence[Optional[timedelta]]] = None,
                  permanents: Optional[Sequence[bool]] = None) -> list[Outcome]: ...

    def release_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                     started: bool = True) -> list[Outcome]: ...

    def snooze_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                    delays: Sequence[timedelta]) -> list[Outcome]: ...


class Bell(Protocol):
    """What the flusher sleeps on while idle (a threading.Event that handlers set)."""

    def clear(self) -> None: ...

    def wait(self, timeout: Optional[float] = None) -> bool: ...


# -- the decisions: pure functions of the ledger's state and the outcomes --------------

def due(waiting: int, waited: float, *, flush_batch: int, flush_interval: float, stopping: bool) -> bool:
    """Report now: ``flush_batch`` outcomes are ``waiting``, the oldest has ``waited``
    ``flush_interval`` seconds, or the worker is stopping."""
    return waiting >= flush_batch or waited >= flush_interval or stopping


def take_batch(results: deque[Result], max_batch: int) -> list[Result]:
    """Pop the next batch from the front of ``results``: at most ``max_batch``, in order,
    ending before the first outcome whose job id is already in it (the batch calls refuse
    duplicate ids; a job claimed again while its old attempt still ran has two)."""
    batch: list[Result] = []
    ids: set[int] = set()
    while results and len(batch) < max_batch and results[0].entry.job.id not in ids:
        r = results.popleft()
        ids.add(r.entry.job.id)
        batch.append(r)
    return batch


@dataclass
class Split:
    """A batch by what becomes of it: ``void`` (the attempt was lost: never reported),
    ``interrupted`` (released), ``snoozed`` (snoozed), ``done`` (completed), ``failed`` (failed)."""

    void: list[Result] = field(default_factory=list)
    interrupted: list[Result] = field(default_factory=list)
    snoozed: list[Result] = field(default_factory=list)
    done: list[Result] = field(default_factory=list)
    failed: list[Result] = field(default_factory=list)


def split(batch: Sequence[Result]) -> Split:
    """Sort a batch by what becomes of each outcome (see :class:`Split`)."""
    s = Split()
    for r in batch:
        if r.entry.lost:
            s.void.append(r)
        elif r.interrupted:
            s.interrupted.append(r)
        elif r.snooze is not None:
            s.snoozed.append(r)
        elif r.ok:
            s.done.append(r)
        else:
            s.failed.append(r)
    return s


# -- what to send, and what the answers mean: steps, driven by the I/O below ---------

@dataclass(frozen=True)
class Request:
    """A database call a step needs: ``method`` of the :class:`Calls`, with these arguments."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


#: A reporting step: a generator that yields the calls it needs and is sent each call's
#: answer (or has its error thrown in), and returns when the attempts are settled. The
#: threaded :class:`Reporter` drives steps with blocking calls, the asyncio worker's
#: reporter (:mod:`pgfence.aio`) awaits them: both decide the same way, here.
Steps = Generator[Request, Any, T]


class Reporting:
    """The reporter's decisions, without I/O (see the module's docstring).

    * ``ledger``: where reported attempts are settled.
    * ``counters``: the worker's counters (completed, failed, snoozed, lease_lost, released).
    * ``hurried``: true after a second signal (stop retrying).
    * ``limits``: the database's limits (``max_batch`` is at most ``limits.batch``).
    * ``metrics`` [None]: the worker's metrics (:mod:`pgfence.worker_metrics`), told how
      each attempt that ran ended, as the database answered.
    """

    def __init__(self, ledger: Ledger, *, worker_id: str, counters: dict[str, int],
                 hurried: Callable[[], bool], limits: Limits = Limits(),
                 metrics: Optional[WorkerMetrics] = None) -> None:
        self.ledger = ledger
        self.worker_id = worker_id
        self.counters = counters
        self.hurried = hurried
        self.max_batch = min(MAX_REPORT_BATCH, limits.batch)
        self.metrics = metrics

    def retry_wait(self, exc: Exception, backoff: float) -> float:
        """A call failed with ``exc`` after waiting ``backoff`` last time: how long to
        wait before the same call again. Re-raises ``exc`` when retrying cannot help,
        raises GiveUp after a second signal. Safe: complete, fail and release (started)
        are idempotent for the token (a repeat is accepted, changes nothing; a repeated
        release of a never-started job is refused, and logged); a lease that expired
        meanwhile is refused by the database, never silently lost."""
        if not retryable(exc):
            raise exc
        # (A call already waiting for a pool connection when the second signal
        # comes still waits out the pool's timeout, 30 s by default.)
        if self.hurried():
            raise GiveUp() from exc
        log.warning("worker %s: reporting outcomes failed (%s); retrying in %.2fs", self.worker_id,
                    str(exc).strip(), backoff)
        return backoff

    def report_failed(self, batch: list[Result]) -> None:
        """Reporting ``batch`` raised what nothing above handles: drop it from the ledger.
        Only the attempts not yet settled are counted ``unreported``: those of the batch
        that were answered (or found void) before the error were counted then, once."""
        log.exception("worker %s: reporting %s outcomes failed; their jobs are dropped from this "
                      "worker and their leases will expire", self.worker_id, len(batch))
        left = {id(e) for e in self.ledger.unsettled([r.entry for r in batch])}
        self._ended([r for r in batch if id(r.entry) in left], "unreported")
        self.ledger.settle([r.entry for r in batch])

    def report_steps(self, batch: list[Result]) -> Steps[None]:
        """Report one batch (of distinct job ids)."""
        s = split(batch)
        # A lost lease makes the attempt's result void: never report it.
        for r in s.void:
            if r.entry.given_back:
                log.info("job %s kind=%s attempt=%s: returned after the shutdown gave it back, result discarded",
                         r.job.id, r.job.kind, r.job.attempts)
            else:
                log.warning("job %s kind=%s attempt=%s: lease lost, result discarded", r.job.id, r.job.kind,
                            r.job.attempts)
        metrics = self.metrics
        if metrics is not None:
            # (an attempt the shutdown gave back while it ran is counted here, once its
            # handler has returned: released, unless the database refused the release)
            for r in s.void:
                metrics.ended(r.job.kind, "released" if r.entry.given_back else "rejected")
        self.ledger.settle([r.entry for r in s.void])
        if s.interrupted:
            yield from self.release_steps([r.entry for r in s.interrupted], started=True, ran=True)
        if s.done:
            yield from self.complete_steps(s.done)
        if s.failed:
            yield from self.fail_steps(s.failed)
        if s.snoozed:
            yield from self.snooze_steps(s.snoozed)

    def release_steps(self, entries: list[Entry], *, started: bool, ran: bool = False) -> Steps[None]:
        """Give these attempts back with fenced ``release_many`` calls of at most
        ``max_batch`` each (``started``: the attempt counts; else the job returns as if
        never claimed), and settle them. ``ran``: their handlers have returned (an
        ``Interrupted``), so the metrics count how each ended."""
        if not entries:
            return
        if len(entries) > self.max_batch:  # (a shutdown with more unstarted jobs than one call takes)
            for start in range(0, len(entries), self.max_batch):
                yield from self.release_steps(entries[start:start + self.max_batch], started=started, ran=ran)
            return
        metrics = self.metrics if ran else None
        jobs = [e.job for e in entries]
        try:
            outcomes = yield Request("release_many", ([j.id for j in jobs], [j.attempt_token for j in jobs]),
                                     {"started": started})
        except GiveUp:
            log.error("worker %s: gave up releasing %s jobs (%s) after a second signal; their leases will expire",
                      self.worker_id, len(jobs), [j.id for j in jobs][:20])
            if metrics is not None:
                for job in jobs:
                    metrics.ended(job.kind, "unreported")
            self.ledger.settle(entries)
            return
        for entry, o in zip(entries, outcomes):
            job = entry.job
            if o.accepted:
                self.counters["released"] += 1
                log.info("released job %s kind=%s attempt=%s (%s) -> %s", job.id, job.kind, job.attempts,
                         "started" if started else "not started", o.status)
            else:
                log.warning("job %s: release refused: %s", job.id, o.detail)
                entry.given_back = False  # not given back: its lease was lost
            if metrics is not None:
                metrics.ended(job.kind, "released" if o.accepted else "rejected")
        self.ledger.settle(entries)

    def complete_steps(self, done: list[Result]) -> Steps[None]:
        refused = yield from self._send(done, self.complete_steps, self._result_refused, Request(
            "complete_many", ([r.job.id for r in done], [r.job.attempt_token for r in done],
                              [None if r.value is None else RawJson(r.value) for r in done]),
            {"refused_only": True}))
        if refused is not None:
            self._answers(done, refused, "completed")

    def fail_steps(self, failed: list[Result]) -> Steps[None]:
        outcomes = yield from self._send(failed, self.fail_steps, self._failure_refused, Request(
            "fail_many", ([r.job.id for r in failed], [r.job.attempt_token for r in failed],
                          [r.value or "" for r in failed]),
            {"retry_ins": [r.retry_in for r in failed], "permanents": [r.permanent for r in failed]}))
        if outcomes is not None:
            self._answers(failed, outcomes, "failed")

    def snooze_steps(self, snoozed: list[Result]) -> Steps[None]:
        outcomes = yield from self._send(snoozed, self.snooze_steps, self._snooze_refused, Request(
            "snooze_many", ([r.job.id for r in snoozed], [r.job.attempt_token for r in snoozed],
                            [r.snooze or timedelta(0) for r in snoozed])))
        if outcomes is not None:
            self._answers(snoozed, outcomes, "snoozed")

    def _send(self, results: list[Result], each: Callable[[list[Result]], Steps[None]],
              refused_one: Callable[[Result, Exception], Steps[None]],
              request: Request) -> Steps[Optional[list[Outcome]]]:
        """The outcomes of ``request`` (complete_many, fail_many or snooze_many for ``results``), through
        retrying; None when they were dealt with here instead: given up after a second
        signal, or refused for their values (not their tokens), when each result goes
        alone through ``each`` to find the one refused, which ``refused_one`` handles."""
        try:
            outcomes: list[Outcome] = yield request
            return outcomes
        except GiveUp:
            self._abandon(results)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            if len(results) > 1:
                for r in results:
                    yield from each([r])
            else:
                yield from refused_one(results[0], exc)
        return None

    def _result_refused(self, r: Result, exc: Exception) -> Steps[None]:
        """The database refused a result itself (a handler's RawJson that is not JSON,
        say): the attempt fails instead."""
        log.error("job %s kind=%s attempt=%s: the database refused its result (%s); failing the attempt",
                  r.job.id, r.job.kind, r.job.attempts, str(exc).strip())
        yield from self.fail_steps([Result(r.entry, False, storable_text(
            f"ResultNotStorable: the database refused the handler's result: {type(exc).__name__}: {exc}"),
            permanent=True)])

    def _failure_refused(self, r: Result, exc: Exception) -> Steps[None]:
        """The database refused a failure: fail again with a plain text and the default
        backoff; if that is refused too, leave the job to its lease."""
        if r.value is not None and r.value.startswith("FailureNotStorable:"):
            log.error("job %s kind=%s attempt=%s: the database refused its failure (%s); its lease will "
                      "expire and the reclaim rule applies", r.job.id, r.job.kind, r.job.attempts,
                      str(exc).strip())
            self._ended([r], "unreported")
            self.ledger.settle([r.entry])
            return
        yield from self.fail_steps([Result(r.entry, False, storable_text(
            f"FailureNotStorable: the database refused this failure ({type(exc).__name__}: {exc})"),
            permanent=r.permanent)])

    def _snooze_refused(self, r: Result, exc: Exception) -> Steps[None]:
        """The database refused a snooze for its value (not its token): fail the attempt
        instead, with the default backoff."""
        log.error("job %s kind=%s attempt=%s: the database refused its snooze (%s); failing the attempt",
                  r.job.id, r.job.kind, r.job.attempts, str(exc).strip())
        yield from self.fail_steps([Result(r.entry, False, storable_text(
            f"SnoozeNotStorable: the database refused this snooze ({type(exc).__name__}: {exc})"))])

    def _abandon(self, results: list[Result]) -> None:
        """A second signal during an outage: these outcomes are not reported (their leases
        expire and the reclaim rule applies, as after a crash)."""
        log.error("worker %s: gave up reporting %s outcomes (jobs %s) after a second signal; their leases will "
                  "expire", self.worker_id, len(results), [r.job.id for r in results][:20])
        self._ended(results, "unreported")
        self.ledger.settle([r.entry for r in results])

    def _ended(self, results: list[Result], outcome: str) -> None:
        """Tell the metrics (if any) that these attempts ended with ``outcome``."""
        metrics = self.metrics
        if metrics is not None:
            for r in results:
                metrics.ended(r.job.kind, outcome)

    def _answers(self, results: list[Result], outcomes: list[Outcome], verb: str) -> None:
        """Log and count each outcome; ``outcomes`` may hold only the refused rows
        (an input without an outcome row was accepted)."""
        by_id = {o.id: o for o in outcomes}
        metrics = self.metrics
        if not by_id and verb == "completed" and not log.isEnabledFor(logging.INFO):
            self.counters[verb] += len(results)  # all accepted, nothing to log: the busy path
            self._ended(results, "done")
            self.ledger.settle([r.entry for r in results])
            return
        for r in results:
            job = r.job
            o = by_id.get(job.id)
            if o is None or o.accepted:
                self.counters[verb] += 1
                if metrics is not None:
                    metrics.ended(job.kind, _outcome(verb, o))
                if verb == "completed":
                    log.info("completed job %s kind=%s attempt=%s", job.id, job.kind, job.attempts)
                elif verb == "snoozed":
                    log.info("snoozed job %s kind=%s attempt=%s for %s -> %s%s", job.id, job.kind, job.attempts,
                             r.snooze, o.status if o else "?", f" ({o.detail})" if o and o.detail else "")
                else:
                    log.info("failed job %s kind=%s attempt=%s -> %s: %s", job.id, job.kind, job.attempts,
                             o.status if o else "?", (r.value or "").splitlines()[0][:200])
            else:
                r.entry.lost = True
                self.counters["lease_lost"] += 1
                if metrics is not None:
                    metrics.ended(job.kind, "rejected")
                log.warning("job %s kind=%s attempt=%s: lease lost, %s refused: %s", job.id, job.kind,
                            job.attempts, {"completed": "complete", "snoozed": "snooze"}.get(verb, "fail"),
                            o.detail)
        self.ledger.settle([r.entry for r in results])


def _outcome(verb: str, o: Optional[Outcome]) -> str:
    """The metrics' outcome of an accepted ``verb`` (completed, failed, snoozed) whose
    answer is ``o`` (None: accepted without a row): as the database's status says."""
    if verb == "completed":
        return "done"
    if o is not None and o.status == "failed":
        return "failed"  # dead-lettered (a snooze past the snooze limit on the last attempt too)
    return "retried" if verb == "failed" else "snoozed"


# -- the I/O of the threaded worker --------------------------------------------------

class Reporter(Reporting):
    """Reports outcomes and give-backs for the threaded worker, with blocking calls.

    * ``calls``: the database calls (the worker's Client).
    * ``wait(seconds)``: the pause between retries (returns early when hurried).
    * the rest: see :class:`Reporting`.
    """

    def __init__(self, calls: Calls, ledger: Ledger, *, worker_id: str, counters: dict[str, int],
                 hurried: Callable[[], bool], wait: Callable[[float], Any], limits: Limits = Limits(),
                 metrics: Optional[WorkerMetrics] = None) -> None:
        super().__init__(ledger, worker_id=worker_id, counters=counters, hurried=hurried, limits=limits,
                         metrics=metrics)
        self.calls = calls
        self.wait = wait

    # -- the flusher ------------------------------------------------------

    def run(self, outcome: Bell, *, flush_batch: int, flush_interval: float, done: Callable[[], bool],
            stopping: Callable[[], bool], clock: Callable[[], float], sleep: Callable[[float], Any]) -> None:
        """The flusher's loop: report outcomes as they become due, until ``done`` and none
        is left. Idle, it sleeps on ``outcome`` (handlers ring it), so an idle worker does
        not poll; it gathers outcomes for up to ``flush_interval`` after the first."""
        results = self.ledger.results
        pending_since: Optional[float] = None
        while True:
            if not results:
                if done():
                    return
                pending_since = None
                outcome.clear()
                if not results:
                    outcome.wait(0.2)
                continue
            now = clock()
            if pending_since is None:
                pending_since = now
            if not due(len(results), now - pending_since, flush_batch=flush_batch,
                       flush_interval=flush_interval, stopping=stopping()):
                sleep(min(flush_interval / 4, pending_since + flush_interval - now))
                continue
            pending_since = None
            self.report(take_batch(results, self.max_batch))

    def report(self, batch: list[Result]) -> None:
        """Report one batch (of distinct job ids). Never raises: a batch that cannot be
        reported is dropped from the ledger, and its leases expire."""
        try:
            self.drive(self.report_steps(batch))
        except Exception:  # never let the flusher die: its outcomes would never settle
            self.report_failed(batch)

    def release(self, entries: list[Entry], *, started: bool) -> None:
        """Give these attempts back (see :meth:`Reporting.release_steps`)."""
        self.drive(self.release_steps(entries, started=started))

    def retrying(self, call: Callable[[], T]) -> T:
        """``call()``, tried again through connection failures (see :meth:`Reporting.retry_wait`).
        Raises GiveUp when a second signal asks the shutdown not to wait any longer."""
        backoff = 0.05
        while True:
            try:
                return call()
            except Exception as exc:
                self.wait(self.retry_wait(exc, backoff))
                backoff = min(backoff * 2, 5.0)

    def drive(self, steps: Steps[T]) -> T:
        """Run ``steps``, making each call it asks for (retrying), until it returns."""
        answer: Any = None
        error: Optional[Exception] = None
        while True:
            try:
                request = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            method = getattr(self.calls, request.method)
            try:
                answer, error = self.retrying(lambda: method(*request.args, **request.kwargs)), None
            except Exception as exc:
                answer, error = None, exc


__all__ = ["Reporter", "Reporting", "Request", "Steps", "Calls", "Split", "GiveUp", "due", "take_batch", "split",
           "MAX_REPORT_BATCH"]
