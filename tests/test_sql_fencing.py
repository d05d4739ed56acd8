"""The fence: only the current attempt token may change a processing job.

A worker whose lease was reclaimed (and maybe re-claimed by another worker) or
whose job was cancelled gets PF001 with a DETAIL and changes nothing; batch calls
refuse just the stale rows; a complete held open in a transaction wins over a
concurrent reclaim (SKIP LOCKED), and a reclaim held open fences a late complete.
"""
from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from support.api import (claim, claim_job, claim_short, enqueue, lease_expired_under_lock, make_stale,
                         reclaim_expired, reclaimed_ids, start_blocked)
from support.db import LEASE_EXPIRED, assert_error, job, one, rows, sql_error


Conn = psycopg.Connection[Any]

FENCED_CALLS = {
    "heartbeat": "SELECT pgfence.heartbeat(job_id => %(id)s, attempt_token => %(token)s, lease => '1 hour')",
    "complete": "SELECT pgfence.complete(job_id => %(id)s, attempt_token => %(token)s, result => '{\"stale\": true}')",
    "fail": "SELECT pgfence.fail(job_id => %(id)s, attempt_token => %(token)s, error => 'stale failure')",
    "fail_permanent": "SELECT pgfence.fail(job_id => %(id)s, attempt_token => %(token)s, error => 'stale', permanent => true)",
    "release": "SELECT pgfence.release(job_id => %(id)s, attempt_token => %(token)s)",
    "snooze": "SELECT pgfence.snooze(job_id => %(id)s, attempt_token => %(token)s, delay => '1 minute')",
}


# ---------------------------------------------------------- stale workers --
@pytest.mark.parametrize("call", sorted(FENCED_CALLS))
def test_stale_worker_is_refused_after_takeover(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str, call: str,
) -> None:
    job_id, stale, current = make_stale(conn, tx_conn, queue)
    before = job(conn, job_id)
    assert (before["status"], before["reserved_by"], before["attempt_token"]) == ("processing", "worker-B", current)
    err = sql_error(conn, FENCED_CALLS[call], {"id": job_id, "token": stale})
    assert_error(err, "PF001", str(job_id), detail=True)
    assert "worker-B" in (err.diag.message_detail or "")
    assert job(conn, job_id) == before
    # the current holder is unaffected
    assert one(conn, FENCED_CALLS["heartbeat"], {"id": job_id, "token": current}) is not None


@pytest.mark.parametrize("call", sorted(FENCED_CALLS))
def test_stale_worker_is_refused_after_reclaim_into_queue(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str, call: str,
) -> None:
    job_id, stale = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        assert reclaimed_ids(reclaim_expired(tx_conn))[job_id]["status"] == "queued"
    before = job(conn, job_id)
    err = sql_error(conn, FENCED_CALLS[call], {"id": job_id, "token": stale})
    assert_error(err, "PF001", str(job_id), detail=True)
    assert "reclaimed" in (err.diag.message_detail or "")
    assert job(conn, job_id) == before


@pytest.mark.parametrize("call", sorted(FENCED_CALLS))
def test_stale_worker_is_refused_after_another_attempt_completed(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str, call: str,
) -> None:
    job_id, stale, current = make_stale(conn, tx_conn, queue)
    conn.execute("SELECT pgfence.complete(%s, %s, '{\"by\": \"B\"}')", (job_id, current))
    before = job(conn, job_id)
    err = sql_error(conn, FENCED_CALLS[call], {"id": job_id, "token": stale})
    assert_error(err, "PF001", str(job_id), detail=True)
    assert job(conn, job_id) == before
    assert before["result"] == {"by": "B"}


@pytest.mark.parametrize("call", sorted(FENCED_CALLS))
def test_wrong_token_is_refused(conn: Conn, queue: str, call: str) -> None:
    job_id = enqueue(conn, queue)
    claim_job(conn, queue, job_id, lease="1 hour")
    before = job(conn, job_id)
    err = sql_error(conn, FENCED_CALLS[call], {"id": job_id, "token": uuid.uuid4()})
    assert_error(err, "PF001", str(job_id), detail=True)
    assert job(conn, job_id) == before


