"""The dashboard tests' helpers: a dashboard over the test database as a throwaway
operator (or viewer) login, jobs in chosen states, and a served app for the browser.

Jobs are made through the SQL API only (enqueue, claim, fail, reclaim_expired), in
queues of the test's own (claims name them), and removed after with delete_queues.
"""
from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Optional

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from .db import Conn, one

TOKEN = "test-token-" + secrets.token_hex(8)


def role_dsn(dsn: str, role: str) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = role
    return make_conninfo(**params)


@contextmanager
def pool_as(dsn: str, role: str) -> Iterator[ConnectionPool]:
    pool = ConnectionPool(role_dsn(dsn, role), min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        pool.wait(timeout=30)
        yield pool
    finally:
        pool.close()


def enqueue(conn: Conn, queue: str, kind: str = "email", payload: str = "{}", *, policy: str = "auto",
            max_attempts: int = 3, key: Optional[str] = None) -> int:
    return int(one(conn, "SELECT pgfence.enqueue(kind => %s, payload => %s::jsonb, queue => %s,"
                         " recovery_policy => %s, max_attempts => %s, idempotency_key => %s)",
                   (kind, payload, queue, policy, max_attempts, key)))


def claim(conn: Conn, queue: str, worker: str, lease: timedelta = timedelta(seconds=30),
          n: int = 1) -> list[tuple[int, Any]]:
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT id, attempt_token FROM pgfence.claim(worker_id => %s, queues => ARRAY[%s], lease => %s,"
        " max_jobs => %s)", (worker, queue, lease, n)).fetchall()]


def expire_and_reclaim(conn: Conn, job_ids: list[int]) -> None:
    """Wait out the 50 ms leases of these jobs, then reclaim them (a claim of our queue
    or the sweeper may reclaim them first: either way they end reclaimed)."""
    time.sleep(0.08)
    deadline = time.time() + 10
    while time.time() < deadline:
        one(conn, "SELECT count(*) FROM pgfence.reclaim_expired(max_jobs => 1000)")
        left = one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'processing'",
                   (job_ids,))
        if left == 0:
            return
        time.sleep(0.05)
    raise AssertionError("jobs were not reclaimed")


def manual_review_job(conn: Conn, queue: str, payload: str = '{"to": "a@example.com"}',
                      kind: str = "charge") -> int:
    job_id = enqueue(conn, queue, kind, payload, policy="manual")
    claimed = claim(conn, queue, "worker-manual", lease=timedelta(milliseconds=50))
    assert [c[0] for c in claimed] == [job_id]
    expire_and_reclaim(conn, [job_id])
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"
    return job_id


def failed_job(conn: Conn, queue: str, error: str, kind: str = "email") -> int:
    job_id = enqueue(conn, queue, kind, max_attempts=1)
    (jid, token), = claim(conn, queue, "worker-fail")
    assert jid == job_id
    assert one(conn, "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s)",
               (job_id, token, error)) == "failed"
    return job_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve the ASGI app with uvicorn on a free loopback port (a thread); its base URL."""
    import uvicorn
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
