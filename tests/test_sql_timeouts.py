"""Run timeouts (issue 17): a job's timeout, distinct from its lease.

The deadline of an attempt is reserved_at + timeout: claim and heartbeat never set a
lease past it, the reclaim (sweeper, on-claim recovery, reclaim_expired) ends it as
``timed_out`` and the job follows its recovery_policy (auto: back to the queue after a
backoff while attempts remain, else failed; manual: manual_review); heartbeat,
complete and fail of that attempt get PF001 with a detail saying the timeout passed.
A queue's default (set_queue_timeout) is stored on the job at enqueue.
"""
from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import psycopg
import pytest

from support.api import claim, claim_job, complete, enqueue, heartbeat, reclaim_expired
from support.db import assert_error, job, one, rows, sql_error

pytestmark = pytest.mark.usefixtures("job_id_floor")

Conn = psycopg.Connection[Any]


def _timeout_of(conn: Conn, job_id: int) -> Any:
    return one(conn, "SELECT timeout FROM pgfence.jobs WHERE id = %s", (job_id,))


def _wait_deadline(conn: Conn, job_id: int) -> None:
    """Sleep (on the database clock) until the job's attempt is past its deadline."""
    conn.execute("SELECT pg_sleep(greatest(0, extract(epoch FROM reserved_at + timeout - clock_timestamp())) + 0.02)"
                 "  FROM pgfence.jobs WHERE id = %s", (job_id,))


def _wait_ended(conn: Conn, job_id: int, token: uuid.UUID) -> dict[str, Any]:
    """Until the attempt (job, token) is in the attempt history (the sweeper, or our own
    reclaim_expired, ended it); returns its row."""
    for _ in range(200):
        got = rows(conn, "SELECT * FROM pgfence.all_attempts WHERE job_id = %s AND attempt_token = %s",
                   (job_id, token))
        if got:
            return got[0]
        reclaim_expired(conn)
        time.sleep(0.02)
    raise AssertionError(f"attempt {token} of job {job_id} never ended")


# --------------------------------------------------------------- the lease --
def test_claim_caps_the_lease_at_the_run_timeout(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="2 seconds")
    plain = enqueue(conn, queue)
    [c] = claim(conn, [queue], lease="30 seconds")
    assert c["id"] == job_id
    got = rows(conn, "SELECT lease_expires_at - reserved_at AS held, timeout FROM pgfence.jobs WHERE id = %s",
               (job_id,))[0]
    assert got == {"held": dt.timedelta(seconds=2), "timeout": dt.timedelta(seconds=2)}
    assert c["lease_expires_at"] == job(conn, job_id)["lease_expires_at"]
    # A lease shorter than the timeout is the lease.
    [c2] = claim(conn, [queue], lease="1 second")
    assert c2["id"] == plain
    assert rows(conn, "SELECT lease_expires_at - reserved_at AS held FROM pgfence.jobs WHERE id = %s",
                (plain,)) == [{"held": dt.timedelta(seconds=1)}]
    short = enqueue(conn, queue, timeout="1 minute")
    claim_job(conn, queue, short, lease="5 seconds")
    assert rows(conn, "SELECT lease_expires_at - reserved_at AS held FROM pgfence.jobs WHERE id = %s",
                (short,)) == [{"held": dt.timedelta(seconds=5)}]


def test_heartbeats_never_extend_the_lease_past_the_deadline(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="3 seconds")
    token = claim_job(conn, queue, job_id, lease="1 second")
    deadline = one(conn, "SELECT reserved_at + timeout FROM pgfence.jobs WHERE id = %s", (job_id,))
    first = heartbeat(conn, job_id, token, lease="1 second")
    assert first < deadline  # the lease, shorter than what is left
    assert heartbeat(conn, job_id, token, lease="1 hour") == deadline
    [row] = rows(conn, "SELECT * FROM pgfence.heartbeat_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], '1 day')",
                 (job_id, token))
    assert (row["accepted"], row["lease_expires_at"]) == (True, deadline)
    assert job(conn, job_id)["lease_expires_at"] == deadline


# ---------------------------------------------------- how an attempt ends --
def test_a_timed_out_auto_job_goes_back_to_the_queue_after_a_backoff(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="300 milliseconds", max_attempts=3)
    token = claim_job(conn, queue, job_id, lease="30 seconds")
    _wait_deadline(conn, job_id)
    a = _wait_ended(conn, job_id, token)
    r = job(conn, job_id)
    assert (a["outcome"], a["error"], a["worker"]) == ("timed_out", "timed out after 00:00:00.3", "worker-A")
    assert a["lease_expires_at"] == a["claimed_at"] + dt.timedelta(milliseconds=300)
    assert a["ended_at"] >= a["lease_expires_at"]
    assert (r["status"], r["attempts"], r["last_error"], r["attempt_token"]) == (
        "queued", 1, "timed out after 00:00:00.3", None)
    assert r["available_at"] == a["ended_at"] + dt.timedelta(seconds=1)  # _backoff(1)
    assert r["reclaim_count"] == 1
    assert claim(conn, [queue]) == []  # not before its backoff


