"""Rows returned by the pgfence functions, as frozen dataclasses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Optional, Protocol


class AttemptState(Protocol):
    """What a job can ask of the worker that holds it: the worker's ledger entry for
    the attempt (:class:`pgfence.ledger.Entry`)."""

    @property
    def lost(self) -> bool: ...

    def should_stop(self) -> bool: ...


@dataclass(frozen=True)
class Job:
    """A claimed job: what ``pgfence.claim`` returns.

    ``attempt_token`` is the fence: pass it back to heartbeat/complete/fail.
    A handler that runs long should poll :meth:`should_stop`.
    """

    id: int
    queue: str
    kind: str
    payload: Any
    attempts: int
    max_attempts: int
    attempt_token: uuid.UUID
    lease_expires_at: datetime
    #: Why ``payload`` could not be decoded (it is then ``None``): the database accepts a
    #: payload no JSON decoder here can read (nested too deep for Python's recursion
    #: limit, say, stored before the 64-level limit existed). A :class:`~pgfence.Worker`
    #: fails such a job permanently without running a handler; the rest of its batch runs.
    payload_error: Optional[str] = None
    #: Seconds the job had been runnable when it was claimed (claim time - available_at, on
    #: the database's clock: ``claim``'s ``waited_s``); None from a database that does not say.
    waited_s: Optional[float] = None
    # Set by a worker's ledger when it takes the job in: the entry that holds this
    # attempt's stop flags (a job no worker holds never stops).
    _attempt: Optional[AttemptState] = field(default=None, repr=False, compare=False)

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat or report was refused, or the worker's shutdown gave the job back
        while it ran: this attempt's result will not be recorded."""
        attempt = self._attempt
        return attempt is not None and attempt.lost

    def should_stop(self) -> bool:
        """True when the handler should wind down: the lease is lost or the worker is shutting
        down. A handler that stops early raises :class:`pgfence.Interrupted` (the job is given
        back); returning normally completes the job with the returned result."""
        attempt = self._attempt
        return attempt is not None and attempt.should_stop()


@dataclass(frozen=True)
class Enqueued:
    """One row of ``enqueue_many``: the input's 1-based ordinal, the job id, and
    whether this element created the job (false when an idempotency key matched)."""

    ordinal: int
    id: int
    created: bool


@dataclass(frozen=True)
class Outcome:
    """Per-job result of a batch call (complete/fail/heartbeat/release_many).

    ``accepted`` is false when the token was not current; ``detail`` says why.
    ``lease_expires_at`` is set by ``heartbeat_many`` only.
    """

    id: int
    accepted: bool
    status: Optional[str]
    detail: Optional[str]
    lease_expires_at: Optional[datetime] = None


@dataclass(frozen=True)
class Reclaimed:
    """One job moved by the reclaim sweep: its new status and reclaim count."""

    id: int
    status: str
    reclaim_count: int


@dataclass(frozen=True)
class QueueStats:
    """One row of ``pgfence.stats()``."""

    queue: str
    status: str
    jobs: int
    oldest_runnable_age: Optional[timedelta]
    expired_leases: int


@dataclass(frozen=True)
class QueueLimit:
    """One row of ``pgfence.queue_limits()``: a paused, capped or rate-limited queue, how
    many of its jobs are processing now, and for a rate limit (``max_claims`` per
    ``claims_per``) how many claims its bucket allows now (``claims_available``)."""

    queue: str
    paused_at: Optional[datetime]
    paused_by: Optional[str]
    max_running: Optional[int]
    running: int
    limited_at: Optional[datetime]
    limited_by: Optional[str]
    max_claims: Optional[int] = None
    claims_per: Optional[timedelta] = None
    claims_available: Optional[int] = None
    rate_limited_at: Optional[datetime] = None
    rate_limited_by: Optional[str] = None


@dataclass(frozen=True)
class QueueSet:
    """One row of ``pgfence.queue_sets()``: a set of queues stored on the server
    (``define_queue_set``), claimed from with ``claim(queue_set=...)``: its name, how many
    queues, their names (sorted), when and by whom it was last defined."""

    queue_set: str
    queue_count: int
    names: list[str]
    defined_at: datetime
    defined_by: str


