"""Connections, queries, expected errors, the job-id floor and sqitch.

Every helper takes the connection (or DSN) to use, so a test can play several sessions
(workers, operator, sweeper) with one connection each.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
PG_SH = REPO / "scripts" / "pg.sh"
SQITCH_PLAN = REPO / "sqitch.plan"

Conn = psycopg.Connection[Any]

#: An id the identity column will never reach: "unknown job".
UNKNOWN_ID = 9_223_372_036_854_775_000
#: An all-zero token: never issued by claim (gen_random_uuid() is version 4).
ZERO_TOKEN = "00000000-0000-0000-0000-000000000000"
LEASE_EXPIRED = "lease expired before completion"
RELEASED = "released by worker before completion"


# ------------------------------------------------------------- connections --
def connect(dsn: str, **kw: Any) -> Conn:
    """A new psycopg 3 connection, autocommit=True unless overridden."""
    kw.setdefault("autocommit", True)
    return psycopg.connect(dsn, **kw)


@contextmanager
def connection(dsn: str, **kw: Any) -> Iterator[Conn]:
    """:func:`connect` for a block, closed after it (never committed: a transactional
    connection is rolled back first)."""
    c = connect(dsn, **kw)
    try:
        yield c
    finally:
        if not c.closed and not c.autocommit:
            c.rollback()
        c.close()


def app_dsn(dsn: str, application_name: str) -> str:
    """``dsn`` with ``application_name`` set (works for URIs and key=value strings),
    so that a test can find, and terminate, exactly its own backends."""
    return make_conninfo(dsn, application_name=application_name)


@contextmanager
def scratch_database(dsn: str, prefix: str) -> Iterator[str]:
    """A new, empty database <prefix>_<random> on dsn's server, for the block; dropped
    after (WITH FORCE: its sessions are ended). Yields its DSN."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with connection(dsn) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with connection(dsn) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def narrow_history(conn: Conn, width: str = "10 seconds") -> None:
    """History partitions `width` wide from now on: the setting, then maintain_history
    until it has nothing left to make or drop (the empty partitions ahead, made again at
    the new width)."""
    conn.execute("SELECT pgfence.set_history_partition_width(%s::interval)", (width,))
    for _ in range(50):
        got = rows(conn, "SELECT * FROM pgfence.maintain_history()")[0]
        if got["dropped"] == got["created"] == 0:
            return
    raise AssertionError("maintain_history kept making or dropping partitions")


def backends(conn: Conn, application_name: str) -> list[tuple[int, str]]:
    """(pid, query) of this database's client backends with that application_name."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND pid <> pg_backend_pid()", (application_name,)).fetchall()]


def terminate_backends(conn: Conn, application_name: str) -> int:
    """pg_terminate_backend every backend with that application_name; returns how many."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
        (application_name,)).fetchone()
    assert row is not None
    return int(row[0])


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


