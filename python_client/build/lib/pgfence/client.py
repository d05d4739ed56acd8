"""The client: one method per pgfence SQL function, each one literal query.

Every decision (fencing, retry, backoff, reclaim) is made in PL/pgSQL; this module
passes arguments, maps rows to dataclasses and SQLSTATEs to exceptions.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import args_row, class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ._text import escaped_logger
from .errors import JobNotFound, LeaseLost, PgfenceError, SchemaMismatch, translate
from .limits import Limits
from .models import (ActionPreview, ActionResult, Attempt, AuditEntry, Enqueued, Job, JobRecord, Metric, Outcome,
                     QueueLimit, QueueStats, Reclaimed, Rejection, SweeperHealth)

log = escaped_logger("pgfence.client")

#: The ``pgfence.schema_version()`` this client speaks.
SCHEMA_VERSION = 3

T = TypeVar("T")

# A job's row: payload and result as JSON text, decoded here one by one (a value this
# process cannot decode is reported in decode_error instead of failing the call).
_JOB_FIELDS = [f.name for f in dataclasses.fields(JobRecord) if f.name != "decode_error"]
_JOB_COLUMNS = sql.SQL(", ").join(
    sql.SQL("{}::text").format(sql.Identifier(n)) if n in ("payload", "result") else sql.Identifier(n)
    for n in _JOB_FIELDS)


class Client:
    """Calls the pgfence SQL API.

    Build it with :meth:`connect` (it owns a connection pool; every call runs in
    autocommit, so a worker never sits idle in a transaction) or from a caller's
    ``psycopg.Connection`` (calls then join the caller's transaction: an enqueue is
    committed or rolled back with the caller's own writes).

    The deployed schema version is checked on construction; a mismatch raises
    :class:`SchemaMismatch` saying to run ``sqitch deploy``.
    """

    def __init__(self, conn: Optional[psycopg.Connection[Any]] = None, *,
                 pool: Optional[ConnectionPool] = None, check_schema: bool = True) -> None:
        if (conn is None) == (pool is None):
            raise TypeError("Client needs exactly one of conn or pool (or use Client.connect(dsn))")
        self._conn = conn
        self._pool = pool
        if check_schema:
            self.check_schema()

    @classmethod
    def connect(cls, dsn: str = "", *, min_size: int = 1, max_size: int = 8,
                prepare_threshold: Optional[int] = 5, **conninfo: Any) -> "Client":
        """A client with its own pool of autocommit connections.

        ``dsn`` may be empty: libpq environment variables (PGHOST, ...) apply.
        ``prepare_threshold`` is psycopg's: a query run that many times on a
        connection becomes a server-side prepared statement (a single enqueue took
        ~450 us unprepared, ~390 us prepared). Pass ``None`` behind a pooler that
        cannot keep prepared statements (pgbouncer in transaction mode before 1.21,
        or with ``max_prepared_statements = 0``).
        """
        pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "prepare_threshold": prepare_threshold, **conninfo},
            open=True,
            name="pgfence",
        )
        try:
            pool.wait(timeout=30.0)
            return cls(pool=pool)
        except BaseException:
            pool.close()
            raise

    @property
    def pool(self) -> Optional[ConnectionPool]:
        """The pool this client owns, or ``None`` when built from a caller's connection."""
        return self._pool

    def close(self) -> None:
        """Close the pool (a caller's connection is left alone)."""
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._conn is not None:
            yield self._conn
        else:
            assert self._pool is not None
            with self._pool.connection() as conn:
                yield conn

    @contextmanager
    def _call(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one call; a pgfence SQLSTATE it raises becomes its PgfenceError."""
        try:
            with self._connection() as conn:
                yield conn
        except psycopg.Error as exc:
            mapped = translate(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    def _rows(self, row_type: type[T], query: Any, params: Any = None, *, positional: bool = False) -> list[T]:
        # positional: the query selects the dataclass's fields in order (cheaper than by name).
        factory = args_row(row_type) if positional else class_row(row_type)
        with self._call() as conn:
            with conn.cursor(row_factory=factory) as cur:
                cur.execute(query, params)
                return cur.fetchall()

    def _scalar(self, query: Any, params: Any = None) -> Any:
        with self._call() as conn:
            row = conn.execute(query, params).fetchone()
            return None if row is None else row[0]

    def _fenced(self, operation: str, job_id: int, attempt_token: uuid.UUID, query: str, params: Any) -> Any:
        """Run a single fenced call; when it raises :class:`LeaseLost`, record the refusal
        with ``report_rejection`` (the refused call's own transaction was rolled back)."""
        try:
            return self._scalar(query, params)
        except LeaseLost:
            if self._conn is None or self._conn.autocommit:
                try:
                    self.report_rejection(job_id, attempt_token, operation)
                except (PgfenceError, psycopg.Error) as exc:  # never hide the LeaseLost
                    log.debug("could not report the refused %s of job %s: %s", operation, job_id, exc)
            raise

    def check_schema(self) -> int:
        """Check that ``pgfence.schema_version()`` is the one this client speaks; return it."""
        try:
            with self._call() as conn:
                row = conn.execute("SELECT pgfence.schema_version(),"
                                   " to_regprocedure('pgfence.claim_results(text, uuid[], interval)') IS NOT NULL"
                                   ).fetchone()
            assert row is not None
            version, additions = row
        except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName) as exc:
            raise SchemaMismatch(
                "pgfence is not deployed in this database: run `sqitch deploy` "
                "(or `make deploy` in the pgfence repository)") from exc
        if version != SCHEMA_VERSION:
            raise SchemaMismatch(
                f"the database has pgfence schema version {version}, this client speaks "
                f"{SCHEMA_VERSION}: run `sqitch deploy` with the matching pgfence release")
        if not additions:
            # (functions added after @v0.4.0 without a new version: claim_results, the
            # read API, limits())
            raise SchemaMismatch(
                f"the database has pgfence schema version {version} as of @v0.4.0, without the functions "
                "added since (claim_results, job, limits, ...) that this client calls: run `sqitch deploy`")
        return int(version)

    # -- producer ---------------------------------------------------------

    def enqueue(self, kind: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
                run_at: Optional[datetime] = None, max_attempts: int = 3,
                recovery_policy: str = "auto", idempotency_key: Optional[str] = None) -> int:
        """``pgfence.enqueue``: one job; returns its id (an existing job's id when
        ``idempotency_key`` matches a live or done job of the queue)."""
        return int(self._scalar(
            "SELECT pgfence.enqueue(kind => %s, payload => %s, queue => %s, priority => %s, "
            "run_at => %s, max_attempts => %s, recovery_policy => %s, idempotency_key => %s)",
            (kind, Jsonb({} if payload is None else payload), queue, priority, _aware(run_at),
             max_attempts, recovery_policy, idempotency_key)))

    def enqueue_many(self, kinds: Sequence[str], payloads: Optional[Sequence[Any]] = None, *,
                     queue: str = "default", priorities: Optional[Sequence[int]] = None,
                     run_ats: Optional[Sequence[Optional[datetime]]] = None, max_attempts: int = 3,
                     recovery_policy: str = "auto",
                     idempotency_keys: Optional[Sequence[Optional[str]]] = None) -> list[Enqueued]:
        """``pgfence.enqueue_many``: up to 10,000 jobs into one queue in one call.

        Parallel sequences; returns one :class:`Enqueued` per input, in input order.
        """
        # Payloads travel as one JSON array that the server unpacks in order: one
        # json.dumps and one jsonb parse instead of a jsonb[] literal of escaped
        # elements (1,000-job batches: 64-68k -> 100-113k jobs/s, measured).
        params: list[Any] = [list(kinds)]
        if payloads is not None:
            params.append(json.dumps([{} if p is None else p for p in payloads]))
        params += [queue, None if priorities is None else list(priorities),
                   None if run_ats is None else [_aware(t) for t in run_ats], max_attempts, recovery_policy,
                   None if idempotency_keys is None else list(idempotency_keys)]
        query = _ENQUEUE_MANY.format(payloads="NULL" if payloads is None else _PAYLOADS_FROM_JSON_ARRAY)
        return self._rows(Enqueued, query, params, positional=True)

    # -- worker -----------------------------------------------------------

    def claim(self, worker_id: str, queues: Optional[Sequence[str]] = None, *,
              lease: timedelta = timedelta(seconds=30), max_jobs: int = 1,
              request_id: Optional[uuid.UUID] = None) -> list[Job]:
        """``pgfence.claim``: up to ``max_jobs`` runnable jobs, each with a fresh token and lease.

        ``request_id`` (a fresh ``uuid.uuid4()`` per call): if the call raises with the
        connection lost, :meth:`claim_results` tells which jobs it took."""
        return self._claim_rows(_CLAIM, {"worker_id": worker_id, "queues": None if queues is None else list(queues),
                                         "lease": lease, "max_jobs": max_jobs, "request_id": request_id})

    def claim_results(self, worker_id: str, request_ids: Sequence[uuid.UUID], *,
                      lease: timedelta = timedelta(seconds=30)) -> list[Job]:
        """``pgfence.claim_results``: the jobs that claims made with these request ids took and
        still hold for ``worker_id``, as :meth:`claim` returned them, each lease renewed to
        ``lease`` (for a claim whose reply was lost)."""
        return self._claim_rows(_CLAIM_RESULTS, {"worker_id": worker_id, "request_ids": list(request_ids),
                                                 "lease": lease})

    def claimed(self, worker_id: str, request_ids: Sequence[uuid.UUID], *,
                lease: timedelta = timedelta(seconds=30)) -> list[Job]:
        """Deprecated name of :meth:`claim_results`."""
        return self.claim_results(worker_id, request_ids, lease=lease)

    def _claim_rows(self, query: tuple[str, str], params: dict[str, Any]) -> list[Job]:
        params["part_bytes"] = _CLAIM_PART_BYTES
        with self._call() as conn:
            load = _custom_jsonb_load(conn)
            rows = conn.execute(query[1] if load else query[0], params).fetchall()
        jobs: list[Job] = []
        for ids, queue_names, kinds, payloads, attempts, max_attempts, tokens, leases in rows:
            try:
                payloads = list(map(load, payloads)) if load else _decode_json_text(payloads)
            except Exception:  # RecursionError, ValueError ...: some payload no decoder here can read
                texts = payloads if load else _json_array_elements(payloads)
                decoded = [_decode_one(load or _decode_json_text, text) for text in texts]
                jobs += map(Job, ids, queue_names, kinds, [d[0] for d in decoded], attempts, max_attempts, tokens,
                            leases, [d[1] for d in decoded])
                continue
            jobs += map(Job, ids, queue_names, kinds, payloads, attempts, max_attempts, tokens, leases)
        return jobs

    def heartbeat(self, job_id: int, attempt_token: uuid.UUID, *,
                  lease: timedelta = timedelta(seconds=30)) -> datetime:
        """``pgfence.heartbeat``: extend the lease; returns the new expiry. Raises :class:`LeaseLost`."""
        value: datetime = self._fenced("heartbeat", job_id, attempt_token,
            "SELECT pgfence.heartbeat(job_id => %s, attempt_token => %s, lease => %s)",
            (job_id, attempt_token, lease))
        return value

    def heartbeat_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                       lease: timedelta = timedelta(seconds=30)) -> list[Outcome]:
        """``pgfence.heartbeat_many``: extend many leases in one round trip; per-job outcome."""
        return self._rows(Outcome,
            "SELECT id, accepted, status, detail, lease_expires_at FROM pgfence.heartbeat_many("
            f"{_FENCE_ARRAYS}, lease => %s)",
            (list(job_ids), list(attempt_tokens), lease))

    def complete(self, job_id: int, attempt_token: uuid.UUID, result: Any = None) -> None:
        """``pgfence.complete``: processing -> done with ``result`` (a JSON-able value, or
        :class:`RawJson` text). Raises :class:`LeaseLost`."""
        self._fenced("complete", job_id, attempt_token,
                     "SELECT pgfence.complete(job_id => %s, attempt_token => %s, result => %s::jsonb)",
                     (job_id, attempt_token, _dump(result)))

    def complete_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                      results: Optional[Sequence[Any]] = None, *,
                      refused_only: bool = False) -> list[Outcome]:
        """``pgfence.complete_many``: complete many attempts in one call; per-job outcome.

        ``results`` are JSON-able values (or already-serialized JSON via :class:`RawJson`).
        ``refused_only`` returns only the refused rows (what a busy worker needs to know).
        """
        ids = list(job_ids)
        dumped = None if results is None else [_dump(r) for r in results]
        if dumped is not None and len(dumped) == len(ids) and all(d is None for d in dumped):
            # No result anywhere (no-op handlers): NULL says the same as an array of
            # NULLs, and the batch no longer carries one (500 jobs: -4 us per job).
            dumped = None
        query = ("SELECT id, accepted, status, detail FROM pgfence.complete_many("
                 f"{_FENCE_ARRAYS}, results => %s::text[]::jsonb[])")
        if refused_only:
            query += " WHERE NOT accepted"
        return self._rows(Outcome, query, (ids, list(attempt_tokens), dumped))

    def fail(self, job_id: int, attempt_token: uuid.UUID, error: str, *,
             retry_in: Optional[timedelta] = None, permanent: bool = False) -> str:
        """``pgfence.fail``: record ``error``; returns the new status, ``queued`` (retry) or ``failed``."""
        return str(self._fenced("fail", job_id, attempt_token,
            "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s, retry_in => %s, "
            "permanent => %s)", (job_id, attempt_token, error, retry_in, permanent)))

    def fail_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                  errors: Sequence[str], *, retry_ins: Optional[Sequence[Optional[timedelta]]] = None,
                  permanents: Optional[Sequence[bool]] = None) -> list[Outcome]:
        """``pgfence.fail_many``: fail many attempts in one call; per-job outcome."""
        return self._rows(Outcome,
            "SELECT id, accepted, status, detail FROM pgfence.fail_many("
            f"{_FENCE_ARRAYS}, errors => %s, retry_ins => %s::interval[], permanents => %s)",
            (list(job_ids), list(attempt_tokens), list(errors),
             None if retry_ins is None else list(retry_ins),
             None if permanents is None else list(permanents)))

    def release(self, job_id: int, attempt_token: uuid.UUID, *, started: bool = True) -> str:
        """``pgfence.release``: give an attempt back without a result; returns the new status."""
        return str(self._fenced("release", job_id, attempt_token,
            "SELECT pgfence.release(job_id => %s, attempt_token => %s, started => %s)",
            (job_id, attempt_token, started)))

    def release_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                     started: bool = True) -> list[Outcome]:
        """``pgfence.release_many``: give many attempts back; per-job outcome."""
        return self._rows(Outcome,
            "SELECT id, accepted, status, detail FROM pgfence.release_many("
            f"{_FENCE_ARRAYS}, started => %s)",
            (list(job_ids), list(attempt_tokens), started))

    # -- operator ---------------------------------------------------------

    def reclaim_expired(self, max_jobs: int = 50) -> list[Reclaimed]:
        """``pgfence.reclaim_expired``: one batch of the reclaim sweep."""
        return self._rows(Reclaimed,
            "SELECT id, status, reclaim_count FROM pgfence.reclaim_expired(max_jobs => %s)", (max_jobs,))

    def sweep(self) -> int:
        """``CALL pgfence.sweep()``: reclaim every expired lease, a committed batch at a time.

        Needs autocommit (a pool client, or a caller's connection outside a transaction).
        """
        return int(self._scalar("CALL pgfence.sweep()"))

    def requeue(self, job_id: int, *, note: Optional[str] = None) -> None:
        """``pgfence.requeue``: failed/manual_review/cancelled -> queued; recorded in the
        operator audit with ``note`` (optional)."""
        self._scalar("SELECT pgfence.requeue(job_id => %s, note => %s)", (job_id, note))

    def cancel(self, job_id: int, *, note: Optional[str] = None) -> None:
        """``pgfence.cancel``: queued/processing/manual_review -> cancelled (fences a running
        worker); recorded in the operator audit with ``note`` (optional)."""
        self._scalar("SELECT pgfence.cancel(job_id => %s, note => %s)", (job_id, note))

    def mark_done(self, job_id: int, note: str, *, result: Any = None) -> None:
        """``pgfence.mark_done``: manual_review -> done. The operator asserts the job's side
        effect happened; ``note`` (required) says why, ``result`` (any JSON value, default
        None) is stored as complete stores one. Raises :class:`InvalidTransition` (PF003)
        when the job is not in manual_review (e.g. a concurrent requeue won)."""
        self._scalar("SELECT pgfence.mark_done(job_id => %s, note => %s, result => %s)",
                     (job_id, note, None if result is None else Jsonb(result)))

    def requeue_many(self, job_ids: Sequence[int], *, note: Optional[str] = None) -> list[ActionResult]:
        """``pgfence.requeue_many``: requeue 1..10,000 jobs; one row per job (id order), one audit row."""
        return self._rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.requeue_many("
                          "job_ids => %s::bigint[], note => %s)", (list(job_ids), note))

    def cancel_many(self, job_ids: Sequence[int], *, note: Optional[str] = None) -> list[ActionResult]:
        """``pgfence.cancel_many``: cancel 1..10,000 jobs; one row per job (id order), one audit row."""
        return self._rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.cancel_many("
                          "job_ids => %s::bigint[], note => %s)", (list(job_ids), note))

    def mark_done_many(self, job_ids: Sequence[int], note: str, *, result: Any = None) -> list[ActionResult]:
        """``pgfence.mark_done_many``: mark 1..10,000 manual_review jobs done (the same
        ``result`` for each); one row per job (id order), one audit row."""
        return self._rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.mark_done_many("
                          "job_ids => %s::bigint[], note => %s, result => %s)",
                          (list(job_ids), note, None if result is None else Jsonb(result)))

    def preview_action(self, action: str, *, status: Optional[str] = None, queue: Optional[str] = None,
                       kind: Optional[str] = None, error_contains: Optional[str] = None,
                       updated_after: Optional[datetime] = None,
                       updated_before: Optional[datetime] = None) -> ActionPreview:
        """``pgfence.preview_action``: how many jobs :meth:`act_on_filter` would act on now
        (action ``requeue``, ``cancel`` or ``mark_done``), and the cap per call."""
        return self._rows(ActionPreview,
            "SELECT jobs, max_jobs FROM pgfence.preview_action(action => %s, status => %s, queue => %s, kind => %s,"
            " error_contains => %s, updated_after => %s, updated_before => %s)",
            (action, status, queue, kind, error_contains, updated_after, updated_before))[0]

    def act_on_filter(self, action: str, *, note: Optional[str] = None, result: Any = None,
                      status: Optional[str] = None, queue: Optional[str] = None, kind: Optional[str] = None,
                      error_contains: Optional[str] = None, updated_after: Optional[datetime] = None,
                      updated_before: Optional[datetime] = None, max_jobs: int = 10000) -> list[ActionResult]:
        """``pgfence.act_on_filter``: run ``action`` on every job the filter matches, when
        they are at most ``max_jobs`` (1..10,000; more raises :class:`InvalidArgument` and
        changes nothing). ``note`` is required for ``mark_done``."""
        return self._rows(ActionResult,
            "SELECT id, acted, job_status, detail FROM pgfence.act_on_filter(action => %s, note => %s,"
            " result => %s, status => %s, queue => %s, kind => %s, error_contains => %s, updated_after => %s,"
            " updated_before => %s, max_jobs => %s)",
            (action, note, None if result is None else Jsonb(result), status, queue, kind, error_contains,
             updated_after, updated_before, max_jobs))

    def audit_of(self, job_id: int) -> list[AuditEntry]:
        """``pgfence.audit_of``: the operator actions on a job, oldest first (operators, viewers)."""
        return self._rows(AuditEntry, "SELECT id, at, db_role, login, actor, action, count, note, detail"
                          " FROM pgfence.audit_of(job_id => %s)", (job_id,))

    def metrics(self) -> list[Metric]:
        """``pgfence.metrics()``: Prometheus-ready samples (operators, viewers); see
        :func:`pgfence.metrics_text.prometheus_text` for the exposition format."""
        return self._rows(Metric, "SELECT name, type, help, labels, value FROM pgfence.metrics()")

    def stats(self) -> list[QueueStats]:
        """``pgfence.stats()``: jobs per queue and status."""
        return self._rows(QueueStats,
            "SELECT queue, status, jobs, oldest_runnable_age, expired_leases FROM pgfence.stats()")

    def get_job(self, job_id: int) -> JobRecord:
        """``pgfence.job``: the whole record of one job. Raises :class:`JobNotFound` when it
        does not exist or this role may not see it (a producer sees the jobs it enqueued)."""
        with self._call() as conn:
            row = conn.execute(sql.SQL("SELECT {} FROM pgfence.job(job_id => %s)").format(_JOB_COLUMNS),
                               (job_id,)).fetchone()
            load = _custom_jsonb_load(conn) or _decode_json_text
        if row is None:
            raise JobNotFound(f"pgfence: job {job_id} not found", sqlstate="PF002")
        values = dict(zip(_JOB_FIELDS, row))
        errors = []
        for name in ("payload", "result"):
            if values[name] is not None:
                values[name], error = _decode_one(load, values[name])
                if error is not None:
                    errors.append(f"{name}: {error}")
        return JobRecord(**values, decode_error="; ".join(errors) or None)

    def sweeper_last_pass(self) -> Optional[datetime]:
        """``pgfence.sweeper_last_pass()``: when the background sweeper last completed a pass."""
        value: Optional[datetime] = self._scalar("SELECT pgfence.sweeper_last_pass()")
        return value

    def sweeper_active(self, max_age: Optional[timedelta] = None) -> bool:
        """True when the background sweeper (pg_cron job ``pgfence-reclaim``) runs: by
        default as :meth:`sweeper_health` says (state ``running``), else when it completed
        a pass within ``max_age`` by the database clock."""
        if max_age is None:
            return self.sweeper_health().state == "running"
        return bool(self._scalar(
            "SELECT coalesce(pgfence.sweeper_last_pass() > clock_timestamp() - %s, false)", (max_age,)))

    def sweeper_health(self) -> SweeperHealth:
        """``pgfence.sweeper_health()``: whether the background sweeper runs, is paused or
        stopped, its last pass and the last error it survived."""
        return self._rows(SweeperHealth,
            "SELECT state, last_pass_at, last_pass_age, paused_at, paused_by, last_error, last_error_at"
            " FROM pgfence.sweeper_health()", positional=True)[0]

    def pause_sweeper(self) -> bool:
        """``pgfence.pause_sweeper()``: pause the background sweeper (operators); true when it
        was running. Claims still reclaim expired leases."""
        return bool(self._scalar("SELECT pgfence.pause_sweeper()"))

    def resume_sweeper(self) -> bool:
        """``pgfence.resume_sweeper()``: let the background sweeper run again; true when it was paused."""
        return bool(self._scalar("SELECT pgfence.resume_sweeper()"))

    def pause_queue(self, queue: str) -> bool:
        """``pgfence.pause_queue``: claims take nothing from ``queue`` until :meth:`resume_queue`
        (operators); jobs already claimed finish, enqueue still works. True when it paused it."""
        return bool(self._scalar("SELECT pgfence.pause_queue(queue => %s)", (queue,)))

    def resume_queue(self, queue: str) -> bool:
        """``pgfence.resume_queue``: claims take from ``queue`` again; true when it was paused."""
        return bool(self._scalar("SELECT pgfence.resume_queue(queue => %s)", (queue,)))

    def set_queue_limit(self, queue: str, max_running: Optional[int]) -> None:
        """``pgfence.set_queue_limit``: at most ``max_running`` (1..1,000,000) jobs of ``queue``
        processing at once across every worker (operators); ``None`` removes the cap."""
        self._scalar("SELECT pgfence.set_queue_limit(queue => %s, max_running => %s::integer)",
                     (queue, max_running))

    def queue_limits(self) -> list[QueueLimit]:
        """``pgfence.queue_limits()``: the paused and capped queues, with their running jobs."""
        return self._rows(QueueLimit,
            "SELECT queue, paused_at, paused_by, max_running, running, limited_at, limited_by"
            " FROM pgfence.queue_limits()", positional=True)

    def wakeup_tags(self, queues: Sequence[str]) -> dict[str, str]:
        """``pgfence.wakeup_tags``: {queue: the NOTIFY pgfence_enqueue payload an enqueue
        into it sends} (the channel carries tags, not queue names)."""
        with self._call() as conn:
            rows = conn.execute("SELECT queue, tag FROM pgfence.wakeup_tags(queues => %s)",
                                (list(queues),)).fetchall()
        return {str(q): str(t) for q, t in rows}

    def report_rejection(self, job_id: int, attempt_token: uuid.UUID, operation: str) -> None:
        """``pgfence.report_rejection``: record that a single call (``heartbeat``, ``complete``,
        ``fail``, ``release``) was refused with :class:`LeaseLost` (its transaction rolled back)."""
        self._scalar("SELECT pgfence.report_rejection(job_id => %s, attempt_token => %s, operation => %s)",
                     (job_id, attempt_token, operation))

    def attempts(self, job_id: int) -> list[Attempt]:
        """``pgfence.attempts_of``: the ended attempts of a job, oldest first (none when this
        role may not see the job)."""
        return self._rows(Attempt,
            "SELECT %(id)s::bigint AS job_id, attempt, attempt_token, worker, claimed_at, heartbeat_at, lease_expires_at,"
            " ended_at, outcome, error FROM pgfence.attempts_of(job_id => %(id)s)", {"id": job_id})

    def rejections(self, job_id: int) -> list[Rejection]:
        """``pgfence.rejections_of``: fenced calls refused for a job, oldest first (at most
        100 are stored per job; :meth:`rejections_not_stored` counts the rest)."""
        return self._rows(Rejection,
            "SELECT %(id)s::bigint AS job_id, attempt_token, operation, caller, detail, rejected_at"
            " FROM pgfence.rejections_of(job_id => %(id)s)", {"id": job_id})

    def rejections_not_stored(self, job_id: int) -> int:
        """``pgfence.rejections_not_stored``: how many refused calls of a job were counted
        but not stored (at most 100 are kept per job)."""
        return int(self._scalar("SELECT pgfence.rejections_not_stored(job_id => %s)", (job_id,)))

    def history_summary(self, since: timedelta = timedelta(hours=1)) -> dict[str, int]:
        """``pgfence.history_summary``: ended attempts per outcome (``done``, ``failed``,
        ``reclaimed``, ``released``, ``cancelled``) and refused calls (``rejected``) within
        ``since``. Operators only."""
        with self._call() as conn:
            rows = conn.execute("SELECT outcome, count FROM pgfence.history_summary(since => %s)",
                                (since,)).fetchall()
        return {str(outcome): int(n) for outcome, n in rows}

    def limits(self) -> Limits:
        """``pgfence.limits()``: the limits the SQL functions enforce (``max_jobs``,
        ``batch``, ``queues``, ``payload_bytes`` ...), as :class:`~pgfence.limits.Limits`."""
        with self._call() as conn:
            rows = conn.execute("SELECT name, value, description FROM pgfence.limits()").fetchall()
        return Limits.from_rows(rows)

    # Kept for callers of the first release: the sweep counts as scheduled when it runs.
    def sweep_scheduled(self) -> bool:
        """Deprecated name of :meth:`sweeper_active`."""
        return self.sweeper_active()


