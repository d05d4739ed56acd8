"""Each SQL function call, defined once for both clients: its query, its parameters, and
how its rows become the method's return value.

:class:`~pgfence.Client` and :class:`~pgfence.aio.AsyncClient` have one method per SQL
function; each builds the :class:`Call` of the function of the same name here and runs
it (``Client._do`` with a ``psycopg.Connection``, ``AsyncClient._do`` awaiting an
``AsyncConnection``). So the SQL text, the argument mapping and the row mapping exist
once, and a client only owns its connections and the SQLSTATE translation
(:func:`pgfence.errors.translate`). Adding a function: a builder here, then a one-line
method in each client.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import args_row, class_row
from psycopg.types.json import Jsonb

from .errors import JobNotFound, SchemaMismatch
from .limits import Limits
from .models import (ActionPreview, ActionResult, Attempt, AuditEntry, Enqueued, Job, JobRecord, Metric, Outcome,
                     QueueLimit, QueueSet, QueueStats, Reclaimed, Rejection, Schedule, SweeperHealth)

#: The ``pgfence.schema_version()`` this client speaks.
SCHEMA_VERSION = 3

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One call of a SQL function, without a connection.

    * ``query``, ``params``: what the cursor executes.
    * ``row_factory``: psycopg's (``class_row``/``args_row``), or None for tuples.
    * ``read(rows, conn)``: the method's return value from the fetched rows.
    * ``fenced``: ``(operation, job_id, attempt_token)`` of a single fenced call, whose
      refusal (LeaseLost) the client records with :func:`report_rejection` when it
      runs outside a caller's transaction.
    """

    query: Any
    params: Any = None
    read: Callable[[list[Any], Any], R] = lambda rows, conn: rows  # type: ignore[assignment,return-value]
    row_factory: Any = None
    fenced: Optional[tuple[str, int, uuid.UUID]] = None


def _first(rows: list[Any], conn: Any) -> Any:
    return rows[0][0] if rows else None


def _scalar(query: Any, params: Any = None,
            convert: Callable[[Any], R] = lambda v: v,  # type: ignore[assignment,return-value]
            fenced: Optional[tuple[str, int, uuid.UUID]] = None) -> Call[R]:
    """A call whose value is the first column of its one row, through ``convert``."""
    return Call(query, params, lambda rows, conn: convert(_first(rows, conn)), fenced=fenced)


def _rows(row_type: type[T], query: Any, params: Any = None, *, positional: bool = False) -> Call[list[T]]:
    """A call whose rows are ``row_type`` dataclasses (``positional``: the query selects
    its fields in order, cheaper than by name)."""
    return Call(query, params, row_factory=args_row(row_type) if positional else class_row(row_type))


def _none(value: Any) -> None:
    return None


# -- schema -----------------------------------------------------------------------

def check_schema() -> Call[int]:
    """The deployed schema version, checked (see :meth:`pgfence.Client.check_schema`)."""
    return Call("SELECT pgfence.schema_version(),"
                " to_regprocedure('pgfence.claim_results(text, uuid[], interval)') IS NOT NULL", None,
                _checked_version)


def _checked_version(rows: list[Any], conn: Any) -> int:
    version, additions = rows[0]
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


#: What ``check_schema`` raises when the schema is missing, raised from these errors.
NOT_DEPLOYED = (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName)


def not_deployed() -> SchemaMismatch:
    return SchemaMismatch("pgfence is not deployed in this database: run `sqitch deploy` "
                          "(or `make deploy` in the pgfence repository)")


# -- producer ---------------------------------------------------------------------

def enqueue(kind: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
            run_at: Optional[datetime] = None, max_attempts: int = 3,
            recovery_policy: str = "auto", idempotency_key: Optional[str] = None,
            timeout: Optional[timedelta] = None, unique_for: Optional[timedelta] = None) -> Call[int]:
    return _scalar(
        "SELECT pgfence.enqueue(kind => %s, payload => %s, queue => %s, priority => %s, "
        "run_at => %s, max_attempts => %s, recovery_policy => %s, idempotency_key => %s, "
        "timeout => %s::interval, unique_for => %s::interval)",
        (kind, Jsonb({} if payload is None else payload), queue, priority, _aware(run_at),
         max_attempts, recovery_policy, idempotency_key, timeout, unique_for), int)


