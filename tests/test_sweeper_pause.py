"""Pausing the background sweeper is an operator action, not a lock any role can take.

Before the rework after @v0.3.0 the sweeper skipped its passes while any session held
``pg_advisory_lock(hashtext('pgfence.sweep'))``: a login with no pgfence grant at all
could take it, and expired leases then waited forever. Now an operator calls
``pgfence.pause_sweeper()`` / ``resume_sweeper()`` (recorded in sweeper_status), and
advisory locks mean nothing to the sweeper. Also: ``run_until`` is bounded (an
'infinity' ran forever)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from support.api import claim_short, start_blocked
from support.db import assert_error, connect, job, one, sql_error
from support.roles import grantless_login

Conn = psycopg.Connection[Any]


def _reclaimed_within(conn: Conn, job_id: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job(conn, job_id)["status"] != "processing":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def nobody(dsn: str) -> Iterator[Conn]:
    """A LOGIN connection of a role with no pgfence grant at all."""
    with grantless_login(dsn, "t_nobody") as c:
        yield c


def test_an_advisory_lock_held_by_a_role_without_grants_does_not_stall_the_sweeper(
        nobody: Conn, conn: Conn, queue: str) -> None:
    # the old pause key, the two-key space of claim requests' locks, and more
    nobody.execute("SELECT pg_advisory_lock(hashtext('pgfence.sweep'))")
    nobody.execute("SELECT pg_advisory_lock(hashtext('pgfence.claim'), k) FROM generate_series(1, 100) k")
    nobody.execute("SELECT pg_advisory_lock(k) FROM generate_series(1, 100) k")
    job_id, _ = claim_short(conn, queue, lease="1 second")
    # No worker claims from this queue: only the background sweeper can reclaim it.
    assert _reclaimed_within(conn, job_id, 5.0), "the background sweeper did not reclaim a 1 s lease within 5 s"
    assert job(conn, job_id)["status"] == "queued"


def test_only_operators_may_pause_the_sweeper(nobody: Conn, dsn: str) -> None:
    for call in ("SELECT pgfence.pause_sweeper()", "SELECT pgfence.resume_sweeper()"):
        assert_error(sql_error(nobody, call), "42501", hint=False)
    with connect(dsn) as c:
        assert one(c, "SELECT state FROM pgfence.sweeper_health()") != "paused"


def test_a_paused_sweeper_reclaims_nothing_until_it_is_resumed(conn: Conn, conn2: Conn, queue: str) -> None:
    assert one(conn2, "SELECT pgfence.pause_sweeper()") is True
    try:
        assert one(conn2, "SELECT pgfence.pause_sweeper()") is False  # already paused
        state, paused_by, paused_at = conn.execute(
            "SELECT state, paused_by, paused_at FROM pgfence.sweeper_health()").fetchone() or (None, None, None)
        assert (state, paused_by) == ("paused", "postgres") and paused_at is not None
        job_id, _ = claim_short(conn, queue, lease="200 milliseconds")
        assert not _reclaimed_within(conn, job_id, 1.5), "a paused sweeper reclaimed a lease"
    finally:
        assert one(conn2, "SELECT pgfence.resume_sweeper()") is True
    assert one(conn2, "SELECT pgfence.resume_sweeper()") is False
    assert _reclaimed_within(conn, job_id, 5.0), "the resumed sweeper did not reclaim the lease"
    assert conn.execute("SELECT paused_at, paused_by FROM pgfence.sweeper_status").fetchone() == (None, None)


def test_pause_waits_for_a_sweeper_step_in_progress(dsn: str, conn: Conn, tx_conn: Conn) -> None:
    """A step holds the sweeper_status row while it works; pause_sweeper() waits for
    it, so once pause has returned no step of the background sweeper runs."""
    tx_conn.execute("SELECT * FROM pgfence.sweeper_status FOR NO KEY UPDATE")  # a step in progress
    blocked = start_blocked(dsn, conn, "SELECT pgfence.pause_sweeper()")
    try:
        tx_conn.rollback()
        assert blocked.finish().error is None and blocked.rows == [(True,)]
    finally:
        conn.execute("SELECT pgfence.resume_sweeper()")


@pytest.mark.parametrize("run_until", ["'infinity'::timestamptz", "'-infinity'::timestamptz",
                                       "clock_timestamp() + interval '2 hours'",
                                       "clock_timestamp() + interval '61 minutes'"])
def test_run_sweeper_refuses_a_run_until_beyond_an_hour(conn: Conn, run_until: str) -> None:
    assert_error(sql_error(conn, f"CALL pgfence.run_sweeper('10 ms', {run_until})"), "22023", "run_until")
    assert_error(sql_error(conn, f"SELECT pgfence.sweeper_begin('10 ms', {run_until})"), "22023", "run_until")


def test_run_sweeper_accepts_a_run_until_within_the_hour(conn: Conn) -> None:
    state = conn.execute("SELECT (s).run_until > clock_timestamp() + interval '58 minutes', (s).phase, (s).done"
                         " FROM pgfence.sweeper_begin('0.5 seconds', clock_timestamp() + interval '59 minutes') s"
                         ).fetchone()
    assert state == (True, "reclaim", False)


def test_sweeper_step_refuses_a_state_it_did_not_make(conn: Conn) -> None:
    err = sql_error(conn, "SELECT pgfence.sweeper_step(ROW('1 hour', now(), 'sleep', 0, NULL, NULL, false)"
                          "::pgfence.sweeper_state)")
    assert_error(err, "22023", "state")
