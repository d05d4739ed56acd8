"""History: every ended attempt is a row in pgfence.attempts (token, worker, when it
was claimed, its last heartbeat, the lease it held, when and how it ended); every
refused fenced call is a row in pgfence.rejections (batch calls record their own,
single calls are reported with report_rejection); and the retention purge deletes
finished jobs with both, per queue and status, freeing their idempotency keys."""
from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgfence import Client, LeaseLost
from support import api
from support.api import (claim_job, claim_short, complete, enqueue, fail, heartbeat,
                         lease_expired_under_lock, reclaim_expired, reclaimed_ids, release)
from support.db import (LEASE_EXPIRED, RELEASED, UNKNOWN_ID, ZERO_TOKEN, assert_error, connection, expire_history,
                        job, one,
                        queues_removed_after, rows, sql_error)
from support.roles import login_roles, set_role

Conn = psycopg.Connection[Any]

# Roles are cluster-wide: a per-run suffix keeps concurrent runs on one cluster apart.
_RUN = secrets.token_hex(3)
WORKER_ROLE = f"t_hist_worker_{_RUN}"
OPERATOR_ROLE = f"t_hist_oper_{_RUN}"
TAKEN_OVER_BY_B = "the lease was taken over: another attempt (worker worker-B) now holds the job"


@pytest.fixture(scope="module")
def hist_roles(dsn: str) -> Iterator[None]:
    with login_roles(dsn, {WORKER_ROLE: "pgfence_worker", OPERATOR_ROLE: "pgfence_operator"}):
        yield


@pytest.fixture
def worker_conn(dsn: str, hist_roles: None) -> Iterator[Conn]:
    with connection(dsn, user=WORKER_ROLE) as c:
        yield c


@pytest.fixture
def oper_conn(dsn: str, hist_roles: None) -> Iterator[Conn]:
    with connection(dsn, user=OPERATOR_ROLE) as c:
        yield c


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    """The test's queue; its jobs, history and retention row are removed afterwards."""
    with queues_removed_after(conn, queue, queue + "_keep"):
        yield queue


# Short leases that expire during a test: long enough that the row lock which keeps
# other reclaimers away is surely taken before the expiry, even on a loaded machine.
SHORT_LEASE = "1 second"


def make_stale(conn: Conn, tx: Conn, queue: str) -> tuple[int, uuid.UUID, uuid.UUID]:
    """support.api.make_stale with a first lease of SHORT_LEASE."""
    return api.make_stale(conn, tx, queue, lease=SHORT_LEASE)