def enqueue_many(kinds: Sequence[str], payloads: Optional[Sequence[Any]] = None, *,
                 queue: str = "default", priorities: Optional[Sequence[int]] = None,
                 run_ats: Optional[Sequence[Optional[datetime]]] = None, max_attempts: int = 3,
                 recovery_policy: str = "auto",
                 idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                 timeout: Optional[timedelta] = None, unique_for: Optional[timedelta] = None) -> Call[list[Enqueued]]:
    # Payloads travel as one JSON array that the server unpacks in order: one
    # json.dumps and one jsonb parse instead of a jsonb[] literal of escaped
    # elements (1,000-job batches: 64-68k -> 100-113k jobs/s, measured).
    params: list[Any] = [list(kinds)]
    if payloads is not None:
        params.append(json.dumps([{} if p is None else p for p in payloads]))
    params += [queue, None if priorities is None else list(priorities),
               None if run_ats is None else [_aware(t) for t in run_ats], max_attempts, recovery_policy,
               None if idempotency_keys is None else list(idempotency_keys), timeout, unique_for]
    query = _ENQUEUE_MANY.format(payloads="NULL" if payloads is None else _PAYLOADS_FROM_JSON_ARRAY)
    return _rows(Enqueued, query, params, positional=True)


# -- worker -----------------------------------------------------------------------

def claim(worker_id: str, queues: Optional[Sequence[str]] = None, *, lease: timedelta = timedelta(seconds=30),
          max_jobs: int = 1, request_id: Optional[uuid.UUID] = None,
          queue_set: Optional[str] = None) -> Call[list[Job]]:
    if queue_set is None:
        return Call(_CLAIM, (worker_id, queue_param(queues), lease, max_jobs, request_id), _jobs)
    return Call(_CLAIM_SET, (worker_id, queue_param(queues), lease, max_jobs, request_id, queue_set), _jobs)


def define_queue_set(queue_set: str, queues: Sequence[str]) -> Call[int]:
    return _scalar("SELECT pgfence.define_queue_set(queue_set => %s, queues => %s::text[])",
                   (queue_set, queue_param(queues)), int)


def drop_queue_set(queue_set: str) -> Call[bool]:
    return _scalar("SELECT pgfence.drop_queue_set(queue_set => %s)", (queue_set,), bool)


def queue_sets() -> Call[list[QueueSet]]:
    return _rows(QueueSet, "SELECT queue_set, queue_count, names, defined_at, defined_by FROM pgfence.queue_sets()",
                 positional=True)


def queue_param(queues: Optional[Sequence[str]]) -> Any:
    """claim's queues as sent: NULL, a list (psycopg adapts it), or, for a list of more
    than 16 names (a worker sends the same list with every claim), the text of a
    PostgreSQL array literal made once per list: psycopg's adaptation of a list of
    10,000 names took 4-5 ms of client CPU per claim, the cached literal a look-up.
    The SQL casts it (``%s::text[]``): a connection whose str dumper says text, not
    unknown, still reaches claim."""
    if queues is None:
        return None
    names = tuple(queues)
    if len(names) > 16:
        try:
            literal = _array_literal(names)
        except TypeError:  # (an unhashable element: psycopg says what it cannot adapt)
            literal = None
        if literal is not None:
            return literal
    return list(names)


