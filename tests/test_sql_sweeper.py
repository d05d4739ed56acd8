"""The background sweeper: the pg_cron job exists, and really reclaims an expired
lease within 2 s of its expiry, without any claim or manual reclaim."""
from __future__ import annotations

import datetime as dt
import time
from typing import Any

import psycopg
import pytest

from support.api import claim_job, enqueue
from support.db import LEASE_EXPIRED, job, one

Conn = psycopg.Connection[Any]


def test_pg_cron_job_runs_the_sweeper(conn: Conn) -> None:
    got = conn.execute("SELECT command, schedule, active FROM cron.job WHERE jobname = 'pgfence-reclaim'").fetchall()
    assert got == [("CALL pgfence.run_sweeper()", "* * * * *", True)]


def _wait_for_sweeper(conn: Conn, timeout: float = 70.0) -> None:
    """pg_cron starts run_sweeper at the start of every minute: wait until a pass
    has been recorded in the last 2 seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if one(conn, "SELECT coalesce(last_pass_at > clock_timestamp() - interval '2 seconds', false)"
                     "  FROM pgfence.sweeper_status"):
            return
        time.sleep(0.25)
    status = conn.execute("SELECT * FROM pgfence.sweeper_status").fetchone()
    runs = conn.execute("SELECT status, return_message, start_time FROM cron.job_run_details"
                        " ORDER BY start_time DESC LIMIT 3").fetchall()
    pytest.fail(f"the pg_cron sweeper recorded no pass within {timeout} s: {status}; last runs: {runs}")


@pytest.mark.slow
def test_sweeper_reclaims_an_expired_lease_within_two_seconds(conn: Conn, queue: str) -> None:
    _wait_for_sweeper(conn)
    job_id = enqueue(conn, queue)
    claim_job(conn, queue, job_id, lease="1 second")
    claimed = job(conn, job_id)
    expires = claimed["lease_expires_at"]
    deadline = time.monotonic() + 30
    status = "processing"
    while status == "processing" and time.monotonic() < deadline:
        time.sleep(0.05)
        status = one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,))
    r = job(conn, job_id)
    assert r["status"] == "queued", f"not reclaimed within 30 s: {r}"
    assert (r["reclaim_count"], r["last_error"], r["attempts"]) == (1, LEASE_EXPIRED, 1)
    assert r["updated_at"] > expires
    assert r["updated_at"] - expires < dt.timedelta(seconds=2)