def attempts_of(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    """Every ended attempt of the job (pgfence.all_attempts: a done job's are in its history row)."""
    return rows(conn, "SELECT * FROM pgfence.all_attempts WHERE job_id = %s ORDER BY attempt, ended_at", (job_id,))


def rejections_of(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    return rows(conn, "SELECT * FROM pgfence.rejections WHERE job_id = %s ORDER BY rejected_at", (job_id,))


def without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


# ================================================================ attempts ==
def test_complete_records_a_done_attempt_with_token_worker_and_times(conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    heartbeat(conn, jid, tok, "1 hour")
    running = job(conn, jid)
    assert attempts_of(conn, jid) == []  # the running attempt lives on the jobs row
    complete(conn, jid, tok, {"ok": True})
    done = job(conn, jid)
    [a] = attempts_of(conn, jid)
    assert without(a, "lease_expires_at") == {
        "job_id": jid, "attempt": 1, "attempt_token": tok, "worker": "worker-A",
        "claimed_at": running["reserved_at"], "heartbeat_at": running["heartbeat_at"],
        "ended_at": done["finished_at"], "outcome": "done", "error": None}
    assert a["claimed_at"] <= a["heartbeat_at"] <= a["ended_at"]


def test_complete_without_heartbeat_records_no_heartbeat(conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    complete(conn, jid, tok)
    [a] = attempts_of(conn, jid)
    assert (a["outcome"], a["attempt_token"], a["heartbeat_at"]) == ("done", tok, None)


@pytest.mark.parametrize("how", ["complete", "fail"])
def test_done_and_failed_attempts_record_the_lease_they_held(conn: Conn, q: str, how: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    held = job(conn, jid)["lease_expires_at"]
    if how == "complete":
        complete(conn, jid, tok)
    else:
        fail(conn, jid, tok, "boom")
    [a] = attempts_of(conn, jid)
    assert a["lease_expires_at"] == held


def test_fail_records_failed_attempts_for_retry_and_dead_letter(conn: Conn, q: str) -> None:
    jid = enqueue(conn, q, max_attempts=2)
    tok1 = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    assert fail(conn, jid, tok1, "boom 1", retry_in="0 seconds") == "queued"
    [a1] = attempts_of(conn, jid)
    assert (a1["attempt"], a1["attempt_token"], a1["worker"], a1["outcome"], a1["error"]) == (
        1, tok1, "worker-A", "failed", "boom 1")
    tok2 = claim_job(conn, q, jid, "worker-B", lease="1 hour")
    heartbeat(conn, jid, tok2, "1 hour")
    running = job(conn, jid)
    assert fail(conn, jid, tok2, "boom 2") == "failed"  # attempts exhausted: dead letter
    dead = job(conn, jid)
    first, second = attempts_of(conn, jid)
    assert first == a1
    assert without(second, "lease_expires_at") == {
        "job_id": jid, "attempt": 2, "attempt_token": tok2, "worker": "worker-B",
        "claimed_at": running["reserved_at"], "heartbeat_at": running["heartbeat_at"],
        "ended_at": dead["finished_at"], "outcome": "failed", "error": "boom 2"}
    assert second["claimed_at"] >= first["ended_at"]

    # a permanent failure dead-letters on the first attempt, recorded the same way
    jp = enqueue(conn, q, max_attempts=5)
    tokp = claim_job(conn, q, jp, "worker-C", lease="1 hour")
    assert fail(conn, jp, tokp, "bad input", permanent=True) == "failed"
    [ap] = attempts_of(conn, jp)
    assert (ap["attempt"], ap["attempt_token"], ap["outcome"], ap["error"], ap["ended_at"]) == (
        1, tokp, "failed", "bad input", job(conn, jp)["finished_at"])


def test_reclaim_records_the_expired_lease(conn: Conn, tx_conn: Conn, q: str) -> None:
    jid, tok = claim_short(conn, q, "worker-A", lease=SHORT_LEASE)
    held = job(conn, jid)
    with lease_expired_under_lock(tx_conn, jid):
        assert reclaimed_ids(reclaim_expired(tx_conn))[jid]["status"] == "queued"
    [a] = attempts_of(conn, jid)
    assert without(a, "ended_at") == {
        "job_id": jid, "attempt": 1, "attempt_token": tok, "worker": "worker-A",
        "claimed_at": held["reserved_at"], "heartbeat_at": None, "lease_expires_at": held["lease_expires_at"],
        "outcome": "reclaimed", "error": LEASE_EXPIRED}
    assert a["ended_at"] >= a["lease_expires_at"]
    assert a["ended_at"] == job(conn, jid)["updated_at"]


def test_release_of_a_started_job_records_released(conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    held = job(conn, jid)
    assert release(conn, jid, tok) == "queued"
    [a] = attempts_of(conn, jid)
    assert without(a, "ended_at") == {
        "job_id": jid, "attempt": 1, "attempt_token": tok, "worker": "worker-A",
        "claimed_at": held["reserved_at"], "heartbeat_at": None, "lease_expires_at": held["lease_expires_at"],
        "outcome": "released", "error": RELEASED}
    assert a["ended_at"] == job(conn, jid)["updated_at"]


def test_release_of_an_unstarted_job_leaves_no_attempt(conn: Conn, q: str) -> None:
    """started => false: the attempt does not count (attempts goes back down), so no
    ended attempt is recorded and the next claim is attempt 1 again."""
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    assert one(conn, "SELECT pgfence.release(%s, %s, started => false)", (jid, tok)) == "queued"
    assert attempts_of(conn, jid) == []
    tok2 = claim_job(conn, q, jid, "worker-B", lease="1 hour")
    complete(conn, jid, tok2)
    assert [(a["attempt"], a["attempt_token"], a["outcome"]) for a in attempts_of(conn, jid)] == [(1, tok2, "done")]


def test_cancel_of_a_processing_job_records_cancelled(conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, "worker-A", lease="1 hour")
    heartbeat(conn, jid, tok, "1 hour")
    held = job(conn, jid)
    conn.execute("SELECT pgfence.cancel(%s)", (jid,))
    [a] = attempts_of(conn, jid)
    assert a == {
        "job_id": jid, "attempt": 1, "attempt_token": tok, "worker": "worker-A",
        "claimed_at": held["reserved_at"], "heartbeat_at": held["heartbeat_at"],
        "lease_expires_at": held["lease_expires_at"], "ended_at": job(conn, jid)["finished_at"],
        "outcome": "cancelled", "error": None}
    # cancelling a queued job ends no attempt
    jq = enqueue(conn, q)
    conn.execute("SELECT pgfence.cancel(%s)", (jq,))
    assert attempts_of(conn, jq) == []


def test_reclaimed_then_completed_by_another_worker_tells_the_overlap_story(
        conn: Conn, tx_conn: Conn, worker_conn: Conn, oper_conn: Conn, q: str) -> None:
    jid, stale, current = make_stale(conn, tx_conn, q)  # A reclaimed, B holds the job
    # the zombie A tries to complete through the client: refused, and reported
    with pytest.raises(LeaseLost):
        Client(worker_conn).complete(jid, stale, {"late": True})
    complete(conn, jid, current, {"by": "B"})

    ops = Client(oper_conn)
    first, second = ops.attempts(jid)
    assert (first.attempt, first.attempt_token, first.worker, first.outcome, first.error) == (
        1, stale, "worker-A", "reclaimed", LEASE_EXPIRED)
    assert first.lease_expires_at is not None and first.ended_at >= first.lease_expires_at
    assert (second.attempt, second.attempt_token, second.worker, second.outcome, second.error) == (
        2, current, "worker-B", "done", None)
    assert second.claimed_at >= first.ended_at
    assert second.ended_at == job(conn, jid)["finished_at"] >= second.claimed_at
    [r] = ops.rejections(jid)
    assert (r.job_id, r.attempt_token, r.operation, r.caller, r.detail) == (
        jid, stale, "complete", WORKER_ROLE, TAKEN_OVER_BY_B)
    assert second.claimed_at <= r.rejected_at <= second.ended_at
    assert job(conn, jid)["result"] == {"by": "B"}


# ============================================================== rejections ==
BATCH_CALLS = {
    "heartbeat": "SELECT accepted, status, detail FROM pgfence.heartbeat_many(%(ids)s, %(toks)s)",
    "complete": "SELECT accepted, status, detail FROM pgfence.complete_many(%(ids)s, %(toks)s)",
    "fail": "SELECT accepted, status, detail FROM pgfence.fail_many(%(ids)s, %(toks)s, ARRAY['late'])",
    "release": "SELECT accepted, status, detail FROM pgfence.release_many(%(ids)s, %(toks)s)",
}


def test_stale_batch_calls_are_recorded_with_operation_caller_and_detail(
        conn: Conn, tx_conn: Conn, worker_conn: Conn, q: str) -> None:
    jid, stale, current = make_stale(conn, tx_conn, q)
    before = job(conn, jid)
    for op, query in BATCH_CALLS.items():
        got = worker_conn.execute(query, {"ids": [jid], "toks": [stale]}).fetchall()
        assert got == [(False, "processing", TAKEN_OVER_BY_B)], op
    # SET ROLE is respected too: the caller is the role set, not the session user
    with set_role(conn, "pgfence_worker"):
        assert conn.execute(BATCH_CALLS["complete"], {"ids": [jid], "toks": [stale]}).fetchall() == [
            (False, "processing", TAKEN_OVER_BY_B)]
    got = rejections_of(conn, jid)
    assert [(r["operation"], r["caller"], r["attempt_token"], r["detail"]) for r in got] == [
        ("heartbeat", WORKER_ROLE, stale, TAKEN_OVER_BY_B),
        ("complete", WORKER_ROLE, stale, TAKEN_OVER_BY_B),
        ("fail", WORKER_ROLE, stale, TAKEN_OVER_BY_B),
        ("release", WORKER_ROLE, stale, TAKEN_OVER_BY_B),
        ("complete", "pgfence_worker", stale, TAKEN_OVER_BY_B),
    ]
    # refused calls change nothing
    assert job(conn, jid) == before
    assert [a["outcome"] for a in attempts_of(conn, jid)] == ["reclaimed"]


def test_accepted_rows_of_a_batch_are_not_rejections(conn: Conn, worker_conn: Conn, q: str) -> None:
    """A mixed batch records exactly its refused inputs (an unknown id is reported in the
    answer but has no job to attach a rejection to)."""
    j1, j2 = enqueue(conn, q), enqueue(conn, q)
    t1 = claim_job(conn, q, j1, lease="1 hour")
    s2 = claim_job(conn, q, j2, lease="1 hour")
    release(conn, j2, s2)  # s2's attempt is over: a stale token
    t2 = claim_job(conn, q, j2, lease="1 hour")
    got = worker_conn.execute(BATCH_CALLS["complete"],
                              {"ids": [j1, j2, UNKNOWN_ID], "toks": [t1, s2, t2]}).fetchall()
    assert [g[0] for g in got] == [True, False, False]
    assert rejections_of(conn, j1) == []
    assert [(r["operation"], r["attempt_token"]) for r in rejections_of(conn, j2)] == [("complete", s2)]
    assert rejections_of(conn, UNKNOWN_ID) == []


def test_a_refused_single_call_is_rolled_back_and_reported_with_report_rejection(
        conn: Conn, tx_conn: Conn, worker_conn: Conn, q: str) -> None:
    jid, stale, _ = make_stale(conn, tx_conn, q)
    err = sql_error(worker_conn, "SELECT pgfence.heartbeat(%s, %s)", (jid, stale))
    assert_error(err, "PF001", detail=True)
    assert rejections_of(conn, jid) == []  # rolled back with the refused call
    worker_conn.execute("SELECT pgfence.report_rejection(%s, %s, 'heartbeat')", (jid, stale))
    [r] = rejections_of(conn, jid)
    assert (r["operation"], r["caller"], r["attempt_token"], r["detail"]) == (
        "heartbeat", WORKER_ROLE, stale, TAKEN_OVER_BY_B)


def test_idempotent_retries_by_the_finishing_token_are_not_rejections(conn: Conn, worker_conn: Conn,
                                                                       q: str) -> None:
    jd, jf = enqueue(conn, q), enqueue(conn, q, max_attempts=1)
    td = claim_job(conn, q, jd, lease="1 hour")
    tf = claim_job(conn, q, jf, lease="1 hour")
    worker_conn.execute("SELECT pgfence.complete(%s, %s)", (jd, td))
    worker_conn.execute("SELECT pgfence.complete(%s, %s)", (jd, td))  # a retry after a lost reply
    assert worker_conn.execute(BATCH_CALLS["complete"], {"ids": [jd], "toks": [td]}).fetchall() == [
        (True, "done", None)]
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'x')", (jf, tf)) == "failed"
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'x')", (jf, tf)) == "failed"
    assert worker_conn.execute(BATCH_CALLS["fail"], {"ids": [jf], "toks": [tf]}).fetchall() == [
        (True, "failed", None)]
    for j in (jd, jf):
        assert rejections_of(conn, j) == []
        assert len(attempts_of(conn, j)) == 1  # the retry ended no second attempt


def test_a_repeated_fail_that_requeued_is_accepted_not_refused(conn: Conn, worker_conn: Conn, q: str) -> None:
    # The first fail requeued the job, which clears its token; a repeat of it (the
    # worker's retry after a lost reply) must be accepted, record nothing, change nothing.
    jid = enqueue(conn, q, max_attempts=3)
    tok = claim_job(conn, q, jid, lease="1 hour")
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'x', '1 hour')", (jid, tok)) == "queued"
    before = one(conn, "SELECT to_jsonb(j) FROM pgfence.jobs j WHERE id = %s", (jid,))
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'x')", (jid, tok)) == "queued"
    assert worker_conn.execute(BATCH_CALLS["fail"], {"ids": [jid], "toks": [tok]}).fetchall() == [
        (True, "queued", None)]
    assert one(conn, "SELECT to_jsonb(j) FROM pgfence.jobs j WHERE id = %s", (jid,)) == before
    assert rejections_of(conn, jid) == []
    assert [a["outcome"] for a in attempts_of(conn, jid)] == ["failed"]
    # another token is still refused
    assert worker_conn.execute(BATCH_CALLS["fail"], {"ids": [jid], "toks": [ZERO_TOKEN]}).fetchall()[0][0] is False
    # once the job runs again, the repeat still answers what its own failure did
    conn.execute("UPDATE pgfence.jobs SET available_at = clock_timestamp() WHERE id = %s", (jid,))
    tok2 = claim_job(conn, q, jid, lease="1 hour")
    before = one(conn, "SELECT to_jsonb(j) FROM pgfence.jobs j WHERE id = %s", (jid,))
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'x')", (jid, tok)) == "queued"
    assert one(conn, "SELECT to_jsonb(j) FROM pgfence.jobs j WHERE id = %s", (jid,)) == before
    assert one(worker_conn, "SELECT pgfence.fail(%s, %s, 'y', permanent => true)", (jid, tok2)) == "failed"
    assert worker_conn.execute(
        "SELECT accepted, status, detail FROM pgfence.fail_many(%s, %s, ARRAY['late', 'late'])",
        ([jid, jid + 10**9], [tok, tok2])).fetchall() == [(True, "queued", None), (False, None, "the job does not exist")]
    assert worker_conn.execute(BATCH_CALLS["fail"], {"ids": [jid], "toks": [tok2]}).fetchall() == [
        (True, "failed", None)]


def test_report_rejection_refuses_what_was_not_refused(conn: Conn, worker_conn: Conn, q: str) -> None:
    jid = enqueue(conn, q)
    tok = claim_job(conn, q, jid, lease="1 hour")
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, 'complete')", (jid, tok))
    assert_error(err, "22023", "attempt_token")  # the token is current: nothing was refused
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, 'complete')", (UNKNOWN_ID, tok))
    assert_error(err, "PF002")
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, 'finish')", (jid, ZERO_TOKEN))
    assert_error(err, "22023", "operation")
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, NULL)", (jid, ZERO_TOKEN))
    assert_error(err, "22004", "operation")
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, NULL, 'complete')", (jid,))
    assert_error(err, "22004", "attempt_token")
    # a token that never held an attempt of the job proves nothing: refused, not recorded
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, 'release')", (jid, ZERO_TOKEN))
    assert_error(err, "22023", "attempt_token")
    assert rejections_of(conn, jid) == []
    assert rejections_of(conn, UNKNOWN_ID) == []
    # a token of an earlier attempt is reported, with the reason the fence would have given
    release(conn, jid, tok)
    current = claim_job(conn, q, jid, lease="1 hour")
    worker_conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (jid, tok))
    assert [(r["operation"], r["caller"], r["detail"]) for r in rejections_of(conn, jid)] == [
        ("complete", WORKER_ROLE, "the lease was taken over: another attempt (worker worker-A) now holds the job")]
    assert current != tok


