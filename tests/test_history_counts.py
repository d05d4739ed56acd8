"""The history's counts (functions/history_counts): metrics() and stats() read per-partition
counts the purge keeps up to a watermark, and count only the rows past it. Whatever the
order of completions, purges, truncations and rewrites, the counts read must equal a count
of the whole history in the same snapshot; and the watermark must never pass a completion
whose transaction has not ended, whether it is idle after its statement or still waiting
inside it for a lock before its first write."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any, Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.api import claim_job, complete, enqueue, fail, release
from support.db import (connection, narrow_history, one, queues_removed_after, rows, scratch_database, sqitch,
                        sqitch_target)

Conn = psycopg.Connection[Any]

# The history of some queues (None: all) counted the plain way, against what
# _history_stored() says, in one statement (one snapshot): the rows that differ. (Tests
# sharing the database delete their queues' history by hand when they end, which the
# counts do not follow: support.db.delete_queues forgets those queues' counts too.)
DIFF = """
    WITH brute AS (
        SELECT 'jobs_done' AS metric, h.queue, '' AS label, count(*)::bigint AS n
          FROM pgfence.finished_jobs h GROUP BY h.queue
        UNION ALL
        SELECT 'attempts_ended', h.queue, e.a->>'outcome', count(*)
          FROM pgfence.finished_jobs h CROSS JOIN LATERAL jsonb_array_elements(h.earlier_attempts) e(a)
         WHERE h.earlier_attempts IS NOT NULL GROUP BY 1, 2, 3)
    SELECT coalesce(b.metric, s.metric) AS metric, coalesce(b.queue, s.queue) AS queue,
           coalesce(b.label, s.label) AS label, b.n AS counted_plainly, s.n AS stored
      FROM brute b FULL JOIN pgfence._history_stored() s USING (metric, queue, label)
     WHERE b.n IS DISTINCT FROM s.n AND (%(q)s::text[] IS NULL OR coalesce(b.queue, s.queue) = ANY(%(q)s))"""


def diff(conn: Conn, *queues: str) -> list[dict[str, Any]]:
    return rows(conn, DIFF, {"q": list(queues) or None})


def passed(conn: Conn, t: Any) -> bool:
    """Whether the watermark is past t."""
    return bool(one(conn, "SELECT counted_to > %s FROM pgfence.history_count_state", (t,)))


def count_steps(conn: Conn, n: int = 3) -> None:
    """n steps of the counts, each as a purge takes it (as pgfence_owner: purge_finished
    is SECURITY DEFINER)."""
    for _ in range(n):
        conn.execute("SET ROLE pgfence_owner")
        try:
            conn.execute("SELECT pgfence._count_history()")
        finally:
            conn.execute("RESET ROLE")


def watermark_epoch(conn: Conn) -> float:
    return float(one(conn, "SELECT extract(epoch FROM counted_to) FROM pgfence.history_count_state"))


def wait_passed(conn: Conn, t: Any) -> None:
    """Steps of the counts until the watermark is past t (other sessions of the test
    database may hold it back a while)."""
    deadline = time.monotonic() + 30
    while True:
        count_steps(conn)
        if passed(conn, t):
            return
        assert time.monotonic() < deadline, "the watermark never passed " + str(t)
        time.sleep(0.2)


def done_job(conn: Conn, queue: str, released: int = 0, failed: int = 0) -> int:
    """A done job with `released` released and `failed` failed attempts before its last."""
    jid = enqueue(conn, queue, max_attempts=released + failed + 1)  # (a release counts as an attempt)
    for _ in range(released):
        release(conn, jid, claim_job(conn, queue, jid, lease="1 hour"))
    for _ in range(failed):
        fail(conn, jid, claim_job(conn, queue, jid, lease="1 hour"), "boom", retry_in="0 seconds")
    complete(conn, jid, claim_job(conn, queue, jid, lease="1 hour"))
    return jid


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    with queues_removed_after(conn, queue):
        yield queue


def test_the_watermark_moves_and_the_counts_hold_the_rows_behind_it(conn: Conn, q: str) -> None:
    jobs = [done_job(conn, q, released=i % 2, failed=i % 3 // 2) for i in range(6)]
    finished = one(conn, "SELECT max(finished_at) FROM pgfence.finished_jobs WHERE id = ANY(%s)", (jobs,))
    assert diff(conn, q) == []
    wait_passed(conn, finished)
    held = rows(conn, "SELECT metric, label, sum(n)::int AS n FROM pgfence.history_counts WHERE queue = %s"
                      " GROUP BY 1, 2 ORDER BY 1, 2", (q,))
    assert held == [{"metric": "attempts_ended", "label": "failed", "n": 2},
                    {"metric": "attempts_ended", "label": "released", "n": 3},
                    {"metric": "jobs_done", "label": "", "n": 6}]
    assert diff(conn, q) == []
    assert one(conn, "SELECT jobs FROM pgfence.stats() WHERE queue = %s AND status = 'done'", (q,)) == 6
    got = {(r["name"], r["labels"].get("outcome")): r["value"]
           for r in rows(conn, "SELECT * FROM pgfence.metrics() WHERE labels->>'queue' = %s", (q,))}
    assert got[("pgfence_jobs_done_total", None)] == 6
    assert got[("pgfence_attempts_ended_total", "done")] == 6
    assert got[("pgfence_attempts_ended_total", "released")] == 3
    assert got[("pgfence_attempts_ended_total", "failed")] == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.tuples(st.just("done"), st.integers(0, 2), st.integers(0, 1), st.integers(0, 1)),
                          st.tuples(st.just("step"), st.integers(1, 3)),
                          st.tuples(st.just("rewrite"))), min_size=1, max_size=8))
def test_the_counts_read_equal_the_history_counted_whole_after_any_steps(
        conn: Conn, q: str, steps: list[tuple[Any, ...]]) -> None:
    """Completions (in two queues, with earlier attempts), steps of the counts and rewrites
    of the partition holding the queue's jobs (VACUUM FULL: a new relfilenode, counted
    again), in any order: after each, the counts read equal the whole history counted."""
    with queues_removed_after(conn, q + "_b"):
        for s in steps:
            if s[0] == "done":
                for _ in range(s[1]):
                    done_job(conn, q + ("" if s[3] == 0 else "_b"), released=s[2])
            elif s[0] == "step":
                count_steps(conn, s[1])
            else:
                for (part,) in conn.execute("SELECT DISTINCT tableoid::regclass::text FROM pgfence.finished_jobs"
                                            " WHERE queue = %s", (q,)).fetchall():
                    conn.execute(f"VACUUM FULL {part}")
            assert diff(conn, q, q + "_b") == [], s


def test_an_open_transaction_that_completed_holds_the_watermark_back(dsn: str, conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    token = claim_job(conn, q, jid, lease="1 hour")
    with psycopg.connect(dsn) as tx:  # a worker completing inside its own transaction
        tx.execute("SELECT pgfence.complete(%s, %s)", (jid, token))
        finished = one(tx, "SELECT finished_at FROM pgfence.finished_jobs WHERE id = %s", (jid,))
        # (a statement reading no table: the session then holds no snapshot, only its
        # transaction id, so that only the gate of the watermark's second step holds it)
        tx.execute("SELECT 1")
        assert one(conn, "SELECT backend_xmin IS NULL AND backend_xid IS NOT NULL FROM pg_stat_activity"
                         " WHERE pid = %s", (tx.info.backend_pid,))
        for _ in range(4):
            count_steps(conn, 2)
            assert not passed(conn, finished)
            time.sleep(0.05)
        assert diff(conn, q) == []
        tx.commit()
    assert diff(conn, q) == []
    wait_passed(conn, finished)
    assert diff(conn, q) == []
    assert one(conn, "SELECT sum(n) FROM pgfence.history_counts WHERE queue = %s AND metric = 'jobs_done'", (q,)) == 1


def test_a_completion_waiting_for_a_lock_before_its_first_write_holds_the_watermark_back(
        dsn: str, conn: Conn, q: str) -> None:
    """complete takes its finished_at when the call begins; here it then waits for a lock
    on the history (a DDL) before it writes anything, ends its statement while the counts
    take steps, and commits later still. The watermark must not have passed it before the
    commit, and the job must be counted once it commits."""
    jid = enqueue(conn, q)
    token = claim_job(conn, q, jid, lease="1 hour")
    tx = psycopg.connect(dsn)
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            tx.execute("SELECT pgfence.complete(%s, %s)", (jid, token))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        done.set()
    try:
        with psycopg.connect(dsn) as ddl:
            ddl.execute("LOCK TABLE pgfence.finished_jobs IN SHARE MODE")  # completions wait; reads do not
            began = one(conn, "SELECT clock_timestamp()")
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            deadline = time.monotonic() + 10
            while one(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                      (tx.info.backend_pid,)) == 0:
                assert time.monotonic() < deadline and not done.is_set(), errors
                time.sleep(0.02)
            for _ in range(3):
                count_steps(conn, 2)
                time.sleep(0.05)
            ddl.rollback()
        assert done.wait(10) and not errors, errors
        # the statement has ended, its transaction has not: steps go on meanwhile
        for _ in range(3):
            count_steps(conn, 2)
            time.sleep(0.05)
        assert diff(conn, q) == []
        before_commit = watermark_epoch(conn)
        tx.commit()
    finally:
        tx.close()
    assert diff(conn, q) == []
    finished = one(conn, "SELECT finished_at FROM pgfence.finished_jobs WHERE id = %s", (jid,))
    assert finished < began + datetime.timedelta(seconds=1)  # (taken before the wait)
    assert before_commit <= finished.timestamp()
    wait_passed(conn, finished)
    assert diff(conn, q) == []
    assert one(conn, "SELECT sum(n) FROM pgfence.history_counts WHERE queue = %s AND metric = 'jobs_done'", (q,)) == 1


def test_truncated_dropped_and_new_partitions(dsn: str) -> None:
    """In a database of its own (it truncates and ends partitions): a truncated partition
    is counted again from nothing, a dropped one is forgotten, the default partition's rows
    are counted as they are, and the metrics' counters stay as they were throughout."""
    with scratch_database(dsn, "pgfence_hcounts") as scratch:
        r = sqitch("deploy", target=sqitch_target(scratch), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        with connection(scratch) as c:
            c.execute("SELECT pgfence.pause_sweeper()")
            c.execute("SELECT pgfence.set_retention(NULL, '0 seconds', '0 seconds')")
            narrow_history(c)
            jobs = [done_job(c, "hc", released=1) for _ in range(3)]
            wait_passed(c, one(c, "SELECT max(finished_at) FROM pgfence.finished_jobs"))
            assert one(c, "SELECT sum(n) FROM pgfence.history_counts WHERE metric = 'jobs_done'") == 3

            def total() -> float:
                return one(c, "SELECT sum(value) FROM pgfence.metrics() WHERE name = 'pgfence_jobs_done_total'")
            assert total() == 3 and diff(c) == []
            # TRUNCATE by hand (the maintenance's own truncate adds to metric_totals first),
            # committed while a step waits for the partition: the step counts it again
            [part] = [p for (p,) in c.execute("SELECT DISTINCT tableoid::regclass::text FROM pgfence.finished_jobs")]
            count_steps(c, 1)  # (a candidate the next step takes: it reads the partitions counted)
            with psycopg.connect(scratch) as truncating:
                truncating.execute(f"TRUNCATE {part}")
                failed: list[BaseException] = []

                def step() -> None:
                    with connection(scratch) as s:
                        try:
                            count_steps(s, 1)
                        except BaseException as e:  # noqa: BLE001 - reported by the test
                            failed.append(e)
                stepping = threading.Thread(target=step, daemon=True)
                stepping.start()
                deadline = time.monotonic() + 10
                while one(c, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                             " AND query LIKE '%_count_history()%'") == 0:
                    assert time.monotonic() < deadline and stepping.is_alive(), failed
                    time.sleep(0.02)
                truncating.commit()
            stepping.join(10)
            assert not stepping.is_alive() and failed == []
            assert diff(c) == []  # the old counts stop counting at once (another relfilenode)
            count_steps(c, 1)
            assert diff(c) == [] and one(c, "SELECT count(*) FROM pgfence.history_counts") == 0
            # the default partition: a job there before the watermark, counted as it is
            jid = done_job(c, "hc")
            c.execute("""WITH m AS (DELETE FROM pgfence.finished_jobs WHERE id = %s RETURNING *)
                         INSERT INTO pgfence.finished_jobs_default
                         SELECT (jsonb_populate_record(NULL::pgfence.finished_jobs,
                                 to_jsonb(m) || jsonb_build_object('purge_at', now() + interval '10 years'))).*
                           FROM m""", (jid,))
            wait_passed(c, one(c, "SELECT finished_at FROM pgfence.finished_jobs WHERE id = %s", (jid,)))
            assert diff(c) == [] and total() == 1
            # partitions made later, then dropped: counted while there, forgotten after
            jobs = [done_job(c, "hc2") for _ in range(2)]
            count_steps(c, 4)
            before = total()
            c.execute("SELECT pg_sleep(10.2 - extract(epoch FROM clock_timestamp())::numeric % 10)")
            for _ in range(5):
                c.execute("SELECT count(*) FROM pgfence.maintain_history()")
                if one(c, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = ANY(%s)", (jobs,)) == 0:
                    break
            assert one(c, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = ANY(%s)", (jobs,)) == 0
            assert total() == before and diff(c) == []
            count_steps(c, 1)
            assert one(c, "SELECT count(*) FROM pgfence.history_count_marks m WHERE NOT EXISTS"
                          " (SELECT FROM pg_class r WHERE r.oid = m.part)") == 0
            assert total() == before and diff(c) == []


@pytest.mark.parametrize("datestyle,timezone", [("SQL, DMY", "Asia/Kolkata"), ("German", "America/St_Johns"),
                                                ("Postgres, MDY", "Pacific/Chatham")])
def test_the_partitions_bounds_read_the_same_whatever_the_sessions_datestyle_and_timezone(
        conn: Conn, datestyle: str, timezone: str) -> None:
    """_history_parts reads each partition's range back from its bound's text: in the
    session's DateStyle and TimeZone that text can name an abbreviation that reads back
    as another zone (IST is Israel's by default)."""
    conn.execute(f"SET datestyle = '{datestyle}'")
    conn.execute(f"SET timezone = '{timezone}'")
    made = one(conn, "SELECT count(*) FROM pgfence.history_partitions")
    assert made > 0
    assert one(conn, "SELECT count(*) FROM pgfence._history_parts() p"
                     " JOIN pgfence.history_partitions h ON h.lower_bound = p.lower_bound") == made


def test_a_gate_copied_from_another_cluster_is_made_again(conn: Conn, q: str) -> None:
    """A candidate whose gate no transaction of this cluster has had (history_count_state
    restored from another cluster, its transaction ids ahead) would never pass: it is
    dropped and made again, and the watermark moves on."""
    conn.execute("UPDATE pgfence.history_count_state SET cand_t = clock_timestamp(),"
                 " cand_gate = (pg_current_xact_id()::text::bigint + 100000000)::text::xid8")
    jid = done_job(conn, q)
    wait_passed(conn, one(conn, "SELECT finished_at FROM pgfence.finished_jobs WHERE id = %s", (jid,)))
    assert diff(conn, q) == []


def test_no_candidate_while_a_statement_begun_before_the_deployment_may_run(dsn: str, conn: Conn, q: str) -> None:
    """Right after the deployment, completions already running run the complete_many from
    before (the clock read before their transaction id): while a session holds a snapshot
    from before the deployment committed, no candidate is made."""
    with psycopg.connect(dsn) as old:
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT count(*) FROM pgfence.history_count_state")  # (its snapshot, held)
        # as if the change had been deployed now, after that snapshot was taken
        conn.execute("UPDATE pgfence.history_count_state"
                     " SET deploy_xid = pg_current_xact_id(), cand_t = NULL, cand_gate = NULL")
        jid = done_job(conn, q)
        finished = one(conn, "SELECT finished_at FROM pgfence.finished_jobs WHERE id = %s", (jid,))
        for _ in range(3):
            count_steps(conn, 2)
            time.sleep(0.05)
        assert one(conn, "SELECT cand_t IS NULL AND deploy_xid IS NOT NULL FROM pgfence.history_count_state")
        assert not passed(conn, finished)
        assert diff(conn, q) == []
        old.rollback()
    wait_passed(conn, finished)
    assert one(conn, "SELECT deploy_xid IS NULL FROM pgfence.history_count_state")
    assert diff(conn, q) == []
