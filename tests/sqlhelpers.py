"""Helpers for the SQL-level tests (tests/test_sql_*.py).

They call the pgfence SQL functions directly with psycopg 3 (named notation),
never the Python client, and read pgfence.jobs only to check what the functions
did. Every helper takes the connection to use, so a test can play several
sessions (workers, operator, sweeper) with one connection each.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers import connect

# An id the identity column will never reach: "unknown job".
UNKNOWN_ID = 9_223_372_036_854_775_000

LEASE_EXPIRED = "lease expired before completion"
RELEASED = "released by worker before completion"


# ---------------------------------------------------------------- fixtures --
@pytest.fixture
def conn2(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A second autocommit connection (another worker, the operator or the sweep)."""
    c = connect(dsn)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def tx_conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection with autocommit off: every statement runs in an explicit
    transaction until commit()/rollback()."""
    c = connect(dsn, autocommit=False)
    try:
        yield c
    finally:
        c.rollback()
        c.close()


# ----------------------------------------------------------------- queries --
def one(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    """The single value of a one-row, one-column query."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None, sql
    return row[0]


def rows(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def now(conn: psycopg.Connection[Any]) -> dt.datetime:
    """The database clock (clock_timestamp()), the only clock that decides leases."""
    return one(conn, "SELECT clock_timestamp()")


def job(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    """The whole pgfence.jobs row."""
    r = rows(conn, "SELECT * FROM pgfence.jobs WHERE id = %s", (job_id,))
    assert len(r) == 1, f"job {job_id} not found"
    return r[0]


# Rows a test creates all have ids above the job id sequence's value when the
# test started (ids come from one sequence, cache 1). Queue lookups add
# "id >= floor", so they are primary-key range scans instead of a sequential scan
# of a table that benchmarks may have filled (jobs has no plain index on queue).
_id_floor = 0


@pytest.fixture(autouse=True)
def _job_id_floor(dsn: str) -> Iterator[None]:
    """Autouse in every module that imports it: record the job id floor."""
    global _id_floor
    with connect(dsn) as c:
        _id_floor = one(c, "SELECT last_value FROM pgfence.jobs_id_seq")
    yield
    _id_floor = 0


def in_queue_sql() -> str:
    """A WHERE fragment for 'in this test's queue %s' (see _job_id_floor)."""
    return f"queue = %s AND id >= {int(_id_floor)}"


def queue_jobs(conn: psycopg.Connection[Any], queue: str) -> list[dict[str, Any]]:
    """Every row of a queue, by id."""
    return rows(conn, f"SELECT * FROM pgfence.jobs WHERE {in_queue_sql()} ORDER BY id", (queue,))


def queue_count(conn: psycopg.Connection[Any], queue: str, status: str | None = None) -> int:
    if status is None:
        return one(conn, f"SELECT count(*) FROM pgfence.jobs WHERE {in_queue_sql()}", (queue,))
    return one(conn, f"SELECT count(*) FROM pgfence.jobs WHERE {in_queue_sql()} AND status = %s", (queue, status))


# --------------------------------------------------------------- API calls --
def enqueue(conn: psycopg.Connection[Any], queue: str, kind: str = "task", *,
            payload: dict[str, Any] | None = None, **kw: Any) -> int:
    """pgfence.enqueue(kind, payload, queue => queue, <kw> => ...) with named notation.
    kw values are passed as parameters; run_at may be a datetime."""
    from psycopg.types.json import Jsonb

    args = ["kind => %(kind)s", "queue => %(queue)s"]
    params: dict[str, Any] = {"kind": kind, "queue": queue}
    if payload is not None:
        args.append("payload => %(payload)s")
        params["payload"] = Jsonb(payload)
    for name, value in kw.items():
        args.append(f"{name} => %({name})s")
        params[name] = value
    return one(conn, f"SELECT pgfence.enqueue({', '.join(args)})", params)


def claim(conn: psycopg.Connection[Any], queues: list[str] | None, worker: str = "worker-A", *,
          lease: str = "30 seconds", max_jobs: int = 1, request_id: uuid.UUID | None = None) -> list[dict[str, Any]]:
    """pgfence.claim(...) rows, in the order claim returned them."""
    return rows(
        conn,
        "SELECT * FROM pgfence.claim(worker_id => %s, queues => %s::text[],"
        " lease => %s::interval, max_jobs => %s, request_id => %s)",
        (worker, queues, lease, max_jobs, request_id),
    )


def claim_one(conn: psycopg.Connection[Any], queue: str, worker: str = "worker-A", *,
              lease: str = "30 seconds") -> dict[str, Any]:
    """Claim exactly one job from queue (fails the test when there is none)."""
    got = claim(conn, [queue], worker, lease=lease, max_jobs=1)
    assert len(got) == 1, f"expected one claimable job in {queue}, got {got}"
    return got[0]


def claim_job(conn: psycopg.Connection[Any], queue: str, job_id: int, worker: str = "worker-A", *,
              lease: str = "30 seconds") -> uuid.UUID:
    """Claim the given job (it must be the next one in its queue); returns its token."""
    c = claim_one(conn, queue, worker, lease=lease)
    assert c["id"] == job_id, f"claimed {c['id']}, expected {job_id}"
    return c["attempt_token"]


def heartbeat(conn: psycopg.Connection[Any], job_id: int, token: uuid.UUID,
              lease: str = "30 seconds") -> dt.datetime:
    return one(conn, "SELECT pgfence.heartbeat(job_id => %s, attempt_token => %s, lease => %s::interval)",
               (job_id, token, lease))


def complete(conn: psycopg.Connection[Any], job_id: int, token: uuid.UUID,
             result: dict[str, Any] | None = None) -> None:
    from psycopg.types.json import Jsonb

    conn.execute("SELECT pgfence.complete(job_id => %s, attempt_token => %s, result => %s)",
                 (job_id, token, Jsonb(result) if result is not None else None))


def fail(conn: psycopg.Connection[Any], job_id: int, token: uuid.UUID, error: str = "boom", *,
         retry_in: str | None = None, permanent: bool = False) -> str:
    return one(conn,
               "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s,"
               " retry_in => %s::interval, permanent => %s)",
               (job_id, token, error, retry_in, permanent))


def release(conn: psycopg.Connection[Any], job_id: int, token: uuid.UUID) -> str:
    return one(conn, "SELECT pgfence.release(job_id => %s, attempt_token => %s)", (job_id, token))


def reclaim_expired(conn: psycopg.Connection[Any], max_jobs: int = 10000) -> list[dict[str, Any]]:
    """One reclaim batch. Large by default: other tests may have left expired leases
    that are older than this test's, and the batch takes the oldest first."""
    return rows(conn, "SELECT * FROM pgfence.reclaim_expired(max_jobs => %s)", (max_jobs,))


def reclaimed_ids(result: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in result}


def wait_lease_expired(conn: psycopg.Connection[Any], *job_ids: int) -> None:
    """Sleep (on the database clock) until the jobs' leases are in the past."""
    conn.execute(
        "SELECT pg_sleep(greatest(0, extract(epoch FROM max(lease_expires_at) - clock_timestamp())) + 0.02)"
        "  FROM pgfence.jobs WHERE id = ANY(%s)", (list(job_ids),))
    assert one(conn, "SELECT bool_and(status = 'processing' AND lease_expires_at < clock_timestamp())"
                     "  FROM pgfence.jobs WHERE id = ANY(%s)", (list(job_ids),)) is True


def claim_short(conn: psycopg.Connection[Any], queue: str, worker: str = "worker-A", *,
                lease: str = "300 milliseconds", **enqueue_kw: Any) -> tuple[int, uuid.UUID]:
    """Enqueue a job and claim it with a short lease (not waited for).
    Returns (job id, token). See lease_expired_under_lock."""
    job_id = enqueue(conn, queue, **enqueue_kw)
    return job_id, claim_job(conn, queue, job_id, worker, lease=lease)


@contextmanager
def lease_expired_under_lock(tx: psycopg.Connection[Any], *job_ids: int) -> Iterator[None]:
    """In tx's transaction (autocommit off): lock the jobs' rows FOR UPDATE, wait until
    their leases are past, yield, then commit.

    Why: the database is shared, and any session's claim() first reclaims expired
    leases from every queue (on-claim recovery, SKIP LOCKED), besides the pg_cron
    sweeper (paused with sweep_paused). Holding the row lock from before expiry
    until this test has acted on the expired lease makes every other reclaimer
    skip the row, so the action inside the block (a reclaim_expired, a late
    heartbeat or complete) is the first thing to happen to the expired lease.
    This transaction's own reclaim_expired/claim are not blocked by its own lock."""
    assert not tx.autocommit
    ids = list(job_ids)
    locked = tx.execute("SELECT id FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'processing'"
                        "   AND lease_expires_at > clock_timestamp() FOR UPDATE", (ids,)).fetchall()
    assert sorted(r[0] for r in locked) == sorted(ids), "lease already over before the lock was taken"
    wait_lease_expired(tx, *ids)
    yield
    tx.commit()


def make_stale(conn: psycopg.Connection[Any], tx: psycopg.Connection[Any],
               queue: str) -> tuple[int, uuid.UUID, uuid.UUID]:
    """A job whose first attempt (worker-A) lost its lease: reclaimed by this test's
    reclaim_expired, then claimed again by worker-B (1 hour lease). Returns
    (job id, A's stale token, B's current token)."""
    job_id, stale = claim_short(conn, queue, "worker-A")
    with lease_expired_under_lock(tx, job_id):
        got = reclaimed_ids(reclaim_expired(tx))
        assert got.get(job_id) == {"id": job_id, "status": "queued", "reclaim_count": 1}
        current = claim_job(tx, queue, job_id, "worker-B", lease="1 hour")
    assert current != stale
    return job_id, stale, current


# ------------------------------------------------------------- concurrency --
class BlockedCall:
    """A statement run on its own connection in a thread, started by start_blocked()
    and known to be waiting on a lock. finish() joins it: then exactly one of
    .error (a psycopg.Error) and .rows is set."""

    def __init__(self, dsn: str, sql: str, params: Any) -> None:
        self.pid: int | None = None
        self.rows: list[tuple[Any, ...]] | None = None
        self.error: psycopg.Error | None = None
        self._thread = threading.Thread(target=self._run, args=(dsn, sql, params), daemon=True)

    def _run(self, dsn: str, sql: str, params: Any) -> None:
        with connect(dsn) as c:
            c.execute("SET statement_timeout = '20s'")
            self.pid = c.info.backend_pid
            try:
                cur = c.execute(sql, params)
                self.rows = cur.fetchall() if cur.description else []
            except psycopg.Error as e:
                self.error = e

    def finish(self, timeout: float = 30) -> "BlockedCall":
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the blocked call did not finish"
        return self


def start_blocked(dsn: str, observer: psycopg.Connection[Any], sql: str, params: Any = None,
                  timeout: float = 10) -> BlockedCall:
    """Run sql on a new connection in a thread and return once it waits on a lock
    (pg_stat_activity.wait_event_type = 'Lock', seen through observer). Fails the
    test if it finishes or never blocks."""
    call = BlockedCall(dsn, sql, params)
    call._thread.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if call.pid is not None and one(
                observer, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                (call.pid,)) == 1:
            return call
        assert call._thread.is_alive(), f"the call finished without blocking: rows={call.rows} error={call.error}"
        time.sleep(0.02)
    raise AssertionError("the call never blocked on a lock")


# ------------------------------------------------------------------ errors --
def sql_error(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> psycopg.Error:
    """Run sql, which must raise; return the error (connection stays usable:
    autocommit connections need nothing, transactional ones are rolled back)."""
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    if not conn.autocommit:
        conn.rollback()
    return info.value


def assert_error(err: psycopg.Error, sqlstate: str, names: str | None = None, *,
                 hint: bool = True, detail: bool = False) -> None:
    """err has sqlstate; its message names `names`; it has a HINT (and a DETAIL)."""
    assert err.sqlstate == sqlstate, f"expected SQLSTATE {sqlstate}, got {err.sqlstate}: {err}"
    if names is not None:
        assert names in (err.diag.message_primary or ""), (names, err.diag.message_primary)
    if hint:
        assert err.diag.message_hint, f"no HINT on {err.sqlstate}: {err.diag.message_primary}"
    if detail:
        assert err.diag.message_detail, f"no DETAIL on {err.sqlstate}: {err.diag.message_primary}"