def test_report_rejection_refuses_a_repeat_that_was_accepted(conn: Conn, worker_conn: Conn, q: str) -> None:
    """A complete (fail, release) repeated with the token that completed (failed,
    released) the job is accepted as a retry after a lost reply, so it never raised
    PF001: reporting it would put a false zombie in the history."""
    done_id, failed_id, released_id = enqueue(conn, q), enqueue(conn, q), enqueue(conn, q)
    done_tok = claim_job(conn, q, done_id, lease="1 hour")
    complete(conn, done_id, done_tok)
    failed_tok = claim_job(conn, q, failed_id, lease="1 hour")
    assert fail(conn, failed_id, failed_tok, "boom") == "queued"
    released_tok = claim_job(conn, q, released_id, lease="1 hour")
    assert release(conn, released_id, released_tok) == "queued"
    for jid, tok, op in ((done_id, done_tok, "complete"), (failed_id, failed_tok, "fail"),
                         (released_id, released_tok, "release")):
        err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, %s)", (jid, tok, op))
        assert_error(err, "22023", "attempt_token")
    # a heartbeat that crossed its own attempt's end is refused (PF001) but is no stale
    # worker: not recorded, by heartbeat_many or through report_rejection
    err = sql_error(worker_conn, "SELECT pgfence.report_rejection(%s, %s, 'heartbeat')", (done_id, done_tok))
    assert_error(err, "22023", "attempt_token")
    assert worker_conn.execute("SELECT accepted FROM pgfence.heartbeat_many(%s, %s)",
                               ([done_id, failed_id], [done_tok, failed_tok])).fetchall() == [(False,), (False,)]
    assert rejections_of(conn, done_id) == [] and rejections_of(conn, failed_id) == []
    assert rejections_of(conn, released_id) == []
    # a complete by the token whose attempt failed is refused (PF001): a stale call, recorded
    worker_conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (failed_id, failed_tok))
    assert [r["operation"] for r in rejections_of(conn, failed_id)] == ["complete"]


