"""The read API: pgfence.job, attempts_of, rejections_of, rejections_not_stored and
history_summary return what the tables hold, to the callers the tables' row-level
security would show it to (operators every job, a producer its own, anyone else
nothing), whether they log in as the role or SET ROLE to it; and pgfence.limits()
tells the limits the functions enforce, each held against the behaviour at the limit
and one past it."""
from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from support.api import claim_one, complete
from support.db import assert_error, delete_queues, id_floor, sql_error
from support.roles import connect_as, login_roles, set_role

Conn = psycopg.Connection[Any]
SUFFIX = secrets.token_hex(3)
ROLES = {f"t_ra_prod_a_{SUFFIX}": "pgfence_producer", f"t_ra_prod_b_{SUFFIX}": "pgfence_producer",
         f"t_ra_worker_{SUFFIX}": "pgfence_worker", f"t_ra_oper_{SUFFIX}": "pgfence_operator",
         f"t_ra_nobody_{SUFFIX}": None}
PROD_A, PROD_B, WORKER, OPER, NOBODY = ROLES


@pytest.fixture(scope="module")
def roles(dsn: str) -> Iterator[None]:
    with login_roles(dsn, ROLES):
        yield


@pytest.fixture
def history(dsn: str, conn: Conn, roles: None, queue: str) -> Iterator[dict[str, Any]]:
    """A job enqueued by producer A, failed once, refused once (a stale complete), then
    done; a job enqueued by producer B."""
    floor = id_floor(conn)
    with connect_as(dsn, PROD_A) as a:
        mine = a.execute("SELECT pgfence.enqueue('k', '{\"n\": 1}', %s)", (queue,)).fetchone()[0]  # type: ignore[index]
    with connect_as(dsn, PROD_B) as b:
        theirs = b.execute("SELECT pgfence.enqueue('k', '{}', %s || '_b')", (queue,)).fetchone()[0]  # type: ignore[index]
    first = claim_one(conn, queue)
    conn.execute("SELECT * FROM pgfence.fail_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], ARRAY['boom'],"
                 " ARRAY['0 seconds']::interval[])", (mine, first["attempt_token"]))
    second = claim_one(conn, queue)
    assert second["id"] == mine
    with pytest.raises(psycopg.Error):
        complete(conn, mine, first["attempt_token"])
    conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (mine, first["attempt_token"]))
    complete(conn, mine, second["attempt_token"], result='{"ok": true}')
    yield {"mine": mine, "theirs": theirs, "tokens": [first["attempt_token"], second["attempt_token"]]}
    delete_queues(conn, [queue, queue + "_b"], floor)


def _visible(c: Conn, job_id: int) -> tuple[int, int, int, int]:
    return (c.execute("SELECT count(*) FROM pgfence.job(%s)", (job_id,)).fetchone()[0],  # type: ignore[index]
            c.execute("SELECT count(*) FROM pgfence.attempts_of(%s)", (job_id,)).fetchone()[0],  # type: ignore[index]
            c.execute("SELECT count(*) FROM pgfence.rejections_of(%s)", (job_id,)).fetchone()[0],  # type: ignore[index]
            c.execute("SELECT count(*) FROM pgfence.all_jobs WHERE id = %s", (job_id,)).fetchone()[0]  # type: ignore[index]
            if c.execute("SELECT has_table_privilege('pgfence.all_jobs', 'SELECT')").fetchone()[0]  # type: ignore[index]
            else 0)


def test_job_and_its_history_read_back_what_the_tables_hold(conn: Conn, history: dict[str, Any]) -> None:
    mine = history["mine"]
    [row] = conn.execute("SELECT * FROM pgfence.job(%s)", (mine,)).fetchall()
    table = conn.execute("SELECT * FROM pgfence.all_jobs WHERE id = %s", (mine,)).fetchone()
    assert row == (*table, None, None)  # (a done job: its history row keeps no timeout nor unique_for)
    attempts = conn.execute("SELECT attempt, attempt_token, outcome, error FROM pgfence.attempts_of(%s)",
                            (mine,)).fetchall()
    assert attempts == [(1, history["tokens"][0], "failed", "boom"), (2, history["tokens"][1], "done", None)]
    assert conn.execute("SELECT attempt_token, operation FROM pgfence.rejections_of(%s)", (mine,)).fetchall() == [
        (history["tokens"][0], "complete")]
    assert conn.execute("SELECT pgfence.rejections_not_stored(%s)", (mine,)).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgfence.job(-1)").fetchone() == (0,)


