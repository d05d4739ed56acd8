"""The in-flight ledger: which attempt holds which job, what runs, what waits to be reported.

A worker keeps one :class:`Entry` per attempt it claimed, from the claim until the
database has accepted or refused the attempt's outcome (the entry is then *settled*).
The ledger holds them by stage, each keyed by job id (ids, not entries: the database
may hand the same job to this worker again while an older attempt of it still runs
here, and the newer attempt is then the one that counts):

* ``held``: every attempt claimed and not settled, the newest of each job. Its leases
  are the ones heartbeated; ``held`` less ``finishing`` counts against the capacity.
* ``ready``: claimed, waiting for a handler, in claim order.
* ``running``: handed to a handler that has not returned.
* ``finishing``: the handler returned; its outcome is not settled yet.
* ``results``: handler outcomes waiting for the reporter, in order.

A plain data structure: it starts no thread, sleeps on nothing and takes no lock. The
threaded worker calls it through :class:`LockedLedger` (each method under one lock);
an asyncio worker can call a :class:`Ledger` from its event loop. ``ready`` and
``results`` are deques, whose append and popleft are atomic under the GIL: the
threaded worker's hot paths read their lengths, and the reporter pops ``results``,
without the lock. Everything else changes only through the methods.

What a transition means for the database (release, complete, fail) is decided by the
reporter and the database; the ledger only records where each attempt stands.
"""

from __future__ import annotations

from collections import deque
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterable, Optional

from .models import Job


def _never() -> bool:
    return False


class Entry:
    """One claimed attempt: its job and the stop flags of the attempt.

    * ``lost``: this attempt's result will not be recorded: a heartbeat or report was
      refused, the same worker claimed the job again, or the shutdown gave the attempt
      back while it ran. ``job.lease_lost`` reads it.
    * ``given_back``: the shutdown released the attempt while its handler ran (a late
      result is then logged as that, not as a lost lease).
    * ``expires``: the lease's end as the database last said it (the claim, then each
      accepted heartbeat); a run timeout caps it at the attempt's deadline, and the
      heartbeats then ask again just after it (see :mod:`pgfence.heartbeats`).
    * ``claimed_at``: when the worker took the attempt in, on the ledger's ``clock``
      (0.0 without one): the start of its wait for a handler, for the worker's metrics.
    """

    __slots__ = ("job", "lost", "given_back", "expires", "claimed_at", "_stopping")

    def __init__(self, job: Job, stopping: Callable[[], bool] = _never, claimed_at: float = 0.0) -> None:
        self.job = job
        self.lost = False
        self.given_back = False
        self.expires = job.lease_expires_at
        self.claimed_at = claimed_at
        self._stopping = stopping

    @property
    def id(self) -> int:
        return self.job.id

    def should_stop(self) -> bool:
        """The lease is lost, or the worker is shutting down (``job.should_stop()``)."""
        return self.lost or self._stopping()

    def __repr__(self) -> str:
        flags = "".join((" lost" if self.lost else "", " given_back" if self.given_back else ""))
        return f"<Entry job={self.job.id} attempt={self.job.attempts}{flags}>"


@dataclass
class Result:
    """A handler's outcome for one attempt, waiting to be reported.

    ``value``: the JSON text of the result (``ok``), or the error text. ``retry_in``
    and ``permanent`` go to ``fail``; ``interrupted`` asks for a fenced release;
    ``snooze`` (a delay) asks for a fenced ``snooze``."""

    entry: Entry
    ok: bool
    value: Optional[str] = None
    retry_in: Optional[timedelta] = None
    permanent: bool = False
    interrupted: bool = False
    snooze: Optional[timedelta] = None

    @property
    def job(self) -> Job:
        return self.entry.job