@functools.lru_cache(maxsize=16)
def _array_literal(names: tuple[Any, ...]) -> Optional[str]:
    """names (str or None) as a text[] literal: each name double-quoted with its
    backslashes and double quotes escaped, None as NULL; None when some name is neither
    (left to psycopg, which says what it cannot adapt)."""
    parts = []
    for n in names:
        if n is None:
            parts.append("NULL")
        elif type(n) is str:
            parts.append('"' + n.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            return None
    return "{" + ",".join(parts) + "}"


def claim_results(worker_id: str, request_ids: Sequence[uuid.UUID], *,
                  lease: timedelta = timedelta(seconds=30)) -> Call[list[Job]]:
    return Call(_CLAIM_RESULTS, (worker_id, list(request_ids), lease), _jobs)


def _jobs(rows: list[Any], conn: Any) -> list[Job]:
    """claim's rows (payloads as JSON text) as Jobs, in claim order."""
    if not rows:
        return []
    load = _custom_jsonb_load(conn)
    if len(rows) == 1:  # (the idle worker's claim)
        job_id, queue_name, kind, text, attempts, max_attempts, token, lease_expires_at, waited = rows[0]
        payload, error = _decode_one(load or _decode_json_text, text)
        return [Job(job_id, queue_name, kind, payload, attempts, max_attempts, token, lease_expires_at, error,
                    waited)]
    ids, queue_names, kinds, texts, attempts, max_attempts, tokens, leases, waited = zip(*rows)
    try:
        payloads = list(map(load, texts)) if load else _decode_json_texts(texts)
        errors: Sequence[Optional[str]] = (None,) * len(rows)
    except Exception:  # RecursionError, ValueError ...: some payload no decoder here can read
        decoded = [_decode_one(load or _decode_json_text, text) for text in texts]
        payloads, errors = [d[0] for d in decoded], [d[1] for d in decoded]
    return list(map(Job, ids, queue_names, kinds, payloads, attempts, max_attempts, tokens, leases, errors, waited))


def heartbeat(job_id: int, attempt_token: uuid.UUID, *, lease: timedelta = timedelta(seconds=30)) -> Call[datetime]:
    return _scalar("SELECT pgfence.heartbeat(job_id => %s, attempt_token => %s, lease => %s)",
                   (job_id, attempt_token, lease), fenced=("heartbeat", job_id, attempt_token))


def heartbeat_many(job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                   lease: timedelta = timedelta(seconds=30)) -> Call[list[Outcome]]:
    return _rows(Outcome, "SELECT id, accepted, status, detail, lease_expires_at FROM pgfence.heartbeat_many("
                 f"{_FENCE_ARRAYS}, lease => %s)", (list(job_ids), list(attempt_tokens), lease))


def complete(job_id: int, attempt_token: uuid.UUID, result: Any = None) -> Call[None]:
    return _scalar("SELECT pgfence.complete(job_id => %s, attempt_token => %s, result => %s::jsonb)",
                   (job_id, attempt_token, _dump(result)), _none, fenced=("complete", job_id, attempt_token))


def complete_many(job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                  results: Optional[Sequence[Any]] = None, *, refused_only: bool = False) -> Call[list[Outcome]]:
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
    return _rows(Outcome, query, (ids, list(attempt_tokens), dumped))


def fail(job_id: int, attempt_token: uuid.UUID, error: str, *, retry_in: Optional[timedelta] = None,
         permanent: bool = False) -> Call[str]:
    return _scalar("SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s, retry_in => %s, "
                   "permanent => %s)", (job_id, attempt_token, error, retry_in, permanent), str,
                   fenced=("fail", job_id, attempt_token))


def fail_many(job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], errors: Sequence[str], *,
              retry_ins: Optional[Sequence[Optional[timedelta]]] = None,
              permanents: Optional[Sequence[bool]] = None) -> Call[list[Outcome]]:
    return _rows(Outcome, "SELECT id, accepted, status, detail FROM pgfence.fail_many("
                 f"{_FENCE_ARRAYS}, errors => %s, retry_ins => %s::interval[], permanents => %s)",
                 (list(job_ids), list(attempt_tokens), list(errors),
                  None if retry_ins is None else list(retry_ins), None if permanents is None else list(permanents)))


def release(job_id: int, attempt_token: uuid.UUID, *, started: bool = True) -> Call[str]:
    return _scalar("SELECT pgfence.release(job_id => %s, attempt_token => %s, started => %s)",
                   (job_id, attempt_token, started), str, fenced=("release", job_id, attempt_token))