@dataclass(frozen=True)
class Schedule:
    """One row of ``pgfence.schedules()``: a schedule, its job options and when it fires.

    ``cron`` (in ``time_zone``) or ``every`` is set, not both; ``next_fire_at`` is the
    next slot (after every slot fired; ``None``: none within 3700 days), ``last_slot`` the last slot fired, at
    ``last_fire_at``, as job ``last_job_id``; ``last_error``: why its last fire failed
    (cleared when a slot fires). Its jobs' ``enqueued_by`` is ``created_by``.
    """

    name: str
    cron: Optional[str]
    every: Optional[timedelta]
    kind: str
    payload: Any
    queue: str
    priority: int
    max_attempts: int
    recovery_policy: str
    time_zone: str
    catch_up: str
    slot_key: Optional[str]
    paused_at: Optional[datetime]
    paused_by: Optional[str]
    created_at: datetime
    created_by: str
    next_fire_at: Optional[datetime]
    last_fire_at: Optional[datetime]
    last_slot: Optional[datetime]
    last_job_id: Optional[int]
    last_error: Optional[str]
    last_error_at: Optional[datetime]


@dataclass(frozen=True)
class SweeperHealth:
    """``pgfence.sweeper_health()``: whether the background sweeper runs.

    ``state``: ``running`` (a pass within the last 2 minutes by the database clock),
    ``paused`` (``pause_sweeper``), ``stopped`` (no pass within 2 minutes) or ``never_ran``.
    """

    state: str
    last_pass_at: Optional[datetime]
    last_pass_age: Optional[timedelta]
    paused_at: Optional[datetime]
    paused_by: Optional[str]
    last_error: Optional[str]
    last_error_at: Optional[datetime]


@dataclass(frozen=True)
class JobRecord:
    """A whole ``pgfence.jobs`` row (for ``show`` and operators)."""

    id: int
    queue: str
    kind: str
    payload: Any
    status: str
    priority: int
    attempts: int
    max_attempts: int
    available_at: datetime
    recovery_policy: str
    idempotency_key: Optional[str]
    attempt_token: Optional[uuid.UUID]
    reserved_by: Optional[str]
    reserved_at: Optional[datetime]
    heartbeat_at: Optional[datetime]
    lease_expires_at: Optional[datetime]
    reclaim_count: int
    last_error: Optional[str]
    result: Any
    created_at: datetime
    updated_at: datetime
    finished_at: Optional[datetime]
    enqueued_by: str
    #: The run timeout of each attempt, and how long a done job holds its idempotency key
    #: (None: none, or a done job, whose history row keeps neither).
    timeout: Optional[timedelta] = None
    unique_for: Optional[timedelta] = None
    #: Why ``payload`` or ``result`` could not be decoded here (that one is then ``None``):
    #: a row stored before the 64-level limit may nest deeper than Python decodes.
    decode_error: Optional[str] = None


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of a job (``pgfence.attempts``)."""

    job_id: int
    attempt: int
    attempt_token: uuid.UUID
    worker: str
    claimed_at: datetime
    heartbeat_at: Optional[datetime]
    lease_expires_at: Optional[datetime]
    ended_at: datetime
    outcome: str
    error: Optional[str]


@dataclass(frozen=True)
class Rejection:
    """A fenced call refused because its token was not current (``pgfence.rejections``)."""

    job_id: int
    attempt_token: uuid.UUID
    operation: str
    caller: str
    detail: Optional[str]
    rejected_at: datetime


@dataclass(frozen=True)
class ActionResult:
    """One row of a bulk operator action (``requeue_many``, ``cancel_many``,
    ``mark_done_many``, ``purge_many``, ``act_on_filter``): whether it acted on the job, the job's status
    after the call (or the one that refused it; None for an unknown id), and why not."""

    id: int
    acted: bool
    job_status: Optional[str]
    detail: Optional[str]


@dataclass(frozen=True)
class ActionPreview:
    """``pgfence.preview_action``: how many jobs ``act_on_filter`` would act on now, and the
    cap per call."""

    jobs: int
    max_jobs: int


@dataclass(frozen=True)
class AuditEntry:
    """One row of ``pgfence.audit_of``: an operator action on a job. ``db_role`` and
    ``login`` are what the database vouches for; ``actor`` is what the caller said (the
    ``pgfence.actor`` setting)."""

    id: int
    at: datetime
    db_role: str
    login: str
    actor: Optional[str]
    action: str
    count: int
    note: Optional[str]
    detail: Any


@dataclass(frozen=True)
class Metric:
    """One row of ``pgfence.metrics()``: a Prometheus sample with its metadata."""

    name: str
    type: str
    help: str
    labels: dict[str, str]
    value: float