# =============================================================== retention ==
def _finish_three(conn: Conn, q: str) -> dict[str, int]:
    """A done job (with a refused call on record), a dead-lettered one, a cancelled
    processing one; plus a queued and a processing job that no purge may touch."""
    jd = enqueue(conn, q)
    stale = claim_job(conn, q, jd, lease="1 hour")
    release(conn, jd, stale)
    td = claim_job(conn, q, jd, lease="1 hour")
    complete(conn, jd, td)
    conn.execute("SELECT * FROM pgfence.complete_many(%s, %s)", ([jd], [stale]))  # a rejection
    jf, jc = enqueue(conn, q), enqueue(conn, q)
    tf = claim_job(conn, q, jf, lease="1 hour")
    fail(conn, jf, tf, "boom", permanent=True)
    claim_job(conn, q, jc, lease="1 hour")
    conn.execute("SELECT pgfence.cancel(%s)", (jc,))
    jp = enqueue(conn, q)
    claim_job(conn, q, jp, lease="1 hour")
    jq = enqueue(conn, q)
    ids = {"done": jd, "failed": jf, "cancelled": jc, "queued": jq, "processing": jp}
    assert dict(conn.execute("SELECT status, id FROM pgfence.all_jobs WHERE queue = %s", (q,)).fetchall()) == {
        s: i for s, i in ids.items()}
    assert len(rejections_of(conn, jd)) == 1
    return ids


