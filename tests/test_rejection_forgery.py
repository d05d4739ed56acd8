"""A rejection row proves something: only tokens that held an attempt of the job are
recorded, at most 100 per job.

Before the rework after @v0.3.0, ``report_rejection(any_id, gen_random_uuid(),
'complete')`` was accepted for a token never issued (about 2,400 forged rows a
second), one ``heartbeat_many`` with 10,000 random tokens wrote 10,000 rows, and
``pgfence show`` presented the forgeries as history. And completing job X with job
Y's token said "the lease was taken over by another attempt".
"""
from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from support.api import claim, claim_job, complete, enqueue, reclaim_expired
from support.db import assert_error, connect, expire_history, one, rows, sql_error
from support.workers import wait_for

Conn = psycopg.Connection[Any]


def stored(conn: Conn, job_id: int) -> int:
    return one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,))


def not_stored(conn: Conn, job_id: int) -> int:
    return one(conn, "SELECT coalesce(sum(not_stored), 0)::int FROM pgfence.rejection_overflow WHERE job_id = %s",
               (job_id,))


def stale_token(conn: Conn, queue: str) -> tuple[int, uuid.UUID, uuid.UUID]:
    """A job of queue whose first attempt's lease expired and was reclaimed (its token is
    stale, and held an attempt), claimed again: (job id, stale token, current token)."""
    job_id = enqueue(conn, queue)
    stale = claim_job(conn, queue, job_id, lease="1 millisecond")
    conn.execute("SELECT pg_sleep(0.005)")
    # (A reclaim of every expired lease first: the claim's own recovery takes the oldest
    # max_jobs expired leases, which may be other tests' leftovers rather than this job.)
    reclaim_expired(conn)
    # (The background sweeper may hold the row for an instant: a pass that found the
    # expired lease in its snapshot locks the row, sees that our reclaim came first, and
    # keeps the lock until its transaction ends, so the claim, SKIP LOCKED, skips the
    # job. It failed so in a full run: try again for up to 2 s.)
    [got] = wait_for(lambda: claim(conn, [queue], "worker-A", lease="1 hour", max_jobs=1), 2,
                     f"job {job_id} to be claimable again after its reclaim")
    assert got["id"] == job_id, f"claimed {got['id']}, expected {job_id}"
    return job_id, stale, got["attempt_token"]


def test_report_rejection_refuses_a_token_never_issued_and_records_nothing(conn: Conn, queue: str) -> None:
    job_id, _, _ = stale_token(conn, queue)
    for _ in range(20):
        err = sql_error(conn, "SELECT pgfence.report_rejection(%s, gen_random_uuid(), 'complete')", (job_id,))
        assert_error(err, "22023", "attempt_token")
    assert stored(conn, job_id) == 0 and not_stored(conn, job_id) == 0


def test_report_rejection_refuses_another_jobs_token(conn: Conn, queue: str) -> None:
    job_x, _, _ = stale_token(conn, queue)
    job_y, stale_y, current_y = stale_token(conn, queue)
    for token in (stale_y, current_y):
        err = sql_error(conn, "SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_x, token))
        assert_error(err, "22023", "attempt_token")
    assert stored(conn, job_x) == 0 and stored(conn, job_y) == 0


def test_batch_calls_record_no_refusal_of_a_token_never_issued(conn: Conn, queue: str) -> None:
    """200 live jobs, each called with a random token: every call refused, none recorded
    (the attack wrote one row per token)."""
    ids = [r[0] for r in conn.execute("SELECT id FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[200]),"
                                      " queue => %s)", (queue,))]
    conn.execute("SELECT count(*) FROM pgfence.claim('w', ARRAY[%s], '1 hour', 200)", (queue,))
    forged = [uuid.uuid4() for _ in ids]
    for call in ("heartbeat_many(%s, %s)", "complete_many(%s, %s)", "fail_many(%s, %s, array_fill('x'::text, ARRAY[200]))",
                 "release_many(%s, %s)"):
        got = conn.execute(f"SELECT accepted FROM pgfence.{call}", (ids, forged)).fetchall()
        assert got == [(False,)] * 200
    assert one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = ANY(%s)", (ids,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'processing'", (ids,)) == 200