def test_a_timed_out_manual_job_waits_in_manual_review(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="200 milliseconds", recovery_policy="manual")
    token = claim_job(conn, queue, job_id)
    _wait_deadline(conn, job_id)
    assert _wait_ended(conn, job_id, token)["outcome"] == "timed_out"
    r = job(conn, job_id)
    assert (r["status"], r["last_error"]) == ("manual_review", "timed out after 00:00:00.2")


def test_a_timed_out_job_without_attempts_left_is_dead_lettered(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="200 milliseconds", max_attempts=1)
    token = claim_job(conn, queue, job_id)
    _wait_deadline(conn, job_id)
    assert _wait_ended(conn, job_id, token)["outcome"] == "timed_out"
    r = job(conn, job_id)
    assert (r["status"], r["finished_at"] is not None) == ("failed", True)


def test_an_expired_lease_before_the_deadline_is_reclaimed_not_timed_out(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="1 hour")
    token = claim_job(conn, queue, job_id, lease="200 milliseconds")
    conn.execute("SELECT pg_sleep(0.25)")
    a = _wait_ended(conn, job_id, token)
    assert (a["outcome"], job(conn, job_id)["status"]) == ("reclaimed", "queued")


# ----------------------------------------------- the stale calls: PF001 --
@pytest.mark.parametrize("call", ["heartbeat", "complete", "fail"])
def test_calls_of_a_timed_out_attempt_get_pf001_saying_so(conn: Conn, queue: str, call: str) -> None:
    job_id = enqueue(conn, queue, timeout="200 milliseconds")
    token = claim_job(conn, queue, job_id)
    _wait_deadline(conn, job_id)
    _wait_ended(conn, job_id, token)
    q = {"heartbeat": "SELECT pgfence.heartbeat(%s, %s)", "complete": "SELECT pgfence.complete(%s, %s)",
         "fail": "SELECT pgfence.fail(%s, %s, 'boom')"}[call]
    err = sql_error(conn, q, (job_id, token))
    assert_error(err, "PF001")
    assert err.diag.message_detail == ("the attempt timed out after 00:00:00.2 (its run timeout passed) and the job "
                                       "went back to the queue")