# The (job id, token) arrays of the batch calls travel in binary: no text to format
# here or to parse there (500 jobs: -1.4 us per job in complete_many, measured). The
# casts keep tokens given as strings working.
_FENCE_ARRAYS = "job_ids => %b::bigint[], attempt_tokens => %b::uuid[]"

_ENQUEUE_MANY = ("SELECT ordinal, id, created FROM pgfence.enqueue_many(kinds => %s, payloads => {payloads}, "
                 "queue => %s, priorities => %s, run_ats => %s, max_attempts => %s, recovery_policy => %s, "
                 "idempotency_keys => %s)")
_PAYLOADS_FROM_JSON_ARRAY = ("ARRAY(SELECT p.value FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS p(value, ord)"
                             " ORDER BY p.ord)")


# claim's jobs arrive as rows of arrays, in claim order, one row per _CLAIM_PART_BYTES
# of payload text (a value is limited to 1 GB, and a payload of 1 MiB of jsonb can be
# several MiB of text). With psycopg's default jsonb loader a row's payloads come as
# one JSON array text, decoded with one call: no row and row-factory call per job, and
# no decoder call (plus psycopg's copy to bytes and encoding detection) per payload
# (500-job claims: 5.9 -> 4.4 us of client CPU per job, measured). Any other jsonb
# loader (say one set with psycopg.types.json.set_json_loads, globally or on the
# caller's connection) is given each payload's text, as psycopg would.
# (claimed() returns the same rows, and is read the same way.)
_CLAIM_ROWS = (
    "SELECT array_agg(c.id ORDER BY c.n), array_agg(c.queue ORDER BY c.n), array_agg(c.kind ORDER BY c.n),"
    " {payloads}, array_agg(c.attempts ORDER BY c.n), array_agg(c.max_attempts ORDER BY c.n),"
    " array_agg(c.attempt_token ORDER BY c.n), array_agg(c.lease_expires_at ORDER BY c.n)"
    " FROM (SELECT c.*, sum(octet_length(c.text)) OVER (ORDER BY c.n) / %(part_bytes)s::bigint AS part"
    " FROM (SELECT c.*, c.payload::text AS text"
    " FROM {call}"
    " WITH ORDINALITY AS c(id, queue, kind, payload, attempts, max_attempts, attempt_token, lease_expires_at, n)"
    " OFFSET 0) c) c"
    " GROUP BY c.part ORDER BY c.part")
