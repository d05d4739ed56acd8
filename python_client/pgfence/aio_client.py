"""The asyncio client: :class:`AsyncClient`, the same methods as :class:`~pgfence.Client`, awaited.

Each method builds the same :class:`~pgfence.calls.Call` as the sync client (the SQL
text, arguments and row mapping are defined once, in :mod:`pgfence.calls`) and runs it
on a psycopg ``AsyncConnection``: the caller's (joining its transaction), or one of the
client's own ``AsyncConnectionPool``. SQLSTATEs become the same exceptions
(:func:`pgfence.errors.translate`).
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Optional, Sequence, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from . import calls
from ._text import escaped_logger
from .calls import Call
from .errors import LeaseLost, PgfenceError, translate
from .limits import Limits
from .models import (ActionPreview, ActionResult, Attempt, AuditEntry, Enqueued, Job, JobRecord, Metric, Outcome,
                     QueueLimit, QueueSet, QueueStats, Reclaimed, Rejection, Schedule, SweeperHealth)

log = escaped_logger("pgfence.client")

R = TypeVar("R")


class AsyncClient:
    """Calls the pgfence SQL API from asyncio; every method is a coroutine.

    Build it with ``await AsyncClient.connect(dsn)`` (it owns an ``AsyncConnectionPool``
    of autocommit connections) or from a caller's ``psycopg.AsyncConnection`` (calls then
    join the caller's transaction: an enqueue is committed or rolled back with the
    caller's own writes).

    The deployed schema version is checked by ``connect``; a client built on a caller's
    connection checks it on its first call (a constructor cannot await), unless
    ``check_schema=False``. A mismatch raises :class:`~pgfence.SchemaMismatch`.
    """

    def __init__(self, conn: Optional[psycopg.AsyncConnection[Any]] = None, *,
                 pool: Optional[AsyncConnectionPool] = None, check_schema: bool = True) -> None:
        if (conn is None) == (pool is None):
            raise TypeError("AsyncClient needs exactly one of conn or pool (or use await AsyncClient.connect(dsn))")
        self._conn = conn
        self._pool = pool
        self._unchecked = check_schema

    @classmethod
    async def connect(cls, dsn: str = "", *, min_size: int = 1, max_size: int = 8,
                      prepare_threshold: Optional[int] = 5, **conninfo: Any) -> "AsyncClient":
        """A client with its own pool of autocommit connections (the options of
        :meth:`pgfence.Client.connect`); the schema version is checked here."""
        pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "prepare_threshold": prepare_threshold, **conninfo},
            open=False,
            name="pgfence-aio",
        )
        try:
            await pool.open(wait=True, timeout=30.0)
            client = cls(pool=pool)
            await client.check_schema()
            return client
        except BaseException:
            await pool.close()
            raise

    @property
    def pool(self) -> Optional[AsyncConnectionPool]:
        """The pool this client owns, or ``None`` when built from a caller's connection."""
        return self._pool

    async def close(self) -> None:
        """Close the pool (a caller's connection is left alone)."""
        if self._pool is not None:
            await self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._conn is not None:
            yield self._conn
        else:
            assert self._pool is not None
            async with self._pool.connection() as conn:
                yield conn

    async def _do(self, call: Call[R]) -> R:
        """Run one call (see ``Client._do``: the same translation and rejection report)."""
        if self._unchecked:
            await self.check_schema()
        try:
            async with self._connection() as conn:
                async with conn.cursor(row_factory=call.row_factory) as cur:
                    await cur.execute(call.query, call.params)
                    return call.read(await cur.fetchall(), conn)
        except psycopg.Error as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            if isinstance(mapped, LeaseLost) and call.fenced is not None:
                await self._report_refused(call)
            raise mapped from exc

    async def _report_refused(self, call: Call[Any]) -> None:
        if self._conn is None or self._conn.autocommit:
            try:
                await self._do(calls.rejection_of(call))
            except (PgfenceError, psycopg.Error) as exc:  # never hide the LeaseLost
                log.debug("could not report a refused call %s: %s", call.fenced, exc)

    async def check_schema(self) -> int:
        """Check that ``pgfence.schema_version()`` is the one this client speaks; return it."""
        self._unchecked = False  # (the check's own call does not check again)
        try:
            return await self._do(calls.check_schema())
        except calls.NOT_DEPLOYED as exc:
            self._unchecked = True
            raise calls.not_deployed() from exc
        except BaseException:
            self._unchecked = True  # a failed check is tried again by the next call
            raise

    # -- producer ---------------------------------------------------------
    # (Each method: the sync Client's signature and docstring, ``async``, one line.)

    async def enqueue(self, kind: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
                      run_at: Optional[datetime] = None, max_attempts: int = 3,
                      recovery_policy: str = "auto", idempotency_key: Optional[str] = None,
                      timeout: Optional[timedelta] = None, unique_for: Optional[timedelta] = None) -> int:
        """``pgfence.enqueue``: one job; returns its id (an existing job's id when
        ``idempotency_key`` matches a live or done job of the queue that holds it).

        ``timeout`` (default ``None``: the queue's default, :meth:`set_queue_timeout`, or
        none): the run timeout of each attempt; past it the attempt ends as ``timed_out``
        and the job follows its ``recovery_policy``. ``unique_for`` (default ``None``: a
        done job holds its key for its retention): ``timedelta(0)`` holds the key only while
        the job is queued, processing or in manual_review; a period holds it until the
        job's creation plus that period."""
        return await self._do(calls.enqueue(kind, payload, queue=queue, priority=priority, run_at=run_at,
                                            max_attempts=max_attempts, recovery_policy=recovery_policy,
                                            idempotency_key=idempotency_key, timeout=timeout,
                                            unique_for=unique_for))

    async def enqueue_many(self, kinds: Sequence[str], payloads: Optional[Sequence[Any]] = None, *,
                           queue: str = "default", priorities: Optional[Sequence[int]] = None,
                           run_ats: Optional[Sequence[Optional[datetime]]] = None, max_attempts: int = 3,
                           recovery_policy: str = "auto",
                           idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                           timeout: Optional[timedelta] = None,
                           unique_for: Optional[timedelta] = None) -> list[Enqueued]:
        """``pgfence.enqueue_many``: up to 10,000 jobs into one queue in one call.

        Parallel sequences; returns one :class:`Enqueued` per input, in input order.
        ``timeout`` and ``unique_for``: one value for the batch, as :meth:`enqueue`'s.
        """
        return await self._do(calls.enqueue_many(kinds, payloads, queue=queue, priorities=priorities,
                                                 run_ats=run_ats, max_attempts=max_attempts,
                                                 recovery_policy=recovery_policy,
                                                 idempotency_keys=idempotency_keys, timeout=timeout,
                                                 unique_for=unique_for))

    # -- worker -----------------------------------------------------------

    async def claim(self, worker_id: str, queues: Optional[Sequence[str]] = None, *,
                    lease: timedelta = timedelta(seconds=30), max_jobs: int = 1,
                    request_id: Optional[uuid.UUID] = None, queue_set: Optional[str] = None) -> list[Job]:
        """``pgfence.claim``: up to ``max_jobs`` runnable jobs, each with a fresh token and lease
        (``queue_set``, instead of ``queues``: a set stored with :meth:`define_queue_set`)."""
        return await self._do(calls.claim(worker_id, queues, lease=lease, max_jobs=max_jobs, request_id=request_id,
                                          queue_set=queue_set))

    async def define_queue_set(self, queue_set: str, queues: Sequence[str]) -> int:
        """``pgfence.define_queue_set``: store (or replace) a set of queues for ``claim(queue_set=...)``."""
        return await self._do(calls.define_queue_set(queue_set, queues))

    async def drop_queue_set(self, queue_set: str) -> bool:
        """``pgfence.drop_queue_set``: true when the set existed."""
        return await self._do(calls.drop_queue_set(queue_set))

    async def queue_sets(self) -> list[QueueSet]:
        """``pgfence.queue_sets()``: the stored sets of queues, by name."""
        return await self._do(calls.queue_sets())

    async def claim_results(self, worker_id: str, request_ids: Sequence[uuid.UUID], *,
                            lease: timedelta = timedelta(seconds=30)) -> list[Job]:
        """``pgfence.claim_results``: the jobs of claims whose reply was lost."""
        return await self._do(calls.claim_results(worker_id, request_ids, lease=lease))

    async def claimed(self, worker_id: str, request_ids: Sequence[uuid.UUID], *,
                      lease: timedelta = timedelta(seconds=30)) -> list[Job]:
        """Deprecated name of :meth:`claim_results`."""
        return await self.claim_results(worker_id, request_ids, lease=lease)

    async def heartbeat(self, job_id: int, attempt_token: uuid.UUID, *,
                        lease: timedelta = timedelta(seconds=30)) -> datetime:
        """``pgfence.heartbeat``: extend the lease; returns the new expiry. Raises :class:`LeaseLost`."""
        return await self._do(calls.heartbeat(job_id, attempt_token, lease=lease))

    async def heartbeat_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                             lease: timedelta = timedelta(seconds=30)) -> list[Outcome]:
        """``pgfence.heartbeat_many``: extend many leases in one round trip; per-job outcome."""
        return await self._do(calls.heartbeat_many(job_ids, attempt_tokens, lease=lease))

    async def complete(self, job_id: int, attempt_token: uuid.UUID, result: Any = None) -> None:
        """``pgfence.complete``: processing -> done with ``result``. Raises :class:`LeaseLost`."""
        return await self._do(calls.complete(job_id, attempt_token, result))

    async def complete_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                            results: Optional[Sequence[Any]] = None, *,
                            refused_only: bool = False) -> list[Outcome]:
        """``pgfence.complete_many``: complete many attempts in one call; per-job outcome."""
        return await self._do(calls.complete_many(job_ids, attempt_tokens, results, refused_only=refused_only))

    async def fail(self, job_id: int, attempt_token: uuid.UUID, error: str, *,
                   retry_in: Optional[timedelta] = None, permanent: bool = False) -> str:
        """``pgfence.fail``: record ``error``; returns the new status. Raises :class:`LeaseLost`."""
        return await self._do(calls.fail(job_id, attempt_token, error, retry_in=retry_in, permanent=permanent))

    async def fail_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                        errors: Sequence[str], *, retry_ins: Optional[Sequence[Optional[timedelta]]] = None,
                        permanents: Optional[Sequence[bool]] = None) -> list[Outcome]:
        """``pgfence.fail_many``: fail many attempts in one call; per-job outcome."""
        return await self._do(calls.fail_many(job_ids, attempt_tokens, errors, retry_ins=retry_ins,
                                              permanents=permanents))

    async def release(self, job_id: int, attempt_token: uuid.UUID, *, started: bool = True) -> str:
        """``pgfence.release``: give an attempt back without a result; returns the new status."""
        return await self._do(calls.release(job_id, attempt_token, started=started))

    async def release_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                           started: bool = True) -> list[Outcome]:
        """``pgfence.release_many``: give many attempts back; per-job outcome."""
        return await self._do(calls.release_many(job_ids, attempt_tokens, started=started))

    async def snooze(self, job_id: int, attempt_token: uuid.UUID, delay: timedelta) -> str:
        """``pgfence.snooze``: back to the queue after ``delay`` (more than 0, at most 365 days),
        the attempt recorded ``snoozed`` and not counted toward ``max_attempts``; returns the new
        status (``queued``; past 100 snoozes of the job the attempt fails instead: ``queued`` or
        ``failed``). Raises :class:`LeaseLost`."""
        return await self._do(calls.snooze(job_id, attempt_token, delay))

    async def snooze_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                          delays: Sequence[timedelta]) -> list[Outcome]:
        """``pgfence.snooze_many``: snooze many attempts in one call; per-job outcome (an
        accepted row past the snooze cap has a ``detail`` saying the attempt failed instead)."""
        return await self._do(calls.snooze_many(job_ids, attempt_tokens, delays))

    # -- operator ---------------------------------------------------------

    async def reclaim_expired(self, max_jobs: int = 50) -> list[Reclaimed]:
        """``pgfence.reclaim_expired``: one batch of the reclaim sweep."""
        return await self._do(calls.reclaim_expired(max_jobs))

    async def sweep(self) -> int:
        """``CALL pgfence.sweep()``: reclaim every expired lease (needs autocommit)."""
        return await self._do(calls.sweep())

    async def requeue(self, job_id: int, *, note: Optional[str] = None) -> None:
        """``pgfence.requeue``: failed/manual_review/cancelled -> queued; recorded in the
        operator audit with ``note`` (optional)."""
        return await self._do(calls.requeue(job_id, note))

    async def cancel(self, job_id: int, *, note: Optional[str] = None) -> None:
        """``pgfence.cancel``: queued/processing/manual_review -> cancelled (fences a running
        worker); recorded in the operator audit with ``note`` (optional)."""
        return await self._do(calls.cancel(job_id, note))

    async def mark_done(self, job_id: int, note: str, *, result: Any = None) -> None:
        """``pgfence.mark_done``: manual_review -> done. The operator asserts the job's side
        effect happened; ``note`` (required) says why, ``result`` (any JSON value, default
        None) is stored as complete stores one. Raises :class:`InvalidTransition` (PF003)
        when the job is not in manual_review (e.g. a concurrent requeue won)."""
        return await self._do(calls.mark_done(job_id, note, result))

    async def requeue_many(self, job_ids: Sequence[int], *, note: Optional[str] = None) -> list[ActionResult]:
        """``pgfence.requeue_many``: requeue 1..10,000 jobs; one row per job (id order), one audit row."""
        return await self._do(calls.requeue_many(job_ids, note))

    async def cancel_many(self, job_ids: Sequence[int], *, note: Optional[str] = None) -> list[ActionResult]:
        """``pgfence.cancel_many``: cancel 1..10,000 jobs; one row per job (id order), one audit row."""
        return await self._do(calls.cancel_many(job_ids, note))

    async def mark_done_many(self, job_ids: Sequence[int], note: str, *, result: Any = None) -> list[ActionResult]:
        """``pgfence.mark_done_many``: mark 1..10,000 manual_review jobs done (the same
        ``result`` for each); one row per job (id order), one audit row."""
        return await self._do(calls.mark_done_many(job_ids, note, result))

    async def purge_many(self, job_ids: Sequence[int], note: str) -> list[ActionResult]:
        """``pgfence.purge_many``: delete 1..10,000 failed or cancelled jobs now, with their
        attempts (a job requeued meanwhile is refused, not deleted); note required; one audit row."""
        return await self._do(calls.purge_many(job_ids, note))

    async def preview_action(self, action: str, *, status: Optional[str] = None, queue: Optional[str] = None,
                       kind: Optional[str] = None, error_contains: Optional[str] = None,
                       updated_after: Optional[datetime] = None,
                       updated_before: Optional[datetime] = None) -> ActionPreview:
        """``pgfence.preview_action``: how many jobs :meth:`act_on_filter` would act on now
        (action ``requeue``, ``cancel`` or ``mark_done``), and the cap per call."""
        return await self._do(calls.preview_action(action, status, queue, kind, error_contains, updated_after,
                                             updated_before))

    async def act_on_filter(self, action: str, *, note: Optional[str] = None, result: Any = None,
                      status: Optional[str] = None, queue: Optional[str] = None, kind: Optional[str] = None,
                      error_contains: Optional[str] = None, updated_after: Optional[datetime] = None,
                      updated_before: Optional[datetime] = None, max_jobs: int = 10000) -> list[ActionResult]:
        """``pgfence.act_on_filter``: run ``action`` on every job the filter matches, when
        they are at most ``max_jobs`` (1..10,000; more raises :class:`InvalidArgument` and
        changes nothing). ``note`` is required for ``mark_done``."""
        return await self._do(calls.act_on_filter(action, note, result, status, queue, kind, error_contains,
                                            updated_after, updated_before, max_jobs))

    async def audit_of(self, job_id: int) -> list[AuditEntry]:
        """``pgfence.audit_of``: the operator actions on a job, oldest first (operators, viewers)."""
        return await self._do(calls.audit_of(job_id))

    async def metrics(self) -> list[Metric]:
        """``pgfence.metrics()``: Prometheus-ready samples (operators, viewers); see
        :func:`pgfence.metrics_text.prometheus_text` for the exposition format."""
        return await self._do(calls.metrics())

    async def stats(self) -> list[QueueStats]:
        """``pgfence.stats()``: jobs per queue and status."""
        return await self._do(calls.stats())

    async def get_job(self, job_id: int) -> JobRecord:
        """``pgfence.job``: the whole record of one job. Raises :class:`JobNotFound`."""
        return await self._do(calls.get_job(job_id))

    async def sweeper_last_pass(self) -> Optional[datetime]:
        """``pgfence.sweeper_last_pass()``: when the background sweeper last completed a pass."""
        return await self._do(calls.sweeper_last_pass())

    async def sweeper_active(self, max_age: Optional[timedelta] = None) -> bool:
        """True when the background sweeper runs (see :meth:`pgfence.Client.sweeper_active`)."""
        if max_age is None:
            return (await self.sweeper_health()).state == "running"
        return await self._do(calls.sweeper_recent(max_age))

    async def sweeper_health(self) -> SweeperHealth:
        """``pgfence.sweeper_health()``: whether the background sweeper runs, is paused or stopped."""
        return await self._do(calls.sweeper_health())

    async def pause_sweeper(self) -> bool:
        """``pgfence.pause_sweeper()``: pause the background sweeper; true when it was running."""
        return await self._do(calls.pause_sweeper())

    async def resume_sweeper(self) -> bool:
        """``pgfence.resume_sweeper()``: let the background sweeper run again; true when it was paused."""
        return await self._do(calls.resume_sweeper())

    async def pause_queue(self, queue: str) -> bool:
        """``pgfence.pause_queue``: claims take nothing from ``queue``; true when it paused it."""
        return await self._do(calls.pause_queue(queue))

    async def resume_queue(self, queue: str) -> bool:
        """``pgfence.resume_queue``: claims take from ``queue`` again; true when it was paused."""
        return await self._do(calls.resume_queue(queue))

    async def set_queue_limit(self, queue: str, max_running: Optional[int]) -> None:
        """``pgfence.set_queue_limit``: at most ``max_running`` jobs of ``queue`` at once (None: no cap)."""
        return await self._do(calls.set_queue_limit(queue, max_running))

    async def set_queue_timeout(self, queue: str, timeout: Optional[timedelta]) -> None:
        """``pgfence.set_queue_timeout``: the run timeout (1 ms..30 days) of ``queue``'s jobs
        enqueued from now on without one of their own (operators); ``None`` removes it."""
        return await self._do(calls.set_queue_timeout(queue, timeout))

    async def queue_timeouts(self) -> dict[str, timedelta]:
        """``pgfence.queue_timeouts()``: {queue: its default run timeout} (operators)."""
        return await self._do(calls.queue_timeouts())

    async def set_queue_rate_limit(self, queue: str, max_claims: Optional[int],
                                   per: timedelta = timedelta(seconds=1)) -> None:
        """``pgfence.set_queue_rate_limit``: claims hand out at most ``max_claims`` (1..1,000,000)
        jobs of ``queue`` per ``per`` (1 ms..1 day) across every worker, by a token bucket (a
        burst of ``max_claims`` after an idle spell); the rest stay queued (operators).
        ``None`` removes the limit."""
        return await self._do(calls.set_queue_rate_limit(queue, max_claims, per))

    async def queue_limits(self) -> list[QueueLimit]:
        """``pgfence.queue_limits()``: the paused, capped and rate-limited queues, with their
        running jobs and the claims a rate limit allows now."""
        return await self._do(calls.queue_limits())

    async def schedule(self, name: str, cron: Optional[str] = None, kind: Optional[str] = None,
                       payload: Any = None, *, queue: str = "default", priority: int = 0, max_attempts: int = 3,
                       recovery_policy: str = "auto", time_zone: str = "UTC", catch_up: str = "latest",
                       every: Optional[timedelta] = None,
                       replace: bool = False, slot_key: Optional[str] = None) -> datetime:
        """``pgfence.schedule``: enqueue ``kind`` at each slot of ``cron`` (5 fields, wall-clock
        times of ``time_zone``) or ``every`` interval (operators); returns the first slot.

        Options as :meth:`enqueue`; ``catch_up`` after a downtime: ``"all"`` (each missed
        slot, the newest 100 at most), ``"latest"`` (default) or ``"none"``. An existing
        ``name`` is refused (``psycopg.errors.UniqueViolation``) unless ``replace=True``.
        ``slot_key``: put each job's slot (ISO 8601, UTC) into its payload under this key.
        """
        return await self._do(calls.schedule(name, cron, kind, payload, queue=queue, priority=priority,
                                             max_attempts=max_attempts, recovery_policy=recovery_policy,
                                             time_zone=time_zone, catch_up=catch_up, every=every,
                                             replace=replace, slot_key=slot_key))

    async def unschedule(self, name: str) -> bool:
        """``pgfence.unschedule``: remove a schedule (its jobs stay); true when it existed."""
        return await self._do(calls.unschedule(name))

    async def pause_schedule(self, name: str) -> bool:
        """``pgfence.pause_schedule``: the schedule fires nothing until :meth:`resume_schedule`;
        true when it paused it. An unknown name raises :class:`InvalidArgument`."""
        return await self._do(calls.pause_schedule(name))

    async def resume_schedule(self, name: str) -> bool:
        """``pgfence.resume_schedule``: fire again from the next slot after now (slots during
        the pause are not caught up); true when it was paused."""
        return await self._do(calls.resume_schedule(name))

    async def schedules(self) -> list[Schedule]:
        """``pgfence.schedules()``: every schedule by name, with its next and last fire time."""
        return await self._do(calls.schedules())

    async def fire_schedules(self, max_slots: int = 100) -> int:
        """``pgfence.fire_schedules``: enqueue the due slots of every schedule now (at most
        ``max_slots`` jobs), each slot once; returns how many. The sweeper does this on every
        pass; call it where no sweeper runs."""
        return await self._do(calls.fire_schedules(max_slots))

    async def cron_next(self, cron: str, after: Optional[datetime] = None,
                        time_zone: str = "UTC") -> Optional[datetime]:
        """``pgfence.cron_next``: when ``cron`` fires next after ``after`` (default: now) in
        ``time_zone``, as a schedule with it would."""
        return await self._do(calls.cron_next(cron, after, time_zone))

    async def wakeup_tags(self, queues: Sequence[str]) -> dict[str, str]:
        """``pgfence.wakeup_tags``: {queue: the NOTIFY pgfence_enqueue payload an enqueue into it sends}."""
        return await self._do(calls.wakeup_tags(queues))

    async def report_rejection(self, job_id: int, attempt_token: uuid.UUID, operation: str) -> None:
        """``pgfence.report_rejection``: record that a single call was refused with LeaseLost."""
        return await self._do(calls.report_rejection(job_id, attempt_token, operation))

    async def attempts(self, job_id: int) -> list[Attempt]:
        """``pgfence.attempts_of``: the ended attempts of a job, oldest first."""
        return await self._do(calls.attempts(job_id))

    async def rejections(self, job_id: int) -> list[Rejection]:
        """``pgfence.rejections_of``: fenced calls refused for a job, oldest first."""
        return await self._do(calls.rejections(job_id))

    async def rejections_not_stored(self, job_id: int) -> int:
        """``pgfence.rejections_not_stored``: refused calls of a job counted but not stored."""
        return await self._do(calls.rejections_not_stored(job_id))

    async def history_summary(self, since: timedelta = timedelta(hours=1)) -> dict[str, int]:
        """``pgfence.history_summary``: ended attempts per outcome and refused calls within ``since``."""
        return await self._do(calls.history_summary(since))

    async def limits(self) -> Limits:
        """``pgfence.limits()``: the limits the SQL functions enforce."""
        return await self._do(calls.limits())

    async def sweep_scheduled(self) -> bool:
        """Deprecated name of :meth:`sweeper_active`."""
        return await self.sweeper_active()


__all__ = ["AsyncClient"]
