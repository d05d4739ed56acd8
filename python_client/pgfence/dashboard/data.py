"""What the dashboard reads and does: literal queries over pgfence's functions and views.

Reads go through ``pgfence.stats()``, ``job()``, ``attempts_of()``, ``rejections_of()``,
``sweeper_health()``, ``queue_limits()``, ``history_summary()`` and the views
``pgfence.all_jobs`` / ``all_attempts`` (``security_invoker``: the connecting role's
own privileges apply). Every list is bounded (a LIMIT) and paged by keyset on ``id``,
never OFFSET. Every action is one call of a pgfence SQL function, in a transaction that
first sets ``pgfence.actor`` (``set_config(..., true)``, i.e. ``SET LOCAL``) to the
dashboard user, which the operator audit records as the informational actor.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Generic, Iterator, Optional, Sequence, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

PAGE = 50
#: The inbox shows each payload's first characters (the job's page shows it whole: up to 1 MiB).
INBOX_PAYLOAD_CHARS = 4000
#: The most jobs one bulk action touches (the cap of pgfence's bulk functions).
BULK_CAP = 10_000
#: The overview and the queues page list at most this many queues (the first by name): a
#: producer names queues at will, and a row each for 100,000 of them was a 100 MB page that
#: the overview rendered again every 5 s. The dead letter and the audit list at most
#: QUEUE_NAMES_SHOWN queue names per row (and say how many there are).
QUEUES_SHOWN = 500
QUEUE_NAMES_SHOWN = 20
#: The error-text search reads at most this window of updated_at (the text has no index).
ERROR_SEARCH_WINDOW = timedelta(days=1)

# The operator functions the dashboard calls (pgfence's operator console, schema version 4);
# checked at start, so a database without them is told to deploy instead of failing later.
REQUIRED = (
    "pgfence.mark_done(bigint, text, jsonb)",
    "pgfence.requeue(bigint, text)",
    "pgfence.cancel(bigint, text)",
    "pgfence.requeue_many(bigint[], text)",
    "pgfence.cancel_many(bigint[], text)",
    "pgfence.mark_done_many(bigint[], text, jsonb)",
    "pgfence.purge_many(bigint[], text)",
    "pgfence.preview_action(text, text, text, text, text, timestamptz, timestamptz)",
    "pgfence.act_on_filter(text, text, jsonb, text, text, text, text, timestamptz, timestamptz, integer)",
    "pgfence.metrics()",
    "pgfence.audit_of(bigint)",
)
# Shown when the database has them (the schedules release is not merged yet).
OPTIONAL = {"schedules": "pgfence.schedules()"}


@dataclass(frozen=True)
class Identity:
    role: str
    superuser: bool
    operator: bool
    viewer: bool


@dataclass
class JobFilter:
    """The jobs page's filter (every field optional)."""

    queue: Optional[str] = None
    kind: Optional[str] = None
    status: Optional[str] = None
    key: Optional[str] = None
    job_id: Optional[int] = None
    error: Optional[str] = None
    after: Optional[datetime] = None
    before: Optional[datetime] = None


T = TypeVar("T")


class Reading(Generic[T]):
    """The last result of ``fn``, shared by every request: the first call reads at once; later
    ones get the last result while it is younger than ``max_age`` seconds, and an older one
    is read again in the background (the request does not wait). So an expensive read
    costs one query per ``max_age`` whatever the number of viewers or scrapers."""

    def __init__(self, fn: Callable[[], T], max_age: float) -> None:
        self.fn, self.max_age = fn, max_age
        self.lock = threading.Lock()
        self.last: Optional[T] = None
        self.at = 0.0
        self.busy = False

    def get(self) -> T:
        with self.lock:
            last = self.last
            start = last is not None and time.monotonic() - self.at > self.max_age and not self.busy
            if start:
                self.busy = True
        if last is None:
            return self._read()
        if start:
            threading.Thread(target=self._read, daemon=True, name="pgfence-dashboard-reading").start()
        return last

    def _read(self) -> T:
        try:
            got = self.fn()
            with self.lock:
                self.last, self.at = got, time.monotonic()
            return got
        finally:
            with self.lock:
                self.busy = False


