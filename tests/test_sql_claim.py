"""claim(): order, run_at, queue filters, batches, isolation level, the lease clock,
and concurrent claimers (SKIP LOCKED: never one job to two callers)."""
from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any, Callable

import psycopg
import pytest

from support.api import (claim, claim_job, complete, enqueue, lease_expired_under_lock, reclaim_expired,
                         reclaimed_ids, release, wait_lease_expired)
from support.db import assert_error, connect, job, now, one, queue_count, queue_jobs, rows, sql_error
from support.roles import connect_as, grantless_login, login_roles
from support.workers import start_and_join, wait_for

# Queue lookups scan only this test's jobs (by primary key range): see support.db.
pytestmark = pytest.mark.usefixtures("job_id_floor")


Conn = psycopg.Connection[Any]


def _ids(claimed: list[dict[str, Any]]) -> list[int]:
    return [c["id"] for c in claimed]


# -------------------------------------------------------------------- order --
def test_claim_order_is_priority_desc_then_available_at_then_id(conn: Conn, queue: str) -> None:
    t = now(conn)
    old = t - dt.timedelta(minutes=10)
    older = t - dt.timedelta(minutes=20)
    low_old = enqueue(conn, queue, "low_old", priority=0, run_at=older)
    mid_new = enqueue(conn, queue, "mid_new", priority=5, run_at=old)
    mid_old = enqueue(conn, queue, "mid_old", priority=5, run_at=older)
    high = enqueue(conn, queue, "high", priority=9, run_at=old)
    tie_a = enqueue(conn, queue, "tie_a", priority=0, run_at=old)
    tie_b = enqueue(conn, queue, "tie_b", priority=0, run_at=old)
    neg = enqueue(conn, queue, "neg", priority=-3, run_at=older)
    expected = [high, mid_old, mid_new, low_old, tie_a, tie_b, neg]
    # one at a time ...
    one_by_one = [claim(conn, [queue], max_jobs=1)[0]["id"] for _ in expected]
    assert one_by_one == expected
    assert claim(conn, [queue]) == []


def test_claim_batch_returns_jobs_in_claim_order(conn: Conn, queue: str) -> None:
    t = now(conn)
    a = enqueue(conn, queue, priority=1, run_at=t - dt.timedelta(seconds=5))
    b = enqueue(conn, queue, priority=3, run_at=t - dt.timedelta(seconds=1))
    c = enqueue(conn, queue, priority=1, run_at=t - dt.timedelta(seconds=9))
    d = enqueue(conn, queue, priority=3, run_at=t - dt.timedelta(seconds=1))
    got = claim(conn, [queue], max_jobs=10)
    assert _ids(got) == [b, d, c, a]
    assert len({g["attempt_token"] for g in got}) == 4


def test_claim_never_returns_more_than_max_jobs(conn: Conn, queue: str) -> None:
    ids = [r[1] for r in conn.execute(
        "SELECT * FROM pgfence.enqueue_many(kinds => array_fill('k'::text, ARRAY[25]), queue => %s)",
        (queue,)).fetchall()]
    batches = [claim(conn, [queue], max_jobs=n) for n in (1, 7, 10, 1000)]
    assert [len(b) for b in batches] == [1, 7, 10, 7]
    assert sorted(i for b in batches for i in _ids(b)) == sorted(ids)
    assert queue_count(conn, queue, "processing") == 25


def test_future_run_at_is_not_claimable_until_due(conn: Conn, queue: str) -> None:
    job_id = one(conn, "SELECT pgfence.enqueue('later', queue => %s, run_at => clock_timestamp() + interval '1 second')",
                 (queue,))
    now_id = enqueue(conn, queue, "now", priority=-100)
    assert _ids(claim(conn, [queue], max_jobs=10)) == [now_id]  # the due job only, despite its low priority
    assert claim(conn, [queue], max_jobs=10) == []
    assert job(conn, job_id)["status"] == "queued"
    conn.execute("SELECT pg_sleep(greatest(0, extract(epoch FROM available_at - clock_timestamp())) + 0.02)"
                 "  FROM pgfence.jobs WHERE id = %s", (job_id,))
    assert _ids(claim(conn, [queue], max_jobs=10)) == [job_id]