def test_a_stale_token_of_the_job_is_still_recorded(conn: Conn, queue: str) -> None:
    job_id, stale, _ = stale_token(conn, queue)
    assert conn.execute("SELECT accepted FROM pgfence.complete_many(%s, %s)", ([job_id], [stale])).fetchall() == [
        (False,)]
    conn.execute("SELECT pgfence.report_rejection(%s, %s, 'heartbeat')", (job_id, stale))
    assert [r["operation"] for r in rows(conn, "SELECT operation FROM pgfence.rejections WHERE job_id = %s"
                                         " ORDER BY slot", (job_id,))] == ["complete", "heartbeat"]


def test_at_most_100_rejections_are_stored_per_job_and_the_rest_counted(conn: Conn, queue: str) -> None:
    job_id, stale, _ = stale_token(conn, queue)
    for i in range(130):
        if i % 2:
            conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
        else:
            conn.execute("SELECT count(*) FROM pgfence.heartbeat_many(%s, %s)", ([job_id], [stale]))
    assert stored(conn, job_id) == 100 and not_stored(conn, job_id) == 30
    assert one(conn, "SELECT array_agg(slot ORDER BY slot) = array(SELECT generate_series(1, 100))::smallint[]"
                     " FROM pgfence.rejections WHERE job_id = %s", (job_id,)) is True


def test_concurrent_refusals_never_store_more_than_100(dsn: str, conn: Conn, queue: str) -> None:
    job_id, stale, _ = stale_token(conn, queue)
    errors: list[BaseException] = []

    def refuse() -> None:
        try:
            with connect(dsn) as c:
                for _ in range(40):
                    c.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=refuse) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert stored(conn, job_id) == 100
    assert stored(conn, job_id) + not_stored(conn, job_id) == 240


def test_the_purge_deletes_a_jobs_count_of_rejections_not_stored(conn: Conn, queue: str) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (queue,))
    try:
        job_id, stale, current = stale_token(conn, queue)
        for _ in range(101):
            conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
        complete(conn, job_id, current)
        assert not_stored(conn, job_id) == 1
        expire_history(conn, [job_id])  # (its retention is over: its history partition goes)
        for _ in range(10):
            if not one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = %s", (job_id,)):
                break
            conn.execute("SELECT pgfence.purge_finished(10000)")
        conn.execute("SELECT pgfence.purge_finished(10000)")  # (a dropped job's rejections go on the next one)
        assert stored(conn, job_id) == 0 and not_stored(conn, job_id) == 0
    finally:
        conn.execute("DELETE FROM pgfence.retention WHERE queue = %s", (queue,))


@pytest.mark.parametrize("call", ["heartbeat", "complete", "fail", "release"])
def test_another_jobs_token_is_refused_with_a_detail_that_says_so(conn: Conn, queue: str, call: str) -> None:
    job_x = enqueue(conn, queue)
    claim_job(conn, queue, job_x, "node-B", lease="1 hour")
    job_y = enqueue(conn, queue)
    token_y = claim_job(conn, queue, job_y, "node-A", lease="1 hour")
    args = {"heartbeat": "", "complete": "", "fail": ", 'boom'", "release": ""}[call]
    err = sql_error(conn, f"SELECT pgfence.{call}(%s, %s{args})", (job_x, token_y))
    assert_error(err, "PF001", detail=True)
    assert "never held an attempt of this job" in (err.diag.message_detail or "")
    assert "taken over" not in (err.diag.message_detail or "")
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_x,)) == "processing"
    assert stored(conn, job_x) == 0



def purgeable(conn: Conn, queue: str) -> tuple[int, uuid.UUID]:
    """A done job of queue (retention 0) with a stale token, its history partition's
    range over (the next purge drops it): (job id, stale token)."""
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (queue,))
    job_id, stale, current = stale_token(conn, queue)
    complete(conn, job_id, current)
    assert expire_history(conn, [job_id]) == 1
    return job_id, stale