def test_complete_and_heartbeat_past_the_deadline_are_refused_before_any_reclaim(
        conn: Conn, queue: str, sweep_paused: Conn) -> None:
    """With the sweeper paused and no claim in between, the attempt is still processing
    when its calls arrive: they are refused all the same, and the batch call ends it."""
    job_id = enqueue(conn, queue, timeout="200 milliseconds")
    token = claim_job(conn, queue, job_id)
    _wait_deadline(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.complete(%s, %s, '{}')", (job_id, token))
    assert_error(err, "PF001")
    assert "timed out after 00:00:00.2" in (err.diag.message_detail or "")
    err = sql_error(conn, "SELECT pgfence.heartbeat(%s, %s)", (job_id, token))
    assert_error(err, "PF001")
    assert "timed out after 00:00:00.2" in (err.diag.message_detail or "")
    # (the single calls raised: their transaction, and the attempt's end in it, rolled back)
    [row] = rows(conn, "SELECT * FROM pgfence.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])",
                 (job_id, token))
    assert (row["accepted"], row["status"]) == (False, "queued")
    assert "timed out" in row["detail"]
    a = rows(conn, "SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (job_id,))
    assert a == [{"outcome": "timed_out"}]
    assert job(conn, job_id)["status"] == "queued"


def test_a_complete_before_the_deadline_wins(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="1 minute")
    token = claim_job(conn, queue, job_id)
    heartbeat(conn, job_id, token)
    complete(conn, job_id, token, {"ok": True})
    assert job(conn, job_id)["status"] == "done"
    assert rows(conn, "SELECT outcome FROM pgfence.all_attempts WHERE job_id = %s", (job_id,)) == [
        {"outcome": "done"}]


# ---------------------------------------------------- overlap and the caps --
def test_attempts_overlap_only_after_the_earlier_one_timed_out(conn: Conn, conn2: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="300 milliseconds", max_attempts=3)
    first = claim_job(conn, queue, job_id, "worker-A", lease="30 seconds")
    # worker-A keeps heartbeating: its lease still ends at the deadline.
    heartbeat(conn, job_id, first, lease="30 seconds")
    _wait_deadline(conn, job_id)
    conn.execute("SELECT pg_sleep(1.1)")  # the backoff after the timeout
    got: list[dict[str, Any]] = []
    for _ in range(100):
        got = claim(conn2, [queue], "worker-B")
        if got:
            break
        time.sleep(0.02)
    [c] = got
    assert c["id"] == job_id
    a, b = rows(conn, "SELECT * FROM pgfence.attempts WHERE job_id = %s ORDER BY attempt", (job_id,)) + [
        rows(conn, "SELECT * FROM pgfence.jobs WHERE id = %s", (job_id,))[0]]
    assert a["outcome"] == "timed_out" and a["attempt_token"] == first
    assert b["reserved_by"] == "worker-B" and b["attempt_token"] == c["attempt_token"]
    # The earlier lease ended (its deadline) before the later attempt began.
    assert a["lease_expires_at"] == a["claimed_at"] + dt.timedelta(milliseconds=300)
    assert a["lease_expires_at"] <= a["ended_at"] <= b["reserved_at"]
    err = sql_error(conn, "SELECT pgfence.complete(%s, %s)", (job_id, first))
    assert_error(err, "PF001")


def test_a_concurrency_cap_counts_a_timed_out_attempt_as_ended(conn: Conn, conn2: Conn, queue: str) -> None:
    first = enqueue(conn, queue, timeout="300 milliseconds", priority=1)
    second = enqueue(conn, queue)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 1)", (queue,))
    try:
        token = claim_job(conn, queue, first, "worker-A")
        assert claim(conn2, [queue], "worker-B") == []  # the cap: one running
        _wait_deadline(conn, first)
        # The timed-out attempt ends (by this claim's own recovery, or by the sweeper
        # when it holds the row at that moment): that frees the slot.
        got: list[dict[str, Any]] = []
        for _ in range(100):
            got = claim(conn2, [queue], "worker-B")
            if got:
                break
            time.sleep(0.02)
        [c] = got
        assert c["id"] == second
        ended = rows(conn, "SELECT outcome, ended_at FROM pgfence.attempts WHERE job_id = %s AND attempt_token = %s",
                     (first, token))
        assert [e["outcome"] for e in ended] == ["timed_out"]
        assert ended[0]["ended_at"] <= job(conn, second)["reserved_at"]
    finally:
        conn.execute("SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))
        conn.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue,))


def test_claim_results_never_renews_past_the_deadline(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="2 seconds")
    rid = uuid.uuid4()
    [c] = claim(conn, [queue], "worker-A", lease="1 second", request_id=rid)
    [again] = rows(conn, "SELECT * FROM pgfence.claim_results('worker-A', ARRAY[%s]::uuid[], '1 hour')", (rid,))
    deadline = one(conn, "SELECT reserved_at + timeout FROM pgfence.jobs WHERE id = %s", (job_id,))
    assert (again["id"], again["lease_expires_at"]) == (c["id"], deadline)


# ------------------------------------------------------- per-queue default --
def test_a_queues_default_timeout_applies_to_jobs_enqueued_without_one(conn: Conn, queue: str) -> None:
    before = enqueue(conn, queue)
    conn.execute("SELECT pgfence.set_queue_timeout(%s, '5 minutes')", (queue,))
    try:
        assert rows(conn, "SELECT queue, timeout FROM pgfence.queue_timeouts() WHERE queue = %s", (queue,)) == [
            {"queue": queue, "timeout": dt.timedelta(minutes=5)}]
        default = enqueue(conn, queue)
        own = enqueue(conn, queue, timeout="2 seconds")
        batch = [r["id"] for r in rows(conn, "SELECT id FROM pgfence.enqueue_many(ARRAY['a','b'], queue => %s)",
                                       (queue,))]
        batch_own = one(conn, "SELECT id FROM pgfence.enqueue_many(ARRAY['a'], queue => %s, timeout => '1 day')",
                        (queue,))
        other = enqueue(conn, queue + "_other")
        assert _timeout_of(conn, before) is None  # enqueued before: kept its own (none)
        assert _timeout_of(conn, default) == dt.timedelta(minutes=5)
        assert _timeout_of(conn, own) == dt.timedelta(seconds=2)
        assert [_timeout_of(conn, i) for i in batch] == [dt.timedelta(minutes=5)] * 2
        assert _timeout_of(conn, batch_own) == dt.timedelta(hours=24)  # stored as a length of time
        assert _timeout_of(conn, other) is None
        conn.execute("SELECT pgfence.set_queue_timeout(%s, '1 minute')", (queue,))
        assert _timeout_of(conn, enqueue(conn, queue)) == dt.timedelta(minutes=1)
        assert _timeout_of(conn, default) == dt.timedelta(minutes=5)  # unchanged
    finally:
        conn.execute("SELECT pgfence.set_queue_timeout(%s, NULL)", (queue,))
    assert _timeout_of(conn, enqueue(conn, queue)) is None
    assert one(conn, "SELECT count(*) FROM pgfence.queue_timeouts WHERE queue = %s", (queue,)) == 0