def test_claim_says_how_long_each_job_had_been_runnable(conn: Conn, queue: str) -> None:
    """waited_s: the claim time minus available_at, on the database's clock (a worker's
    enqueue-to-start without comparing two hosts' clocks); claim_results says the same."""
    late = one(conn, "SELECT pgfence.enqueue('late', queue => %s, run_at => clock_timestamp() - interval '30 seconds')",
               (queue,))
    fresh = enqueue(conn, queue, "fresh", priority=-1)
    request_id = uuid.uuid4()
    got = {r["id"]: r["waited_s"] for r in rows(
        conn, "SELECT id, waited_s FROM pgfence.claim('w', ARRAY[%s], max_jobs => 2, request_id => %s)",
        (queue, request_id))}
    assert 30 <= got[late] < 40
    assert 0 <= got[fresh] < 10
    again = {r["id"]: r["waited_s"] for r in rows(
        conn, "SELECT id, waited_s FROM pgfence.claim_results('w', ARRAY[%s]::uuid[])", (request_id,))}
    assert again == got


# ------------------------------------------------------------------- queues --
def test_claim_takes_only_from_the_given_queues(conn: Conn, queue: str) -> None:
    qa, qb, qc = f"{queue}_a", f"{queue}_b", f"{queue}_c"
    a = enqueue(conn, qa, priority=1)
    b = enqueue(conn, qb, priority=9)
    c = enqueue(conn, qc, priority=5)
    got = claim(conn, [qa, qc], max_jobs=10)
    assert _ids(got) == [c, a]
    assert {g["queue"] for g in got} == {qa, qc}
    assert job(conn, b)["status"] == "queued"
    assert _ids(claim(conn, [qb, qb], max_jobs=10)) == [b]  # a repeated name is one queue


def test_claim_with_null_queues_claims_from_every_queue(conn: Conn, queue: str) -> None:
    # claim(queues => NULL) may take any queue's jobs, so this test only makes
    # its own jobs the best candidates (maximum priority) and claims exactly that many.
    top = 2147483647
    a = enqueue(conn, f"{queue}_x", priority=top)
    b = enqueue(conn, f"{queue}_y", priority=top)
    got = claim(conn, None, "worker-null", lease="1 hour", max_jobs=2)
    assert _ids(got) == [a, b]
    assert [g["queue"] for g in got] == [f"{queue}_x", f"{queue}_y"]
    assert job(conn, a)["reserved_by"] == job(conn, b)["reserved_by"] == "worker-null"


def _explain_each_statement(c: Conn, *settings: str) -> list[str]:
    """SET settings on c, and have auto_explain report the plan of every statement run on
    c, nested ones too, as a NOTICE: the list returned collects them."""
    plans: list[str] = []
    c.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    c.execute("LOAD 'auto_explain'")
    for setting in (*settings, "auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice", "client_min_messages = notice"):
        c.execute(f"SET {setting}")
    return plans


