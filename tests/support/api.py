"""The pgfence SQL functions called directly (named notation), as the SQL-level tests
use them: never through the Python client. Every helper takes the connection to use.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import psycopg
from psycopg.types.json import Jsonb

from .db import Conn, connect, one, rows


# --------------------------------------------------------------- API calls --
def enqueue(conn: Conn, queue: str, kind: str = "task", *,
            payload: Optional[dict[str, Any]] = None, **kw: Any) -> int:
    """pgfence.enqueue(kind, payload, queue => queue, <kw> => ...) with named notation.
    kw values are passed as parameters; run_at may be a datetime."""
    args = ["kind => %(kind)s", "queue => %(queue)s"]
    params: dict[str, Any] = {"kind": kind, "queue": queue}
    if payload is not None:
        args.append("payload => %(payload)s")
        params["payload"] = Jsonb(payload)
    for name, value in kw.items():
        args.append(f"{name} => %({name})s")
        params[name] = value
    return one(conn, f"SELECT pgfence.enqueue({', '.join(args)})", params)


def claim(conn: Conn, queues: Optional[list[str]], worker: str = "worker-A", *,
          lease: str = "30 seconds", max_jobs: int = 1, request_id: Optional[uuid.UUID] = None) -> list[dict[str, Any]]:
    """pgfence.claim(...) rows, in the order claim returned them."""
    return rows(
        conn,
        "SELECT * FROM pgfence.claim(worker_id => %s, queues => %s::text[],"
        " lease => %s::interval, max_jobs => %s, request_id => %s)",
        (worker, queues, lease, max_jobs, request_id),
    )


def claim_one(conn: Conn, queue: str, worker: str = "worker-A", *,
              lease: str = "30 seconds") -> dict[str, Any]:
    """Claim exactly one job from queue (fails the test when there is none)."""
    got = claim(conn, [queue], worker, lease=lease, max_jobs=1)
    assert len(got) == 1, f"expected one claimable job in {queue}, got {got}"
    return got[0]


def claim_job(conn: Conn, queue: str, job_id: int, worker: str = "worker-A", *,
              lease: str = "30 seconds") -> uuid.UUID:
    """Claim the given job (it must be the next one in its queue); returns its token."""
    c = claim_one(conn, queue, worker, lease=lease)
    assert c["id"] == job_id, f"claimed {c['id']}, expected {job_id}"
    return c["attempt_token"]


def heartbeat(conn: Conn, job_id: int, token: uuid.UUID,
              lease: str = "30 seconds") -> dt.datetime:
    return one(conn, "SELECT pgfence.heartbeat(job_id => %s, attempt_token => %s, lease => %s::interval)",
               (job_id, token, lease))


def complete(conn: Conn, job_id: int, token: uuid.UUID,
             result: Optional[dict[str, Any]] = None) -> None:
    conn.execute("SELECT pgfence.complete(job_id => %s, attempt_token => %s, result => %s)",
                 (job_id, token, Jsonb(result) if result is not None else None))


def fail(conn: Conn, job_id: int, token: uuid.UUID, error: str = "boom", *,
         retry_in: Optional[str] = None, permanent: bool = False) -> str:
    return one(conn,
               "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s,"
               " retry_in => %s::interval, permanent => %s)",
               (job_id, token, error, retry_in, permanent))


def release(conn: Conn, job_id: int, token: uuid.UUID) -> str:
    return one(conn, "SELECT pgfence.release(job_id => %s, attempt_token => %s)", (job_id, token))


def reclaim_expired(conn: Conn, max_jobs: int = 10000) -> list[dict[str, Any]]:
    """One reclaim batch. Large by default: other tests may have left expired leases
    that are older than this test's, and the batch takes the oldest first."""
    return rows(conn, "SELECT * FROM pgfence.reclaim_expired(max_jobs => %s)", (max_jobs,))


def reclaimed_ids(result: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in result}


def wait_lease_expired(conn: Conn, *job_ids: int) -> None:
    """Sleep (on the database clock) until the jobs' leases are in the past."""
    conn.execute(
        "SELECT pg_sleep(greatest(0, extract(epoch FROM max(lease_expires_at) - clock_timestamp())) + 0.02)"
        "  FROM pgfence.jobs WHERE id = ANY(%s)", (list(job_ids),))
    assert one(conn, "SELECT bool_and(status = 'processing' AND lease_expires_at < clock_timestamp())"
                     "  FROM pgfence.jobs WHERE id = ANY(%s)", (list(job_ids),)) is True


def claim_short(conn: Conn, queue: str, worker: str = "worker-A", *,
                lease: str = "300 milliseconds", **enqueue_kw: Any) -> tuple[int, uuid.UUID]:
    """Enqueue a job and claim it with a short lease (not waited for).
    Returns (job id, token). See lease_expired_under_lock."""
    job_id = enqueue(conn, queue, **enqueue_kw)
    return job_id, claim_job(conn, queue, job_id, worker, lease=lease)


@contextmanager
def lease_expired_under_lock(tx: Conn, *job_ids: int) -> Iterator[None]:
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


def make_stale(conn: Conn, tx: Conn, queue: str,
               lease: str = "300 milliseconds") -> tuple[int, uuid.UUID, uuid.UUID]:
    """A job whose first attempt (worker-A, this lease) lost its lease: reclaimed by this
    test's reclaim_expired, then claimed again by worker-B (1 hour lease). Returns
    (job id, A's stale token, B's current token)."""
    job_id, stale = claim_short(conn, queue, "worker-A", lease=lease)
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
        self.pid: Optional[int] = None
        self.rows: Optional[list[tuple[Any, ...]]] = None
        self.error: Optional[psycopg.Error] = None
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


def start_blocked(dsn: str, observer: Conn, sql: str, params: Any = None,
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
