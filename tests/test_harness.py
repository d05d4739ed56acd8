"""Sanity checks for the test harness and the database it provides."""
from __future__ import annotations

from typing import Any

import psycopg

from support.db import connect


def test_dsn_connects(dsn: str) -> None:
    with connect(dsn) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_pg_cron_installed(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'").fetchone()
    assert row is not None, (
        "pg_cron extension missing in the test database "
        "(install postgresql-<major>-cron: scripts/setup.sh; it must be in shared_preload_libraries)"
    )


def test_server_version(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    assert row is not None and row[0] >= 150000, row


def test_queue_names_unique(queue: str) -> None:
    assert queue.startswith("t_test_queue_names_unique_") and len(queue) <= 100


def test_sweep_paused_pauses_the_background_sweeper(sweep_paused: psycopg.Connection[Any],
                                                   conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT state, paused_by FROM pgfence.sweeper_health()").fetchone()
    assert row == ("paused", "postgres")
    before = conn.execute("SELECT last_pass_at FROM pgfence.sweeper_status").fetchone()
    conn.execute("SELECT pg_sleep(0.7)")  # longer than a pass interval
    assert conn.execute("SELECT last_pass_at FROM pgfence.sweeper_status").fetchone() == before