_CLAIM_PART_BYTES = 64 * 1024 * 1024


def _claim_queries(call: str) -> tuple[str, str]:
    """(payloads as one JSON array text, payloads one text each) for a call returning claim's rows."""
    return (_CLAIM_ROWS.format(call=call, payloads="'[' || string_agg(c.text, ',' ORDER BY c.n) || ']'"),
            _CLAIM_ROWS.format(call=call, payloads="array_agg(c.text ORDER BY c.n)"))


_CLAIM = _claim_queries("pgfence.claim(worker_id => %(worker_id)s, queues => %(queues)s, lease => %(lease)s,"
                        " max_jobs => %(max_jobs)s, request_id => %(request_id)s)")
_CLAIM_RESULTS = _claim_queries("pgfence.claim_results(worker_id => %(worker_id)s,"
                                " request_ids => %(request_ids)s::uuid[], lease => %(lease)s)")
_JSONB_OID = 3802
_decode_json = json.JSONDecoder().decode


def _decode_json_text(text: Any) -> Any:
    # str, except on a SQL_ASCII connection, where psycopg returns text as bytes
    return _decode_json(text) if type(text) is str else json.loads(text)


def _decode_one(load: Callable[[Any], Any], text: Any) -> tuple[Any, Optional[str]]:
    """(payload, None), or (None, why) for a payload that cannot be decoded here."""
    try:
        return load(text), None
    except Exception as exc:  # RecursionError on a payload nested deeper than Python recurses
        return None, f"{type(exc).__name__}: {str(exc)[:500]}"


