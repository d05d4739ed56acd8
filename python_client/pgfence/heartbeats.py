"""Heartbeats: extend every held lease, and learn which were lost.

Every ``lease / 3`` (at least 10 ms) one ``heartbeat_many`` call (one per
``Limits.batch`` attempts) extends the lease of every attempt the ledger holds: waiting
for a handler, running, or waiting for its outcome to be reported. A refused heartbeat
marks the attempt's lease lost (``job.lease_lost``, ``job.should_stop()``), and its
result is never reported; an attempt that never started is dropped at once. A refusal
for an attempt whose outcome is already being reported changes nothing: the reporter
learns from the database whether that outcome counted. A connection failure skips the
round (the next one comes ``lease / 3`` later, well before the leases end).

A run timeout (``enqueue(timeout=...)``) caps a lease at the attempt's deadline: the
database never extends it further and refuses the heartbeats after it. So that a
handler's ``should_stop()`` turns true right after the deadline, not up to ``lease / 3``
later, a round also comes just after the earliest lease end the database returned
(``Entry.expires``), once per such end. Only the database decides: this clock (the
local one) only picks when to ask, and a skewed clock makes that round come early (the
heartbeat is accepted, and the regular rounds go on) or late (at most the regular
interval).
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

from ._text import escaped_logger
from .ledger import Entry, Ledger
from .limits import Limits
from .models import Outcome
from .retries import RETRYABLE

log = escaped_logger("pgfence.worker")


class Renews(Protocol):
    """The database call the heartbeats make (a :class:`~pgfence.Client` has it)."""

    def heartbeat_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                       lease: timedelta = ...) -> list[Outcome]: ...


def interval(lease: timedelta) -> float:
    """Seconds between two heartbeat rounds: a third of the lease, at least 10 ms."""
    return max(lease.total_seconds() / 3.0, 0.01)


#: How long after a lease's end (as the database returned it) its extra round comes.
AFTER_EXPIRY = 0.05
#: How often, at most, the heartbeat thread looks at the held leases' ends between two
#: rounds (a job claimed meanwhile may have a lease that ends before the next round).
RECHECK = 0.25


def chunks(entries: Sequence[Entry], size: int) -> Iterator[Sequence[Entry]]:
    """``entries`` in calls of at most ``size`` (the database's batch limit)."""
    for start in range(0, len(entries), size):
        yield entries[start:start + size]


class Rounds:
    """When the next heartbeat round comes (both workers' heartbeats ask this): every
    ``interval``, and once just after each held lease end the database returned that is
    sooner (a lease capped by a run timeout), so ``should_stop()`` turns true right after
    the deadline."""

    def __init__(self, ledger: Ledger, interval: float) -> None:
        self.ledger = ledger
        self.interval = interval
        # The lease ends an extra round was made for, by job id (one round per end).
        self._asked: dict[int, datetime] = {}
        self._next_beat = time.monotonic() + interval

    def start(self) -> None:
        """The heartbeats start: the first regular round comes ``interval`` from now."""
        self._next_beat = time.monotonic() + self.interval

    def next_wait(self, now: Optional[datetime] = None) -> float:
        """Seconds until the next round: ``interval``, or less when a held lease ends
        sooner (a run timeout's deadline) and no round was made for that end yet."""
        now = now or datetime.now(timezone.utc)
        wait = self.interval
        for e in self.ledger.held_entries():
            if e.expires is not None and self._asked.get(e.id) != e.expires:
                wait = min(wait, (e.expires - now).total_seconds() + AFTER_EXPIRY)
        return max(wait, 0.01)

    def sleep(self) -> float:
        """How long to wait before asking :meth:`due` again."""
        return max(min(self._next_beat - time.monotonic(), self.next_wait(), RECHECK), 0.0)

    def due(self) -> bool:
        """Whether a round is due now."""
        return time.monotonic() >= self._next_beat or self.next_wait() <= 0.01

    def begin(self, entries: Sequence[Entry]) -> None:
        """A round for ``entries`` starts: the ends it asks just after are remembered, and
        the next regular round comes ``interval`` from now."""
        now = datetime.now(timezone.utc)
        self._asked = {e.id: e.expires for e in entries
                       if e.expires is not None and (e.expires - now).total_seconds() + AFTER_EXPIRY <= 0.01}
        self._next_beat = time.monotonic() + self.interval


class Heartbeats:
    """Renews the leases of ``ledger``'s held attempts through ``calls``.

    ``counters``: the worker's counters (``lease_lost`` is counted here)."""

    def __init__(self, calls: Renews, ledger: Ledger, *, worker_id: str, lease: timedelta,
                 counters: dict[str, int], limits: Limits = Limits()) -> None:
        self.calls = calls
        self.ledger = ledger
        self.worker_id = worker_id
        self.lease = lease
        self.counters = counters
        self.limits = limits
        self.interval = interval(lease)
        self.rounds = Rounds(ledger, self.interval)

    def run(self, done: Callable[[float], Any]) -> None:
        """Beat every ``interval``, or sooner just after a lease capped by a run timeout
        ends (:class:`Rounds`), until ``done(timeout)`` (an Event's ``wait``) is true."""
        rounds = self.rounds
        rounds.start()
        while not done(rounds.sleep()):
            if rounds.due():
                self.beat()

    def next_wait(self, now: Optional[datetime] = None) -> float:
        """See :meth:`Rounds.next_wait`."""
        return self.rounds.next_wait(now)

    def beat(self) -> None:
        """One round: renew every held lease; revoke the attempts whose renewal was refused."""
        entries = self.ledger.held_entries()
        self.rounds.begin(entries)
        for chunk in chunks(entries, self.limits.batch):
            try:
                outcomes = self.calls.heartbeat_many([e.job.id for e in chunk], [e.job.attempt_token for e in chunk],
                                                     lease=self.lease)
            except RETRYABLE as exc:
                log.warning("worker %s: heartbeat failed (%s); next try in %.1fs", self.worker_id,
                            str(exc).strip(), self.interval)
                break
            except Exception:  # (the thread must outlive any one call: without it no lease is renewed)
                log.exception("worker %s: heartbeat failed; next try in %.1fs", self.worker_id, self.interval)
                break
            revoke_refused(self.ledger, chunk, outcomes, self.counters)


def revoke_refused(ledger: Ledger, chunk: Sequence[Entry], outcomes: Sequence[Outcome],
                   counters: dict[str, int]) -> None:
    """The answers of one ``heartbeat_many`` call for ``chunk``: note each accepted
    lease's new end (``Entry.expires``, capped by a run timeout), and revoke each attempt
    whose renewal was refused (unless its outcome is being reported: the reporter learns
    the truth), counting it in ``lease_lost``."""
    for entry, o in zip(chunk, outcomes):
        if o.accepted:
            if o.lease_expires_at is not None:
                entry.expires = o.lease_expires_at
            continue
        if not ledger.revoke(entry):
            continue  # its outcome is being reported: the reporter learns the truth
        counters["lease_lost"] += 1
        job = entry.job
        log.warning("job %s kind=%s attempt=%s: lease lost on heartbeat: %s", job.id, job.kind,
                    job.attempts, o.detail)


__all__ = ["Heartbeats", "Renews", "Rounds", "interval", "chunks", "revoke_refused", "AFTER_EXPIRY", "RECHECK"]
