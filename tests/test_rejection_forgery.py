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

from helpers import connect
from sqlhelpers import assert_error, claim_job, complete, enqueue, one, rows, sql_error

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
    return job_id, stale, claim_job(conn, queue, job_id, lease="1 hour")  # (claim reclaims first)


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
        for _ in range(10):
            if not one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = %s", (job_id,)):
                break
            conn.execute("SELECT pgfence.purge_finished(10000)")
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