class Throughput:
    """Jobs finished per minute over the last hour, per (queue, status).

    A minute that ended more than 2 minutes ago is final (a completion's finished_at is its
    statement's clock; a transaction still open at that minute's end commits within
    seconds), so its counts are kept here and only the last minutes are read again: a
    refresh reads the jobs of ~3 minutes, not the hour's. (A process of its own keeps its
    own; the first read after start reads the whole hour.)
    """

    FINAL_AFTER = timedelta(minutes=2)

    def __init__(self) -> None:
        self.minutes: dict[datetime, dict[tuple[str, str], int]] = {}
        self.final_until: Optional[datetime] = None   # minutes before this are kept
        self.lock = threading.Lock()

    def read(self, data: "Data") -> tuple[datetime, list[tuple[datetime, dict[str, int]]], dict[tuple[str, str], int]]:
        now = data.rows("SELECT date_trunc('minute', now()) AS m")[0]["m"]
        first = now - timedelta(minutes=59)
        with self.lock:
            since = first if self.final_until is None or self.final_until < first else self.final_until
        rows = data.rows(
            "SELECT date_trunc('minute', finished_at) AS minute, queue, status, count(*) AS n"
            " FROM pgfence.all_jobs WHERE finished_at >= %s GROUP BY 1, 2, 3", (since,))
        fresh: dict[datetime, dict[tuple[str, str], int]] = {}
        for r in rows:
            fresh.setdefault(r["minute"], {})[(r["queue"], r["status"])] = r["n"]
        with self.lock:
            for m in [m for m in self.minutes if m < first or m >= since]:
                del self.minutes[m]
            merged = dict(self.minutes)
            merged.update(fresh)
            final = now - self.FINAL_AFTER
            for i in range(0, 60):
                minute = first + timedelta(minutes=i)
                if since <= minute < final:
                    self.minutes[minute] = fresh.get(minute, {})
            self.final_until = max(since, final)
        series = []
        per_queue: dict[tuple[str, str], int] = {}
        for i in range(60):
            minute = first + timedelta(minutes=i)
            counts = {"done": 0, "failed": 0, "cancelled": 0}
            for (queue, status), n in merged.get(minute, {}).items():
                if status in counts:
                    counts[status] += n
                per_queue[(queue, status)] = per_queue.get((queue, status), 0) + n
            series.append((minute, counts))
        return now, series, per_queue