def exists(conn: Conn, job_id: int) -> bool:
    """The job is live or done (pgfence.all_jobs)."""
    return bool(one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = %s", (job_id,)))


@pytest.mark.parametrize("full", [False, True])
def test_a_refusal_left_uncommitted_does_not_hold_up_the_purge(dsn: str, conn: Conn, queue: str,
                                                               sweep_paused: Conn, full: bool) -> None:
    """A worker that leaves its transaction open after a refused call holds what that
    call wrote: the overflow row of a job with 100 stored rejections, which the purge
    once waited for (holding the sweeper's status row, so every sweeper run stalled for
    as long as the worker liked). Now the refusal holds its job FOR KEY SHARE and the
    purge, taking jobs SKIP LOCKED, passes over it; once the worker commits, the next
    purge deletes the job with all its rejections. (A done job is in the history: its
    partition's drop waits at most 100 ms for the refusal's lock on the table, gives up
    and is tried again by the next purge, which then deletes the job's rejections.)"""
    try:
        job_id, stale = purgeable(conn, queue)
        for _ in range(101 if full else 0):  # (101: the overflow row exists, and the refusal updates it)
            conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
        with connect(dsn, autocommit=False) as worker, connect(dsn) as sweeper:
            worker.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
            sweeper.execute("SET statement_timeout = '30s'")  # (a stall fails the test, it does not hang it)
            for _ in range(3):
                sweeper.execute("SELECT pgfence.purge_finished(10000)")
            assert exists(conn, job_id)  # passed over while the refusal is uncommitted
            worker.commit()
            sweeper.execute("SELECT pgfence.purge_finished(10000)")
            sweeper.execute("SELECT pgfence.purge_finished(10000)")  # (its rejections: the next purge)
        assert not exists(conn, job_id)
        assert stored(conn, job_id) == 0 and not_stored(conn, job_id) == 0
    finally:
        conn.execute("DELETE FROM pgfence.retention WHERE queue = %s", (queue,))


def test_a_refusal_recorded_as_its_job_is_purged_stores_nothing(dsn: str, conn: Conn, queue: str,
                                                                sweep_paused: Conn) -> None:
    """The purge deletes a job with the rejections it can see; a refusal inserted by a
    transaction that committed after it used to outlive its job, a row no purge would
    ever delete. The refusal now waits for the purge's lock on the job (for a done job:
    on its history, whose partition the purge drops) and, the job gone, stores nothing."""
    try:
        job_id, stale = purgeable(conn, queue)
        done = threading.Event()
        errors: list[BaseException] = []
        with connect(dsn, autocommit=False) as purger:
            one(purger, "SELECT pgfence.purge_finished(10000)")  # drops its history partition
            assert not exists(purger, job_id)

            def refuse() -> None:
                try:
                    with connect(dsn) as worker:
                        worker.execute("SET statement_timeout = '30s'")
                        try:
                            worker.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
                        except psycopg.Error as exc:  # PF002 or 22023 once the job and its history are gone
                            assert exc.sqlstate in ("PF002", "22023"), exc
                except BaseException as exc:  # reported below
                    errors.append(exc)
                finally:
                    done.set()

            t = threading.Thread(target=refuse)
            t.start()
            waited = not done.wait(1.0)  # it waits for the purge's lock on the job
            purger.commit()
            t.join(30)
        assert errors == []
        assert waited
        assert stored(conn, job_id) == 0 and not_stored(conn, job_id) == 0
    finally:
        conn.execute("DELETE FROM pgfence.retention WHERE queue = %s", (queue,))


def test_a_slot_freed_by_hand_is_used_again(conn: Conn, queue: str) -> None:
    """The next slot was "stored rows + 1": with a gap (a DBA deleted one row), that
    slot was always taken and the refusal looped forever."""
    job_id, stale, _ = stale_token(conn, queue)
    for _ in range(100):
        conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (job_id, stale))
    conn.execute("DELETE FROM pgfence.rejections WHERE job_id = %s AND slot IN (5, 60)", (job_id,))
    conn.execute("SET statement_timeout = '30s'")
    for _ in range(3):
        conn.execute("SELECT pgfence.report_rejection(%s, %s, 'heartbeat')", (job_id, stale))
    assert stored(conn, job_id) == 100 and not_stored(conn, job_id) == 1
    assert rows(conn, "SELECT slot FROM pgfence.rejections WHERE job_id = %s AND operation = 'heartbeat'"
                      " ORDER BY slot", (job_id,)) == [{"slot": 5}, {"slot": 60}]
