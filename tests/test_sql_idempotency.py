"""Idempotency keys (enqueue and enqueue_many), enqueue in the caller's
transaction, and enqueue_many's ordering and created flags."""
from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from support.api import claim_job, complete, enqueue, fail, release, start_blocked
from support.db import assert_error, connect, in_queue_sql, job, one, queue_count, queue_jobs, rows
from support.workers import start_and_join

# Queue lookups scan only this test's jobs (by primary key range): see support.db.
pytestmark = pytest.mark.usefixtures("job_id_floor")


Conn = psycopg.Connection[Any]


def _key_rows(conn: Conn, queue: str, key: str) -> list[dict[str, Any]]:
    return rows(conn, f"SELECT * FROM pgfence.jobs WHERE {in_queue_sql()} AND idempotency_key = %s ORDER BY id",
                (queue, key))


# ------------------------------------------------------------------ enqueue --
def test_same_key_twice_returns_the_same_job(conn: Conn, queue: str) -> None:
    first = enqueue(conn, queue, "k1", payload={"v": 1}, idempotency_key="order-1")
    second = enqueue(conn, queue, "k2", payload={"v": 2}, priority=5, idempotency_key="order-1")
    assert second == first
    [r] = _key_rows(conn, queue, "order-1")
    assert (r["id"], r["kind"], r["payload"], r["priority"]) == (first, "k1", {"v": 1}, 0)
    assert queue_count(conn, queue) == 1


def test_concurrent_same_key_enqueues_create_one_job(dsn: str, conn: Conn, queue: str) -> None:
    n_threads, keys = 8, [f"key-{i}" for i in range(10)]
    barrier = threading.Barrier(n_threads)
    got: dict[str, list[int]] = {k: [] for k in keys}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueuer(n: int) -> None:
        try:
            with connect(dsn) as c:
                c.execute("SET statement_timeout = '30s'")
                for k in keys:
                    barrier.wait(timeout=30)
                    # In a transaction that stays open a little, so the others
                    # really hit the uncommitted row of whoever inserted first.
                    with c.transaction():
                        i = one(c, "SELECT pgfence.enqueue('k', queue => %s, idempotency_key => %s,"
                                   " payload => %s)", (queue, k, Jsonb({"thread": n})))
                        c.execute("SELECT pg_sleep(0.05)")
                    with lock:
                        got[k].append(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=enqueuer, args=(n,)) for n in range(n_threads)]
    start_and_join(threads, 120)
    assert errors == []  # in particular no 23505 unique_violation
    for k in keys:
        assert len(got[k]) == n_threads
        assert len(set(got[k])) == 1, f"{k}: {got[k]}"
        [r] = _key_rows(conn, queue, k)
        assert r["id"] == got[k][0]
    assert queue_count(conn, queue) == len(keys)


@pytest.mark.parametrize("how", ["fail", "fail_permanent", "cancel"])
def test_key_is_free_again_after_failed_or_cancelled(conn: Conn, queue: str, how: str) -> None:
    old = enqueue(conn, queue, max_attempts=1, idempotency_key="k")
    if how == "cancel":
        conn.execute("SELECT pgfence.cancel(%s)", (old,))
        final = "cancelled"
    else:
        token = claim_job(conn, queue, old)
        assert fail(conn, old, token, permanent=(how == "fail_permanent")) == "failed"
        final = "failed"
    new = enqueue(conn, queue, idempotency_key="k")
    assert new != old
    assert [(r["id"], r["status"]) for r in _key_rows(conn, queue, "k")] == [(old, final), (new, "queued")]
    assert enqueue(conn, queue, idempotency_key="k") == new