class Data:
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.has: dict[str, bool] = {}
        self.throughput = Throughput()
        #: the hour's finished jobs, read at most every 10 s (in the background after the first)
        self.hour = Reading(lambda: self.throughput.read(self), 10.0)
        #: pgfence.metrics() counts the whole history: read at most every 15 s (a scrape interval)
        self.metric_rows = Reading(self._metrics, 15.0)

    # -- plumbing ---------------------------------------------------------
    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as c:
            yield c

    def rows(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        with self.conn() as c, c.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def detect(self) -> list[str]:
        """The required functions this database lacks (none: it can serve); and which optional
        ones it has, in :attr:`has`."""
        with self.conn() as c:
            missing = []
            for sig in REQUIRED:
                row = c.execute("SELECT to_regprocedure(%s) IS NOT NULL", (sig,)).fetchone()
                if not (row and row[0]):
                    missing.append(sig)
            for name, sig in OPTIONAL.items():
                row = c.execute("SELECT to_regprocedure(%s) IS NOT NULL", (sig,)).fetchone()
                self.has[name] = bool(row and row[0])
        return missing

    def identity(self) -> Identity:
        r = self.rows(
            "SELECT current_user AS role, r.rolsuper AS superuser,"
            " pg_has_role(current_user, 'pgfence_operator', 'MEMBER') AS operator,"
            " (to_regrole('pgfence_viewer') IS NOT NULL"
            "  AND pg_has_role(current_user, 'pgfence_viewer', 'MEMBER')) AS viewer"
            " FROM pg_roles r WHERE r.rolname = current_user")[0]
        return Identity(str(r["role"]), bool(r["superuser"]), bool(r["operator"]), bool(r["viewer"]))

    # -- overview ---------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        """Per queue: live jobs by state (pgfence.jobs only: ``all_jobs WHERE status <> 'done'``,
        whose history branch the planner drops), the oldest runnable age, expired leases,
        jobs finished per minute over the last hour (done ones from the history's BRIN on
        finished_at), refused calls within the hour, pause and cap; the sweeper's health.

        Not ``pgfence.stats()``: it counts every done job in the history (a full scan of it at
        each refresh). The per-minute counts of minutes that ended more than 2 minutes ago do
        not change, so they are kept (:class:`Throughput`) and only the recent ones are read again,
        at most every 10 s and in the background: the page shows the last reading.
        """
        live = self.rows(
            "SELECT queue, status, count(*) AS jobs,"
            " clock_timestamp() - min(available_at)"
            "   FILTER (WHERE status = 'queued' AND available_at <= clock_timestamp()) AS oldest,"
            " count(*) FILTER (WHERE status = 'processing' AND lease_expires_at < clock_timestamp()) AS expired"
            " FROM pgfence.all_jobs WHERE status <> 'done' GROUP BY queue, status")
        queues: dict[str, dict[str, Any]] = {}

        def q_of(name: str) -> dict[str, Any]:
            return queues.setdefault(name, {"queue": name, "states": {}, "oldest": None, "expired": 0,
                                            "hour": {"done": 0, "failed": 0, "cancelled": 0}, "rejected": 0,
                                            "limit": None})
        for s in live:
            q = q_of(s["queue"])
            q["states"][s["status"]] = s["jobs"]
            if s["oldest"] is not None:
                q["oldest"] = max(q["oldest"] or s["oldest"], s["oldest"])
            q["expired"] += s["expired"] or 0
        for r in self.rows("SELECT queue, paused_at, paused_by, max_running, running FROM pgfence.queue_limits()"):
            q_of(r["queue"])["limit"] = r
        now, series, per_queue = self.hour.get()
        for (queue, status), n in per_queue.items():
            if status in ("done", "failed", "cancelled"):
                q_of(queue)["hour"][status] += n
        rejected = self.rows("SELECT queue, count(*) AS n FROM pgfence.rejections"
                             " WHERE rejected_at >= now() - interval '1 hour' GROUP BY queue")
        for r in rejected:
            q_of(r["queue"])["rejected"] = r["n"]
        sweeper = self.rows("SELECT state, last_pass_at, last_pass_age, paused_at, paused_by, last_error,"
                            " last_error_at FROM pgfence.sweeper_health()")
        summary = {k: sum(v[k] for _, v in series) for k in ("done", "failed", "cancelled")}
        summary["rejected"] = sum(r["n"] for r in rejected)
        summary["expired"] = sum(q["expired"] for q in queues.values())
        listed = sorted(queues.values(), key=lambda q: q["queue"])
        shown, more = _first_shown(listed)
        return {"queues": shown, "queues_more": more,
                "series": series, "now": now, "summary": summary, "sweeper": sweeper[0] if sweeper else None}

    # -- lists ------------------------------------------------------------
    def manual_review(self, before_id: Optional[int], queue: Optional[str]) -> list[dict[str, Any]]:
        """Manual-review jobs, newest id first, with their last ended attempt (the one whose
        lease expired)."""
        return self.rows(
            "SELECT j.id, j.queue, j.kind, left(j.payload::text, %(chars)s) AS payload,"
            " length(j.payload::text) > %(chars)s AS payload_cut, j.attempts, j.max_attempts, j.updated_at,"
            " j.last_error, a.worker, a.claimed_at, a.heartbeat_at, a.lease_expires_at, a.ended_at,"
            " now() - a.lease_expires_at AS expired_ago"
            " FROM pgfence.all_jobs j"
            " LEFT JOIN LATERAL (SELECT * FROM pgfence.attempts_of(job_id => j.id) ORDER BY attempt DESC LIMIT 1) a"
            "   ON true"
            " WHERE j.status = 'manual_review' AND (%(before)s::bigint IS NULL OR j.id < %(before)s)"
            "   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)"
            " ORDER BY j.id DESC LIMIT %(limit)s",
            {"before": before_id, "queue": queue, "limit": PAGE + 1, "chars": INBOX_PAYLOAD_CHARS})

    def jobs(self, f: JobFilter, before_id: Optional[int]) -> tuple[list[dict[str, Any]], Optional[datetime]]:
        """One page of jobs matching the filter, newest id first (keyset on id: ``id < the last
        id shown``, never OFFSET), and where the error search's window starts (None: no window).

        The WHERE clause is made of fixed fragments, one per filter given (values always as
        parameters), so each combination is planned with only its own conditions. An
        idempotency key is looked up where it is indexed: live jobs by (queue, key), done
        ones in ``pgfence.held_keys``. The error text has no index: it is searched within a
        window of updated_at (:func:`error_window_start`, ending at "until" or now), which the
        jobs page's bulk form carries as its "from".
        """
        where = []
        p: dict[str, Any] = {"limit": PAGE + 1}
        start = error_window_start(f)
        for name, value, frag in (
                ("before", before_id, "id < %(before)s"), ("id", f.job_id, "id = %(id)s"),
                ("queue", f.queue, "queue = %(queue)s"), ("kind", f.kind, "kind = %(kind)s"),
                ("status", f.status, "status = %(status)s"),
                ("after", f.after, "updated_at >= %(after)s"), ("until", f.before, "updated_at < %(until)s")):
            if value is not None:
                where.append(frag)
                p[name] = value
        if f.key is not None:
            # first the ids (an index look-up each), then those jobs: an IN (subquery) here made the
            # planner walk every job in id order looking for them (1 s with 1,000,000 jobs)
            by_queue = " AND j.queue = %(queue)s" if f.queue is not None else ""
            ids = [r["id"] for r in self.rows(
                "SELECT j.id FROM pgfence.jobs j WHERE j.idempotency_key = %(key)s" + by_queue +
                " UNION ALL SELECT j.job_id FROM pgfence.held_keys j WHERE j.idempotency_key = %(key)s" + by_queue +
                " LIMIT 1000", {"key": f.key, "queue": f.queue})]
            if not ids:
                return [], start
            where.append("id = ANY(%(ids)s)")
            p["ids"] = ids
        if f.error is not None:
            p["error"] = f.error
            where.append("strpos(last_error, %(error)s) > 0")
            if f.status is None:
                # live, failed and cancelled jobs (pgfence.jobs); done ones only when asked for
                where.append("status <> 'done'")
            if start is not None:
                where.append("updated_at >= %(win_start)s")
                p["win_start"] = start
        query = ("SELECT id, queue, kind, status, attempts, max_attempts, idempotency_key,"
                 " left(last_error, 200) AS error, created_at, updated_at, finished_at FROM pgfence.all_jobs"
                 + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC LIMIT %(limit)s")
        return self.rows(query, p), start

    def dead_letter(self) -> list[dict[str, Any]]:
        """Failed jobs grouped by their error (the first 500 characters), largest group first."""
        return self.rows(
            "SELECT left(coalesce(last_error, ''), 500) AS error, count(*) AS n,"
            " (array_agg(DISTINCT queue))[1:%(names)s] AS queues, count(DISTINCT queue) AS queue_count,"
            " min(updated_at) AS first_at, max(updated_at) AS last_at, max(id) AS sample"
            " FROM pgfence.all_jobs WHERE status = 'failed'"
            " GROUP BY 1 ORDER BY n DESC, error LIMIT 100", {"names": QUEUE_NAMES_SHOWN})

    def queues(self) -> tuple[list[dict[str, Any]], int]:
        """The queues with jobs in pgfence.jobs, a control, or jobs finished within the hour
        (not stats(): it scans the whole history): the first :data:`QUEUES_SHOWN` by name, and
        how many more there are."""
        names = {r["queue"] for r in self.rows("SELECT DISTINCT queue FROM pgfence.all_jobs WHERE status <> 'done'")}
        names |= {queue for queue, _ in self.hour.get()[2]}
        limits = {r["queue"]: r for r in self.rows(
            "SELECT queue, paused_at, paused_by, max_running, running, limited_at, limited_by"
            " FROM pgfence.queue_limits()")}
        names |= set(limits)
        shown, more = _first_shown(sorted(names))
        return [{"queue": n, "limit": limits.get(n)} for n in shown], more

    def schedules(self) -> Optional[list[dict[str, Any]]]:
        if not self.has.get("schedules"):
            return None
        return self.rows("SELECT * FROM pgfence.schedules() LIMIT 500")

    # -- one job ----------------------------------------------------------
    def job(self, job_id: int) -> Optional[dict[str, Any]]:
        r = self.rows("SELECT id, queue, kind, payload::text AS payload, status, priority, attempts, max_attempts,"
                      " available_at, recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,"
                      " heartbeat_at, lease_expires_at, reclaim_count, last_error, result::text AS result,"
                      " created_at, updated_at, finished_at, enqueued_by, timeout, unique_for FROM pgfence.job(job_id => %s)", (job_id,))
        return r[0] if r else None

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT attempt, attempt_token, worker, claimed_at, heartbeat_at, lease_expires_at,"
                         " ended_at, outcome, error FROM pgfence.attempts_of(job_id => %s)", (job_id,))

    def rejections(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT attempt_token, operation, caller, detail, rejected_at"
                         " FROM pgfence.rejections_of(job_id => %s)", (job_id,))

    def audit(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM pgfence.audit_of(job_id => %s)", (job_id,))

    def audit_log(self, before_id: Optional[int]) -> list[dict[str, Any]]:
        """The operator audit, newest first (keyset on its id): who did what to how many jobs."""
        return self.rows(
            "SELECT id, at, db_role, login, actor, action, queues[1:%(names)s] AS queues,"
            " cardinality(queues) AS queue_count, count, note,"
            " job_ids[1:20] AS job_ids FROM pgfence.operator_audit"
            + (" WHERE id < %(before)s" if before_id is not None else "") +
            " ORDER BY id DESC LIMIT %(limit)s", {"before": before_id, "limit": PAGE + 1, "names": QUEUE_NAMES_SHOWN})

    def now(self) -> datetime:
        return self.rows("SELECT now() AS now")[0]["now"]

    # -- metrics ----------------------------------------------------------
    def metrics(self) -> list[dict[str, Any]]:
        """The rows of pgfence.metrics(), at most 15 s old (:class:`Reading`)."""
        return self.metric_rows.get()

    def _metrics(self) -> list[dict[str, Any]]:
        return self.rows("SELECT name, type, help, labels, value FROM pgfence.metrics()")

    # -- actions ----------------------------------------------------------
    @contextmanager
    def acting(self, actor: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction whose pgfence.actor is the dashboard user (informational, for the audit)."""
        with self.conn() as c, c.transaction():
            c.execute("SELECT set_config('pgfence.actor', %s, true)", (actor,))
            yield c

    def act(self, actor: str, action: str, job_id: int, note: Optional[str] = None,
            result: Optional[str] = None) -> None:
        """One job: ``requeue``/``cancel`` (with an optional note) or ``mark_done`` (note required)."""
        with self.acting(actor) as c:
            if action == "requeue":
                c.execute("SELECT pgfence.requeue(job_id => %s, note => %s)", (job_id, note))
            elif action == "cancel":
                c.execute("SELECT pgfence.cancel(job_id => %s, note => %s)", (job_id, note))
            elif action == "mark_done":
                c.execute("SELECT pgfence.mark_done(job_id => %s, note => %s, result => %s::jsonb)",
                          (job_id, note, result))
            else:
                raise ValueError(action)

    def act_many(self, actor: str, action: str, job_ids: Sequence[int], note: Optional[str] = None,
                 result: Optional[str] = None) -> list[dict[str, Any]]:
        """A selection: ``requeue_many``/``cancel_many``/``mark_done_many``/``purge_many`` (one audit row with the
        ids acted on); one row per job: acted or not, and why."""
        ids = list(job_ids)
        with self.acting(actor) as c, c.cursor(row_factory=dict_row) as cur:
            if action == "mark_done":
                cur.execute("SELECT id, acted, job_status, detail FROM pgfence.mark_done_many("
                            "job_ids => %s, note => %s, result => %s::jsonb)", (ids, note, result))
            elif action == "requeue":
                cur.execute("SELECT id, acted, job_status, detail FROM pgfence.requeue_many("
                            "job_ids => %s, note => %s)", (ids, note))
            elif action == "cancel":
                cur.execute("SELECT id, acted, job_status, detail FROM pgfence.cancel_many("
                            "job_ids => %s, note => %s)", (ids, note))
            elif action == "purge":
                cur.execute("SELECT id, acted, job_status, detail FROM pgfence.purge_many("
                            "job_ids => %s, note => %s)", (ids, note))
            else:
                raise ValueError(action)
            return cur.fetchall()

    def preview(self, action: str, flt: dict[str, Any]) -> tuple[int, int]:
        """``preview_action``: (jobs the filter matches that the action applies to, the cap per call)."""
        r = self.rows("SELECT jobs, max_jobs FROM pgfence.preview_action(action => %(action)s,"
                      " status => %(status)s, queue => %(queue)s, kind => %(kind)s,"
                      " error_contains => %(error)s, updated_after => %(after)s, updated_before => %(before)s)",
                      {"action": action, **flt})[0]
        return int(r["jobs"]), int(r["max_jobs"])

    def act_on_filter(self, actor: str, action: str, flt: dict[str, Any], note: Optional[str],
                      result: Optional[str]) -> list[dict[str, Any]]:
        """``act_on_filter``: every job the filter matches, when at most :data:`BULK_CAP` (else 22023,
        nothing changed)."""
        with self.acting(actor) as c, c.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT id, acted, job_status, detail FROM pgfence.act_on_filter(action => %(action)s,"
                        " note => %(note)s, result => %(result)s::jsonb, status => %(status)s,"
                        " queue => %(queue)s, kind => %(kind)s, error_contains => %(error)s,"
                        " updated_after => %(after)s, updated_before => %(before)s, max_jobs => %(cap)s)",
                        {"action": action, "note": note, "result": result, "cap": BULK_CAP, **flt})
            return cur.fetchall()

    # -- queues -----------------------------------------------------------
    def queue_action(self, actor: str, action: str, queue: str, max_running: Optional[int] = None) -> None:
        with self.acting(actor) as c:
            if action == "pause":
                c.execute("SELECT pgfence.pause_queue(queue => %s)", (queue,))
            elif action == "resume":
                c.execute("SELECT pgfence.resume_queue(queue => %s)", (queue,))
            elif action == "limit":
                c.execute("SELECT pgfence.set_queue_limit(queue => %s, max_running => %s::integer)",
                          (queue, max_running))
            else:
                raise ValueError(action)


