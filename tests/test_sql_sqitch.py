"""The sqitch changes: `sqitch verify` passes on the test database, and
deploy -> verify -> revert -y -> deploy round-trips on a scratch database
(without pg_cron, where cron/reclaim deploys with a NOTICE)."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from helpers import REPO, connect, sqitch_target

Conn = psycopg.Connection[Any]


def _sqitch(*args: str, target: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("sqitch")
    assert exe is not None, "sqitch not on PATH"
    env = dict(os.environ)
    env.setdefault("SQITCH_FULLNAME", "pgfence tests")
    env.setdefault("SQITCH_EMAIL", "pgfence-tests@localhost")
    env.pop("SQITCH_TARGET", None)
    return subprocess.run([exe, *args, "--target", target], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _ok(r: subprocess.CompletedProcess[str], what: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"sqitch {what} exited {r.returncode}:\n{out}"
    return out


def test_sqitch_verify_passes_on_the_test_database(dsn: str) -> None:
    out = _ok(_sqitch("verify", target=sqitch_target(dsn)), "verify")
    assert "Verify successful" in out


@pytest.fixture
def scratch_dsn(dsn: str) -> Iterator[str]:
    """A new, empty database pgfence_roundtrip_<random> on the test server; dropped after."""
    name = f"pgfence_roundtrip_{secrets.token_hex(4)}"
    with connect(dsn) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with connect(dsn) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                      (name,))
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _has_jobs_table(dsn: str) -> bool:
    with connect(dsn) as c:
        return c.execute("SELECT to_regclass('pgfence.jobs') IS NOT NULL").fetchone() == (True,)


def test_sqitch_deploy_verify_revert_deploy_round_trips(scratch_dsn: str) -> None:
    target = sqitch_target(scratch_dsn)
    dbname = conninfo_to_dict(scratch_dsn)["dbname"]
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'").fetchone() == (0,)

    out = _ok(_sqitch("deploy", target=target), "deploy")
    notice = f"NOTICE:  pgfence: pg_cron is not installed in database {dbname}, so no sweep is scheduled"
    assert notice in out, out
    assert _has_jobs_table(scratch_dsn)

    out = _ok(_sqitch("verify", target=target), "verify")
    assert "Verify successful" in out

    _ok(_sqitch("revert", "-y", target=target), "revert -y")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgfence'").fetchone() == (0,)

    out = _ok(_sqitch("deploy", target=target), "deploy (again)")
    assert notice in out, out
    assert _has_jobs_table(scratch_dsn)
    _ok(_sqitch("verify", target=target), "verify (again)")
    # the redeployed schema works
    with connect(scratch_dsn) as c:
        [job_id] = c.execute("SELECT pgfence.enqueue('k', queue => 'roundtrip')").fetchall()[0]
        [token] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['roundtrip'])").fetchall()[0]
        c.execute("SELECT pgfence.complete(%s, %s)", (job_id, token))
        assert c.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)).fetchone() == ("done",)