@pytest.mark.parametrize("via", ["login", "set_role"])
def test_each_role_reads_the_jobs_row_level_security_shows_it(dsn: str, conn: Conn, history: dict[str, Any],
                                                              via: str) -> None:
    mine, theirs = history["mine"], history["theirs"]
    want = {PROD_A: {mine: (1, 2, 1, 1), theirs: (0, 0, 0, 0)},
            PROD_B: {mine: (0, 0, 0, 0), theirs: (1, 0, 0, 1)},
            OPER: {mine: (1, 2, 1, 1), theirs: (1, 0, 0, 1)}}
    for role, expected in want.items():
        if via == "login":
            with connect_as(dsn, role) as c:
                got = {j: _visible(c, j) for j in expected}
        else:
            with set_role(conn, role):
                got = {j: _visible(conn, j) for j in expected}
        assert got == expected, role


@pytest.mark.parametrize("role", [WORKER, NOBODY])
def test_roles_without_the_read_grant_may_not_call_it(dsn: str, history: dict[str, Any], role: str) -> None:
    with connect_as(dsn, role) as c:
        for call in ("SELECT * FROM pgfence.job(%s)", "SELECT * FROM pgfence.attempts_of(%s)",
                     "SELECT * FROM pgfence.rejections_of(%s)", "SELECT pgfence.rejections_not_stored(%s)"):
            assert sql_error(c, call, (history["mine"],)).sqlstate == "42501", call


def test_history_summary_counts_outcomes_and_refusals(conn: Conn, history: dict[str, Any]) -> None:
    got = dict(conn.execute("SELECT * FROM pgfence.history_summary('1 hour')").fetchall())
    assert got["done"] >= 1 and got["failed"] >= 1 and got["rejected"] >= 1
    assert dict(conn.execute("SELECT * FROM pgfence.history_summary('0 seconds')").fetchall()) == {"rejected": 0}


@pytest.mark.parametrize(("call", "sqlstate", "names"), [
    ("SELECT * FROM pgfence.job(NULL)", "22004", "job_id"),
    ("SELECT * FROM pgfence.attempts_of(NULL)", "22004", "job_id"),
    ("SELECT * FROM pgfence.rejections_of(NULL)", "22004", "job_id"),
    ("SELECT pgfence.rejections_not_stored(NULL)", "22004", "job_id"),
    ("SELECT * FROM pgfence.history_summary(NULL)", "22004", "since"),
    ("SELECT * FROM pgfence.history_summary('-1 second')", "22023", "since"),
    ("SELECT * FROM pgfence.history_summary('3651 days')", "22023", "since"),
    ("SELECT * FROM pgfence.history_summary('1 mon -29 days')", "22023", "since"),
])
def test_bad_arguments_are_refused_naming_them(conn: Conn, call: str, sqlstate: str, names: str) -> None:
    assert_error(sql_error(conn, call), sqlstate, names)


# ----------------------------------------------------------------- limits --
def limit(conn: Conn, name: str) -> int:
    row = conn.execute("SELECT value FROM pgfence.limits() WHERE name = %s", (name,)).fetchone()
    assert row is not None, name
    return int(row[0])


def test_limits_are_named_once_each_with_a_description(conn: Conn) -> None:
    got = conn.execute("SELECT name, value, description FROM pgfence.limits()").fetchall()
    names = [r[0] for r in got]
    assert len(names) == len(set(names)) >= 16
    assert all(r[1] > 0 and len(r[2]) > 10 for r in got)


def _accepted(conn: Conn, query: str, params: Any = None) -> bool:
    """Whether the call passes its argument checks (run in a transaction rolled back)."""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(query, params)
        return True
    except psycopg.Error as e:
        assert e.sqlstate == "22023", (query, e.sqlstate, str(e))
        return False