def test_claim_never_jit_compiles_its_queries(conn: Conn, queue: str) -> None:
    # On a deep queue the generic plan's estimate passes jit_above_cost and every
    # claim compiled its query again; claim runs with jit = off. Here JIT is forced
    # for every statement (jit_above_cost = 0) and auto_explain reports each plan.
    conn.execute("SET jit = on")
    if not one(conn, "SELECT pg_jit_available()"):
        pytest.skip("this server has no JIT provider")
    for _ in range(2):
        enqueue(conn, queue)
    plans = _explain_each_statement(conn, "jit_above_cost = 0")
    conn.execute("SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)).fetchone()
    assert any("JIT:" in p for p in plans), "JIT was not used even outside claim: the check proves nothing"
    plans.clear()
    assert len(claim(conn, [queue], "worker-jit", lease="1 hour", max_jobs=2)) == 2
    claimed = [p for p in plans if "pgfence.jobs" in p]
    assert claimed and not any("JIT:" in p for p in claimed), claimed


@pytest.mark.parametrize("call", ["claim", "reclaim_expired"])
def test_claim_and_reclaim_never_read_the_whole_table(sweep_paused: Conn, dsn: str, conn: Conn, queue: str,
                                                      call: str) -> None:
    # When the indexes are large next to the heap (after a backlog), the generic plans
    # chose to read the table: the whole queue sorted, or every row for the reclaim
    # probe, on every claim. (A fresh connection each: plans are cached per session.
    # The background sweeper is paused: the expired lease is left to the call tested.)
    for _ in range(3):
        enqueue(conn, queue)
    [expired] = claim(conn, [queue], "worker-seq", lease="1 hour", max_jobs=1)
    conn.execute("UPDATE pgfence.jobs SET lease_expires_at = clock_timestamp() - interval '1 minute'"
                 " WHERE id = %s", (expired["id"],))
    with connect(dsn) as c:
        # Index page reads made to look very expensive: a plain query reads the table.
        plans = _explain_each_statement(c, "random_page_cost = 100000")
        c.execute("SELECT id FROM pgfence.jobs WHERE status = 'queued' AND queue = %s"
                  " ORDER BY priority DESC, available_at, id LIMIT 1", (queue,)).fetchone()
        assert any("Seq Scan on jobs" in p for p in plans), "no sequential scan even outside: proves nothing"
        plans.clear()
        if call == "claim":
            assert len(claim(c, [queue], "worker-seq", lease="1 hour", max_jobs=2)) == 2
        else:
            one(c, "SELECT count(*) FROM pgfence.reclaim_expired(10)")
        assert plans and not any("Seq Scan on jobs" in p for p in plans), [p for p in plans if "Seq Scan" in p]
    assert job(conn, expired["id"])["status"] == "queued"  # reclaimed by the call, whose plans were checked


# ------------------------------------------------------------ lease & clock --
def test_claim_in_a_long_transaction_gets_a_full_lease(tx_conn: Conn, conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    tx_conn.execute("SELECT pg_sleep(2)")
    got = claim(tx_conn, [queue], lease="30 seconds")
    assert _ids(got) == [job_id]
    [(remaining, reserved_after_start)] = tx_conn.execute(
        "SELECT lease_expires_at - clock_timestamp(), reserved_at - now() FROM pgfence.jobs WHERE id = %s",
        (job_id,)).fetchall()
    tx_conn.commit()
    assert dt.timedelta(seconds=29) < remaining <= dt.timedelta(seconds=30)
    assert reserved_after_start >= dt.timedelta(seconds=2)  # measured from clock_timestamp(), not now()
    assert job(conn, job_id)["status"] == "processing"


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_claim_outside_read_committed_raises_pf004(tx_conn: Conn, conn: Conn, queue: str, level: str) -> None:
    job_id = enqueue(conn, queue)
    tx_conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
    err = sql_error(tx_conn, "SELECT * FROM pgfence.claim('worker-A', ARRAY[%s])", (queue,))
    assert_error(err, "PF004", level.lower())
    assert "READ COMMITTED" in (err.diag.message_hint or "")
    r = job(conn, job_id)
    assert (r["status"], r["attempts"], r["attempt_token"]) == ("queued", 0, None)


def test_claim_in_read_committed_transaction_block_is_allowed(tx_conn: Conn, conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    tx_conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    assert _ids(claim(tx_conn, [queue])) == [job_id]
    tx_conn.rollback()  # the claim rolls back with its transaction
    r = job(conn, job_id)
    assert (r["status"], r["attempts"]) == ("queued", 0)
    claim_job(conn, queue, job_id)


# -------------------------------------------------------------- concurrency --
N_JOBS = 3000
MAX_JOBS = [1, 2, 3, 5, 10, 25, 100, 1000]  # one per thread


def test_concurrent_claimers_never_claim_a_job_twice(dsn: str, conn: Conn, queue: str) -> None:
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM pgfence.enqueue_many(kinds => array_fill('k'::text, ARRAY[%s]), queue => %s)",
        (N_JOBS, queue)).fetchall()]
    assert len(ids) == N_JOBS
    barrier = threading.Barrier(len(MAX_JOBS))
    results: dict[int, list[list[int]]] = {}
    errors: list[BaseException] = []

    def claimer(n: int, max_jobs: int) -> None:
        calls: list[list[int]] = []
        try:
            with connect(dsn) as c:
                c.execute("SET statement_timeout = '30s'")
                barrier.wait(timeout=30)
                while True:
                    got = [r[0] for r in c.execute(
                        "SELECT id FROM pgfence.claim(%s, ARRAY[%s], lease => '10 minutes', max_jobs => %s)",
                        (f"claimer-{n}", queue, max_jobs)).fetchall()]
                    calls.append(got)
                    if not got and one(c, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s AND status = 'queued'",
                                       (queue,)) == 0:
                        break
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            results[n] = calls

    threads = [threading.Thread(target=claimer, args=(n, m)) for n, m in enumerate(MAX_JOBS)]
    start_and_join(threads, 120)
    assert errors == []
    for n, max_jobs in enumerate(MAX_JOBS):
        assert all(len(call) <= max_jobs for call in results[n]), f"claimer {n} got more than {max_jobs}"
    claimed = [i for calls in results.values() for call in calls for i in call]
    assert len(claimed) == len(set(claimed)) == N_JOBS
    assert set(claimed) == set(ids)
    # every job claimed exactly once: one attempt each, by the claimer that returned it
    owner = {i: f"claimer-{n}" for n, calls in results.items() for call in calls for i in call}
    state = {r["id"]: r for r in queue_jobs(conn, queue)}
    assert {r["status"] for r in state.values()} == {"processing"}
    assert {r["attempts"] for r in state.values()} == {1}
    assert all(state[i]["reserved_by"] == owner[i] for i in ids)
    assert len({r["attempt_token"] for r in state.values()}) == N_JOBS


# ------------------------------------------- a claim whose reply was lost --
def _claimed(conn: Conn, request_ids: list[uuid.UUID], worker: str = "worker-A", *,
             lease: str = "30 seconds") -> list[dict[str, Any]]:
    return rows(conn, "SELECT * FROM pgfence.claimed(worker_id => %s, request_ids => %s::uuid[], lease => %s::interval)",
                (worker, request_ids, lease))


def _same_claim(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The same jobs and attempts, in the same order (leases aside: claimed() renews them)."""
    def key(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "lease_expires_at"} for r in rs]
    return key(a) == key(b)


def test_claimed_returns_what_a_claim_with_a_request_id_took(conn: Conn, queue: str) -> None:
    t = now(conn)
    low = enqueue(conn, queue, priority=0, run_at=t - dt.timedelta(seconds=2))
    high = enqueue(conn, queue, priority=5, run_at=t - dt.timedelta(seconds=1))
    enqueue(conn, queue)  # left queued
    request = uuid.uuid4()
    got = claim(conn, [queue], max_jobs=2, request_id=request)
    assert _ids(got) == [high, low]
    # The same rows, in the same order, as claim returned them, each lease renewed
    # (and stamped as a heartbeat); nothing else changes.
    before = {r["id"]: r for r in queue_jobs(conn, queue)}
    again = _claimed(conn, [request], lease="1 hour")
    assert _same_claim(again, got)
    assert all(a["lease_expires_at"] > g["lease_expires_at"] + dt.timedelta(minutes=50) for a, g in zip(again, got))
    after = {r["id"]: r for r in queue_jobs(conn, queue)}
    renewed = ("lease_expires_at", "heartbeat_at", "updated_at")
    for job_id, row in after.items():
        changed = {k for k in row if row[k] != before[job_id][k]}
        assert changed == (set(renewed) if job_id in (high, low) else set()), (job_id, changed)
    assert _same_claim(_claimed(conn, [uuid.uuid4(), request]), got)
    # Only for the worker that claimed, and only for that request.
    assert _claimed(conn, [request], worker="worker-B") == []
    assert _claimed(conn, [uuid.uuid4()]) == []
    # A job done, released or claimed by another request is no longer returned.
    complete(conn, high, got[0]["attempt_token"])
    assert _ids(_claimed(conn, [request])) == [low]
    release(conn, low, got[1]["attempt_token"])
    assert _claimed(conn, [request]) == []


def test_a_request_id_given_twice_still_fences_each_attempt(conn: Conn, queue: str) -> None:
    """The token of a claim with a request_id is derived from it, the job, the attempt and
    the claim time: a request id reused (a caller's bug) never brings an old token back."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    first = claim(conn, [queue], request_id=request)[0]["attempt_token"]
    # started => false undoes the claim: the attempt number is the same next time.
    assert one(conn, "SELECT pgfence.release(%s, %s, started => false)", (job_id, first)) == "queued"
    second = claim(conn, [queue], request_id=request)[0]
    assert second["id"] == job_id and second["attempts"] == 1
    assert second["attempt_token"] != first
    assert _same_claim(_claimed(conn, [request]), [second])
    err = sql_error(conn, "SELECT pgfence.complete(%s, %s)", (job_id, first))
    assert err.sqlstate == "PF001"
    complete(conn, job_id, second["attempt_token"])
    assert job(conn, job_id)["status"] == "done"


def test_claimed_forgets_a_lease_reclaimed_and_claimed_again(sweep_paused: Conn, conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    claim(conn, [queue], lease="50 milliseconds", request_id=request)
    wait_lease_expired(conn, job_id)
    reclaim_expired(conn)  # (or another session's claim did it first)
    assert job(conn, job_id)["status"] == "queued"
    assert _claimed(conn, [request]) == []
    again = claim(conn, [queue], request_id=request)  # the same worker, the same request id
    assert _ids(again) == [job_id] and again[0]["attempts"] == 2
    assert _same_claim(_claimed(conn, [request]), again)


def test_claimed_renews_a_lease_that_expired_but_was_not_reclaimed(
        sweep_paused: Conn, tx_conn: Conn, conn: Conn, queue: str) -> None:
    """A lease stays the holder's until someone takes it (as for heartbeat): the jobs come
    back with a fresh lease, so no claim reclaims them while the caller starts running them."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    claim(conn, [queue], lease="200 milliseconds", request_id=request)
    with lease_expired_under_lock(tx_conn, job_id):
        got = _claimed(tx_conn, [request], lease="1 hour")
        assert _ids(got) == [job_id]
        assert one(tx_conn, "SELECT lease_expires_at > clock_timestamp() + interval '50 minutes'"
                            " FROM pgfence.jobs WHERE id = %s", (job_id,)) is True
    assert job_id not in reclaimed_ids(reclaim_expired(conn))
    assert job(conn, job_id)["status"] == "processing"


def test_claimed_waits_for_a_claim_with_that_request_id_still_running(
        tx_conn: Conn, dsn: str, conn: Conn, queue: str) -> None:
    """The reply can be lost before the claim commits (the client gave up on the
    connection; the server still runs it): claimed() waits for that claim to end
    instead of answering 'nothing' and leaving its jobs stranded."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    assert _ids(claim(tx_conn, [queue], request_id=request)) == [job_id]  # not committed yet
    answer: list[list[dict[str, Any]]] = []
    pids: list[int] = []

    def ask() -> None:
        with connect(dsn) as c:
            pids.append(one(c, "SELECT pg_backend_pid()"))
            answer.append(_claimed(c, [request]))
    t = threading.Thread(target=ask)
    t.start()
    try:
        wait_for(lambda: pids and one(conn, "SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                                      (pids[0],)) == "advisory", 10, "claimed() to wait on the claim's lock")
    finally:
        tx_conn.commit()
        t.join(15)
    assert not t.is_alive()
    assert [_ids(a) for a in answer] == [[job_id]]


def test_no_role_can_hold_the_lock_of_a_request_id(dsn: str, conn: Conn, queue: str) -> None:
    """Any role may take advisory locks. The request lock's key was public (hashtext of
    the request id): a login with no grant held it for a request id it knew, or
    thousands of keys at random, and the claims that landed on them waited until it
    disconnected. The key is now keyed with the secret key: neither the old key nor a
    sweep of the key space near it blocks a claim."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    with grantless_login(dsn, "t_locker") as locker:
        locker.execute("SELECT pg_advisory_lock(hashtext('pgfence.claim'), hashtext(%s))", (str(request),))
        locker.execute("SELECT count(pg_try_advisory_lock(k)) FROM generate_series(-5000, 4999) k")
        locker.execute("SELECT count(pg_try_advisory_lock(hashtext(%s)::bigint + k)) FROM generate_series(-500, 499) k",
                       (str(request),))
        with connect(dsn) as c:
            c.execute("SET statement_timeout = '20s'")  # (a parked claim fails the test, it does not hang it)
            assert _ids(claim(c, [queue], request_id=request)) == [job_id]


def test_a_worker_cannot_learn_the_lock_of_a_request_id_from_wakeup_tags(dsn: str, conn: Conn, queue: str) -> None:
    """wakeup_tags(names) shows left(md5(secret || name), 16) for any name a worker passes;
    the request lock's key was that of '/claim/' || the request id, so a worker role that
    knew a request id could hold its lock and park the claim (review finding). The lock
    now takes the digest's other half."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    with login_roles(dsn, {"t_lock_worker": "pgfence_worker"}), connect_as(dsn, "t_lock_worker") as locker:
        [tag] = [r[0] for r in locker.execute("SELECT tag FROM pgfence.wakeup_tags(ARRAY[%s])",
                                              (f"/claim/{request}",))]
        locker.execute("SELECT pg_advisory_lock(('x' || %s)::bit(64)::bigint)", (tag,))
        with connect(dsn) as c:
            c.execute("SET statement_timeout = '10s'")  # (a parked claim fails the test, it does not hang it)
            assert _ids(claim(c, [queue], request_id=request)) == [job_id]


def test_claimed_waits_for_a_claim_stalled_before_it_touched_a_row(
        tx_conn: Conn, dsn: str, conn: Conn, queue: str) -> None:
    """Review finding: claim took its request lock only after reclaiming and listing the
    queues, so a claim stalled there (here: behind a table lock) was answered 'nothing'."""
    job_id = enqueue(conn, queue)
    request = uuid.uuid4()
    tx_conn.execute("LOCK TABLE pgfence.jobs IN EXCLUSIVE MODE")  # stalls claim's first row lock
    results: dict[str, list[dict[str, Any]]] = {}
    pids: dict[str, int] = {}

    def run(name: str, call: Callable[[Conn], list[dict[str, Any]]]) -> threading.Thread:
        def body() -> None:
            with connect(dsn) as c:
                pids[name] = one(c, "SELECT pg_backend_pid()")
                results[name] = call(c)
        t = threading.Thread(target=body)
        t.start()
        return t

    def waits_on(name: str, event: str) -> bool:
        return name in pids and one(conn, "SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                                    (pids[name],)) == event
    threads = []
    try:
        threads.append(run("claim", lambda c: claim(c, [queue], request_id=request)))
        wait_for(lambda: waits_on("claim", "relation"), 10, "claim to wait behind the table lock")
        threads.append(run("claimed", lambda c: _claimed(c, [request])))
        wait_for(lambda: waits_on("claimed", "advisory"), 10, "claimed() to wait for the claim")
    finally:
        tx_conn.commit()
        for t in threads:
            t.join(15)
    assert _ids(results["claim"]) == [job_id]
    assert _same_claim(results["claimed"], results["claim"])


def test_claimed_outside_read_committed_raises_pf004(tx_conn: Conn) -> None:
    tx_conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    err = sql_error(tx_conn, "SELECT * FROM pgfence.claimed('w', ARRAY[gen_random_uuid()])")
    assert_error(err, "PF004")


def test_claim_without_a_request_id_gives_random_tokens(conn: Conn, queue: str) -> None:
    for _ in range(3):
        enqueue(conn, queue)
    got = claim(conn, [queue], max_jobs=3)
    assert {g["attempt_token"].version for g in got} == {4}


@pytest.mark.parametrize(("worker", "request_ids", "sqlstate", "names"), [
    (None, "{00000000-0000-0000-0000-000000000001}", "22004", "worker_id"),
    (" w", "{00000000-0000-0000-0000-000000000001}", "22023", "worker_id"),
    ("w", None, "22004", "request_ids"),
    ("w", "{}", "22023", "request_ids length"),
    ("w", "{00000000-0000-0000-0000-000000000001,NULL}", "22004", "request_ids[2]"),
    ("w", "[0:0]={00000000-0000-0000-0000-000000000001}", "22023", "request_ids"),
    ("w", "{{00000000-0000-0000-0000-000000000001}}", "22023", "request_ids"),
    ("w", "{00000000-0000-0000-0000-000000000001}", "22023", "lease"),
])
def test_claimed_refuses_bad_arguments(conn: Conn, worker: str | None, request_ids: str | None,
                                       sqlstate: str, names: str) -> None:
    lease = "0 seconds" if names == "lease" else "30 seconds"
    err = sql_error(conn, "SELECT * FROM pgfence.claimed(%s, %s::uuid[], %s::interval)", (worker, request_ids, lease))
    assert_error(err, sqlstate, names)


def test_claimed_refuses_more_than_1000_request_ids(conn: Conn) -> None:
    ids = [uuid.uuid4() for _ in range(1001)]
    assert_error(sql_error(conn, "SELECT * FROM pgfence.claimed('w', %s::uuid[])", (ids,)), "22023",
                 "request_ids length")