# ----------------------------------------------------------------- queries --
def one(conn: Conn, query: str, params: Any = None) -> Any:
    """The single value of a one-row, one-column query."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


def rows(conn: Conn, query: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall()


def now(conn: Conn) -> dt.datetime:
    """The database clock (clock_timestamp()), the only clock that decides leases."""
    return one(conn, "SELECT clock_timestamp()")  # type: ignore[no-any-return]


def job(conn: Conn, job_id: int) -> dict[str, Any]:
    """The whole row of the job, live or done (pgfence.all_jobs: a done job is in the
    history, pgfence.finished_jobs, with the same columns)."""
    r = rows(conn, "SELECT * FROM pgfence.all_jobs WHERE id = %s", (job_id,))
    assert len(r) == 1, f"job {job_id} not found"
    return r[0]


# ------------------------------------------------------------ job-id floor --
# Rows a test creates all have ids above the job id sequence's value when the test
# started (ids come from one sequence, cache 1). Queue lookups add "id >= floor", so
# they are primary-key range scans instead of a sequential scan of a table that
# benchmarks may have filled (jobs has no plain index on queue). The conftest fixture
# job_id_floor sets the floor for a test (modules opt in with
# pytestmark = pytest.mark.usefixtures("job_id_floor")); without it the floor is 0.
_id_floor = 0


def id_floor(conn: Conn) -> int:
    """An id below every job enqueued from now on (the identity sequence's last value):
    with it, a test finds its own jobs by primary key instead of scanning the shared table.
    (A sequence never called yet hands out its last_value next: the floor is one below.)"""
    return int(one(conn, "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END"
                         " FROM pgfence.jobs_id_seq"))


def set_id_floor(floor: int) -> None:
    """The floor :func:`in_queue_sql` uses (see above)."""
    global _id_floor
    _id_floor = floor


def in_queue_sql() -> str:
    """A WHERE fragment for 'in this test's queue %s' (see the job-id floor above)."""
    return f"queue = %s AND id >= {int(_id_floor)}"


def queue_jobs(conn: Conn, queue: str) -> list[dict[str, Any]]:
    """Every job of a queue, live or done (pgfence.all_jobs), by id."""
    return rows(conn, f"SELECT * FROM pgfence.all_jobs WHERE {in_queue_sql()} ORDER BY id", (queue,))


def queue_count(conn: Conn, queue: str, status: Optional[str] = None) -> int:
    if status is None:
        return int(one(conn, f"SELECT count(*) FROM pgfence.all_jobs WHERE {in_queue_sql()}", (queue,)))
    return int(one(conn, f"SELECT count(*) FROM pgfence.all_jobs WHERE {in_queue_sql()} AND status = %s",
                   (queue, status)))


@contextmanager
def queues_removed_after(conn: Conn, *queues: str) -> Iterator[int]:
    """For a block that fills these queues: yields the job-id floor (:func:`id_floor`),
    then removes the queues' jobs above it with their history (:func:`delete_queues`)."""
    floor = id_floor(conn)
    yield floor
    delete_queues(conn, list(queues), floor)


def delete_queues(conn: Conn, queues: list[str], floor: int = 0) -> None:
    """Remove the jobs of these queues (ids above floor) with their history and their
    retention rows (as the superuser), so that no job of ours is left for a claim over
    all queues in another test."""
    conn.execute("""
        WITH gone AS (DELETE FROM pgfence.jobs WHERE id > %(floor)s AND queue = ANY(%(q)s) RETURNING id),
             a AS (DELETE FROM pgfence.attempts USING gone WHERE job_id = gone.id),
             done AS (DELETE FROM pgfence.finished_jobs WHERE id > %(floor)s AND queue = ANY(%(q)s) RETURNING id),
             r AS (DELETE FROM pgfence.rejections
                    WHERE job_id IN (SELECT id FROM gone UNION ALL SELECT id FROM done))
        SELECT count(*) FROM gone""", {"q": queues, "floor": floor})
    conn.execute("DELETE FROM pgfence.retention WHERE queue = ANY(%s)", (queues,))
    # (the purge's counts of the history: what was deleted by hand here is no longer counted)
    if one(conn, "SELECT to_regclass('pgfence.history_counts') IS NOT NULL"):
        conn.execute("DELETE FROM pgfence.history_counts WHERE queue = ANY(%s)", (queues,))


def expire_history(conn: Conn, job_ids: list[int]) -> int:
    """As the clock would, for done jobs whose retention has passed (purge_at in the
    past): end the range of the history partitions that hold them, so that the next
    purge_finished drops those partitions whole (with every other done job in them, all
    past their retention too). Returns how many partitions it ended."""
    cur = conn.execute("""
        UPDATE pgfence.history_partitions p SET upper_bound = p.lower_bound + interval '1 microsecond'
         WHERE p.lower_bound <= clock_timestamp()
           AND EXISTS (SELECT FROM pgfence.finished_jobs h
                        WHERE h.id = ANY(%s) AND h.purge_at >= p.lower_bound AND h.purge_at < p.upper_bound
                          AND h.purge_at <= clock_timestamp())""", (job_ids,))
    return cur.rowcount


# ------------------------------------------------------------------ errors --
def sql_error(conn: Conn, query: str, params: Any = None) -> psycopg.Error:
    """Run query, which must raise; return the error (connection stays usable:
    autocommit connections need nothing, transactional ones are rolled back)."""
    import pytest  # here, not at the top: the benchmark imports this package too

    with pytest.raises(psycopg.Error) as info:
        conn.execute(query, params)
    if not conn.autocommit:
        conn.rollback()
    return info.value


def assert_error(err: psycopg.Error, sqlstate: str, names: Optional[str] = None, *,
                 hint: bool = True, detail: bool = False) -> None:
    """err has sqlstate; its message names `names`; it has a HINT (and a DETAIL)."""
    assert err.sqlstate == sqlstate, f"expected SQLSTATE {sqlstate}, got {err.sqlstate}: {err}"
    if names is not None:
        assert names in (err.diag.message_primary or ""), (names, err.diag.message_primary)
    if hint:
        assert err.diag.message_hint, f"no HINT on {err.sqlstate}: {err.diag.message_primary}"
    if detail:
        assert err.diag.message_detail, f"no DETAIL on {err.sqlstate}: {err.diag.message_primary}"


def sqlstate_of(conn: Conn, query: str, params: Any = None) -> Optional[str]:
    """Run query; None when it succeeds, else its SQLSTATE (a transactional connection
    is rolled back so it stays usable)."""
    try:
        cur = conn.execute(query, params)
        if cur.description is not None:
            cur.fetchall()
        return None
    except psycopg.Error as e:
        if not conn.autocommit:
            conn.rollback()
        return e.sqlstate


def sqlstate_rolled_back(conn: Conn, query: str, params: Any = None) -> Optional[str]:
    """Like sqlstate_of, inside a transaction that is always rolled back: a write that
    should have been refused cannot damage the shared database even if it is not."""
    try:
        with conn.transaction(force_rollback=True):
            cur = conn.execute(query, params)
            if cur.description is not None:
                cur.fetchall()
        return None
    except psycopg.Error as e:
        return e.sqlstate


# ------------------------------------------------------------------ sqitch --
def plan_has_changes(plan: Path = SQITCH_PLAN) -> bool:
    """True when sqitch.plan exists and lists at least one change."""
    if not plan.is_file() or not (REPO / "db").is_dir():
        return False
    for line in plan.read_text().splitlines():
        s = line.strip()
        if s and not s.startswith(("%", "#")):
            return True
    return False


def sqitch_target(dsn: str) -> str:
    """Sqitch target URI (db:postgresql://...) for a libpq URI or key=value DSN."""
    if re.match(r"^postgres(ql)?://", dsn):
        return "db:" + dsn
    p = conninfo_to_dict(dsn)
    user = quote(str(p.get("user", "")), safe="")
    pw = p.get("password")
    auth = f"{user}:{quote(str(pw), safe='')}@" if pw else (f"{user}@" if user else "")
    host = str(p.get("host", ""))
    port = f":{p['port']}" if p.get("port") else ""
    return f"db:postgresql://{auth}{host}{port}/{quote(str(p.get('dbname', '')), safe='')}"


def sqitch(*args: str, target: str, env: Optional[dict[str, str]] = None,
           timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``sqitch ARGS --target TARGET`` in the repository, or in another copy of the sqitch
    project (cwd; never $SQITCH_TARGET); env: the environment (default: this one), with a
    deployer name when it has none."""
    exe = shutil.which("sqitch")
    if exe is None:
        raise RuntimeError("sqitch not found on PATH (run scripts/setup.sh)")
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "SQITCH_TARGET"}
    env.setdefault("SQITCH_FULLNAME", "pgfence tests")
    env.setdefault("SQITCH_EMAIL", "pgfence-tests@localhost")
    return subprocess.run([exe, *args, "--target", target], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def sqitch_deploy(dsn: str) -> Optional[str]:
    """`sqitch deploy` against dsn (idempotent). Returns None when there is no plan yet,
    else sqitch's output; raises RuntimeError on failure."""
    if not plan_has_changes():
        return None
    r = sqitch("deploy", target=sqitch_target(dsn), timeout=600)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"sqitch deploy failed (exit {r.returncode}):\n{out}")
    return out
