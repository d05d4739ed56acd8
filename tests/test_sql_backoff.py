"""The retry schedule: 1 s * 2^(attempts-1), capped at 5 minutes, through fail()
and through pgfence._backoff for attempt counts no test could reach by claiming."""
from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest

from support.api import claim_job, enqueue, fail
from support.db import job, one

Conn = psycopg.Connection[Any]
SEC = dt.timedelta(seconds=1)
CAP = dt.timedelta(minutes=5)


@pytest.mark.parametrize(("attempt", "expected"), [
    (1, 1 * SEC), (2, 2 * SEC), (3, 4 * SEC), (4, 8 * SEC), (5, 16 * SEC), (6, 32 * SEC),
    (7, 64 * SEC), (8, 128 * SEC), (9, 256 * SEC), (10, CAP), (11, CAP),
])
def test_fail_backs_off_exponentially_up_to_five_minutes(conn: Conn, queue: str, attempt: int,
                                                         expected: dt.timedelta) -> None:
    job_id = enqueue(conn, queue, max_attempts=1000)
    # attempts 1 .. attempt-1 fail with retry_in 0 (runnable at once) ...
    for _ in range(attempt - 1):
        assert fail(conn, job_id, claim_job(conn, queue, job_id), retry_in="0 seconds") == "queued"
    # ... and attempt number `attempt` fails with the default backoff.
    token = claim_job(conn, queue, job_id)
    assert job(conn, job_id)["attempts"] == attempt
    assert fail(conn, job_id, token, "transient") == "queued"
    r = job(conn, job_id)
    assert r["available_at"] - r["updated_at"] == expected
    assert one(conn, "SELECT pgfence._backoff(%s)", (attempt,)) == expected


@pytest.mark.parametrize(("attempts", "expected"), [
    (1, 1 * SEC), (9, 256 * SEC), (10, CAP), (20, CAP), (21, CAP), (22, CAP), (31, CAP), (32, CAP),
    (64, CAP), (1000, CAP), (1_000_000, CAP), (2147483646, CAP), (2147483647, CAP),
])
def test_backoff_is_capped_without_overflow(conn: Conn, attempts: int, expected: dt.timedelta) -> None:
    assert one(conn, "SELECT pgfence._backoff(%s::integer)", (attempts,)) == expected


@pytest.mark.parametrize("attempts", [0, -1, -2147483648])
def test_backoff_for_non_positive_attempts_is_one_second(conn: Conn, attempts: int) -> None:
    assert one(conn, "SELECT pgfence._backoff(%s::integer)", (attempts,)) == SEC


def test_retry_in_is_used_instead_of_backoff_even_when_longer_than_the_cap(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, max_attempts=5)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, retry_in="2 days") == "queued"
    r = job(conn, job_id)
    assert r["available_at"] - r["updated_at"] == dt.timedelta(days=2)
