"""Two things that need a server start, on a cluster of their own (never the tests'
shared one): pg_cron running the sweeper where public is writable and planted, and
the sweeper starting at once after a crash-restart.

After a crash-restart the sweeper runs again within seconds, not at the next minute.

pg_cron 1.4 schedules by the minute, and the sweeper of a minute ends with it: after a
restart nothing swept until the next minute boundary (8.8 s to 58.4 s in three
crash-restarts; expired leases waited ~52 s with no worker polling). cron/reclaim now
also schedules 'pgfence-reclaim-reboot' ('@reboot'), which pg_cron runs when it starts.

This test crash-restarts a cluster of its own (never the tests' shared one), at a
moment when the next minute boundary is more than 20 s away, with an expired lease
and no worker: the lease must be reclaimed by the reboot job's run well before it.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from support.clusters import Cluster, session
from support.db import REPO, connect
from support.roles import connect_as
from test_sweeper_search_path import plant, pwned, work


@pytest.fixture(scope="module")
def restart_cluster() -> Iterator[Cluster]:
    with session(Cluster(REPO / ".pgdata-restart", "pgfence", base_port=54369, name="restart")) as cluster:
        yield cluster


def _wait(predicate, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_crash_restart_starts_the_sweeper_at_once(restart_cluster: Cluster) -> None:
    dsn = restart_cluster.dsn()

    def status(job_id: int) -> str:
        try:
            with connect(dsn, connect_timeout=2) as c:
                row = c.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)).fetchone()
                return "" if row is None else str(row[0])
        except Exception:
            return ""

    # crash at least 25 s before the next minute boundary, so the minutely job cannot be
    # the one that recovers
    while not 3 <= datetime.now(timezone.utc).second <= 30:
        time.sleep(0.2)
    with connect(dsn) as c:
        job_id = c.execute("SELECT pgfence.enqueue('k', queue => 'restart')").fetchone()[0]  # type: ignore[index]
        c.execute("SELECT pgfence.claim('w', ARRAY['restart'], '1 second')")
    down = restart_cluster.crash_restart()
    restarted = time.monotonic()
    boundary_in = 60 - datetime.now(timezone.utc).second
    took = _wait(lambda: status(job_id) == "queued", 15, "the expired lease to be reclaimed after the restart")
    assert took < boundary_in, f"reclaimed {took:.1f}s after the restart: the minute boundary was {boundary_in}s away"
    with connect(dsn) as c:
        runs = c.execute("SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid)"
                         " WHERE j.jobname = 'pgfence-reclaim-reboot'").fetchone()
        assert runs is not None and runs[0] >= 1
    print(f"server down {down:.1f}s; lease reclaimed {time.monotonic() - restarted:.1f}s after the restart")


@pytest.mark.parametrize("path", ['"$user", public', "public, pg_catalog"])
def test_pg_cron_runs_the_sweeper_without_running_functions_planted_in_public(restart_cluster: Cluster,
                                                                             path: str) -> None:
    """A login with no pgfence grant planted look-alikes of what the sweeper calls in a
    writable public; pg_cron runs the sweeper there as its superuser (the @reboot job,
    at a restart), with the database's default search_path: it reclaims and purges, and
    no look-alike runs in it.

    With public ahead of pg_catalog in that default path, pg_cron's own launcher runs a
    planted operator (its queries of cron.job are not schema-qualified): that is
    pg_cron's, whatever pgfence does, and why the README tells DBAs to keep public
    unwritable and after pg_catalog in the cron database."""
    dsn = restart_cluster.dsn()
    with connect(dsn) as su:
        su.execute("DROP ROLE IF EXISTS t_cron_attacker")
        su.execute("CREATE ROLE t_cron_attacker LOGIN")
        su.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    with connect_as(dsn, "t_cron_attacker") as a:
        plant(a)
    try:
        with connect(dsn) as su:
            su.execute(f"ALTER DATABASE pgfence SET search_path = {path}")
            expired, done = work(su)
        restart_cluster.stop()
        restart_cluster.start()
        with connect(dsn) as su:
            started = su.execute("SELECT pg_postmaster_start_time()").fetchone()[0]  # type: ignore[index]
            assert su.execute("SHOW search_path").fetchone() == (path,)
            _wait(lambda: su.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (expired,)).fetchone()
                  == ("queued",), 30, "pg_cron's sweeper to reclaim the expired lease")
            _wait(lambda: su.execute("SELECT count(*) FROM pgfence.jobs WHERE id = %s", (done,)).fetchone() == (0,),
                  30, "pg_cron's sweeper to purge the finished job")
            runs = su.execute("SELECT d.status, d.return_message FROM cron.job_run_details d JOIN cron.job j"
                              " USING (jobid) WHERE j.jobname = 'pgfence-reclaim-reboot' AND d.start_time > %s",
                              (started,)).fetchall()
            assert runs and all(r[0] in ("running", "succeeded") for r in runs), runs
            ran = pwned(su)
            assert [r for r in ran if r[3] != "pg_cron launcher"] == []
            if path.startswith('"$user"'):
                assert ran == []
    finally:
        with connect(dsn) as su:
            su.execute("ALTER DATABASE pgfence RESET search_path")
            su.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            su.execute("DROP OWNED BY t_cron_attacker")
            su.execute("DROP ROLE t_cron_attacker")


def test_the_restart_cluster_is_not_the_tests_cluster(restart_cluster: Cluster, dsn: str) -> None:
    assert f":{restart_cluster.port}/" not in dsn
    assert Path(restart_cluster.datadir) != REPO / ".pgdata-test"
