"""Unique jobs by state and period (issue 17), built on idempotency keys: unique_for.

NULL (the default): a done job holds its key for its retention, as before. 0: the key
is held only while the job is queued, processing or in manual_review. A period: held
while live and, once done, until created_at + unique_for. failed and cancelled free the
key at once, whatever unique_for says (as before).
"""
from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import psycopg
import pytest

from support.api import claim_job, complete, enqueue
from support.db import assert_error, connect, job, one, rows, sql_error

pytestmark = pytest.mark.usefixtures("job_id_floor")

Conn = psycopg.Connection[Any]


def _done(conn: Conn, queue: str, job_id: int) -> None:
    complete(conn, job_id, claim_job(conn, queue, job_id))


def test_unique_for_zero_holds_the_key_only_while_the_job_is_live(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k", unique_for="0")
    assert enqueue(conn, queue, idempotency_key="k", unique_for="0") == first  # queued
    token = claim_job(conn, queue, first)
    assert enqueue(conn, queue, idempotency_key="k") == first  # processing
    complete(conn, first, token)
    assert one(conn, "SELECT count(*) FROM pgfence.held_keys WHERE queue = %s", (queue,)) == 0
    second = enqueue(conn, queue, idempotency_key="k", unique_for="0")
    assert second != first
    assert job(conn, first)["status"] == "done" and job(conn, second)["status"] == "queued"


def test_unique_for_zero_holds_the_key_in_manual_review(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k", unique_for="0", recovery_policy="manual")
    token = claim_job(conn, queue, first)
    assert one(conn, "SELECT pgfence.release(%s, %s)", (first, token)) == "manual_review"
    assert enqueue(conn, queue, idempotency_key="k", unique_for="0") == first


def test_unique_for_a_period_holds_a_done_jobs_key_until_created_at_plus_it(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k", unique_for="1 hour")
    _done(conn, queue, first)
    [held] = rows(conn, "SELECT job_id, held_until - %s::timestamptz AS after FROM pgfence.held_keys"
                        " WHERE queue = %s", (job(conn, first)["created_at"], queue))
    assert held == {"job_id": first, "after": dt.timedelta(hours=1)}
    assert enqueue(conn, queue, idempotency_key="k") == first
    assert one(conn, "SELECT created FROM pgfence.enqueue_many(ARRAY['k'], queue => %s,"
                     " idempotency_keys => ARRAY['k'])", (queue,)) is False
    # The hour over (the time passed): free at once, without waiting for the purge.
    conn.execute("UPDATE pgfence.held_keys SET held_until = clock_timestamp() - interval '1 second'"
                 " WHERE queue = %s", (queue,))
    second = enqueue(conn, queue, idempotency_key="k", unique_for="1 hour")
    assert second != first
    [row] = rows(conn, "SELECT id, created FROM pgfence.enqueue_many(ARRAY['k'], queue => %s,"
                       " idempotency_keys => ARRAY['k'])", (queue,))
    assert (row["id"], row["created"]) == (second, False)  # the live one holds it


def test_a_job_done_after_its_period_holds_no_key(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k", unique_for="100 milliseconds")
    token = claim_job(conn, queue, first)
    conn.execute("SELECT pg_sleep(0.15)")
    complete(conn, first, token)
    assert one(conn, "SELECT count(*) FROM pgfence.held_keys WHERE queue = %s", (queue,)) == 0
    assert enqueue(conn, queue, idempotency_key="k") != first


def test_without_unique_for_a_done_job_holds_its_key_as_before(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k")
    _done(conn, queue, first)
    assert rows(conn, "SELECT job_id, held_until FROM pgfence.held_keys WHERE queue = %s", (queue,)) == [
        {"job_id": first, "held_until": None}]
    assert enqueue(conn, queue, idempotency_key="k", unique_for="0") == first


@pytest.mark.parametrize("end", ["cancel", "fail"])
def test_failed_and_cancelled_free_the_key_whatever_unique_for_says(conn: Conn, queue: str, end: str) -> None:
    first = enqueue(conn, queue, idempotency_key="k", unique_for="1 day", max_attempts=1)
    if end == "cancel":
        conn.execute("SELECT pgfence.cancel(%s)", (first,))
    else:
        token = claim_job(conn, queue, first)
        assert one(conn, "SELECT pgfence.fail(%s, %s, 'boom')", (first, token)) == "failed"
    assert enqueue(conn, queue, idempotency_key="k", unique_for="1 day") != first


@pytest.mark.parametrize("unique_for", ["0", "1 hour"])
def test_concurrent_same_key_enqueues_with_unique_for_create_one_job(dsn: str, conn: Conn, queue: str,
                                                                     unique_for: str) -> None:
    n = 8
    barrier = threading.Barrier(n)
    ids: list[int] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            with connect(dsn) as c:
                barrier.wait(10)
                ids.append(enqueue(c, queue, idempotency_key="race", unique_for=unique_for))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert len(ids) == n and len(set(ids)) == 1
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)) == 1


@pytest.mark.parametrize("value", ["-1 second", "1 mon -29 days", "36526 days"])
def test_a_bad_unique_for_is_refused_naming_it_and_changes_nothing(conn: Conn, queue: str, value: str) -> None:
    for q in ("SELECT pgfence.enqueue('k', queue => %(q)s, idempotency_key => 'x', unique_for => %(v)s::interval)",
              "SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %(q)s, unique_for => %(v)s::interval)"):
        err = sql_error(conn, q, {"q": queue, "v": value})
        assert_error(err, "22023", "unique_for")
        assert err.diag.message_hint
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)) == 0


@pytest.mark.parametrize("value", ["101 years", "100 years 1 mon", "36526 days", "10 years 32900 days"])
@pytest.mark.parametrize("many", [False, True])
def test_a_unique_for_over_100_years_in_years_is_refused_as_22023(conn: Conn, queue: str, value: str,
                                                                    many: bool) -> None:
    """Years compare as 360 days (12 months of 30) but are stored at 365.25 days: before
    the review '101 years' passed the argument check and then broke the table's CHECK
    (23514, naming no argument), and with a key '100 years' itself did."""
    q = ("SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %s, idempotency_keys => ARRAY['u'],"
         " unique_for => %s::interval)" if many else
         "SELECT pgfence.enqueue('k', queue => %s, idempotency_key => 'u', unique_for => %s::interval)")
    err = sql_error(conn, q, (queue, value))
    assert_error(err, "22023")
    assert "unique_for" in (err.diag.message_primary or "") and err.diag.message_hint
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s", (queue,)) == 0


@pytest.mark.parametrize("value", ["100 years", "36525 days", "99 years 11 mons"])
def test_unique_for_of_100_years_is_accepted_with_a_key(conn: Conn, queue: str, value: str) -> None:
    job_id = enqueue(conn, queue, idempotency_key="u", unique_for=value)
    assert one(conn, "SELECT unique_for FROM pgfence.jobs WHERE id = %s", (job_id,)) <= dt.timedelta(days=36525)


@pytest.mark.parametrize("call", [
    "SELECT pgfence.enqueue('k', queue => %(q)s, unique_for => '1 hour')",
    "SELECT * FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %(q)s, unique_for => '0')",
    "SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %(q)s, idempotency_keys => ARRAY[NULL],"
    " unique_for => '1 hour')",
])
def test_unique_for_without_an_idempotency_key_is_refused_and_changes_nothing(conn: Conn, queue: str,
                                                                               call: str) -> None:
    """unique_for is how long a done job holds its key: without a key it changed nothing
    (the job was made, the period dropped), so a caller who forgot the key got duplicates."""
    err = sql_error(conn, call, {"q": queue})
    assert_error(err, "22023", "unique_for")
    assert "idempotency" in (err.diag.message_primary or "") and "idempotency_key" in (err.diag.message_hint or "")
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s", (queue,)) == 0


def test_unique_for_in_a_batch_applies_to_the_jobs_with_a_key(conn: Conn, queue: str) -> None:
    got = conn.execute("SELECT id, created FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %s,"
                       " idempotency_keys => ARRAY['a', NULL], unique_for => '1 hour') ORDER BY ordinal",
                       (queue,)).fetchall()
    assert [created for _, created in got] == [True, True]
    assert [one(conn, "SELECT unique_for FROM pgfence.jobs WHERE id = %s", (i,)) for i, _ in got] \
        == [dt.timedelta(hours=1), None]


def test_a_batch_that_made_no_job_sends_no_wake_up(dsn: str, conn: Conn, queue: str) -> None:
    conn.execute("SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %s, idempotency_keys => ARRAY['held'])",
                 (queue,))
    with connect(dsn) as listener:
        listener.execute("LISTEN pgfence_enqueue")
        conn.execute("SELECT * FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %s,"
                     " idempotency_keys => ARRAY['held', 'held'])", (queue,))
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        conn.execute("SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %s, idempotency_keys => ARRAY['new'])",
                     (queue,))
        assert len(list(listener.notifies(timeout=5, stop_after=1))) == 1