#: An indented JSON text is at most this many times its text's length (or 64 KiB): indenting a
#: payload of many values deep inside nested arrays writes each value on a line of its own
#: after two spaces per level, 65 times the text at the 64 levels enqueue takes.
PRETTY_MAX_GROWTH = 4


def error_window_start(f: JobFilter) -> Optional[datetime]:
    """Where an error-text search of ``f`` starts reading updated_at: :data:`ERROR_SEARCH_WINDOW`
    before "until" (``f.before``) or now (the dashboard's clock); None when ``f`` searches
    no error text, or gives a narrower "from" (``f.after``), which is then used as given. The
    jobs page lists what this window holds, and its "everything matching this filter" form
    carries the same start, so that a bulk action reaches no older job than the list read.
    Rounded up to a whole second (what the form carries reads the same back). The clock is
    the dashboard's, not the database's: a skew between them moves the window by as much,
    for the list and the action alike. A time without an offset is UTC."""
    if f.error is None:
        return None
    end = as_utc(f.before or datetime.now(timezone.utc))
    if f.after is not None and end - as_utc(f.after) <= ERROR_SEARCH_WINDOW:
        return None
    start = end - ERROR_SEARCH_WINDOW
    return start.replace(microsecond=0) + timedelta(seconds=1) if start.microsecond else start