@pytest.mark.parametrize("call", ["heartbeat", "complete", "fail", "fail_permanent", "release", "snooze"])
def test_cancel_fences_the_running_worker(conn: Conn, conn2: Conn, queue: str, call: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    conn2.execute("SELECT pgfence.cancel(%s)", (job_id,))  # the operator
    before = job(conn, job_id)
    assert before["status"] == "cancelled"
    err = sql_error(conn, FENCED_CALLS[call], {"id": job_id, "token": token})
    assert_error(err, "PF001", str(job_id), detail=True)
    assert "cancelled" in (err.diag.message_detail or "")
    assert job(conn, job_id) == before


# ------------------------------------------------------------------ batches --
def _three_jobs_middle_stale(conn: Conn, tx: Conn, queue: str) -> tuple[list[int], list[uuid.UUID]]:
    """Three processing jobs held by worker-A; A's token for the middle one is stale
    (its lease was reclaimed and worker-B holds it now). Needs sweep_paused."""
    j1 = enqueue(conn, queue, "first")
    j2 = enqueue(conn, queue, "middle", priority=10)
    j3 = enqueue(conn, queue, "last")
    t2 = claim_job(conn, queue, j2, "worker-A", lease="300 milliseconds")
    got = claim(conn, [queue], "worker-A", lease="1 hour", max_jobs=2)
    assert [g["id"] for g in got] == [j1, j3]
    t1, t3 = got[0]["attempt_token"], got[1]["attempt_token"]
    with lease_expired_under_lock(tx, j2):
        assert reclaimed_ids(reclaim_expired(tx))[j2]["status"] == "queued"
        assert claim_job(tx, queue, j2, "worker-B", lease="1 hour") != t2
    return [j1, j2, j3], [t1, t2, t3]


def test_complete_many_refuses_only_the_stale_row(sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str) -> None:
    ids, tokens = _three_jobs_middle_stale(conn, tx_conn, queue)
    before = job(conn, ids[1])
    res = rows(conn, "SELECT * FROM pgfence.complete_many(job_ids => %s, attempt_tokens => %s, results => %s)",
               (ids, tokens, [Jsonb({"n": 1}), Jsonb({"n": 2}), Jsonb({"n": 3})]))
    assert [(r["id"], r["accepted"], r["status"]) for r in res] == [
        (ids[0], True, "done"), (ids[1], False, "processing"), (ids[2], True, "done")]
    assert res[0]["detail"] is None and res[2]["detail"] is None
    assert res[1]["detail"] and "worker-B" in res[1]["detail"]
    assert job(conn, ids[1]) == before
    assert (job(conn, ids[0])["result"], job(conn, ids[2])["result"]) == ({"n": 1}, {"n": 3})
    assert job(conn, ids[0])["status"] == job(conn, ids[2])["status"] == "done"


def test_heartbeat_many_refuses_only_the_stale_row(sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str) -> None:
    ids, tokens = _three_jobs_middle_stale(conn, tx_conn, queue)
    before = job(conn, ids[1])
    res = rows(conn, "SELECT * FROM pgfence.heartbeat_many(job_ids => %s, attempt_tokens => %s, lease => '2 hours')",
               (ids, tokens))
    assert [(r["id"], r["accepted"], r["status"]) for r in res] == [
        (ids[0], True, "processing"), (ids[1], False, "processing"), (ids[2], True, "processing")]
    assert res[1]["lease_expires_at"] is None and res[1]["detail"] and "worker-B" in res[1]["detail"]
    for i in (0, 2):
        r = job(conn, ids[i])
        assert res[i]["detail"] is None
        assert res[i]["lease_expires_at"] == r["lease_expires_at"] == r["heartbeat_at"] + dt.timedelta(hours=2)
    assert job(conn, ids[1]) == before


def test_fail_many_refuses_only_the_stale_row(sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str) -> None:
    ids, tokens = _three_jobs_middle_stale(conn, tx_conn, queue)
    before = job(conn, ids[1])
    res = rows(conn, "SELECT * FROM pgfence.fail_many(job_ids => %s, attempt_tokens => %s, errors => %s,"
                     " permanents => %s)",
               (ids, tokens, ["e1", "e2", "e3"], [False, False, True]))
    assert [(r["id"], r["accepted"], r["status"]) for r in res] == [
        (ids[0], True, "queued"), (ids[1], False, "processing"), (ids[2], True, "failed")]
    assert res[1]["detail"] and res[0]["detail"] is None and res[2]["detail"] is None
    assert job(conn, ids[1]) == before
    assert (job(conn, ids[0])["last_error"], job(conn, ids[2])["last_error"]) == ("e1", "e3")


def test_release_many_refuses_only_the_stale_row(sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str) -> None:
    ids, tokens = _three_jobs_middle_stale(conn, tx_conn, queue)
    before = job(conn, ids[1])
    res = rows(conn, "SELECT * FROM pgfence.release_many(job_ids => %s, attempt_tokens => %s)", (ids, tokens))
    assert [(r["id"], r["accepted"], r["status"]) for r in res] == [
        (ids[0], True, "queued"), (ids[1], False, "processing"), (ids[2], True, "queued")]
    assert res[1]["detail"] and res[0]["detail"] is None and res[2]["detail"] is None
    assert job(conn, ids[1]) == before


def test_batch_results_follow_input_order(conn: Conn, queue: str) -> None:
    a, b, c = (enqueue(conn, queue, k) for k in ("a", "b", "c"))
    got = {r["id"]: r["attempt_token"] for r in claim(conn, [queue], lease="1 hour", max_jobs=3)}
    order = [c, a, b]
    res = conn.execute("SELECT id, accepted FROM pgfence.complete_many(%s, %s)",
                       (order, [got[i] for i in order])).fetchall()
    assert res == [(c, True), (a, True), (b, True)]


# -------------------------------------------------------------------- races --
def test_complete_held_open_wins_over_concurrent_reclaim(
    sweep_paused: Conn, conn: Conn, conn2: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, token = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        # The worker's complete runs after expiry; its transaction stays open.
        tx_conn.execute("SELECT pgfence.complete(%s, %s, '{\"ok\": 1}')", (job_id, token))
        # Meanwhile the sweep: it must neither wait for the worker nor take the job.
        conn2.execute("SET statement_timeout = '5s'")
        assert job_id not in reclaimed_ids(reclaim_expired(conn2))
        # ... nor does a claim (on-claim recovery uses the same SKIP LOCKED batch).
        assert claim(conn2, [queue], "worker-B", max_jobs=5) == []
        assert job(conn2, job_id)["status"] == "processing"  # the complete is not committed yet
    # (the block commits the worker's transaction)
    r = job(conn, job_id)
    assert (r["status"], r["result"], r["reclaim_count"], r["attempt_token"]) == ("done", {"ok": 1}, 0, token)
    assert r["last_error"] is None
    assert job_id not in reclaimed_ids(reclaim_expired(conn2))
    assert job(conn, job_id) == r


def test_reclaim_held_open_fences_a_late_complete(
    sweep_paused: Conn, dsn: str, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, token = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        # The sweep reclaims the job; its transaction stays open (row locked).
        got = reclaimed_ids(rows(tx_conn, "SELECT * FROM pgfence.reclaim_expired(10000)"))
        assert got[job_id]["status"] == "queued"
        # The worker completes meanwhile: it must wait for the reclaim's transaction.
        late = start_blocked(dsn, conn, "SELECT pgfence.complete(%s, %s, '{\"late\": 1}')", (job_id, token))
    # (the block committed the reclaim)
    late.finish()
    assert late.error is not None, "a complete after the reclaim committed was accepted"
    assert_error(late.error, "PF001", str(job_id), detail=True)
    assert "reclaimed" in (late.error.diag.message_detail or "")
    r = job(conn, job_id)
    assert (r["status"], r["result"], r["reclaim_count"], r["last_error"]) == ("queued", None, 1, LEASE_EXPIRED)