def release_many(job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                 started: bool = True) -> Call[list[Outcome]]:
    return _rows(Outcome, "SELECT id, accepted, status, detail FROM pgfence.release_many("
                 f"{_FENCE_ARRAYS}, started => %s)", (list(job_ids), list(attempt_tokens), started))


def snooze(job_id: int, attempt_token: uuid.UUID, delay: timedelta) -> Call[str]:
    return _scalar("SELECT pgfence.snooze(job_id => %s, attempt_token => %s, delay => %s)",
                   (job_id, attempt_token, delay), str, fenced=("snooze", job_id, attempt_token))


def snooze_many(job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                delays: Sequence[timedelta]) -> Call[list[Outcome]]:
    return _rows(Outcome, "SELECT id, accepted, status, detail FROM pgfence.snooze_many("
                 f"{_FENCE_ARRAYS}, delays => %s::interval[])", (list(job_ids), list(attempt_tokens), list(delays)))


# -- operator ---------------------------------------------------------------------

def reclaim_expired(max_jobs: int = 50) -> Call[list[Reclaimed]]:
    return _rows(Reclaimed, "SELECT id, status, reclaim_count FROM pgfence.reclaim_expired(max_jobs => %s)",
                 (max_jobs,))


def sweep() -> Call[int]:
    return _scalar("CALL pgfence.sweep()", None, int)


def requeue(job_id: int, note: Optional[str] = None) -> Call[None]:
    return _scalar("SELECT pgfence.requeue(job_id => %s, note => %s)", (job_id, note), _none)


def cancel(job_id: int, note: Optional[str] = None) -> Call[None]:
    return _scalar("SELECT pgfence.cancel(job_id => %s, note => %s)", (job_id, note), _none)


# -- the operator console ---------------------------------------------------------

def mark_done(job_id: int, note: str, result: Any = None) -> Call[None]:
    return _scalar("SELECT pgfence.mark_done(job_id => %s, note => %s, result => %s::jsonb)",
                   (job_id, note, _dump(result)), _none)


def requeue_many(job_ids: Sequence[int], note: Optional[str] = None) -> Call[list[ActionResult]]:
    return _rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.requeue_many("
                 "job_ids => %s::bigint[], note => %s)", (list(job_ids), note))


def cancel_many(job_ids: Sequence[int], note: Optional[str] = None) -> Call[list[ActionResult]]:
    return _rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.cancel_many("
                 "job_ids => %s::bigint[], note => %s)", (list(job_ids), note))


def mark_done_many(job_ids: Sequence[int], note: str, result: Any = None) -> Call[list[ActionResult]]:
    return _rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.mark_done_many("
                 "job_ids => %s::bigint[], note => %s, result => %s::jsonb)",
                 (list(job_ids), note, _dump(result)))


def purge_many(job_ids: Sequence[int], note: str) -> Call[list[ActionResult]]:
    return _rows(ActionResult, "SELECT id, acted, job_status, detail FROM pgfence.purge_many("
                 "job_ids => %s::bigint[], note => %s)", (list(job_ids), note))


def preview_action(action: str, status: Optional[str], queue: Optional[str], kind: Optional[str],
                   error_contains: Optional[str], updated_after: Optional[datetime],
                   updated_before: Optional[datetime]) -> Call[ActionPreview]:
    return Call("SELECT jobs, max_jobs FROM pgfence.preview_action(action => %s, status => %s, queue => %s,"
                " kind => %s, error_contains => %s, updated_after => %s, updated_before => %s)",
                (action, status, queue, kind, error_contains, updated_after, updated_before),
                lambda rows, conn: rows[0], row_factory=class_row(ActionPreview))


def act_on_filter(action: str, note: Optional[str], result: Any, status: Optional[str], queue: Optional[str],
                  kind: Optional[str], error_contains: Optional[str], updated_after: Optional[datetime],
                  updated_before: Optional[datetime], max_jobs: int) -> Call[list[ActionResult]]:
    return _rows(ActionResult,
                 "SELECT id, acted, job_status, detail FROM pgfence.act_on_filter(action => %s, note => %s,"
                 " result => %s::jsonb, status => %s, queue => %s, kind => %s, error_contains => %s,"
                 " updated_after => %s, updated_before => %s, max_jobs => %s)",
                 (action, note, _dump(result), status, queue, kind, error_contains, updated_after,
                  updated_before, max_jobs))