def as_utc(t: datetime) -> datetime:
    """``t``, taken as UTC when it has no offset."""
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _first_shown(listed: list[T]) -> tuple[list[T], int]:
    """The first :data:`QUEUES_SHOWN` of ``listed``, and how many more there are."""
    return listed[:QUEUES_SHOWN], max(0, len(listed) - QUEUES_SHOWN)


def pretty_json(text: Optional[str]) -> Optional[str]:
    """A JSON text indented for reading; as it is, when it does not parse here or when
    indenting would make it more than :data:`PRETTY_MAX_GROWTH` times longer (it stops
    writing at that length)."""
    if text is None:
        return None
    budget = max(PRETTY_MAX_GROWTH * len(text), 65536)
    out: list[str] = []
    try:
        for chunk in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(json.loads(text)):
            budget -= len(chunk)
            if budget < 0:
                return text
            out.append(chunk)
    except (ValueError, RecursionError):
        return text
    return "".join(out)


__all__ = ["Data", "JobFilter", "Identity", "PAGE", "BULK_CAP", "QUEUES_SHOWN", "QUEUE_NAMES_SHOWN", "ERROR_SEARCH_WINDOW", "error_window_start", "as_utc", "pretty_json", "PRETTY_MAX_GROWTH", "Jsonb"]