def _json_array_elements(text: Any) -> list[str]:
    """The texts of the elements of a JSON array text, found without decoding them (a
    scan that keeps no stack, so any depth splits): for the claimed batch whose
    decoding as one array failed, to decode its payloads one by one."""
    if not isinstance(text, str):  # SQL_ASCII connections return bytes
        text = text.decode("utf-8", "replace")
    out: list[str] = []
    i, n = 1, len(text) - 1          # inside the outer [ ... ]
    while i < n:
        start, depth = i, 0
        while i < n:
            c = text[i]
            if c == '"':
                i += 1
                while text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
            elif c == "," and depth == 0:
                break
            i += 1
        out.append(text[start:i])
        i += 1                        # the comma
    return out


def _custom_jsonb_load(conn: psycopg.Connection[Any]) -> Optional[Callable[[Any], Any]]:
    """None when jsonb is decoded by psycopg's default loader (json.loads), else a
    function that decodes one payload's JSON text with the loader set on ``conn``."""
    loader_class = conn.adapters.get_loader(_JSONB_OID, psycopg.pq.Format.TEXT)
    if loader_class is None or getattr(loader_class, "_loads", None) is json.loads:
        return None
    load = loader_class(_JSONB_OID, conn).load
    return lambda text: load(text.encode() if isinstance(text, str) else text)


class RawJson(str):
    """A result that is already serialized JSON text (skips ``json.dumps``)."""


def _dump(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, RawJson):
        return str(value)
    return json.dumps(value, allow_nan=False)  # NaN/Infinity: ValueError here, not a 22P02 there


def _aware(when: Optional[datetime]) -> Optional[datetime]:
    """A naive datetime is local time (as datetime.astimezone() reads it), not the
    database session's TimeZone, which psycopg would otherwise apply."""
    if when is not None and when.tzinfo is None:
        return when.astimezone()
    return when


__all__ = ["Client", "RawJson", "SCHEMA_VERSION", "PgfenceError"]