@pytest.mark.parametrize("state", ["processing", "done", "manual_review", "queued_after_retry"])
def test_key_stays_held_while_job_is_live_or_done(conn: Conn, queue: str, state: str) -> None:
    job_id = enqueue(conn, queue, idempotency_key="k",
                     recovery_policy="manual" if state == "manual_review" else "auto")
    token = claim_job(conn, queue, job_id, lease="1 hour")
    if state == "done":
        complete(conn, job_id, token)
    elif state == "manual_review":
        assert release(conn, job_id, token) == "manual_review"
    elif state == "queued_after_retry":
        assert fail(conn, job_id, token, retry_in="1 hour") == "queued"
    assert enqueue(conn, queue, idempotency_key="k") == job_id
    assert queue_count(conn, queue) == 1


def test_idempotency_keys_are_per_queue(conn: Conn, queue: str) -> None:
    a = enqueue(conn, queue, idempotency_key="shared")
    b = enqueue(conn, f"{queue}_other", idempotency_key="shared")
    assert a != b
    assert enqueue(conn, queue, idempotency_key="shared") == a
    assert enqueue(conn, f"{queue}_other", idempotency_key="shared") == b
    assert queue_count(conn, queue) == 1 and queue_count(conn, f"{queue}_other") == 1


def test_enqueue_joins_the_callers_transaction(tx_conn: Conn, conn: Conn, queue: str) -> None:
    plain = one(tx_conn, "SELECT pgfence.enqueue('k', queue => %s)", (queue,))
    keyed = one(tx_conn, "SELECT pgfence.enqueue('k', queue => %s, idempotency_key => 'rb')", (queue,))
    assert plain != keyed
    assert queue_count(conn, queue) == 0  # not visible to others before commit
    tx_conn.rollback()
    assert queue_count(conn, queue) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id IN (%s, %s)", (plain, keyed)) == 0
    # the rolled-back key holds nothing
    again = enqueue(conn, queue, idempotency_key="rb")
    assert again not in (plain, keyed)
    assert queue_count(conn, queue) == 1


def test_enqueue_many_rolled_back_leaves_nothing(tx_conn: Conn, conn: Conn, queue: str) -> None:
    tx_conn.execute("SELECT * FROM pgfence.enqueue_many(ARRAY['a','b','c'], queue => %s,"
                    " idempotency_keys => ARRAY['x', NULL, 'y'])", (queue,))
    tx_conn.rollback()
    assert queue_count(conn, queue) == 0


# ------------------------------------------------------------- enqueue_many --
def _many(conn: Conn, queue: str, kinds: list[str], **arrays: Any) -> list[dict[str, Any]]:
    args = ["kinds => %(kinds)s", "queue => %(queue)s"]
    params: dict[str, Any] = {"kinds": kinds, "queue": queue}
    for name, value in arrays.items():
        cast = {"payloads": "::jsonb[]", "run_ats": "::timestamptz[]", "idempotency_keys": "::text[]",
                "priorities": "::integer[]"}.get(name, "")
        args.append(f"{name} => %({name})s{cast}")
        params[name] = value
    return rows(conn, f"SELECT * FROM pgfence.enqueue_many({', '.join(args)})", params)


def test_enqueue_many_returns_one_row_per_input_in_input_order(conn: Conn, queue: str) -> None:
    kinds = ["e", "d", "c", "b", "a"]
    res = _many(conn, queue, kinds, payloads=[Jsonb({"i": i}) for i in range(5)], priorities=[5, 4, 3, 2, 1])
    assert [r["ordinal"] for r in res] == [1, 2, 3, 4, 5]
    assert all(r["created"] for r in res)
    assert len({r["id"] for r in res}) == 5
    for i, r in enumerate(res):
        row = job(conn, r["id"])
        assert (row["kind"], row["payload"], row["priority"], row["status"]) == (kinds[i], {"i": i}, 5 - i, "queued")
    assert queue_count(conn, queue) == 5


def test_enqueue_many_defaults_and_run_ats(conn: Conn, queue: str) -> None:
    later = one(conn, "SELECT clock_timestamp() + interval '1 hour'")
    res = _many(conn, queue, ["a", "b"], run_ats=[None, later])
    a, b = (job(conn, r["id"]) for r in res)
    assert (a["payload"], a["priority"], a["max_attempts"], a["recovery_policy"]) == ({}, 0, 3, "auto")
    assert a["available_at"] == a["created_at"]
    assert b["available_at"] == later