def audit_of(job_id: int) -> Call[list[AuditEntry]]:
    return _rows(AuditEntry, "SELECT id, at, db_role, login, actor, action, count, note, detail"
                 " FROM pgfence.audit_of(job_id => %s)", (job_id,))


def metrics() -> Call[list[Metric]]:
    return _rows(Metric, "SELECT name, type, help, labels, value FROM pgfence.metrics()")


def stats() -> Call[list[QueueStats]]:
    return _rows(QueueStats, "SELECT queue, status, jobs, oldest_runnable_age, expired_leases FROM pgfence.stats()")


def get_job(job_id: int) -> Call[JobRecord]:
    def read(rows: list[Any], conn: Any) -> JobRecord:
        if not rows:
            raise JobNotFound(f"pgfence: job {job_id} not found", sqlstate="PF002")
        load = _custom_jsonb_load(conn) or _decode_json_text
        values = dict(zip(_JOB_FIELDS, rows[0]))
        errors = []
        for name in ("payload", "result"):
            if values[name] is not None:
                values[name], error = _decode_one(load, values[name])
                if error is not None:
                    errors.append(f"{name}: {error}")
        return JobRecord(**values, decode_error="; ".join(errors) or None)
    return Call(sql.SQL("SELECT {} FROM pgfence.job(job_id => %s)").format(_JOB_COLUMNS), (job_id,), read)


def sweeper_last_pass() -> Call[Optional[datetime]]:
    return _scalar("SELECT pgfence.sweeper_last_pass()")


def sweeper_recent(max_age: timedelta) -> Call[bool]:
    """Whether the background sweeper completed a pass within ``max_age`` (``sweeper_active``)."""
    return _scalar("SELECT coalesce(pgfence.sweeper_last_pass() > clock_timestamp() - %s, false)", (max_age,),
                   bool)


def sweeper_health() -> Call[SweeperHealth]:
    return Call("SELECT state, last_pass_at, last_pass_age, paused_at, paused_by, last_error, last_error_at"
                " FROM pgfence.sweeper_health()", None, lambda rows, conn: rows[0], args_row(SweeperHealth))


def pause_sweeper() -> Call[bool]:
    return _scalar("SELECT pgfence.pause_sweeper()", None, bool)


def resume_sweeper() -> Call[bool]:
    return _scalar("SELECT pgfence.resume_sweeper()", None, bool)


def pause_queue(queue: str) -> Call[bool]:
    return _scalar("SELECT pgfence.pause_queue(queue => %s)", (queue,), bool)


def resume_queue(queue: str) -> Call[bool]:
    return _scalar("SELECT pgfence.resume_queue(queue => %s)", (queue,), bool)


def set_queue_limit(queue: str, max_running: Optional[int]) -> Call[None]:
    return _scalar("SELECT pgfence.set_queue_limit(queue => %s, max_running => %s::integer)",
                   (queue, max_running), _none)


def set_queue_timeout(queue: str, timeout: Optional[timedelta]) -> Call[None]:
    return _scalar("SELECT pgfence.set_queue_timeout(queue => %s, timeout => %s::interval)", (queue, timeout), _none)


def queue_timeouts() -> Call[dict[str, timedelta]]:
    return Call("SELECT queue, timeout FROM pgfence.queue_timeouts()", None,
                lambda rows, conn: {str(q): t for q, t in rows})


def set_queue_rate_limit(queue: str, max_claims: Optional[int],
                         per: timedelta = timedelta(seconds=1)) -> Call[None]:
    return _scalar("SELECT pgfence.set_queue_rate_limit(queue => %s, max_claims => %s::integer, per => %s)",
                   (queue, max_claims, per), _none)


