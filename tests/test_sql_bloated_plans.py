"""The fenced calls reach pgfence.jobs by primary key even when its statistics say it
is nearly empty and its files say it is large: what a backlog leaves behind.

Vacuum does not give pgfence.jobs' pages back (vacuum_truncate = false), and a btree
never shrinks. Once a vacuum or ANALYZE has counted a few live rows in such a table,
the planner prices each primary-key probe at the key's pages over those rows, and a
generic plan that joins a batch to the table chose to read it whole instead, on every
call (a 230 MB table, 2 live rows: 45 ms a complete, 150-220 ms a heartbeat, where
0.8-1.3 ms is the norm). Claim and the reclaim already ran with enable_seqscan off;
the fenced batches (heartbeat_many, complete_many, fail_many, release_many,
snooze_many) do too now, and with them their one-job forms; so do the private
functions that record a refusal (whoever calls them) and purge_finished (called
directly, outside the sweeper).

A database of its own (the bloat and the statistics would otherwise be every other
test's), with autovacuum off on pgfence.jobs so that the statistics stay as set. The
plans are read with auto_explain (every nested statement, as a NOTICE), not timed.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Callable

import psycopg
import pytest

from support.db import connect, scratch_database, sqitch_deploy

Conn = psycopg.Connection[Any]

# A long queue name makes the primary key (id, queue) wide, as a real deployment's names
# do: the ratio of its pages to the table's is what the planner's choice turns on.
BALLAST = "ballast-" + "x" * 90
FENCED = ("pgfence.heartbeat_many(bigint[], uuid[], interval)",
          "pgfence.complete_many(bigint[], uuid[], jsonb[])",
          "pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])",
          "pgfence.release_many(bigint[], uuid[], boolean)",
          "pgfence.snooze_many(bigint[], uuid[], interval[])")


@pytest.fixture(scope="module")
def bloated_dsn(dsn: str) -> Iterator[str]:
    """pgfence.jobs after a backlog of 150,000 jobs that were deleted: its pages and its
    index pages kept, 2 live rows counted by ANALYZE."""
    with scratch_database(dsn, "pgfence_bloated") as the_dsn:
        sqitch_deploy(the_dsn)
        with connect(the_dsn) as c:
            c.execute("ALTER TABLE pgfence.jobs SET (autovacuum_enabled = false)")
            c.execute("INSERT INTO pgfence.jobs (queue, kind) SELECT %s, 'k' FROM generate_series(1, 150000)",
                      (BALLAST,))
            c.execute("DELETE FROM pgfence.jobs")
            c.execute("VACUUM pgfence.jobs")
            c.execute("INSERT INTO pgfence.jobs (queue, kind, available_at)"
                      " SELECT %s, 'k', now() + interval '1 day' FROM generate_series(1, 2)", (BALLAST,))
            c.execute("ANALYZE pgfence.jobs")
            pages, tuples = c.execute("SELECT relpages, reltuples FROM pg_class"
                                      " WHERE oid = 'pgfence.jobs'::regclass").fetchone() or (0, 0)
            assert (pages > 3000, tuples) == (True, 2)
        yield the_dsn


@pytest.fixture
def db(bloated_dsn: str) -> Iterator[Conn]:
    c = connect(bloated_dsn)
    try:
        yield c
    finally:
        c.execute("DELETE FROM pgfence.jobs WHERE queue <> %s", (BALLAST,))
        c.close()


def plans_of(conn: Conn, call: Callable[[], Any]) -> list[str]:
    """Every statement's plan that `call` runs on conn (nested ones too), as auto_explain
    writes them."""
    notes: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        notes.append(d.message_primary or "")
    conn.add_notice_handler(keep)
    conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice", "client_min_messages = notice"):
        conn.execute(f"SET {setting}")
    try:
        call()
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.remove_notice_handler(keep)
    assert notes, "auto_explain wrote no plan"
    return notes


def reads_jobs_whole(plans: list[str]) -> list[str]:
    """The plans that scan pgfence.jobs sequentially (the first line of each)."""
    return [p.splitlines()[1] if len(p.splitlines()) > 1 else p for p in plans
            if re.search(r"Seq Scan on jobs\b", p)]


def claimed(conn: Conn, queue: str, n: int) -> tuple[list[int], list[Any]]:
    conn.execute("SELECT count(*) FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[%s]),"
                 " array_fill('{}'::jsonb, ARRAY[%s]), queue => %s)", (n, n, queue))
    rows = conn.execute("SELECT id, attempt_token FROM pgfence.claim(worker_id => 'w', queues => ARRAY[%s],"
                        " max_jobs => %s)", (queue, n)).fetchall()
    assert len(rows) == n
    return [r[0] for r in rows], [r[1] for r in rows]


CALLS: dict[str, Callable[[list[int], list[Any]], str]] = {
    "heartbeat_many": lambda i, t: f"SELECT count(*) FROM pgfence.heartbeat_many('{_a(i)}', '{_a(t)}')",
    "heartbeat": lambda i, t: f"SELECT pgfence.heartbeat({i[0]}, '{t[0]}')",
    "complete_many": lambda i, t: f"SELECT count(*) FROM pgfence.complete_many('{_a(i)}', '{_a(t)}')",
    "complete": lambda i, t: f"SELECT pgfence.complete({i[0]}, '{t[0]}')",
    "fail_many": lambda i, t: (f"SELECT count(*) FROM pgfence.fail_many('{_a(i)}', '{_a(t)}',"
                                  f" array_fill('boom'::text, ARRAY[{len(i)}]))"),
    "fail": lambda i, t: f"SELECT pgfence.fail({i[0]}, '{t[0]}', 'boom')",
    "release_many": lambda i, t: f"SELECT count(*) FROM pgfence.release_many('{_a(i)}', '{_a(t)}')",
    "release": lambda i, t: f"SELECT pgfence.release({i[0]}, '{t[0]}')",
    "snooze_many": lambda i, t: (f"SELECT count(*) FROM pgfence.snooze_many('{_a(i)}', '{_a(t)}',"
                                    f" array_fill(interval '1 hour', ARRAY[{len(i)}]))"),
    "snooze": lambda i, t: f"SELECT pgfence.snooze({i[0]}, '{t[0]}', interval '1 hour')",
}


def _a(values: list[Any]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_fenced_call_never_reads_the_bloated_table_whole(db: Conn, name: str) -> None:
    ids, tokens = claimed(db, f"bloated-{name}", 3)
    statement = CALLS[name](ids, tokens)
    plans = plans_of(db, lambda: db.execute(statement).fetchall())
    assert reads_jobs_whole(plans) == []
    # (the call did its work on its jobs: all of them for a batch, the first for one job)
    acted = ids if name.endswith("_many") else ids[:1]
    states = db.execute("SELECT status, heartbeat_at IS NOT NULL FROM pgfence.all_jobs WHERE id = ANY (%s)",
                        (acted,)).fetchall()
    want = {"heartbeat": ("processing", True), "complete": ("done", False)}.get(name.removesuffix("_many"),
                                                                               ("queued", False))
    assert states == [want] * len(acted)


def test_without_the_setting_the_same_statistics_make_a_fenced_batch_read_the_table_whole(db: Conn) -> None:
    """The negative control: the scan above can see what it looks for. In a transaction
    rolled back, complete_many loses its settings and reads the table whole."""
    ids, tokens = claimed(db, "bloated-control", 3)
    with db.transaction(force_rollback=True):
        db.execute("ALTER FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[]) RESET enable_seqscan")
        plans = plans_of(db, lambda: db.execute("SELECT count(*) FROM pgfence.complete_many(%s, %s)",
                                                (ids, tokens)).fetchall())
    assert reads_jobs_whole(plans) != []


def test_every_fenced_batch_turns_sequential_scans_and_jit_off(db: Conn) -> None:
    for sig in FENCED:
        config = db.execute("SELECT proconfig FROM pg_proc WHERE oid = %s::regprocedure", (sig,)).fetchone()
        assert config is not None and {"enable_seqscan=off", "jit=off"} <= set(config[0] or ()), sig


RECORDERS = ("pgfence._record_rejection(bigint, uuid, text, text)",
             "pgfence._record_rejections(bigint[], uuid[], boolean[], text)")


def refused_job(db: Conn, queue: str) -> tuple[int, Any]:
    """A job claimed again after its first attempt failed, and that first attempt's token
    (stale now: a refusal of it is recorded)."""
    ids, tokens = claimed(db, queue, 1)
    db.execute("SELECT count(*) FROM pgfence.fail_many(%s, %s, ARRAY['again'])", (ids, tokens))
    db.execute("UPDATE pgfence.jobs SET available_at = now() WHERE id = %s", (ids[0],))
    again = db.execute("SELECT attempt_token FROM pgfence.claim(worker_id => 'w', queues => ARRAY[%s],"
                       " max_jobs => 1)", (queue,)).fetchall()
    assert len(again) == 1
    return ids[0], tokens[0]


def record_plans_after_a_plain_caller(db: Conn, job_id: int, stale: Any) -> list[str]:
    """_record_rejection called eight times from a statement without settings of its own
    (its generic plan is made from the sixth call on, and kept for the session), then the
    plans of a ninth call."""
    for _ in range(8):
        db.execute("SELECT pgfence._record_rejection(%s, %s, 'complete', 'test')", (job_id, stale))
    return plans_of(db, lambda: db.execute("SELECT pgfence._record_rejection(%s, %s, 'complete', 'test')",
                                           (job_id, stale)).fetchall())


def test_a_refused_batch_after_many_reported_refusals_never_reads_the_table_whole(db: Conn) -> None:
    """The clients report every refused one-job call (report_rejection), which records it
    through the same private function as the batches' refusals do. PL/pgSQL keeps a
    function's plans for the session: a generic plan of that function made while
    report_rejection ran (from its sixth call on) was the one every later refused batch
    on the connection used, so report_rejection plans as the batches do."""
    job_id, stale = refused_job(db, "bloated-refused")
    ids = [job_id]
    for _ in range(8):
        db.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (ids[0], stale))
    plans = plans_of(db, lambda: db.execute("SELECT accepted FROM pgfence.complete_many(%s, %s)",
                                            (ids, [stale])).fetchall())
    assert reads_jobs_whole(plans) == []
    assert db.execute("SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (ids[0],)).fetchone() == (9,)
    plans = plans_of(db, lambda: db.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')",
                                            (ids[0], stale)).fetchall())
    assert reads_jobs_whole(plans) == []


def test_recording_a_refusal_never_reads_the_table_whole_whoever_calls_it(db: Conn) -> None:
    """The private functions that record refusals carry the settings themselves: a plan
    made while a caller without them ran (none does today; a future one might) is what
    every later refusal of the session would use."""
    for sig in RECORDERS:
        config = db.execute("SELECT proconfig FROM pg_proc WHERE oid = %s::regprocedure", (sig,)).fetchone()
        assert config is not None and {"enable_seqscan=off", "jit=off"} <= set(config[0] or ()), sig
    job_id, stale = refused_job(db, "bloated-recorder")
    assert reads_jobs_whole(record_plans_after_a_plain_caller(db, job_id, stale)) == []
    assert db.execute("SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,)).fetchone() == (9,)


def test_without_its_settings_recording_a_refusal_reads_the_table_whole(db: Conn) -> None:
    """The negative control of the test above, in a transaction rolled back."""
    job_id, stale = refused_job(db, "bloated-recorder-control")
    with db.transaction(force_rollback=True):
        db.execute(f"ALTER FUNCTION {RECORDERS[0]} RESET ALL")
        assert reads_jobs_whole(record_plans_after_a_plain_caller(db, job_id, stale)) != []


def expired_failures(db: Conn, queue: str, n: int) -> list[int]:
    """n jobs failed for good and past their retention (failed 7 days by default)."""
    ids, tokens = claimed(db, queue, n)
    db.execute("SELECT count(*) FROM pgfence.fail_many(%s, %s, array_fill('boom'::text, ARRAY[%s]),"
               " permanents => array_fill(true, ARRAY[%s]))", (ids, tokens, n, n))
    db.execute("UPDATE pgfence.jobs SET created_at = created_at - interval '30 days',"
               " finished_at = finished_at - interval '30 days' WHERE id = ANY (%s)", (ids,))
    return ids


def purge_plans(db: Conn) -> list[str]:
    """purge_finished called directly eight times (a plan kept for the session from the
    sixth), then the plans of a ninth call."""
    for _ in range(8):
        db.execute("SELECT pgfence.purge_finished(1)")
    return plans_of(db, lambda: db.execute("SELECT pgfence.purge_finished(1)").fetchall())


def test_a_direct_purge_never_reads_the_bloated_table_whole(db: Conn) -> None:
    """A DBA's own cron line calls purge_finished outside the sweeper (whose step turns
    sequential scans off for everything it runs)."""
    ids = expired_failures(db, "bloated-purge", 12)
    assert reads_jobs_whole(purge_plans(db)) == []
    # (each call purged one: nine of the twelve are gone)
    assert db.execute("SELECT count(*) FROM pgfence.jobs WHERE id = ANY (%s)", (ids,)).fetchone() == (3,)


def test_without_its_settings_a_direct_purge_reads_the_table_whole(db: Conn) -> None:
    """The negative control of the test above, in a transaction rolled back."""
    expired_failures(db, "bloated-purge-control", 12)
    with db.transaction(force_rollback=True):
        db.execute("ALTER FUNCTION pgfence.purge_finished(integer) RESET enable_seqscan")
        assert reads_jobs_whole(purge_plans(db)) != []


@pytest.mark.parametrize("read", ["job", "attempts_of", "rejections_of", "rejections_not_stored"])
def test_reading_one_job_never_reads_the_bloated_table_whole(db: Conn, read: str) -> None:
    """What `pgfence show` and the dashboard's job page call: job() read the table whole
    twice per call in this state."""
    ids, tokens = claimed(db, f"bloated-read-{read}", 1)
    statement = f"SELECT * FROM pgfence.{read}({ids[0]})"
    plans = plans_of(db, lambda: db.execute(statement).fetchall())
    assert reads_jobs_whole(plans) == []
    if read == "job":
        assert db.execute(statement).fetchall()[0][:2] == (ids[0], "bloated-read-job")
