"""snooze(job_id, attempt_token, delay): the job back to queued after delay, not a failure.

The attempt is recorded with outcome snoozed and its number (numbers stay unique); the
job gets one more attempt (max_attempts + 1), so the dead-letter rule counts only the
attempts that were not snoozed. Fenced like fail (PF001 for a stale token, refusals
recorded); at most 100 snoozes per job (limits(): snoozes_per_job), past that a snooze
fails the attempt."""
from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import psycopg
import pytest

from support.api import claim, claim_job, enqueue, fail, make_stale
from support.db import assert_error, job, one, rows, sql_error

Conn = psycopg.Connection[Any]


def _attempts(conn: Conn, job_id: int) -> list[tuple[int, str]]:
    return [(r["attempt"], r["outcome"]) for r in rows(conn, "SELECT * FROM pgfence.attempts_of(%s)", (job_id,))]


def _snooze(conn: Conn, job_id: int, token: uuid.UUID, delay: str) -> str:
    return str(one(conn, "SELECT pgfence.snooze(job_id => %s, attempt_token => %s, delay => %s::interval)",
                   (job_id, token, delay)))


def test_snooze_puts_the_job_back_queued_until_the_delay_and_records_the_attempt(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=1)
    token = claim_job(conn, queue, job_id)
    before = job(conn, job_id)
    assert _snooze(conn, job_id, token, "1 hour") == "queued"
    after = job(conn, job_id)
    assert (after["status"], after["attempts"], after["max_attempts"]) == ("queued", 1, 2)
    assert after["attempt_token"] is None and after["lease_expires_at"] is None and after["reserved_by"] is None
    assert after["last_error"] == before["last_error"]  # not an error
    assert dt.timedelta(minutes=59) < after["available_at"] - before["reserved_at"] < dt.timedelta(minutes=61)
    assert claim(conn, [queue]) == []  # not before the delay
    [a] = rows(conn, "SELECT * FROM pgfence.attempts_of(%s)", (job_id,))
    assert (a["attempt"], a["attempt_token"], a["worker"], a["outcome"], a["error"]) == (1, token, "worker-A",
                                                                                        "snoozed", None)


def test_a_snoozed_job_is_claimable_after_its_delay(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    _snooze(conn, job_id, token, "300 milliseconds")
    assert claim(conn, [queue]) == []
    time.sleep(0.4)
    [c] = claim(conn, [queue])
    assert (c["id"], c["attempts"]) == (job_id, 2)
    assert c["attempt_token"] != token


def test_a_snoozed_attempt_does_not_count_toward_the_dead_letter(conn: Conn, queue: str) -> None:
    """max_attempts 2: snoozed twice, then two failures are needed to dead-letter it."""
    job_id = enqueue(conn, queue, max_attempts=2)
    for _ in range(2):
        _snooze(conn, job_id, claim_job(conn, queue, job_id), "1 millisecond")
        time.sleep(0.01)
    assert fail(conn, job_id, claim_job(conn, queue, job_id), retry_in="0") == "queued"  # one failure: retried
    time.sleep(0.01)
    assert fail(conn, job_id, claim_job(conn, queue, job_id)) == "failed"  # the second: dead letter
    assert _attempts(conn, job_id) == [(1, "snoozed"), (2, "snoozed"), (3, "failed"), (4, "failed")]
    final = job(conn, job_id)
    assert (final["status"], final["attempts"], final["max_attempts"]) == ("failed", 4, 4)


def test_a_repeated_snooze_by_its_token_is_accepted_and_changes_nothing(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    _snooze(conn, job_id, token, "1 hour")
    before = job(conn, job_id)
    assert _snooze(conn, job_id, token, "1 minute") == "queued"  # a retry after a lost reply
    assert job(conn, job_id) == before
    assert _attempts(conn, job_id) == [(1, "snoozed")]
    assert one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,)) == 0


def test_past_the_cap_a_snooze_fails_the_attempt(conn: Conn, queue: str) -> None:
    cap = one(conn, "SELECT value FROM pgfence.limits() WHERE name = 'snoozes_per_job'")
    assert cap == 100
    job_id = enqueue(conn, queue, max_attempts=1)
    ids, tokens = [job_id], []
    for _ in range(cap):
        token = claim_job(conn, queue, job_id)
        assert one(conn, "SELECT status FROM pgfence.snooze_many(%s, %s, ARRAY['1 microsecond'::interval])",
                   (ids, [token])) == "queued"
        tokens.append(token)
    token = claim_job(conn, queue, job_id)
    [r] = rows(conn, "SELECT * FROM pgfence.snooze_many(%s, %s, ARRAY['1 minute'::interval])", (ids, [token]))
    # the one failure max_attempts 1 allows: dead letter
    assert (r["accepted"], r["status"]) == (True, "failed")
    assert "snooze limit reached" in r["detail"]
    final = job(conn, job_id)
    assert (final["status"], final["attempts"], final["max_attempts"]) == ("failed", cap + 1, cap + 1)
    assert final["last_error"].startswith(f"snooze limit reached: job {job_id} was snoozed {cap} times")
    history = _attempts(conn, job_id)
    assert history == [(n, "snoozed") for n in range(1, cap + 1)] + [(cap + 1, "failed")]
    # a repeat of that snooze (lost reply) is accepted and changes nothing
    assert _snooze(conn, job_id, token, "1 minute") == "failed"
    assert job(conn, job_id) == final