def queue_limits() -> Call[list[QueueLimit]]:
    return _rows(QueueLimit, "SELECT queue, paused_at, paused_by, max_running, running, limited_at, limited_by,"
                 " max_claims, claims_per, claims_available, rate_limited_at, rate_limited_by"
                 " FROM pgfence.queue_limits()", positional=True)


def schedule(name: str, cron: Optional[str] = None, kind: Optional[str] = None, payload: Any = None, *,
             queue: str = "default", priority: int = 0, max_attempts: int = 3, recovery_policy: str = "auto",
             time_zone: str = "UTC", catch_up: str = "latest", every: Optional[timedelta] = None,
             replace: bool = False, slot_key: Optional[str] = None) -> Call[datetime]:
    return _scalar(
        "SELECT pgfence.schedule(name => %s, cron => %s, kind => %s, payload => %s, queue => %s,"
        " priority => %s, max_attempts => %s, recovery_policy => %s, time_zone => %s, catch_up => %s,"
        " every => %s::interval, replace => %s, slot_key => %s)",
        (name, cron, kind, Jsonb({} if payload is None else payload), queue, priority, max_attempts,
         recovery_policy, time_zone, catch_up, every, replace, slot_key))


def unschedule(name: str) -> Call[bool]:
    return _scalar("SELECT pgfence.unschedule(name => %s)", (name,), bool)


def pause_schedule(name: str) -> Call[bool]:
    return _scalar("SELECT pgfence.pause_schedule(name => %s)", (name,), bool)


def resume_schedule(name: str) -> Call[bool]:
    return _scalar("SELECT pgfence.resume_schedule(name => %s)", (name,), bool)


def schedules() -> Call[list[Schedule]]:
    return _rows(Schedule,
                 "SELECT name, cron, every, kind, payload, queue, priority, max_attempts, recovery_policy, time_zone,"
                 " catch_up, slot_key, paused_at, paused_by, created_at, created_by, next_fire_at, last_fire_at,"
                 " last_slot, last_job_id, last_error, last_error_at FROM pgfence.schedules()", positional=True)


def fire_schedules(max_slots: int = 100) -> Call[int]:
    return _scalar("SELECT pgfence.fire_schedules(max_slots => %s)", (max_slots,), int)


def cron_next(cron: str, after: Optional[datetime] = None, time_zone: str = "UTC") -> Call[Optional[datetime]]:
    return _scalar("SELECT pgfence.cron_next(cron => %s, after => coalesce(%s, now()), time_zone => %s)",
                   (cron, _aware(after), time_zone))


def wakeup_tags(queues: Sequence[str]) -> Call[dict[str, str]]:
    return Call("SELECT queue, tag FROM pgfence.wakeup_tags(queues => %s)", (list(queues),),
                lambda rows, conn: {str(q): str(t) for q, t in rows})


def report_rejection(job_id: int, attempt_token: uuid.UUID, operation: str) -> Call[None]:
    return _scalar("SELECT pgfence.report_rejection(job_id => %s, attempt_token => %s, operation => %s)",
                   (job_id, attempt_token, operation), _none)


def rejection_of(call: Call[Any]) -> Call[None]:
    """The ``report_rejection`` of a refused single fenced call."""
    assert call.fenced is not None
    operation, job_id, attempt_token = call.fenced
    return report_rejection(job_id, attempt_token, operation)


def attempts(job_id: int) -> Call[list[Attempt]]:
    return _rows(Attempt, "SELECT %(id)s::bigint AS job_id, attempt, attempt_token, worker, claimed_at,"
                 " heartbeat_at, lease_expires_at, ended_at, outcome, error FROM pgfence.attempts_of(job_id => %(id)s)",
                 {"id": job_id})


def rejections(job_id: int) -> Call[list[Rejection]]:
    return _rows(Rejection, "SELECT %(id)s::bigint AS job_id, attempt_token, operation, caller, detail, rejected_at"
                 " FROM pgfence.rejections_of(job_id => %(id)s)", {"id": job_id})