def test_enqueue_many_duplicate_keys_in_one_batch_resolve_to_the_first(conn: Conn, queue: str) -> None:
    res = _many(conn, queue, ["a", "b", "c", "d", "e"], idempotency_keys=["x", "y", "x", None, "x"])
    ids = [r["id"] for r in res]
    assert [r["ordinal"] for r in res] == [1, 2, 3, 4, 5]
    assert ids[0] == ids[2] == ids[4]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert [r["created"] for r in res] == [True, True, False, True, False]
    assert job(conn, ids[0])["kind"] == "a"  # the first element's job
    assert [r["kind"] for r in _key_rows(conn, queue, "x")] == ["a"]
    assert queue_count(conn, queue) == 3


def test_enqueue_many_reports_existing_keys_as_not_created(conn: Conn, queue: str) -> None:
    existing = enqueue(conn, queue, "old", idempotency_key="k1")
    res = _many(conn, queue, ["new1", "plain", "new2"], idempotency_keys=["k1", None, "k2"])
    assert [(r["ordinal"], r["created"]) for r in res] == [(1, False), (2, True), (3, True)]
    assert res[0]["id"] == existing
    assert job(conn, existing)["kind"] == "old"
    assert job(conn, res[2]["id"])["idempotency_key"] == "k2"
    assert job(conn, res[1]["id"])["idempotency_key"] is None
    assert queue_count(conn, queue) == 3


def test_enqueue_many_mixes_keyed_and_unkeyed_jobs(conn: Conn, queue: str) -> None:
    kinds = ["p1", "k1", "p2", "k2", "p3", "k1dup"]
    keys = [None, "a", None, "b", None, "a"]
    res = _many(conn, queue, kinds, idempotency_keys=keys, payloads=[Jsonb({"n": i}) for i in range(6)])
    assert [r["ordinal"] for r in res] == [1, 2, 3, 4, 5, 6]
    assert [r["created"] for r in res] == [True, True, True, True, True, False]
    ids = [r["id"] for r in res]
    assert ids[5] == ids[1] and len(set(ids)) == 5
    for i in range(5):
        row = job(conn, ids[i])
        assert (row["kind"], row["idempotency_key"], row["payload"]) == (kinds[i], keys[i], {"n": i})
    assert queue_count(conn, queue) == 5


def test_enqueue_many_keys_are_per_queue(conn: Conn, queue: str) -> None:
    a = _many(conn, queue, ["a"], idempotency_keys=["same"])
    b = _many(conn, f"{queue}_other", ["b"], idempotency_keys=["same"])
    assert a[0]["created"] and b[0]["created"] and a[0]["id"] != b[0]["id"]


def test_enqueue_and_enqueue_many_share_the_key_space(conn: Conn, queue: str) -> None:
    res = _many(conn, queue, ["a"], idempotency_keys=["shared"])
    assert enqueue(conn, queue, idempotency_key="shared") == res[0]["id"]
    assert queue_jobs(conn, queue)[0]["kind"] == "a" and queue_count(conn, queue) == 1


# ------------------------------------------------------- requeue and the key --
def _dead_lettered_with_key(conn: Conn, queue: str, key: str) -> int:
    job_id = enqueue(conn, queue, max_attempts=1, idempotency_key=key)
    token = claim_job(conn, queue, job_id)
    assert fail(conn, job_id, token, "dead") == "failed"
    return job_id