# Each limit: a call with the value at the limit (accepted) and one past it (22023).
LIMIT_CALLS = {
    "max_jobs": "SELECT * FROM pgfence.claim('w', ARRAY[%(q)s], '1 minute', %(v)s)",
    "batch": "SELECT * FROM pgfence.complete_many(ARRAY(SELECT -g FROM generate_series(1, %(v)s) g)::bigint[],"
             " array_fill(gen_random_uuid(), ARRAY[%(v)s]))",
    "queues": "SELECT * FROM pgfence.claim('w', ARRAY(SELECT %(q)s || g FROM generate_series(1, %(v)s) g))",
    "name_chars": "SELECT pgfence.enqueue(repeat('k', %(v)s), queue => %(q)s)",
    "key_chars": "SELECT pgfence.enqueue('k', queue => %(q)s, idempotency_key => repeat('x', %(v)s))",
    # (a payload of one long string: its size is the string's length plus a constant)
    "payload_bytes": "SELECT pgfence.enqueue('k', jsonb_build_object('a', repeat('x', %(v)s - (SELECT"
                     " pgfence._payload_size(jsonb_build_object('a', repeat('x', 1000))) - 1000))), %(q)s)",
    "json_depth": "SELECT pgfence.enqueue('k', (repeat('{\"a\": ', %(v)s - 1) || '{}' || repeat('}', %(v)s - 1))::jsonb,"
                  " %(q)s)",
    "max_attempts": "SELECT pgfence.enqueue('k', queue => %(q)s, max_attempts => %(v)s)",
    "lease_max_ms": "SELECT * FROM pgfence.claim('w', ARRAY[%(q)s], make_interval(secs => %(v)s / 1000.0))",
    "run_sweeper_ahead_s": "SELECT pgfence.sweeper_begin('10 ms', clock_timestamp() + make_interval(secs => %(v)s - 1))",
}


@pytest.mark.parametrize("name", sorted(LIMIT_CALLS))
def test_each_limit_is_the_boundary_the_functions_enforce(conn: Conn, queue: str, name: str) -> None:
    value = limit(conn, name)
    query = LIMIT_CALLS[name]
    assert _accepted(conn, query, {"q": queue, "v": value}), name
    assert not _accepted(conn, query, {"q": queue, "v": value + (2 if name == "run_sweeper_ahead_s" else 1)}), name


def test_sweeper_health_says_stopped_after_sweeper_stale_s(dsn: str) -> None:
    """sweeper_health's own notion of healthy is the limit limits() tells: a pass
    sweeper_stale_s - 1 seconds ago is running, sweeper_stale_s + 1 ago stopped (the
    pass time set in a transaction that is rolled back)."""
    with psycopg.connect(dsn) as c:
        stale = limit(c, "sweeper_stale_s")
        for age, state in ((stale - 1, "running"), (stale + 1, "stopped")):
            with c.transaction(force_rollback=True):
                c.execute("UPDATE pgfence.sweeper_status SET last_pass_at = clock_timestamp() - make_interval(secs => %s),"
                          " paused_at = NULL, paused_by = NULL", (age,))
                assert c.execute("SELECT state FROM pgfence.sweeper_health()").fetchone() == (state,), age


def test_a_bypassrls_producer_reads_through_the_functions_what_it_reads_in_the_table(
        dsn: str, conn: Conn, history: dict[str, Any]) -> None:
    """Row-level security does not apply to a BYPASSRLS role: the functions agree."""
    name = f"t_ra_bypass_{SUFFIX}"
    with login_roles(dsn, {name: "pgfence_producer"}):
        conn.execute(f'ALTER ROLE "{name}" BYPASSRLS')
        with connect_as(dsn, name) as c:
            assert _visible(c, history["mine"]) == (1, 2, 1, 1)
            assert _visible(c, history["theirs"]) == (1, 0, 0, 1)


def test_job_returns_the_run_timeout_and_unique_for_of_a_job_in_the_table(conn: Conn, queue: str) -> None:
    """job() gives a live job's timeout and unique_for (pgfence.jobs' columns), NULL where
    it has none; the rest of its row is the table's."""
    floor = id_floor(conn)
    timed = conn.execute("SELECT pgfence.enqueue('k', '{}', %s, timeout => '5 seconds',"
                         " unique_for => '1 hour', idempotency_key => 'tk')", (queue,)).fetchone()[0]
    plain = conn.execute("SELECT pgfence.enqueue('k', '{}', %s)", (queue,)).fetchone()[0]
    try:
        for job_id, expected in ((timed, (dt.timedelta(seconds=5), dt.timedelta(hours=1))), (plain, (None, None))):
            [row] = conn.execute("SELECT * FROM pgfence.job(%s)", (job_id,)).fetchall()
            assert row[-2:] == expected
            assert row[:-2] == conn.execute("SELECT * FROM pgfence.all_jobs WHERE id = %s", (job_id,)).fetchone()
    finally:
        delete_queues(conn, [queue], floor)