class Ledger:
    """The attempts a worker holds, by stage (see the module's docstring).

    ``stopping``: true once the worker is shutting down (read by ``job.should_stop()``
    and by :meth:`take`). ``clock``: when set (a worker with metrics sets it), read once
    per :meth:`admit` to stamp the new entries' ``claimed_at``."""

    def __init__(self, stopping: Callable[[], bool] = _never) -> None:
        self.held: dict[int, Entry] = {}
        self.running: dict[int, Entry] = {}
        self.finishing: set[int] = set()
        self.ready: deque[Entry] = deque()
        self.results: deque[Result] = deque()
        self.clock: Optional[Callable[[], float]] = None
        self._stopping = stopping

    # -- claimed -----------------------------------------------------------

    def admit(self, jobs: Iterable[Job]) -> tuple[list[Entry], list[tuple[Entry, Entry]]]:
        """Take in claimed jobs: each gets an entry (``job.lease_lost`` and
        ``job.should_stop()`` read it), is held and waits, in order, for a handler.

        Returns the new entries, and ``(old, new)`` for each older attempt of the same
        job that is lost now (the database handed the job out again while they still ran or waited
        here; their handlers learn it from ``should_stop()``, their results are void).
        An older attempt whose handler had returned is not among them: its outcome is on
        its way, and the database says whether it was accepted (a failure that requeued
        the job at once) or refused."""
        entries: list[Entry] = []
        displaced: list[tuple[Entry, Entry]] = []
        held, finishing = self.held, self.finishing
        claimed_at = 0.0 if self.clock is None else self.clock()
        for job in jobs:
            entry = Entry(job, self._stopping, claimed_at)
            object.__setattr__(job, "_attempt", entry)
            old = held.get(job.id)
            if old is not None:
                if job.id in finishing:
                    finishing.discard(job.id)
                else:
                    old.lost = True
                    displaced.append((old, entry))
            held[job.id] = entry
            entries.append(entry)
        self.ready.extend(entries)
        return entries, displaced

    def free(self, capacity: int) -> int:
        """How many more jobs fit in ``capacity``: an attempt whose handler returned only
        waits for the reporter, holds no handler, and does not count."""
        return capacity - (len(self.held) - len(self.finishing))

    # -- running -----------------------------------------------------------

    def take(self) -> Optional[Entry]:
        """The next ready attempt, now running; None when none is ready or the worker is
        stopping (no handler starts after that: the shutdown gives back what is ready).
        An attempt that lost its job while it waited is dropped: it never starts."""
        if self._stopping():
            return None
        ready, held = self.ready, self.held
        while ready:
            entry = ready.popleft()
            if held.get(entry.job.id) is entry:
                self.running[entry.job.id] = entry
                return entry
        return None

    def finish(self, result: Result) -> None:
        """A handler returned ``result``: its attempt no longer runs, and the outcome waits
        for the reporter. (If the shutdown gave the attempt back meanwhile, nothing is left
        to settle: the reporter only logs the void outcome.)"""
        entry = result.entry
        job_id = entry.job.id
        if self.running.get(job_id) is entry:
            del self.running[job_id]
        if self.held.get(job_id) is entry:
            self.finishing.add(job_id)
        self.results.append(result)

    # -- heartbeats --------------------------------------------------------

    def held_entries(self) -> list[Entry]:
        """Every held attempt (ready, running or finishing): the leases to renew."""
        return list(self.held.values())

    def revoke(self, entry: Entry) -> bool:
        """A heartbeat of ``entry`` was refused: its lease is lost. Marks it lost and
        returns True, and drops it if it never started (it will not); returns False, and
        changes nothing, when its outcome is being reported or a newer attempt holds the
        job (the reporter learns from the database whether that outcome counts)."""
        job_id = entry.job.id
        if self.held.get(job_id) is not entry or job_id in self.finishing:
            return False
        entry.lost = True
        if self.running.get(job_id) is not entry:
            del self.held[job_id]
        return True

    # -- settled -----------------------------------------------------------

    def settle(self, entries: Iterable[Entry]) -> None:
        """The database has the last word on these attempts (accepted, refused, or given
        up on): they hold their jobs no more. An entry a newer attempt replaced is left."""
        held, finishing = self.held, self.finishing
        for entry in entries:
            job_id = entry.job.id
            if held.get(job_id) is entry:
                del held[job_id]
                finishing.discard(job_id)

    def unsettled(self, entries: Iterable[Entry]) -> list[Entry]:
        """Those of ``entries`` that still hold their jobs (not settled yet)."""
        held = self.held
        return [e for e in entries if held.get(e.job.id) is e]

    # -- shutdown ----------------------------------------------------------

    def unstarted(self) -> list[Entry]:
        """Empty ``ready``; returns the attempts in it that still hold their jobs (to give
        back uncounted)."""
        entries = [e for e in self.ready if self.held.get(e.job.id) is e]
        self.ready.clear()
        return entries

    def any_running(self) -> bool:
        return bool(self.running)

    def give_back_running(self) -> list[Entry]:
        """The running attempts that still hold their jobs, each now lost (a handler that
        polls ``should_stop()`` stops; its late result is void) and, unless it was lost
        before (that stays reported as a lost lease), ``given_back``."""
        entries = [e for e in self.running.values() if self.held.get(e.job.id) is e]
        for entry in entries:
            if not entry.lost:
                entry.given_back = True
            entry.lost = True
        return entries

    def unreported(self) -> bool:
        """Some outcome is not settled yet (waiting for the reporter, or being reported)."""
        return bool(self.finishing) or bool(self.results)


class LockedLedger(Ledger):
    """A :class:`Ledger` whose every method runs under ``lock`` (for threads)."""

    def __init__(self, lock: AbstractContextManager[Any], stopping: Callable[[], bool] = _never) -> None:
        super().__init__(stopping)
        self._lock = lock

    def admit(self, jobs: Iterable[Job]) -> tuple[list[Entry], list[tuple[Entry, Entry]]]:
        with self._lock:
            return Ledger.admit(self, jobs)

    def free(self, capacity: int) -> int:
        with self._lock:
            return Ledger.free(self, capacity)

    def take(self) -> Optional[Entry]:
        with self._lock:
            return Ledger.take(self)

    def finish(self, result: Result) -> None:
        with self._lock:
            Ledger.finish(self, result)

    def held_entries(self) -> list[Entry]:
        with self._lock:
            return Ledger.held_entries(self)

    def revoke(self, entry: Entry) -> bool:
        with self._lock:
            return Ledger.revoke(self, entry)

    def settle(self, entries: Iterable[Entry]) -> None:
        with self._lock:
            Ledger.settle(self, entries)

    def unsettled(self, entries: Iterable[Entry]) -> list[Entry]:
        with self._lock:
            return Ledger.unsettled(self, entries)

    def unstarted(self) -> list[Entry]:
        with self._lock:
            return Ledger.unstarted(self)

    def any_running(self) -> bool:
        with self._lock:
            return Ledger.any_running(self)

    def give_back_running(self) -> list[Entry]:
        with self._lock:
            return Ledger.give_back_running(self)

    def unreported(self) -> bool:
        with self._lock:
            return Ledger.unreported(self)


__all__ = ["Entry", "Result", "Ledger", "LockedLedger"]