# ---------------------------------------------------------------- bad input --
@pytest.mark.parametrize("value, state", [
    ("0", "22023"), ("-1 second", "22023"), ("31 days", "22023"), ("1 mon -29 days", "22023"),
    ("0.5 milliseconds", "22023"),
])
def test_a_bad_timeout_is_refused_naming_it_and_changes_nothing(conn: Conn, queue: str, value: str,
                                                               state: str) -> None:
    for q in ("SELECT pgfence.enqueue('k', queue => %(q)s, timeout => %(v)s::interval)",
              "SELECT pgfence.enqueue('k', queue => %(q)s, idempotency_key => 'x', timeout => %(v)s::interval)",
              "SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %(q)s, timeout => %(v)s::interval)",
              "SELECT pgfence.set_queue_timeout(%(q)s, %(v)s::interval)"):
        err = sql_error(conn, q, {"q": queue, "v": value})
        assert_error(err, state, "timeout")
        assert err.diag.message_hint
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.queue_timeouts WHERE queue = %s", (queue,)) == 0


def test_set_queue_timeout_checks_its_queue(conn: Conn) -> None:
    assert_error(sql_error(conn, "SELECT pgfence.set_queue_timeout(NULL, '1 minute')"), "22004", "queue")
    assert_error(sql_error(conn, "SELECT pgfence.set_queue_timeout('', '1 minute')"), "22023", "queue")


def test_the_timeout_bounds_are_inclusive(conn: Conn, queue: str) -> None:
    lo = enqueue(conn, queue, timeout="1 millisecond")
    hi = enqueue(conn, queue, timeout="30 days")
    assert (_timeout_of(conn, lo), _timeout_of(conn, hi)) == (dt.timedelta(milliseconds=1), dt.timedelta(days=30))


def test_a_complete_begun_before_the_deadline_wins_over_the_reclaim(dsn: str, conn: Conn, queue: str) -> None:
    """complete decides by the time it began: one that took the row before the deadline and
    commits after it wins; the reclaim meanwhile passes over the locked row (SKIP LOCKED)."""
    job_id = enqueue(conn, queue, timeout="300 milliseconds")
    token = claim_job(conn, queue, job_id)
    with psycopg.connect(dsn) as tx:  # (autocommit off: the transaction stays open)
        tx.execute("SELECT pgfence.complete(%s, %s, '{\"ok\": true}')", (job_id, token))
        _wait_deadline(conn, job_id)
        reclaim_expired(conn)
        assert job(conn, job_id)["status"] == "processing"  # (our transaction has not committed)
        tx.commit()
    r = job(conn, job_id)
    assert (r["status"], r["result"]) == ("done", {"ok": True})
    assert rows(conn, "SELECT outcome FROM pgfence.all_attempts WHERE job_id = %s", (job_id,)) == [
        {"outcome": "done"}]


def test_a_snooze_past_the_deadline_is_refused_and_the_attempt_times_out(
        conn: Conn, queue: str, sweep_paused: Conn) -> None:
    """A snooze must not launder a timed-out attempt into an uncounted one: before the
    review, a snooze that arrived after the deadline (the sweeper not there yet) was
    accepted, recorded the attempt snoozed, gave the job max_attempts + 1 and sent a
    manual job back to the queue instead of manual_review."""
    job_id = enqueue(conn, queue, timeout="200 milliseconds", recovery_policy="manual")
    token = claim_job(conn, queue, job_id)
    _wait_deadline(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.snooze(%s, %s, '1 second')", (job_id, token))
    assert_error(err, "PF001")
    assert "timed out after 00:00:00.2" in (err.diag.message_detail or "")
    [row] = rows(conn, "SELECT * FROM pgfence.snooze_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[],"
                       " ARRAY['1 second']::interval[])", (job_id, token))
    assert (row["accepted"], row["status"]) == (False, "manual_review")
    assert "timed out" in row["detail"]
    r = job(conn, job_id)
    assert (r["status"], r["max_attempts"], r["last_error"]) == ("manual_review", 3, "timed out after 00:00:00.2")
    assert rows(conn, "SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (job_id,)) == [
        {"outcome": "timed_out"}]


def test_a_snooze_before_the_deadline_is_accepted(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, timeout="1 minute")
    token = claim_job(conn, queue, job_id)
    assert one(conn, "SELECT pgfence.snooze(%s, %s, '1 second')", (job_id, token)) == "queued"
    assert rows(conn, "SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (job_id,)) == [
        {"outcome": "snoozed"}]