def rejections_not_stored(job_id: int) -> Call[int]:
    return _scalar("SELECT pgfence.rejections_not_stored(job_id => %s)", (job_id,), int)


def history_summary(since: timedelta = timedelta(hours=1)) -> Call[dict[str, int]]:
    return Call("SELECT outcome, count FROM pgfence.history_summary(since => %s)", (since,),
                lambda rows, conn: {str(outcome): int(n) for outcome, n in rows})


def limits() -> Call[Limits]:
    return Call("SELECT name, value, description FROM pgfence.limits()", None,
                lambda rows, conn: Limits.from_rows(rows))


# -- how values travel --------------------------------------------------------------

# A job's row: payload and result as JSON text, decoded here one by one (a value this
# process cannot decode is reported in decode_error instead of failing the call).
_JOB_FIELDS = [f.name for f in dataclasses.fields(JobRecord) if f.name != "decode_error"]
_JOB_COLUMNS = sql.SQL(", ").join(
    sql.SQL("{}::text").format(sql.Identifier(n)) if n in ("payload", "result") else sql.Identifier(n)
    for n in _JOB_FIELDS)

# The (job id, token) arrays of the batch calls travel in binary: no text to format
# here or to parse there (500 jobs: -1.4 us per job in complete_many, measured). The
# casts keep tokens given as strings working.
_FENCE_ARRAYS = "job_ids => %b::bigint[], attempt_tokens => %b::uuid[]"

_ENQUEUE_MANY = ("SELECT ordinal, id, created FROM pgfence.enqueue_many(kinds => %s, payloads => {payloads}, "
                 "queue => %s, priorities => %s, run_ats => %s, max_attempts => %s, recovery_policy => %s, "
                 "idempotency_keys => %s, timeout => %s::interval, unique_for => %s::interval)")
_PAYLOADS_FROM_JSON_ARRAY = ("ARRAY(SELECT p.value FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS p(value, ord)"
                             " ORDER BY p.ord)")


# claim's jobs arrive as plain rows in claim order, each payload as its JSON text, which
# _jobs decodes itself: a batch's payloads joined into one JSON array text and decoded
# with one call (no decoder call, copy to bytes and encoding detection per payload, as
# psycopg's jsonb loader would make), one job's with one call. Any other jsonb loader
# (say one set with psycopg.types.json.set_json_loads, globally or on the caller's
# connection) is given each payload's text, as psycopg would. Plain rows, not one row
# of arrays per 64 MiB of payload text as before: the server's aggregation cost more
# than the client saved (one-job claim, raw query: -60 us of server time; a
# 500-job claim +0.4 us of client CPU per job, less wall time).
# (claim_results() returns the same rows, and is read the same way.)
_CLAIM_COLUMNS = ("SELECT id, queue, kind, payload::text, attempts, max_attempts, attempt_token, lease_expires_at,"
                  " waited_s FROM ")
_CLAIM = _CLAIM_COLUMNS + ("pgfence.claim(worker_id => %s, queues => %s::text[], lease => %s, max_jobs => %s,"
                           " request_id => %s)")
# (queue_set only when given: a server older than it still takes the other claims)
_CLAIM_SET = _CLAIM[:-1] + ", queue_set => %s)"
_CLAIM_RESULTS = _CLAIM_COLUMNS + "pgfence.claim_results(worker_id => %s, request_ids => %s::uuid[], lease => %s)"
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


def _decode_json_texts(texts: Sequence[Any]) -> list[Any]:
    """The values of several JSON texts (each a whole JSON value, as jsonb::text gives),
    decoded as one array."""
    if type(texts[0]) is str:
        values = _decode_json("[" + ",".join(texts) + "]")
    else:  # SQL_ASCII connections return bytes
        values = json.loads(b"[" + b",".join(texts) + b"]")
    if len(values) != len(texts):
        raise ValueError("the payload texts did not make one element each")
    return list(values)


def _custom_jsonb_load(conn: psycopg.BaseConnection[Any]) -> Optional[Callable[[Any], Any]]:
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


__all__ = ["Call", "RawJson", "SCHEMA_VERSION"]