def test_requeue_racing_a_same_key_enqueue_is_refused_with_pf003(
    dsn: str, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    old = _dead_lettered_with_key(conn, queue, "k")
    # A producer enqueues the key again; its transaction is still open when the
    # operator requeues the old job.
    new = one(tx_conn, "SELECT pgfence.enqueue('k', queue => %s, idempotency_key => 'k')", (queue,))
    requeue = start_blocked(dsn, conn, "SELECT pgfence.requeue(%s)", (old,))
    tx_conn.commit()
    requeue.finish()
    # The key stays unique whatever happens ...
    assert [(r["id"], r["status"]) for r in _key_rows(conn, queue, "k")] == [(old, "failed"), (new, "queued")]
    # ... and the operator gets the documented refusal.
    assert requeue.error is not None
    assert_error(requeue.error, "PF003", str(new))


def test_concurrent_requeues_of_two_jobs_with_one_key_refuse_the_second_with_pf003(
    dsn: str, conn: Conn, tx_conn: Conn, queue: str,
) -> None:
    first = _dead_lettered_with_key(conn, queue, "k")
    second = _dead_lettered_with_key(conn, queue, "k")
    tx_conn.execute("SELECT pgfence.requeue(%s)", (first,))
    requeue = start_blocked(dsn, conn, "SELECT pgfence.requeue(%s)", (second,))
    tx_conn.commit()
    requeue.finish()
    assert [(r["id"], r["status"]) for r in _key_rows(conn, queue, "k")] == [(first, "queued"), (second, "failed")]
    assert requeue.error is not None
    assert_error(requeue.error, "PF003", str(first))


def test_concurrent_enqueue_many_with_overlapping_keys_create_one_job_per_key(
    dsn: str, conn: Conn, queue: str,
) -> None:
    # Every thread sends the same keys in its own order (plus one key of its own),
    # in a transaction that stays open briefly: no deadlock, no unique violation,
    # and every thread resolves each key to the same job.
    n_threads, shared = 8, [f"k{i}" for i in range(20)]
    barrier = threading.Barrier(n_threads)
    got: dict[int, dict[str, int]] = {}
    errors: list[BaseException] = []

    def producer(n: int) -> None:
        keys = shared[n:] + shared[:n] + [f"own-{n}"]
        if n % 2:
            keys.reverse()
        try:
            with connect(dsn) as c:
                c.execute("SET statement_timeout = '30s'")
                barrier.wait(timeout=30)
                with c.transaction():
                    res = c.execute("SELECT ordinal, id FROM pgfence.enqueue_many(%s, queue => %s,"
                                    " idempotency_keys => %s)", ([f"t{n}"] * len(keys), queue, keys)).fetchall()
                    c.execute("SELECT pg_sleep(0.05)")
                got[n] = {keys[o - 1]: i for o, i in res}
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(n_threads)]
    start_and_join(threads, 120)
    assert errors == []
    for k in shared:
        ids = {got[n][k] for n in range(n_threads)}
        assert len(ids) == 1, f"{k}: {ids}"
        assert [r["id"] for r in _key_rows(conn, queue, k)] == list(ids)
    assert queue_count(conn, queue) == len(shared) + n_threads


def test_under_repeatable_read_a_same_key_enqueue_that_lost_the_race_raises_40001_and_a_retry_finds_the_job(
        dsn: str, conn: psycopg.Connection[Any], queue: str) -> None:
    """As the README says: under REPEATABLE READ (or SERIALIZABLE) an enqueue whose key
    another transaction took and committed after this one's snapshot raises 40001
    (serialization_failure), like any write conflict at that level; retrying the
    transaction returns that job's id."""
    with connect(dsn, autocommit=False) as rr:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT 1")  # the snapshot is taken
        winner = enqueue(conn, queue, idempotency_key="rr-key")
        with pytest.raises(psycopg.errors.SerializationFailure):
            rr.execute("SELECT pgfence.enqueue('k', queue => %s, idempotency_key => 'rr-key')", (queue,))
        rr.rollback()
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert one(rr, "SELECT pgfence.enqueue('k', queue => %s, idempotency_key => 'rr-key')", (queue,)) == winner
        rr.commit()
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)) == 1