def _purge_until_gone(conn: Conn, ids: list[int]) -> None:
    """purge_finished(10000) until none of ids is left or a batch comes back short
    (other tests' finished jobs may come first in its oldest-first batches). Done jobs
    go with their history partition: the partitions of those past their retention are
    ended first, as the clock would (support.db.expire_history)."""
    expire_history(conn, ids)
    for _ in range(10):
        n = one(conn, "SELECT pgfence.purge_finished(10000)")
        if n < 10000 or not one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = ANY(%s)", (ids,)):
            break
    one(conn, "SELECT pgfence.purge_finished(10000)")  # (the rejections of dropped history: the next purge)


def _present(conn: Conn, ids: list[int]) -> dict[str, set[int]]:
    """Which of ids are still anywhere: live or done (all_jobs), with attempts (all_attempts), with rejections."""
    return {t: {r[0] for r in conn.execute(f"SELECT {c} FROM pgfence.{v} WHERE {c} = ANY(%s)", (ids,))}
            for t, v, c in (("jobs", "all_jobs", "id"), ("attempts", "all_attempts", "job_id"),
                            ("rejections", "rejections", "job_id"))}


def test_purge_deletes_finished_jobs_with_their_attempts_and_rejections(
        conn: Conn, q: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (q,))
    ids = _finish_three(conn, q)
    keep_q = q + "_keep"  # default retention: done 1 day
    jk = enqueue(conn, keep_q)
    complete(conn, jk, claim_job(conn, keep_q, jk, lease="1 hour"))
    finished = [ids["done"], ids["failed"], ids["cancelled"]]
    assert _present(conn, finished + [jk])["attempts"] == set(finished + [jk])
    _purge_until_gone(conn, finished)
    assert _present(conn, finished) == {"jobs": set(), "attempts": set(), "rejections": set()}
    # unfinished jobs and a recent done job under the default retention stay
    assert _present(conn, [ids["queued"], ids["processing"], jk])["jobs"] == {ids["queued"], ids["processing"], jk}
    assert _present(conn, [jk])["attempts"] == {jk}


