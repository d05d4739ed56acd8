"""Every state transition of the SQL API, its resulting row, and its SQLSTATE when refused.

enqueue -> queued; claim -> processing; heartbeat; complete -> done; fail -> queued
(backoff) or failed; reclaim_expired -> queued / manual_review / failed; release;
requeue; cancel; PF002 for unknown jobs; idempotent complete/fail for the token
that finished the job.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest

from support.api import (claim, claim_job, claim_one, claim_short, complete, enqueue, fail, heartbeat,
                         lease_expired_under_lock, reclaim_expired, reclaimed_ids, release)
from support.db import (LEASE_EXPIRED, RELEASED, UNKNOWN_ID, assert_error, job, now, one, queue_count,
                        sql_error)

# Queue lookups scan only this test's jobs (by primary key range): see support.db.
pytestmark = pytest.mark.usefixtures("job_id_floor")


Conn = psycopg.Connection[Any]
SEC = dt.timedelta(seconds=1)


# ------------------------------------------------------------------ enqueue --
def test_enqueue_creates_queued_job_with_defaults(conn: Conn, queue: str) -> None:
    t0 = now(conn)
    job_id = enqueue(conn, queue, "send_email", payload={"to": "a@b.c"})
    t1 = now(conn)
    r = job(conn, job_id)
    assert r["status"] == "queued"
    assert (r["queue"], r["kind"], r["payload"]) == (queue, "send_email", {"to": "a@b.c"})
    assert (r["priority"], r["attempts"], r["max_attempts"], r["recovery_policy"]) == (0, 0, 3, "auto")
    assert r["reclaim_count"] == 0
    for col in ("attempt_token", "reserved_by", "reserved_at", "heartbeat_at", "lease_expires_at",
                "last_error", "result", "finished_at", "idempotency_key"):
        assert r[col] is None, col
    assert t0 <= r["available_at"] <= t1
    assert r["created_at"] == r["updated_at"] == r["available_at"]


def test_enqueue_with_options_stores_them(conn: Conn, queue: str) -> None:
    run_at = now(conn) + dt.timedelta(hours=1)
    job_id = enqueue(conn, queue, "k", payload={}, priority=-7, run_at=run_at, max_attempts=9,
                     recovery_policy="manual", idempotency_key="key-1")
    r = job(conn, job_id)
    assert (r["priority"], r["available_at"], r["max_attempts"], r["recovery_policy"], r["idempotency_key"]) == (
        -7, run_at, 9, "manual", "key-1")
    assert r["status"] == "queued"


# -------------------------------------------------------------------- claim --
def test_claim_moves_job_to_processing_with_token_and_lease_from_clock(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, "k", payload={"n": 1}, max_attempts=5)
    t0 = now(conn)
    got = claim(conn, [queue], "worker-A", lease="42 seconds")
    t1 = now(conn)
    assert len(got) == 1
    c = got[0]
    r = job(conn, job_id)
    assert r["status"] == "processing"
    assert r["attempts"] == 1
    assert r["attempt_token"] is not None and r["attempt_token"] == c["attempt_token"]
    assert r["reserved_by"] == "worker-A"
    assert t0 <= r["reserved_at"] <= t1
    assert r["lease_expires_at"] - r["reserved_at"] == dt.timedelta(seconds=42)
    assert r["heartbeat_at"] is None
    assert r["updated_at"] == r["reserved_at"]
    assert c == {"id": job_id, "queue": queue, "kind": "k", "payload": {"n": 1}, "attempts": 1,
                 "max_attempts": 5, "attempt_token": r["attempt_token"],
                 "lease_expires_at": r["lease_expires_at"],
                 "waited_s": (r["reserved_at"] - r["available_at"]).total_seconds()}


def test_every_claim_issues_a_fresh_token_and_counts_the_attempt(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=5)
    tokens = []
    for attempt in (1, 2, 3):
        c = claim_one(conn, queue, f"worker-{attempt}")
        assert (c["id"], c["attempts"]) == (job_id, attempt)
        tokens.append(c["attempt_token"])
        assert fail(conn, job_id, c["attempt_token"], retry_in="0 seconds") == "queued"
    assert len(set(tokens)) == 3
    assert job(conn, job_id)["attempts"] == 3


def test_claim_returns_no_rows_when_nothing_is_runnable(conn: Conn, queue: str) -> None:
    assert claim(conn, [queue], max_jobs=10) == []
    job_id = enqueue(conn, queue)
    claim_job(conn, queue, job_id)
    assert claim(conn, [queue], max_jobs=10) == []


# ---------------------------------------------------------------- heartbeat --
def test_heartbeat_extends_lease_and_stamps_heartbeat_at(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id, lease="10 seconds")
    before = job(conn, job_id)
    t0 = now(conn)
    expiry = heartbeat(conn, job_id, token, lease="1 hour")
    t1 = now(conn)
    r = job(conn, job_id)
    assert expiry == r["lease_expires_at"]
    assert t0 <= r["heartbeat_at"] <= t1
    assert r["lease_expires_at"] - r["heartbeat_at"] == dt.timedelta(hours=1)
    assert r["lease_expires_at"] > before["lease_expires_at"]
    assert r["updated_at"] == r["heartbeat_at"]
    unchanged = ("status", "attempt_token", "attempts", "reserved_by", "reserved_at", "reclaim_count")
    assert {k: r[k] for k in unchanged} == {k: before[k] for k in unchanged}


def test_heartbeat_can_shorten_the_lease(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    expiry = heartbeat(conn, job_id, token, lease="5 seconds")
    r = job(conn, job_id)
    assert expiry == r["lease_expires_at"] == r["heartbeat_at"] + 5 * SEC


# ----------------------------------------------------------------- complete --
def test_complete_marks_done_stores_result_and_keeps_token(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    t0 = now(conn)
    complete(conn, job_id, token, {"sent": True, "n": 3})
    t1 = now(conn)
    r = job(conn, job_id)
    assert r["status"] == "done"
    assert r["result"] == {"sent": True, "n": 3}
    assert t0 <= r["finished_at"] <= t1
    assert r["updated_at"] == r["finished_at"]
    assert r["attempt_token"] == token
    assert r["lease_expires_at"] is None
    assert r["attempts"] == 1
    assert claim(conn, [queue], max_jobs=5) == []


def test_complete_without_result_stores_null(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    complete(conn, job_id, token)
    r = job(conn, job_id)
    assert (r["status"], r["result"]) == ("done", None)


def test_complete_is_idempotent_for_the_completing_token(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    complete(conn, job_id, token, {"v": 1})
    first = job(conn, job_id)
    # A retry after a lost reply: accepted, and changes nothing (not even the result).
    complete(conn, job_id, token, {"v": 2})
    assert job(conn, job_id) == first
    res = conn.execute(
        "SELECT id, accepted, status, detail FROM pgfence.complete_many(job_ids => %s, attempt_tokens => %s)",
        ([job_id], [token])).fetchall()
    assert res == [(job_id, True, "done", None)]
    assert job(conn, job_id) == first


# --------------------------------------------------------------------- fail --
def test_fail_with_attempts_left_requeues_with_backoff(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=3)
    token = claim_job(conn, queue, job_id)
    t0 = now(conn)
    assert fail(conn, job_id, token, "ValueError: nope") == "queued"
    t1 = now(conn)
    r = job(conn, job_id)
    assert r["status"] == "queued"
    assert t0 <= r["updated_at"] <= t1
    assert r["available_at"] - r["updated_at"] == SEC  # backoff after attempt 1
    assert r["last_error"] == "ValueError: nope"
    assert r["attempts"] == 1
    for col in ("attempt_token", "reserved_by", "reserved_at", "heartbeat_at", "lease_expires_at", "finished_at"):
        assert r[col] is None, col
    # not runnable before the backoff has passed
    assert claim(conn, [queue]) == []


def test_fail_on_last_attempt_dead_letters_and_keeps_token(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=2)
    t1 = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, t1, "first", retry_in="0 seconds") == "queued"
    t2 = claim_job(conn, queue, job_id)
    before = now(conn)
    assert fail(conn, job_id, t2, "second") == "failed"
    r = job(conn, job_id)
    assert (r["status"], r["attempts"], r["last_error"]) == ("failed", 2, "second")
    assert r["finished_at"] >= before and r["updated_at"] == r["finished_at"]
    assert r["attempt_token"] == t2
    assert r["lease_expires_at"] is None
    assert claim(conn, [queue]) == []


def test_fail_with_max_attempts_one_dead_letters_at_once(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=1)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token) == "failed"
    assert job(conn, job_id)["status"] == "failed"


def test_fail_permanent_dead_letters_with_attempts_left(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=10)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "bad input", permanent=True) == "failed"
    r = job(conn, job_id)
    assert (r["status"], r["attempts"], r["max_attempts"], r["last_error"]) == ("failed", 1, 10, "bad input")
    assert r["finished_at"] is not None


def test_fail_retry_in_overrides_backoff(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=5)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, retry_in="42 seconds") == "queued"
    r = job(conn, job_id)
    assert r["available_at"] - r["updated_at"] == 42 * SEC


def test_fail_retry_in_zero_makes_job_runnable_at_once(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=5)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, retry_in="0 seconds") == "queued"
    r = job(conn, job_id)
    assert r["available_at"] == r["updated_at"]
    c = claim_one(conn, queue)
    assert (c["id"], c["attempts"]) == (job_id, 2)


def test_fail_is_idempotent_for_the_dead_lettering_token(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=1)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "first error") == "failed"
    first = job(conn, job_id)
    assert fail(conn, job_id, token, "retried error") == "failed"
    assert fail(conn, job_id, token, "again", permanent=True) == "failed"
    assert job(conn, job_id) == first


def test_fail_again_after_a_retry_is_accepted_and_changes_nothing(conn: Conn, queue: str) -> None:
    # The fail that sent the job back to the queue ended the attempt and cleared its
    # token; a repeat by that token (a retry after a lost reply) is accepted, like a
    # repeated complete, and changes nothing: the first error stays.
    job_id = enqueue(conn, queue, max_attempts=3)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "first") == "queued"
    before = job(conn, job_id)
    assert fail(conn, job_id, token, "second") == "queued"
    assert job(conn, job_id) == before and before["last_error"] == "first"


def test_fail_again_after_the_dead_letter_was_requeued_answers_queued(conn: Conn, queue: str) -> None:
    # Documented limit: after an operator requeued the dead letter, the repeat of the
    # fail that dead-lettered it is still accepted and changes nothing, but answers
    # queued (the history records both kinds of failure as 'failed').
    job_id = enqueue(conn, queue, max_attempts=1)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "dead") == "failed"
    conn.execute("SELECT pgfence.requeue(%s)", (job_id,))
    before = job(conn, job_id)
    assert before["status"] == "queued"
    assert fail(conn, job_id, token, "dead") == "queued"
    assert job(conn, job_id) == before


# ------------------------------------------------------------ reclaim_expired --
RECLAIM_RULE = [
    # (recovery_policy, max_attempts, expected status)
    pytest.param("auto", 3, "queued", id="auto-attempts-left-queued"),
    pytest.param("manual", 3, "manual_review", id="manual-manual_review"),
    pytest.param("manual", 1, "manual_review", id="manual-exhausted-manual_review"),
    pytest.param("auto", 1, "failed", id="auto-exhausted-failed"),
]


@pytest.mark.parametrize(("policy", "max_attempts", "expected"), RECLAIM_RULE)
def test_reclaim_expired_applies_the_reclaim_rule(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str, policy: str, max_attempts: int, expected: str,
) -> None:
    job_id, token = claim_short(conn, queue, recovery_policy=policy, max_attempts=max_attempts)
    before = job(conn, job_id)
    with lease_expired_under_lock(tx_conn, job_id):
        t0 = now(tx_conn)
        got = reclaimed_ids(reclaim_expired(tx_conn))
        t1 = now(tx_conn)
    assert got.get(job_id) == {"id": job_id, "status": expected, "reclaim_count": 1}
    r = job(conn, job_id)
    assert r["status"] == expected
    assert r["reclaim_count"] == 1
    assert r["last_error"] == LEASE_EXPIRED
    assert r["attempts"] == 1
    assert r["attempt_token"] is None and r["lease_expires_at"] is None
    assert t0 <= r["updated_at"] <= t1
    assert r["updated_at"] > before["lease_expires_at"]
    if expected == "queued":
        assert r["available_at"] == r["updated_at"]  # runnable now
        assert r["finished_at"] is None
        assert (r["reserved_by"], r["reserved_at"], r["heartbeat_at"]) == (None, None, None)
        c = claim_one(conn, queue, "worker-B")
        assert (c["id"], c["attempts"]) == (job_id, 2) and c["attempt_token"] != token
    elif expected == "manual_review":
        assert r["finished_at"] is None
        assert r["available_at"] == before["available_at"]
        assert claim(conn, [queue]) == []
    else:
        assert r["finished_at"] == r["updated_at"]
        assert claim(conn, [queue]) == []


def test_reclaim_expired_leaves_live_leases_alone(sweep_paused: Conn, conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    claim_job(conn, queue, job_id, lease="1 hour")
    before = job(conn, job_id)
    assert job_id not in reclaimed_ids(reclaim_expired(conn))
    assert job(conn, job_id) == before


def test_reclaim_expired_takes_oldest_expired_first_and_respects_max_jobs(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    # Claimed in id order, but the second lease ends first: oldest *lease* first.
    a = enqueue(conn, queue)
    b = enqueue(conn, queue)
    claim_job(conn, queue, a, lease="600 milliseconds")
    claim_job(conn, queue, b, lease="300 milliseconds")
    assert job(conn, b)["lease_expires_at"] < job(conn, a)["lease_expires_at"]
    seen: list[int] = []
    with lease_expired_under_lock(tx_conn, a, b):
        # max_jobs bounds the batch: reclaim one at a time until both are back
        # (expired leases other tests left behind may come first).
        for _ in range(500):
            batch = reclaim_expired(tx_conn, max_jobs=1)
            assert len(batch) <= 1
            if not batch:
                break
            seen.extend(r["id"] for r in batch if r["id"] in (a, b))
            if len(seen) == 2:
                break
    assert seen == [b, a]


# ------------------------------------------------------------------ release --
@pytest.mark.parametrize(("policy", "max_attempts", "expected"), RECLAIM_RULE)
def test_release_applies_the_reclaim_rule_now(
    conn: Conn, queue: str, policy: str, max_attempts: int, expected: str,
) -> None:
    job_id = enqueue(conn, queue, recovery_policy=policy, max_attempts=max_attempts)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    before = job(conn, job_id)
    assert release(conn, job_id, token) == expected
    r = job(conn, job_id)
    assert r["status"] == expected
    assert r["reclaim_count"] == 0  # a release is not a reclaim
    assert r["last_error"] == RELEASED
    assert r["attempts"] == 1
    assert r["attempt_token"] is None and r["lease_expires_at"] is None
    assert r["updated_at"] > before["updated_at"]
    if expected == "queued":
        assert r["available_at"] == r["updated_at"]
        assert r["reserved_by"] is None and r["finished_at"] is None
        assert claim_one(conn, queue, "worker-B")["id"] == job_id
    elif expected == "manual_review":
        assert r["finished_at"] is None
        assert claim(conn, [queue]) == []
    else:
        assert r["finished_at"] == r["updated_at"]


def test_release_of_an_unstarted_attempt_requeues_without_counting_it(conn: Conn, queue: str) -> None:
    # started => false: claimed but never handed to a handler, so even a manual
    # job goes straight back to the queue and the attempt does not count.
    job_id = enqueue(conn, queue, recovery_policy="manual", max_attempts=1)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    assert one(conn, "SELECT pgfence.release(job_id => %s, attempt_token => %s, started => false)",
               (job_id, token)) == "queued"
    r = job(conn, job_id)
    assert (r["status"], r["attempts"], r["reclaim_count"]) == ("queued", 0, 0)
    assert r["available_at"] == r["updated_at"]
    for col in ("attempt_token", "reserved_by", "reserved_at", "heartbeat_at", "lease_expires_at", "finished_at"):
        assert r[col] is None, col
    c = claim_one(conn, queue, "worker-B")
    assert (c["id"], c["attempts"]) == (job_id, 1)


def test_release_twice_is_accepted_and_changes_nothing(conn: Conn, queue: str) -> None:
    """Like complete and fail: a worker retrying a release whose reply it lost must not
    be told (and recorded as) a stale worker."""
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    assert release(conn, job_id, token) == "queued"
    before = job(conn, job_id)
    assert release(conn, job_id, token) == "queued"
    assert job(conn, job_id) == before
    assert one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.attempts WHERE job_id = %s", (job_id,)) == 1
    # Claimed again by another worker: the old token's repeat still changes nothing.
    new_token = claim_job(conn, queue, job_id, "worker-B")
    before = job(conn, job_id)
    assert release(conn, job_id, token) == "processing"
    assert job(conn, job_id) == before and before["attempt_token"] == new_token


def test_release_without_start_twice_is_refused_with_pf001(conn: Conn, queue: str) -> None:
    # started => false undoes the claim and leaves no attempt behind to recognise a repeat by.
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    assert one(conn, "SELECT pgfence.release(%s, %s, started => false)", (job_id, token)) == "queued"
    before = job(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.release(%s, %s, started => false)", (job_id, token))
    assert_error(err, "PF001", str(job_id), detail=True)
    assert job(conn, job_id) == before


# ------------------------------------------------------------------ requeue --
def _dead_letter(conn: Conn, queue: str, **kw: Any) -> int:
    job_id = enqueue(conn, queue, **kw)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "dead", permanent=True) == "failed"
    return job_id


def _manual_review(conn: Conn, queue: str) -> int:
    job_id = enqueue(conn, queue, recovery_policy="manual")
    token = claim_job(conn, queue, job_id)
    assert release(conn, job_id, token) == "manual_review"
    return job_id


def _cancelled(conn: Conn, queue: str) -> int:
    job_id = enqueue(conn, queue)
    conn.execute("SELECT pgfence.cancel(%s)", (job_id,))
    return job_id


def _processing(conn: Conn, queue: str) -> int:
    job_id = enqueue(conn, queue)
    claim_job(conn, queue, job_id, lease="1 hour")
    return job_id


def _done(conn: Conn, queue: str) -> int:
    job_id = enqueue(conn, queue)
    complete(conn, job_id, claim_job(conn, queue, job_id))
    return job_id


MAKE_STATE = {
    "queued": enqueue,
    "processing": _processing,
    "done": _done,
    "failed": _dead_letter,
    "manual_review": _manual_review,
    "cancelled": _cancelled,
}


@pytest.mark.parametrize("state", ["failed", "manual_review", "cancelled"])
def test_requeue_puts_job_back_in_queue_runnable_now(conn: Conn, queue: str, state: str) -> None:
    job_id = MAKE_STATE[state](conn, queue)
    before = job(conn, job_id)
    assert before["status"] == state
    t0 = now(conn)
    conn.execute("SELECT pgfence.requeue(job_id => %s)", (job_id,))
    t1 = now(conn)
    r = job(conn, job_id)
    assert r["status"] == "queued"
    assert t0 <= r["updated_at"] <= t1 and r["available_at"] == r["updated_at"]
    for col in ("attempt_token", "reserved_by", "reserved_at", "heartbeat_at", "lease_expires_at", "finished_at"):
        assert r[col] is None, col
    assert r["attempts"] == before["attempts"]  # history kept
    c = claim_one(conn, queue, "worker-B")
    assert c["id"] == job_id
    assert c["attempts"] == before["attempts"] + 1
    assert c["attempt_token"] != before["attempt_token"]


def test_requeue_gives_an_exhausted_job_one_more_attempt(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=1)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token) == "failed"
    conn.execute("SELECT pgfence.requeue(%s)", (job_id,))
    r = job(conn, job_id)
    assert (r["status"], r["attempts"], r["max_attempts"]) == ("queued", 1, 2)
    token2 = claim_job(conn, queue, job_id)
    # the extra attempt is the last one: failing it dead-letters again
    assert fail(conn, job_id, token2) == "failed"


@pytest.mark.parametrize("state", ["queued", "processing", "done"])
def test_requeue_refuses_other_states_with_pf003(conn: Conn, queue: str, state: str) -> None:
    job_id = MAKE_STATE[state](conn, queue)
    before = job(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.requeue(%s)", (job_id,))
    assert_error(err, "PF003", str(job_id))
    assert state in (err.diag.message_primary or "")
    assert job(conn, job_id) == before


def test_requeue_refuses_when_another_job_holds_the_idempotency_key(conn: Conn, queue: str) -> None:
    old = _dead_letter(conn, queue, idempotency_key="order-7")
    new = enqueue(conn, queue, idempotency_key="order-7")
    assert new != old
    before = job(conn, old)
    err = sql_error(conn, "SELECT pgfence.requeue(%s)", (old,))
    assert_error(err, "PF003", str(new))
    assert job(conn, old) == before
    assert queue_count(conn, queue, "queued") == 1


# ------------------------------------------------------------------- cancel --
@pytest.mark.parametrize("state", ["queued", "processing", "manual_review"])
def test_cancel_moves_job_to_cancelled(conn: Conn, queue: str, state: str) -> None:
    job_id = MAKE_STATE[state](conn, queue)
    t0 = now(conn)
    conn.execute("SELECT pgfence.cancel(job_id => %s)", (job_id,))
    t1 = now(conn)
    r = job(conn, job_id)
    assert r["status"] == "cancelled"
    assert t0 <= r["finished_at"] <= t1 and r["updated_at"] == r["finished_at"]
    assert r["attempt_token"] is None and r["lease_expires_at"] is None
    assert claim(conn, [queue], max_jobs=5) == []


@pytest.mark.parametrize("state", ["done", "failed", "cancelled"])
def test_cancel_refuses_finished_jobs_with_pf003(conn: Conn, queue: str, state: str) -> None:
    job_id = MAKE_STATE[state](conn, queue)
    before = job(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.cancel(%s)", (job_id,))
    assert_error(err, "PF003", str(job_id))
    assert state in (err.diag.message_primary or "")
    assert job(conn, job_id) == before


# ------------------------------------------------------------ unknown jobs --
UNKNOWN_CALLS = {
    "heartbeat": "SELECT pgfence.heartbeat(%(id)s, gen_random_uuid())",
    "complete": "SELECT pgfence.complete(%(id)s, gen_random_uuid(), '{}')",
    "fail": "SELECT pgfence.fail(%(id)s, gen_random_uuid(), 'boom')",
    "release": "SELECT pgfence.release(%(id)s, gen_random_uuid())",
    "requeue": "SELECT pgfence.requeue(%(id)s)",
    "cancel": "SELECT pgfence.cancel(%(id)s)",
}


@pytest.mark.parametrize("fn", sorted(UNKNOWN_CALLS))
def test_unknown_job_id_raises_pf002(conn: Conn, fn: str) -> None:
    err = sql_error(conn, UNKNOWN_CALLS[fn], {"id": UNKNOWN_ID})
    assert_error(err, "PF002", str(UNKNOWN_ID))
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = %s", (UNKNOWN_ID,)) == 0


@pytest.mark.parametrize("fn", ["heartbeat_many", "complete_many", "release_many", "fail_many"])
def test_batch_call_reports_unknown_job_as_refused_row(conn: Conn, fn: str) -> None:
    extra = ", errors => ARRAY['boom']" if fn == "fail_many" else ""
    res = conn.execute(
        f"SELECT id, accepted, status, detail FROM pgfence.{fn}(job_ids => %s, attempt_tokens => ARRAY[gen_random_uuid()]{extra})",
        ([UNKNOWN_ID],)).fetchall()
    assert res == [(UNKNOWN_ID, False, None, "the job does not exist")]


# ---------------------------------------- lease over, but nobody reclaimed it --
def test_heartbeat_after_expiry_before_reclaim_succeeds(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, token = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        t0 = now(tx_conn)
        expiry = heartbeat(tx_conn, job_id, token, lease="1 hour")
    r = job(conn, job_id)
    assert r["status"] == "processing" and r["attempt_token"] == token
    assert expiry == r["lease_expires_at"] > t0 + dt.timedelta(minutes=59)
    # the renewed lease is no longer reclaimable
    assert job_id not in reclaimed_ids(reclaim_expired(conn))
    assert job(conn, job_id)["status"] == "processing"


def test_complete_after_expiry_before_reclaim_succeeds(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, token = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        complete(tx_conn, job_id, token, {"late": True})
    r = job(conn, job_id)
    assert (r["status"], r["result"], r["reclaim_count"]) == ("done", {"late": True}, 0)
    assert job_id not in reclaimed_ids(reclaim_expired(conn))
    assert job(conn, job_id)["status"] == "done"


def test_fail_after_expiry_before_reclaim_succeeds(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, token = claim_short(conn, queue)
    with lease_expired_under_lock(tx_conn, job_id):
        assert fail(tx_conn, job_id, token, "late failure") == "queued"
    r = job(conn, job_id)
    assert (r["status"], r["last_error"], r["reclaim_count"]) == ("queued", "late failure", 0)


# ------------------------------------------------------ isolation of fenced calls --
FENCED_SINGLE_CALLS = {
    "heartbeat": "SELECT pgfence.heartbeat(%(id)s, %(token)s)",
    "complete": "SELECT pgfence.complete(%(id)s, %(token)s)",
    "fail": "SELECT pgfence.fail(%(id)s, %(token)s, 'e')",
    "release": "SELECT pgfence.release(%(id)s, %(token)s)",
    "complete_many": "SELECT * FROM pgfence.complete_many(ARRAY[%(id)s::bigint], ARRAY[%(token)s::uuid])",
}


@pytest.mark.parametrize("call", sorted(FENCED_SINGLE_CALLS))
def test_fenced_call_outside_read_committed_raises_pf004(
    conn: Conn, tx_conn: Conn, queue: str, call: str,
) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    before = job(conn, job_id)
    tx_conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    err = sql_error(tx_conn, FENCED_SINGLE_CALLS[call], {"id": job_id, "token": token})
    assert_error(err, "PF004", "repeatable read")
    assert job(conn, job_id) == before
