"""Heartbeats: extend every held lease, and learn which were lost.

Every ``lease / 3`` (at least 10 ms) one ``heartbeat_many`` call (one per
``Limits.batch`` attempts) extends the lease of every attempt the ledger holds: waiting
for a handler, running, or waiting for its outcome to be reported. A refused heartbeat
marks the attempt's lease lost (``job.lease_lost``, ``job.should_stop()``), and its
result is never reported; an attempt that never started is dropped at once. A refusal
for an attempt whose outcome is already being reported changes nothing: the reporter
learns from the database whether that outcome counted. A connection failure skips the
round (the next one comes ``lease / 3`` later, well before the leases end).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Callable, Iterator, Protocol, Sequence

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


def chunks(entries: Sequence[Entry], size: int) -> Iterator[Sequence[Entry]]:
    """``entries`` in calls of at most ``size`` (the database's batch limit)."""
    for start in range(0, len(entries), size):
        yield entries[start:start + size]


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

    def run(self, done: Callable[[float], Any]) -> None:
        """Beat every ``interval`` until ``done(timeout)`` (an Event's ``wait``) is true."""
        while not done(self.interval):
            self.beat()

    def beat(self) -> None:
        """One round: renew every held lease; revoke the attempts whose renewal was refused."""
        entries = self.ledger.held_entries()
        for chunk in chunks(entries, self.limits.batch):
            try:
                outcomes = self.calls.heartbeat_many([e.job.id for e in chunk], [e.job.attempt_token for e in chunk],
                                                     lease=self.lease)
            except RETRYABLE as exc:
                log.warning("worker %s: heartbeat failed (%s); next try in %.1fs", self.worker_id,
                            str(exc).strip(), self.interval)
                break
            for entry, o in zip(chunk, outcomes):
                if o.accepted:
                    continue
                if not self.ledger.revoke(entry):
                    continue  # its outcome is being reported: the reporter learns the truth
                self.counters["lease_lost"] += 1
                job = entry.job
                log.warning("job %s kind=%s attempt=%s: lease lost on heartbeat: %s", job.id, job.kind,
                            job.attempts, o.detail)


__all__ = ["Heartbeats", "Renews", "interval", "chunks"]