def test_purge_keeps_failed_jobs_for_retain_failed(conn: Conn, q: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '1 hour')", (q,))
    ids = _finish_three(conn, q)
    _purge_until_gone(conn, [ids["done"], ids["cancelled"]])
    assert _present(conn, list(ids.values()))["jobs"] == {ids["failed"], ids["queued"], ids["processing"]}
    assert _present(conn, [ids["failed"]])["attempts"] == {ids["failed"]}


def test_a_purged_jobs_idempotency_key_can_be_reused(conn: Conn, q: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (q,))
    first = enqueue(conn, q, idempotency_key="k1")
    complete(conn, first, claim_job(conn, q, first, lease="1 hour"))
    assert enqueue(conn, q, idempotency_key="k1") == first  # done holds the key
    _purge_until_gone(conn, [first])
    assert _present(conn, [first])["jobs"] == set()
    second = enqueue(conn, q, idempotency_key="k1")
    assert second != first
    assert job(conn, second)["status"] == "queued"


def test_the_purge_never_frees_a_key_a_completion_is_holding_again(conn: Conn, tx_conn: Conn, dsn: str, q: str,
                                                                  sweep_paused: Conn) -> None:
    """A done job's key past its retention is in held_keys until the purge deletes it; a
    new job with that key completing meanwhile takes the row over (new job, new
    purge_at). A purge that read the old row and waits for that completion must
    leave the row it took over: the purge's DELETE named the past purge_at only in its
    subquery, which the re-check after the wait does not read again, and so freed the key
    of a job kept for an hour; an enqueue with the key then made a second job."""
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '1 hour')", (q,))
    first = enqueue(conn, q, idempotency_key="k1", unique_for="1 hour")
    complete(conn, first, claim_job(conn, q, first, lease="1 hour"))
    # As the clock would: the first's unique_for has passed (the key is free), its row
    # is still there (past its purge_at too, for the purge to delete).
    conn.execute("UPDATE pgfence.held_keys SET held_until = clock_timestamp() - interval '1 second'"
                 " WHERE queue = %s AND idempotency_key = 'k1'", (q,))
    conn.execute("SELECT pgfence.set_retention(%s, '1 hour', '1 hour')", (q,))
    second = enqueue(conn, q, idempotency_key="k1")
    assert second != first
    token = claim_job(conn, q, second, lease="1 hour")
    complete(tx_conn, second, token)  # (holds the key's row, taken over, until it commits)
    errors: list[BaseException] = []

    def purge() -> None:
        try:
            with connection(dsn) as p:
                p.execute("SELECT pgfence.purge_finished(10000)")
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
    purger = threading.Thread(target=purge)
    purger.start()
    try:
        deadline = time.monotonic() + 30
        while one(conn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query = 'SELECT pgfence.purge_finished(10000)'") == 0:
            assert time.monotonic() < deadline and purger.is_alive(), "the purge did not wait for the completion"
            time.sleep(0.01)
        tx_conn.commit()
    finally:
        tx_conn.rollback()  # (after a failure: the purge and the teardown would wait for it)
        purger.join(30)
    assert not purger.is_alive() and not errors, errors
    assert rows(conn, "SELECT job_id FROM pgfence.held_keys WHERE queue = %s AND idempotency_key = 'k1'",
                (q,)) == [{"job_id": second}]
    assert enqueue(conn, q, idempotency_key="k1") == second


@pytest.mark.parametrize("call", ["SELECT pgfence.purge_finished()", "SELECT * FROM pgfence.maintain_history()"])
def test_the_purge_and_the_partition_maintenance_refuse_a_snapshot_older_than_the_call(
        conn: Conn, tx_conn: Conn, q: str, call: str) -> None:
    """Under REPEATABLE READ the maintenance's statements saw the transaction's snapshot,
    which hid completions committed after it: a partition within its retention looked
    empty and was dropped with them. Both entry points refuse it (PF004) and change
    nothing."""
    conn.execute("SELECT pgfence.set_retention(%s, '1 hour', '1 hour')", (q,))
    done = enqueue(conn, q)
    tx_conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    tx_conn.execute("SELECT count(*) FROM pgfence.retention")  # (the snapshot is taken)
    complete(conn, done, claim_job(conn, q, done, lease="1 hour"))
    err = sql_error(tx_conn, call)
    assert_error(err, "PF004", call.split("pgfence.")[1].split("(")[0])
    tx_conn.rollback()
    assert one(conn, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (done,)) == 1


def test_a_retention_is_counted_in_utc_whatever_the_sessions_time_zone(conn: Conn, q: str) -> None:
    """A day is 24 hours in UTC; in the session's zone it is 23 or 25 across a
    daylight-saving change, and a done job's purge_at (finished_at + its retention)
    depended on the completing session's TimeZone: a worker in New York kept a job with
    a 150-day retention an hour less than one in UTC (the sweeper's partitions ahead,
    made in its own zone, were off by as much). Now every retention is counted in UTC."""
    conn.execute("SET TimeZone = 'America/New_York'")
    # 2026-03-08 is a change in New York: a day there lasts 23 hours
    assert one(conn, "SELECT timestamptz '2026-03-07 12:00+00' + interval '1 day'"
                     " - timestamptz '2026-03-07 12:00+00'") == dt.timedelta(hours=23)
    assert one(conn, "SELECT pgfence._utc_plus('2026-03-07 12:00+00', '1 day')"
                     " - timestamptz '2026-03-07 12:00+00'") == dt.timedelta(days=1)
    assert one(conn, "SELECT pgfence._utc_plus('2026-11-01 04:00+00', '-1 mon')") == \
        dt.datetime(2026, 10, 1, 4, tzinfo=dt.timezone.utc)
    # The completing session in a zone whose summer time starts in two days (a POSIX
    # rule by day of the year), so that the 30 days of retention span a change on any date
    day = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=2)).timetuple().tm_yday
    start = min(day, 365)
    end = (start - 1 + 60) % 365 + 1  # (ends after the 30 days)
    conn.execute(f"SET TimeZone = 'AAA0BBB,J{start},J{end}'")
    assert one(conn, "SELECT now() + interval '30 days' - now()") != dt.timedelta(days=30)  # (the control)
    conn.execute("SELECT pgfence.set_retention(%s, '30 days', '1 hour')", (q,))
    done = enqueue(conn, q)
    complete(conn, done, claim_job(conn, q, done, lease="1 hour"))
    assert one(conn, "SELECT purge_at - finished_at FROM pgfence.finished_jobs WHERE id = %s",
               (done,)) == dt.timedelta(days=30)


