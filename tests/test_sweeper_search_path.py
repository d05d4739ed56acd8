"""The routines pg_cron or an operator runs are safe whatever the caller's search_path.

pg_cron runs ``CALL pgfence.run_sweeper()`` as a superuser. Procedures that COMMIT
cannot be SECURITY DEFINER nor pin their search_path with a SET clause, so before
the rework after @v0.3.0 the sweeper resolved ``pg_sleep(0.01)`` (a numeric) through
the caller's path: where ``public`` is writable, a login that created
``public.pg_sleep(numeric)`` (an exact-type match beats ``pg_catalog.pg_sleep(float8)``)
had it run as the superuser within a minute.

Here a database with a writable ``public`` gets look-alikes of every function and
operator the procedures could reach, planted by a login with no pgfence grant; each
records that it ran (and as whom) instead of escalating. The procedures then run as
the superuser with the default path and with ``public`` first, doing real work (an
expired lease to reclaim, a finished job to purge), and the look-alikes must never
run; nor may the objects of a schema ``cron`` the attacker created where pg_cron is
not installed (the sweeper trimmed ``cron.job_run_details`` wherever it existed: with
a trigger or a view in it, the attacker became a superuser). A control shows they would: the same unqualified call
made outside the procedures runs them. (pg_cron itself running the sweeper in such a
database, with ``public`` first as the database's default: tests/test_restart_recovery.py,
on a cluster of its own.)
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from support.db import connect, sqitch_deploy
from support.roles import connect_as, login_roles

Conn = psycopg.Connection[Any]

# (signature, returns, the pg_catalog call it forwards to): look-alikes of what the
# sweeper's code calls or could call. Those with the signature of a pg_catalog
# function win only when public comes first in the path; the others (pg_sleep(numeric),
# the int4 advisory locks) win by an exact type match under the default path too.
PLANTED_FUNCTIONS = [
    ("pg_sleep(numeric)", "void", "pg_catalog.pg_sleep($1::float8)"),
    ("pg_sleep(double precision)", "void", "pg_catalog.pg_sleep($1)"),
    ("pg_try_advisory_lock(integer)", "boolean", "true"),
    ("pg_advisory_unlock(integer)", "boolean", "true"),
    ("pg_try_advisory_lock(bigint)", "boolean", "true"),
    ("now()", "timestamptz", "pg_catalog.now()"),
    ("clock_timestamp()", "timestamptz", "pg_catalog.clock_timestamp()"),
    ("set_config(text, text, boolean)", "text", "pg_catalog.set_config($1, $2, $3)"),
    ("to_regclass(text)", "regclass", "pg_catalog.to_regclass($1)"),
    ("to_regprocedure(text)", "regprocedure", "pg_catalog.to_regprocedure($1)"),
    ("date_trunc(text, timestamptz)", "timestamptz", "pg_catalog.date_trunc($1, $2)"),
    ("current_setting(text)", "text", "pg_catalog.current_setting($1)"),
    ("hashtext(text)", "integer", "pg_catalog.hashtext($1)"),
    ("isfinite(timestamptz)", "boolean", "pg_catalog.isfinite($1)"),
    ("left(text, integer)", "text", "pg_catalog.left($1, $2)"),
]
# (operator, left, right, the pg_catalog operator it forwards to)
PLANTED_OPERATORS = [
    ("<", "timestamptz", "timestamptz"), (">=", "timestamptz", "timestamptz"), ("<", "bigint", "integer"),
    ("=", "bigint", "integer"), ("+", "timestamptz", "interval"), ("-", "timestamptz", "interval"),
    ("+", "bigint", "bigint"), ("=", "text", "text"), ("<>", "text", "text"), ("||", "text", "text"),
    # (what the CHECK of pgfence.jobs, pgfence._job_row_rules, compares)
    ("=", "boolean", "boolean"), (">=", "integer", "integer"), ("<=", "timestamptz", "timestamptz"),
]


def plant(attacker: Conn) -> None:
    """As the attacker (no pgfence grant): a log table anyone may write, and the look-alikes."""
    attacker.execute("CREATE TABLE public.pwned (what text, who text, superuser boolean, query text)")
    attacker.execute("GRANT INSERT ON public.pwned TO PUBLIC")
    attacker.execute("""CREATE FUNCTION public.pwn(what text) RETURNS void LANGUAGE sql AS $$
        INSERT INTO public.pwned
        SELECT what, current_user::text, r.rolsuper,
               coalesce(pg_catalog.current_query(),
                        (SELECT a.backend_type FROM pg_catalog.pg_stat_activity a
                          WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()))
          FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user $$""")
    for sig, returns, forward in PLANTED_FUNCTIONS:
        name = sig.split("(")[0]
        body = "SELECT public.pwn('%s'); SELECT %s" % (sig, forward)
        if returns == "void":
            body = "SELECT public.pwn('%s'); SELECT %s" % (sig, forward)
        attacker.execute(f"CREATE FUNCTION public.{name}({sig.split('(', 1)[1]} RETURNS {returns} "
                         f"LANGUAGE sql AS $$ {body} $$")
    for i, (op, left, right) in enumerate(PLANTED_OPERATORS):
        fn = f"op_{i}"
        returns = {"+": left, "-": left, "||": "text"}.get(op, "boolean")
        attacker.execute(f"CREATE FUNCTION public.{fn}(a {left}, b {right}) RETURNS {returns} LANGUAGE sql AS "
                         f"$$ SELECT public.pwn('operator {op}({left}, {right})'); "
                         f"SELECT a OPERATOR(pg_catalog.{op}) b $$")
        attacker.execute(f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = public.{fn})")


@pytest.fixture
def attacked(scratch_dsn: str, dsn: str) -> Iterator[tuple[str, str]]:
    """(superuser dsn, attacker role) of a scratch database with pgfence deployed, a
    writable public (as in every database created before PostgreSQL 15), look-alikes
    planted there by a login with no pgfence grant, and (this database has no pg_cron,
    as where pg_cron runs from another database) a schema cron of the attacker's own: a
    run log with a DELETE trigger and a cron.job view, both calling its function, for
    the sweeper's trim of pg_cron's run log to find."""
    attacker = f"t_attacker_{secrets.token_hex(3)}"
    sqitch_deploy(scratch_dsn)
    with login_roles(dsn, {attacker: None}):
        with connect(scratch_dsn) as su:
            su.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
            su.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(su.info.dbname), sql.Identifier(attacker)))
        with connect_as(scratch_dsn, attacker) as a:
            plant(a)
            a.execute("CREATE SCHEMA cron")
            a.execute("GRANT USAGE ON SCHEMA cron TO PUBLIC")
            a.execute("CREATE TABLE cron.job_run_details (jobid bigint, runid bigint, end_time timestamptz)")
            a.execute("INSERT INTO cron.job_run_details VALUES (1, 1, now() - interval '2 days'),"
                      " (2, 2, now() - interval '2 days'), (1, 3, now())")
            a.execute("""CREATE FUNCTION cron.on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
                         BEGIN PERFORM public.pwn('trigger on cron.job_run_details'); RETURN OLD; END $$""")
            a.execute("CREATE TRIGGER t BEFORE DELETE ON cron.job_run_details FOR EACH ROW"
                      " EXECUTE FUNCTION cron.on_delete()")
            a.execute("""CREATE VIEW cron.job AS SELECT 1::bigint AS jobid, 'pgfence-reclaim'::text AS jobname
                          FROM (SELECT public.pwn('view cron.job')) x""")
            a.execute("GRANT ALL ON cron.job_run_details, cron.job TO PUBLIC")
        try:
            yield scratch_dsn, attacker
        finally:  # (the role is dropped from the tests' database: its objects here go first)
            with connect(scratch_dsn) as su:
                su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")
                su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(attacker)))


def work(su: Conn) -> tuple[int, int]:
    """An expired lease to reclaim and a done job past its retention to purge."""
    queue = f"attacked-{secrets.token_hex(3)}"
    expired, done = [r[0] for r in su.execute(
        "SELECT id FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %s) ORDER BY ordinal", (queue,))]
    tokens = dict(su.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY[%s], '1 hour', 2)", (queue,)))
    su.execute("SELECT pgfence.complete(%s, %s)", (done, tokens[done]))
    su.execute("UPDATE pgfence.jobs SET finished_at = finished_at - interval '2 days' WHERE id = %s", (done,))
    su.execute("SELECT pgfence.heartbeat(%s, %s, '1 millisecond')", (expired, tokens[expired]))
    time.sleep(0.01)
    return expired, done


def pwned(su: Conn) -> list[tuple[Any, ...]]:
    """(what ran, as whom, superuser?, the statement that ran it) of every look-alike that ran."""
    return su.execute("SELECT what, who, superuser, query FROM public.pwned").fetchall()


@pytest.mark.parametrize("path", ['"$user", public', "public, pg_catalog", "public, pg_catalog, pgfence"])
def test_sweeper_procedures_run_no_function_of_the_callers_search_path(attacked: tuple[str, str], path: str) -> None:
    scratch, _ = attacked
    with connect(scratch) as su:
        expired, done = work(su)
        su.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        su.execute("CALL pgfence.run_sweeper('10 milliseconds', pg_catalog.clock_timestamp()"
                   " OPERATOR(pg_catalog.+) interval '300 milliseconds')")
        su.execute("CALL pgfence.sweep()")
        su.execute("RESET search_path")
        assert pwned(su) == []
        # ... and they did their work: reclaimed, purged; a cron schema that is not
        # pg_cron's was left alone (the trim of pg_cron's own log: test_misuse.py)
        assert su.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (expired,)).fetchone() == ("queued",)
        assert su.execute("SELECT count(*) FROM pgfence.jobs WHERE id = %s", (done,)).fetchone() == (0,)
        assert su.execute("SELECT runid FROM cron.job_run_details ORDER BY runid").fetchall() == [(1,), (2,), (3,)]
        # the caller's search_path is its own again afterwards
        su.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        su.execute("CALL pgfence.sweep()")
        assert su.execute("SHOW search_path").fetchone() == (path,)


@pytest.mark.parametrize("path", ["public, pg_catalog", "public, pg_catalog, pgfence"])
def test_a_write_to_the_jobs_table_runs_no_operator_of_the_writers_search_path(attacked: tuple[str, str],
                                                                                 path: str) -> None:
    """The table's CHECK (pgfence._job_row_rules) runs in whatever session writes
    pgfence.jobs: a superuser writing it directly with public first, the function's
    first call in that session, neither lets nor refuses a row through a look-alike."""
    scratch, _ = attacked
    with connect(scratch) as setup:
        running, queued = [r[0] for r in setup.execute(
            "SELECT id FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => 'direct') ORDER BY ordinal")]
        assert setup.execute("SELECT id FROM pgfence.claim('w', ARRAY['direct'], '1 hour', 1)").fetchall() == [
            (running,)]
    with connect(scratch) as su:
        su.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        su.execute("UPDATE pgfence.jobs SET priority = 5 WHERE id OPERATOR(pg_catalog.=) %s::bigint", (queued,))
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            su.execute("UPDATE pgfence.jobs SET reserved_by = 'x' WHERE id OPERATOR(pg_catalog.=) %s::bigint"
                       " AND status OPERATOR(pg_catalog.=) 'queued'::text", (queued,))
        assert refused.value.diag.constraint_name == "jobs_queued_has_no_lease"
        su.execute("UPDATE pgfence.jobs SET heartbeat_at = pg_catalog.clock_timestamp()"
                   " WHERE status OPERATOR(pg_catalog.=) 'processing'::text AND queue OPERATOR(pg_catalog.=) 'direct'::text")
        su.execute("RESET search_path")
        assert pwned(su) == []
        assert su.execute("SELECT priority FROM pgfence.jobs WHERE id = %s", (queued,)).fetchone() == (5,)
        assert su.execute("SELECT heartbeat_at IS NOT NULL FROM pgfence.jobs WHERE id = %s", (running,)).fetchone() == (
            True,)


def test_the_planted_functions_would_run_for_an_unqualified_call(attacked: tuple[str, str]) -> None:
    """The control: without the hardening, the same calls reach the look-alikes, as
    the superuser (what the sweeper of @v0.3.0 did: PERFORM pg_sleep(0.01))."""
    scratch, _ = attacked
    with connect(scratch) as su:
        su.execute("SELECT pg_sleep(0.01)")  # default path: public.pg_sleep(numeric) wins
        su.execute("SET search_path = public, pg_catalog")
        su.execute("SELECT clock_timestamp() + interval '1 second' < now()")
        su.execute("RESET search_path")
        # ... and the trim of @v0.3.0 (to_regclass found the table) ran the attacker's cron objects
        su.execute("DELETE FROM cron.job_run_details d WHERE d.jobid IN (SELECT j.jobid FROM cron.job j)")
        ran = {what for what, _, _, _ in pwned(su)}
        assert {"pg_sleep(numeric)", "clock_timestamp()", "now()",
                "operator +(timestamptz, interval)", "operator <(timestamptz, timestamptz)",
                "view cron.job", "trigger on cron.job_run_details"} <= ran
        assert {(who, superuser) for _, who, superuser, _ in pwned(su)} == {("postgres", True)}