def test_past_the_cap_a_snooze_with_attempts_left_retries_after_its_delay(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=3)
    token = claim_job(conn, queue, job_id)
    # 100 snoozes recorded as if they had happened (the loop is in the test above)
    conn.execute("""INSERT INTO pgfence.attempts (job_id, queue, attempt, attempt_token, worker, claimed_at, ended_at,
                                                  outcome)
                    SELECT %s, %s, -n, gen_random_uuid(), 'w', now(), now(), 'snoozed' FROM generate_series(1, 100) n""",
                 (job_id, queue))
    assert _snooze(conn, job_id, token, "1 hour") == "queued"
    after = job(conn, job_id)
    assert (after["status"], after["attempts"], after["max_attempts"]) == ("queued", 1, 3)
    assert after["last_error"].startswith("snooze limit reached")
    assert after["available_at"] > after["updated_at"] + dt.timedelta(minutes=59)
    assert _attempts(conn, job_id)[-1] == (1, "failed")


# ------------------------------------------------------------------- fence --
def test_a_stale_worker_cannot_snooze_after_takeover_and_its_refusal_is_recorded(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, stale, current = make_stale(conn, tx_conn, queue)
    before = job(conn, job_id)
    err = sql_error(conn, "SELECT pgfence.snooze(%s, %s, '1 minute')", (job_id, stale))
    assert_error(err, "PF001", str(job_id), detail=True)
    assert "worker-B" in (err.diag.message_detail or "")
    assert job(conn, job_id) == before
    conn.execute("SELECT pgfence.report_rejection(%s, %s, 'snooze')", (job_id, stale))
    [r] = rows(conn, "SELECT * FROM pgfence.snooze_many(%s, %s, ARRAY['1 minute'::interval])", ([job_id], [stale]))
    assert (r["accepted"], r["status"]) == (False, "processing") and "worker-B" in r["detail"]
    assert job(conn, job_id) == before
    assert [x["operation"] for x in rows(conn, "SELECT * FROM pgfence.rejections_of(%s)", (job_id,))] == [
        "snooze", "snooze"]
    assert _snooze(conn, job_id, current, "1 minute") == "queued"  # the holder still can


def test_a_zombie_cannot_snooze_a_job_completed_by_another_attempt(
    sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    job_id, stale, current = make_stale(conn, tx_conn, queue)
    conn.execute("SELECT pgfence.complete(%s, %s)", (job_id, current))
    err = sql_error(conn, "SELECT pgfence.snooze(%s, %s, '1 minute')", (job_id, stale))
    assert_error(err, "PF001", str(job_id), detail=True)
    assert job(conn, job_id)["status"] == "done"


def test_snooze_many_snoozes_only_the_current_rows(sweep_paused: Conn, conn: Conn, tx_conn: Conn, queue: str) -> None:
    mine = enqueue(conn, queue, priority=5)
    t_mine = claim_job(conn, queue, mine, lease="1 hour")
    job_id, stale, _current = make_stale(conn, tx_conn, queue)
    got = rows(conn, "SELECT * FROM pgfence.snooze_many(%s, %s, ARRAY['1 hour', '1 hour']::interval[])",
               ([job_id, mine], [stale, t_mine]))
    assert [(g["id"], g["accepted"], g["status"]) for g in got] == [(job_id, False, "processing"),
                                                                     (mine, True, "queued")]
    assert job(conn, mine)["status"] == "queued"


# --------------------------------------------------------------- bad input --
@pytest.mark.parametrize("args, sqlstate, names", [
    ("NULL::bigint, %(tok)s, '1 minute'", "22004", "job_id"),
    ("%(id)s, NULL::uuid, '1 minute'", "22004", "attempt_token"),
    ("%(id)s, %(tok)s, NULL", "22004", "delay"),
    ("%(id)s, %(tok)s, '0'", "22023", "delay"),
    ("%(id)s, %(tok)s, '-1 second'", "22023", "delay"),
    ("%(id)s, %(tok)s, '366 days'", "22023", "delay"),
    ("%(id)s, %(tok)s, '1 day -23 hours'", "22023", "delay"),
])  # (each delay is cast: snooze(bigint, uuid, interval))
def test_snooze_refuses_bad_input_and_changes_nothing(conn: Conn, queue: str, args: str, sqlstate: str,
                                                      names: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    before = job(conn, job_id)
    assert_error(sql_error(conn, f"SELECT pgfence.snooze({args}::interval)", {"id": job_id, "tok": token}),
                 sqlstate, names)
    assert job(conn, job_id) == before


@pytest.mark.parametrize("delays, sqlstate, names", [
    (None, "22004", "delays"),
    (["1 minute", "1 minute"], "22023", "delays length"),
    ([None], "22004", "delays[1]"),
    (["0"], "22023", "delays[1]"),
])
def test_snooze_many_refuses_bad_delays(conn: Conn, queue: str, delays: Any, sqlstate: str, names: str) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id)
    before = job(conn, job_id)
    assert_error(sql_error(conn, "SELECT * FROM pgfence.snooze_many(%s, %s, %s::interval[])",
                           ([job_id], [token], delays)), sqlstate, names)
    assert job(conn, job_id) == before


def test_snooze_needs_read_committed(tx_conn: Conn, queue: str) -> None:
    job_id = enqueue(tx_conn, queue)
    token = claim_job(tx_conn, queue, job_id)
    tx_conn.commit()
    tx_conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    assert_error(sql_error(tx_conn, "SELECT pgfence.snooze(%s, %s, '1 minute')", (job_id, token)), "PF004")