@pytest.mark.parametrize(("done", "failed", "sqlstate", "names"), [
    ("-1 second", "1 day", "22023", "retain_done"),
    ("1 day", "-1 day", "22023", "retain_failed"),
    (None, "1 day", "22004", "retain_done"),
    ("1 day", None, "22004", "retain_failed"),
    # from about 6,800 years every purge failed (the cutoff is before 4714 BC)
    ("10000 years", "1 day", "22023", "retain_done"),
    ("1 day", "100 years 1 day", "22023", "retain_failed"),
    ("2 mons -40 days", "1 day", "22023", "retain_done"),  # 20 days by comparison, 19 to 22 when applied
])
def test_set_retention_refuses_bad_intervals(conn: Conn, q: str, done: str | None, failed: str | None,
                                             sqlstate: str, names: str) -> None:
    defaults = conn.execute("SELECT * FROM pgfence.retention WHERE queue = ''").fetchall()
    err = sql_error(conn, "SELECT pgfence.set_retention(%s, %s::interval, %s::interval)", (q, done, failed))
    assert_error(err, sqlstate, names)
    assert conn.execute("SELECT * FROM pgfence.retention WHERE queue = %s", (q,)).fetchall() == []
    assert conn.execute("SELECT * FROM pgfence.retention WHERE queue = ''").fetchall() == defaults


def test_set_retention_refuses_an_empty_queue_name(conn: Conn) -> None:
    defaults = conn.execute("SELECT * FROM pgfence.retention WHERE queue = ''").fetchall()
    err = sql_error(conn, "SELECT pgfence.set_retention('', '0 seconds', '0 seconds')")
    assert_error(err, "22023", "queue")
    assert conn.execute("SELECT * FROM pgfence.retention WHERE queue = ''").fetchall() == defaults
