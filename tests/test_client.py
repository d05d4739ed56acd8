"""The Python client: one method per SQL function, rows to dataclasses, SQLSTATEs to exceptions.

The queue rules themselves are tested at the SQL level (tests/test_sql_*.py); here
we check that every Client method reaches its function with the right arguments,
maps what comes back (ids, dataclasses, datetimes, timedeltas, JSON) and raises
the right PgfenceError subclass with the server's message, detail and hint.
"""
from __future__ import annotations

import dataclasses

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import psycopg
import pytest

from support.db import LEASE_EXPIRED, RELEASED, UNKNOWN_ID, connect, scratch_database
from support.workers import wait_for
from pgfence import (SCHEMA_VERSION, Attempt, Client, Enqueued, InvalidArgument, InvalidTransition, Job,
                     JobNotFound, JobRecord, LeaseLost, Outcome, PgfenceError, QueueStats, RawJson,
                     Reclaimed, Rejection, SchemaMismatch, WrongIsolation)

W = "test-client-worker"


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, dsn: str) -> Iterator[Any]:
    """Each test runs against pgfence.Client and against pgfence.aio.AsyncClient (its
    coroutines run to completion on a loop thread: support.aio.Blocking): same methods,
    arguments, return values and exceptions."""
    if request.param == "sync":
        c: Any = Client.connect(dsn, max_size=4)
    else:
        from support.aio import Blocking
        c = Blocking.connect(dsn, max_size=4)
    try:
        yield c
    finally:
        c.close()


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def job_if(client: Client, job_id: int, status: str) -> Optional[JobRecord]:
    row = client.get_job(job_id)
    return row if row.status == status else None


def claim_one(client: Client, queue: str, lease: timedelta = timedelta(seconds=30)) -> Job:
    jobs = client.claim(W, [queue], lease=lease)
    assert len(jobs) == 1
    return jobs[0]


# ------------------------------------------------------------ producer ----
def test_enqueue_stores_every_option_and_returns_the_id(client: Client, queue: str) -> None:
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    job_id = client.enqueue("email", {"to": "a@example.com", "n": [1, 2.5, None, True]}, queue=queue,
                            priority=-7, run_at=run_at, max_attempts=9, recovery_policy="manual",
                            idempotency_key="k-1")
    assert isinstance(job_id, int)
    j = client.get_job(job_id)
    assert isinstance(j, JobRecord)
    assert (j.id, j.queue, j.kind, j.status, j.priority, j.attempts, j.max_attempts, j.recovery_policy,
            j.idempotency_key, j.reclaim_count) == (job_id, queue, "email", "queued", -7, 0, 9, "manual", "k-1", 0)
    assert j.payload == {"to": "a@example.com", "n": [1, 2.5, None, True]}
    assert j.available_at == run_at and j.available_at.tzinfo is not None
    assert (j.attempt_token, j.reserved_by, j.lease_expires_at, j.result, j.last_error, j.finished_at) == \
        (None, None, None, None, None, None)


def test_enqueue_defaults_are_an_empty_payload_runnable_now(client: Client, conn: psycopg.Connection[Any],
                                                            queue: str) -> None:
    before = db_now(conn)
    j = client.get_job(client.enqueue("noop", queue=queue))
    assert (j.payload, j.priority, j.max_attempts, j.recovery_policy, j.idempotency_key) == ({}, 0, 3, "auto", None)
    assert before <= j.available_at <= db_now(conn)


def test_enqueue_with_a_held_idempotency_key_returns_the_existing_job(client: Client, queue: str) -> None:
    first = client.enqueue("email", {"v": 1}, queue=queue, idempotency_key="same")
    second = client.enqueue("email", {"v": 2}, queue=queue, idempotency_key="same")
    assert second == first
    assert client.get_job(first).payload == {"v": 1}


def test_enqueue_many_returns_one_row_per_input_in_order(client: Client, queue: str) -> None:
    run_at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    rows = client.enqueue_many(["a", "b", "c", "d"], [{"i": 1}, None, {"i": "é✓"}, {"i": 4}], queue=queue,
                               priorities=[1, 2, 3, 4], run_ats=[None, run_at, None, None], max_attempts=5,
                               recovery_policy="manual", idempotency_keys=[None, "k", "k", None])
    assert all(isinstance(r, Enqueued) for r in rows)
    assert [r.ordinal for r in rows] == [1, 2, 3, 4]
    assert [r.created for r in rows] == [True, True, False, True]
    assert rows[2].id == rows[1].id and len({rows[0].id, rows[1].id, rows[3].id}) == 3
    a, b, d = client.get_job(rows[0].id), client.get_job(rows[1].id), client.get_job(rows[3].id)
    assert (a.kind, a.payload, a.priority, a.max_attempts, a.recovery_policy) == ("a", {"i": 1}, 1, 5, "manual")
    assert (b.kind, b.payload, b.priority, b.available_at, b.idempotency_key) == ("b", {}, 2, run_at, "k")
    assert (d.kind, d.payload, d.priority) == ("d", {"i": 4}, 4)


def test_enqueue_many_keeps_payload_order_over_a_large_batch(client: Client, queue: str) -> None:
    # The client sends the payloads as one JSON array that the server unpacks in order.
    payloads = [{"i": i, "s": "x" * (i % 7), "nested": {"q": [i, "\"quoted\""]}} for i in range(2500)]
    rows = client.enqueue_many(["k"] * 2500, payloads, queue=queue)
    assert [r.ordinal for r in rows] == list(range(1, 2501))
    for i in (0, 1, 1249, 2499):
        assert client.get_job(rows[i].id).payload == payloads[i]


@pytest.mark.parametrize("payloads, name", [
    ([{"ok": 1}, [1, 2]], "payloads[2]"),          # an array, not an object
    ([{"ok": 1}, "text"], "payloads[2]"),          # a JSON string
    ([{"ok": 1}], "array lengths"),                # one payload short
    ([], "array lengths"),                         # none for two kinds
])
def test_enqueue_many_rejects_bad_payloads_and_enqueues_nothing(client: Client, queue: str, payloads: list[Any],
                                                                 name: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        client.enqueue_many(["k", "k"], payloads, queue=queue)
    assert err.value.sqlstate == "22023" and name in str(err.value)
    assert [s for s in client.stats() if s.queue == queue] == []


def test_enqueue_joins_the_callers_transaction(dsn: str, client: Client, queue: str) -> None:
    with connect(dsn, autocommit=False) as tx:
        in_tx = Client(tx)
        rolled_back = in_tx.enqueue("email", {"n": 1}, queue=queue)
        assert in_tx.get_job(rolled_back).status == "queued"  # visible inside the transaction
        with pytest.raises(JobNotFound):
            client.get_job(rolled_back)                          # not outside it
        tx.rollback()
        with pytest.raises(JobNotFound):
            client.get_job(rolled_back)
        committed = in_tx.enqueue("email", {"n": 2}, queue=queue)
        with pytest.raises(JobNotFound):
            client.get_job(committed)
        tx.commit()
    assert client.get_job(committed).payload == {"n": 2}
    assert [(s.status, s.jobs) for s in client.stats() if s.queue == queue] == [("queued", 1)]


# -------------------------------------------------------------- worker ----
@pytest.fixture(params=["sync", "async"])
def pool_client(request: pytest.FixtureRequest, dsn: str) -> Iterator[Any]:
    """make(autocommit): a Client (or a blocking AsyncClient) over a caller's pool of one
    connection, autocommit or not; the connection's application_name is the client's
    ``app`` attribute."""
    made: list[Any] = []

    def make(autocommit: bool) -> Any:
        app = f"pool-test-{uuid.uuid4().hex[:12]}"
        kwargs: dict[str, Any] = {"autocommit": autocommit, "application_name": app}
        if request.param == "sync":
            from psycopg_pool import ConnectionPool
            pool = ConnectionPool(dsn, min_size=1, max_size=1, kwargs=kwargs, open=True)
            c: Any = Client(pool=pool)
            made.append(pool.close)
        else:
            from psycopg_pool import AsyncConnectionPool
            from pgfence.aio import AsyncClient
            from support.aio import Blocking, LoopThread
            loop = LoopThread()

            async def opened() -> AsyncConnectionPool:
                p = AsyncConnectionPool(dsn, min_size=1, max_size=1, kwargs=kwargs, open=False)
                await p.open(wait=True)
                return p
            apool = loop.run(opened())
            c = Blocking(AsyncClient(pool=apool), loop, owns_loop=True)
            made.append(c.close)
        c.app = app
        return c
    yield make
    for close in made:
        close()


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_pool_connection_is_committed_and_comes_back_clean_after_an_error(
        pool_client: Any, conn: psycopg.Connection[Any], queue: str, autocommit: bool) -> None:
    """A caller's pool: each call is committed (visible to another session at once),
    a refused call leaves its connection idle, not in a failed transaction, and the
    pool's one connection serves the next call."""
    c = pool_client(autocommit)
    first = c.enqueue("noop", {"n": 1}, queue=queue)
    assert conn.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (first,)).fetchone() == ("queued",)
    with pytest.raises(InvalidArgument):
        c.enqueue("noop", {"n": 2}, queue=queue, max_attempts=0)
    second = c.enqueue("noop", {"n": 3}, queue=queue)
    rows = conn.execute("SELECT payload FROM pgfence.jobs WHERE queue = %s ORDER BY id", (queue,)).fetchall()
    assert rows == [({"n": 1},), ({"n": 3},)] and second > first
    stats = c.pool.get_stats()
    assert stats["pool_size"] == 1 and stats.get("connections_lost", 0) == 0, stats


def test_a_broken_pool_connection_is_replaced(pool_client: Any, conn: psycopg.Connection[Any], queue: str) -> None:
    """The pool's connection killed between calls: the call on it fails with the
    driver's error, the pool replaces it, and the next call goes through."""
    c = pool_client(True)
    c.enqueue("noop", queue=queue)
    [(pid,)] = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (c.app,)).fetchall()
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: conn.execute("SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)",
                                  (pid,)).fetchone() == (True,), 10, "the backend to end")
    with pytest.raises(psycopg.OperationalError):
        c.enqueue("noop", queue=queue)
    job = wait_for(lambda: _enqueued(c, queue), 30, "an enqueue on the pool's new connection")
    assert conn.execute("SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (queue,)).fetchone() == (2,)
    assert job > 0


def _enqueued(c: Any, queue: str) -> Optional[int]:
    try:
        return int(c.enqueue("noop", queue=queue))
    except psycopg.OperationalError:
        return None


def test_claim_returns_jobs_with_a_token_and_a_lease_in_priority_order(client: Client, queue: str) -> None:
    low = client.enqueue("k", {"p": "low"}, queue=queue, priority=1)
    high = client.enqueue("k", {"p": "high"}, queue=queue, priority=9)
    later = client.enqueue("k", queue=queue, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    jobs = client.claim(W, [queue], lease=timedelta(seconds=42), max_jobs=5)
    assert [j.id for j in jobs] == [high, low]
    job = jobs[0]
    assert isinstance(job, Job) and isinstance(job.attempt_token, uuid.UUID)
    assert (job.queue, job.kind, job.payload, job.attempts, job.max_attempts) == (queue, "k", {"p": "high"}, 1, 3)
    assert not job.lease_lost and not job.should_stop()
    row = client.get_job(high)
    assert (row.status, row.attempt_token, row.reserved_by, row.lease_expires_at) == \
        ("processing", job.attempt_token, W, job.lease_expires_at)
    assert row.reserved_at is not None and job.lease_expires_at - row.reserved_at == timedelta(seconds=42)
    assert client.get_job(later).status == "queued"
    assert client.claim(W, [queue]) == []


def test_a_long_queue_list_reaches_the_server_name_for_name(client: Client, dsn: str, queue: str) -> None:
    """A list of more than 16 queues is sent as an array literal (made once per list):
    names that an array literal quotes or escapes arrive as they were, a job of a
    listed queue is claimed, and a bad element is refused naming its index, as for a
    short list. Checked against the server: the literal reads back as the list."""
    from pgfence.calls import queue_param
    odd = ['we"ird', "back\\slash", "{brace}", "comma,x", "NULL", "in side", "é", "a'b", "\\N", "x" * 128]
    names = odd + [f"{queue}-other-{i}" for i in range(10)] + [queue]
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT %s::text[]", (queue_param(names),)).fetchone()[0] == names
        assert c.execute("SELECT %s::text[]", (queue_param(names + [None]),)).fetchone()[0] == names + [None]
    assert isinstance(queue_param(names), str) and queue_param(names[:16]) == names[:16]
    job_id = client.enqueue("k", queue=queue)
    assert [j.id for j in client.claim(W, names)] == [job_id]
    for bad, index in (([*names, None], len(names) + 1), ([*names[:3], " lead", *names[3:]], 4)):
        with pytest.raises(InvalidArgument) as info:
            client.claim(W, bad)
        assert f"queues[{index}]" in str(info.value)
    # A caller's connection whose str dumper sends text, not unknown: still claim's text[].
    from psycopg.types.string import StrBinaryDumper, StrDumper
    for dumper in (StrDumper, StrBinaryDumper):
        with psycopg.connect(dsn, autocommit=True) as c:
            c.adapters.register_dumper(str, dumper)
            other = client.enqueue("k", queue=queue)
            assert [j.id for j in Client(c).claim(W, names)] == [other]


def test_claim_returns_the_payload_as_enqueued(client: Client, queue: str) -> None:
    # claim decodes the payload itself (from JSON text); it must equal what went in.
    payload = {"text": "h\u00e9llo \u2603 \"q\" \\ \n", "n": [1, -2.5, 0.1, 12345678901234567890, None, True],
               "nested": {"a": {"b": []}, "empty": {}}}
    client.enqueue("k", payload, queue=queue)
    [job] = client.claim(W, [queue])
    assert job.payload == payload and job.payload["n"][3] == 12345678901234567890


def test_claim_decodes_the_payload_with_a_jsonb_loader_set_on_the_connection(dsn: str, queue: str) -> None:
    from decimal import Decimal
    from psycopg.types.json import set_json_loads
    with connect(dsn) as conn:
        set_json_loads(lambda data: json.loads(data, parse_float=Decimal), conn)
        own = Client(conn)
        own.enqueue("k", {"price": 1.10}, queue=queue)
        own.enqueue("k", {"price": 2.5}, queue=queue)
        jobs = own.claim(W, [queue], max_jobs=2)
        assert [j.payload for j in jobs] == [{"price": Decimal("1.10")}, {"price": Decimal("2.5")}]
        assert isinstance(jobs[0].payload["price"], Decimal)


def test_claim_of_many_gives_each_job_its_own_payload_in_claim_order(client: Client, queue: str) -> None:
    # claim decodes a batch's payloads as one JSON array.
    ids = [client.enqueue("k", {"n": n, "s": "x" * n}, queue=queue, priority=n % 3) for n in range(7)]
    jobs = client.claim(W, [queue], max_jobs=7)
    expected = sorted(range(7), key=lambda n: (-(n % 3), n))
    assert [j.id for j in jobs] == [ids[n] for n in expected]
    assert [j.payload for j in jobs] == [{"n": n, "s": "x" * n} for n in expected]
    assert len({j.attempt_token for j in jobs}) == 7 and all(j.attempts == 1 for j in jobs)


def test_claim_gives_any_other_jsonb_loader_each_payload(dsn: str, queue: str) -> None:
    from psycopg.types.string import TextLoader
    with connect(dsn) as conn:
        conn.adapters.register_loader("jsonb", TextLoader)  # payloads as their JSON text
        own = Client(conn)
        own.enqueue("k", {"a": 1}, queue=queue)
        own.enqueue("k", {"b": [2]}, queue=queue)
        jobs = own.claim(W, [queue], max_jobs=2)
        assert [j.payload for j in jobs] == ['{"a": 1}', '{"b": [2]}']


@pytest.mark.parametrize("custom_loader", [False, True])
def test_claim_of_many_escaped_payloads_comes_back_whole_and_in_order(
        client: Client, dsn: str, queue: str, custom_loader: bool) -> None:
    # A batch's payload texts are joined into one JSON array and decoded with one call
    # (the default loader), or given one by one to another loader. U+0001 is 1 byte in
    # jsonb and 6 (\u0001) in JSON text; the commas and brackets inside strings must not
    # split an element.
    from psycopg.types.json import set_json_loads
    payloads = [{"n": n, "s": "\u0001" * (n * 7), "t": "],[" * n, "a": [n, {"b": "},{"}]} for n in range(12)]
    ids = [client.enqueue("k", p, queue=queue) for p in payloads]
    first = client.claim(W, [queue], max_jobs=4)
    assert [j.id for j in first] == ids[:4] and [j.payload for j in first] == payloads[:4]
    with connect(dsn) as conn:
        if custom_loader:
            set_json_loads(lambda data: {"loaded": json.loads(data)}, conn)
        jobs = Client(conn).claim(W, [queue], max_jobs=9)
    assert [j.id for j in jobs] == ids[4:]
    assert [j.payload for j in jobs] == [{"loaded": p} if custom_loader else p for p in payloads[4:]]
    assert all(j.payload_error is None for j in first + jobs)


def test_claimed_returns_the_jobs_of_a_claim_as_claim_did(client: Client, queue: str) -> None:
    import uuid
    for n in range(3):
        client.enqueue("k", {"n": n, "s": "é"}, queue=queue)
    request = uuid.uuid4()
    jobs = client.claim(W, [queue], max_jobs=2, request_id=request)
    assert [j.payload["n"] for j in jobs] == [0, 1]
    again = client.claimed(W, [uuid.uuid4(), request], lease=timedelta(hours=1))
    assert [dataclasses.replace(j, lease_expires_at=None) for j in again] == \
        [dataclasses.replace(j, lease_expires_at=None) for j in jobs]
    assert all(a.lease_expires_at > j.lease_expires_at + timedelta(minutes=50) for a, j in zip(again, jobs))
    assert client.claimed(W, [uuid.uuid4()]) == []
    with pytest.raises(InvalidArgument):
        client.claimed(W, [])


def test_claim_decodes_the_payload_on_a_sql_ascii_connection(dsn: str, queue: str) -> None:
    # psycopg returns text as bytes when client_encoding is SQL_ASCII.
    with connect(dsn) as conn:
        conn.execute("SET client_encoding TO 'SQL_ASCII'")
        own = Client(conn)
        own.enqueue("k", {"a": [1, "b"]}, queue=queue)
        [job] = own.claim(W, [queue])
        assert job.payload == {"a": [1, "b"]}
        own.enqueue_many(["k", "k"], [{"n": 1}, {"x": [{"y": None}, "é"]}], queue=queue)  # a batch: bytes joined
        assert [j.payload for j in own.claim(W, [queue], max_jobs=3)] == [{"n": 1}, {"x": [{"y": None}, "é"]}]


def test_batch_calls_take_large_ids_and_tokens_given_as_strings(client: Client, queue: str) -> None:
    # Ids and tokens travel as binary arrays: ids beyond int4, tuples, and tokens as
    # strings all reach the function (and an unknown id is refused, not an error).
    job_id = client.enqueue("k", queue=queue)
    [job] = client.claim(W, [queue])
    big = 2**40
    out = client.heartbeat_many((job_id, big), (str(job.attempt_token), str(uuid.uuid4())))
    assert [(o.id, o.accepted) for o in out] == [(job_id, True), (big, False)]
    assert out[1].detail == "the job does not exist"
    out = client.complete_many([big, job_id], [uuid.uuid4(), job.attempt_token], [None, None])
    assert [(o.id, o.accepted, o.status) for o in out] == [(big, False, None), (job_id, True, "done")]
    assert client.get_job(job_id).result is None


def test_heartbeat_extends_the_lease_by_the_given_timedelta(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    expires = client.heartbeat(job.id, job.attempt_token, lease=timedelta(minutes=7))
    row = client.get_job(job.id)
    assert isinstance(expires, datetime) and expires == row.lease_expires_at
    assert row.heartbeat_at is not None and expires - row.heartbeat_at == timedelta(minutes=7)


def test_heartbeat_many_reports_each_job(client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    a, b = client.claim(W, [queue], max_jobs=2)
    out = client.heartbeat_many([a.id, b.id], [a.attempt_token, uuid.uuid4()], lease=timedelta(seconds=90))
    assert all(isinstance(o, Outcome) for o in out)
    assert [(o.id, o.accepted, o.status) for o in out] == [(a.id, True, "processing"), (b.id, False, "processing")]
    assert out[0].detail is None and out[0].lease_expires_at == client.get_job(a.id).lease_expires_at
    assert out[1].detail and out[1].lease_expires_at is None
    assert client.get_job(b.id).heartbeat_at is None


def test_complete_stores_the_result_json(client: Client, queue: str) -> None:
    result = {"s": "héllo ✓", "n": [1, -2.5, 10 ** 15], "nested": {"null": None, "t": True}, "empty": []}
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    assert client.complete(job.id, job.attempt_token, result) is None
    row = client.get_job(job.id)
    assert (row.status, row.result, row.lease_expires_at) == ("done", result, None)
    assert row.finished_at is not None
    client.complete(job.id, job.attempt_token, result)  # a retry by the same attempt is accepted


def test_complete_without_a_result_stores_null(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    client.complete(job.id, job.attempt_token)
    row = client.get_job(job.id)
    assert (row.status, row.result) == ("done", None)


def test_complete_takes_raw_json_as_json_like_complete_many(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    client.complete(job.id, job.attempt_token, RawJson('{"raw": true}'))
    assert client.get_job(job.id).result == {"raw": True}


def test_complete_many_stores_results_and_refuses_a_stale_token(client: Client, queue: str) -> None:
    client.enqueue_many(["k"] * 4, queue=queue)
    a, b, c, d = client.claim(W, [queue], max_jobs=4)
    out = client.complete_many([a.id, b.id, c.id, d.id],
                               [a.attempt_token, b.attempt_token, c.attempt_token, uuid.uuid4()],
                               [{"x": [1]}, RawJson('{"raw": true}'), None, {"never": 1}])
    assert [(o.id, o.accepted, o.status) for o in out] == \
        [(a.id, True, "done"), (b.id, True, "done"), (c.id, True, "done"), (d.id, False, "processing")]
    assert [o.detail is None for o in out] == [True, True, True, False]
    assert [client.get_job(j.id).result for j in (a, b, c, d)] == [{"x": [1]}, {"raw": True}, None, None]


def test_fail_retries_after_retry_in_then_dead_letters(client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue, max_attempts=2)
    job = claim_one(client, queue)
    assert client.fail(job.id, job.attempt_token, "E1: first", retry_in=timedelta(0)) == "queued"
    row = client.get_job(job_id)
    assert (row.status, row.attempts, row.last_error, row.attempt_token) == ("queued", 1, "E1: first", None)
    assert row.available_at == row.updated_at
    job2 = claim_one(client, queue)
    assert job2.attempts == 2 and job2.attempt_token != job.attempt_token
    assert client.fail(job2.id, job2.attempt_token, "E2: second") == "failed"
    row = client.get_job(job_id)
    assert (row.status, row.attempts, row.last_error) == ("failed", 2, "E2: second")
    assert row.finished_at is not None


def test_fail_retry_in_timedelta_sets_available_at(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    assert client.fail(job.id, job.attempt_token, "later", retry_in=timedelta(minutes=5, milliseconds=250)) == "queued"
    row = client.get_job(job.id)
    assert row.available_at - row.updated_at == timedelta(minutes=5, milliseconds=250)
    assert client.claim(W, [queue]) == []


def test_fail_without_retry_in_uses_the_database_backoff(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    assert client.fail(job.id, job.attempt_token, "boom") == "queued"
    row = client.get_job(job.id)
    assert row.available_at - row.updated_at == timedelta(seconds=1)  # 1 s * 2^(1-1)


def test_fail_permanent_dead_letters_at_once(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue, max_attempts=10)
    job = claim_one(client, queue)
    assert client.fail(job.id, job.attempt_token, "bad input", permanent=True) == "failed"
    assert (client.get_job(job.id).status, client.get_job(job.id).attempts) == ("failed", 1)


def test_fail_many_applies_each_retry_in_and_permanent(client: Client, queue: str) -> None:
    client.enqueue_many(["k"] * 3, queue=queue)
    a, b, c = client.claim(W, [queue], max_jobs=3)
    out = client.fail_many([a.id, b.id, c.id], [a.attempt_token, b.attempt_token, c.attempt_token],
                           ["ea", "eb", "ec"], retry_ins=[timedelta(0), None, None],
                           permanents=[False, True, False])
    assert [(o.id, o.accepted, o.status) for o in out] == [(a.id, True, "queued"), (b.id, True, "failed"),
                                                           (c.id, True, "queued")]
    ra, rb, rc = client.get_job(a.id), client.get_job(b.id), client.get_job(c.id)
    assert [r.last_error for r in (ra, rb, rc)] == ["ea", "eb", "ec"]
    assert ra.available_at == ra.updated_at
    assert rc.available_at - rc.updated_at == timedelta(seconds=1)


def test_release_started_counts_the_attempt_and_unstarted_does_not(client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    a, b = client.claim(W, [queue], max_jobs=2)
    assert client.release(a.id, a.attempt_token) == "queued"
    assert client.release(b.id, b.attempt_token, started=False) == "queued"
    ra, rb = client.get_job(a.id), client.get_job(b.id)
    assert (ra.status, ra.attempts, ra.last_error, ra.reclaim_count) == ("queued", 1, RELEASED, 0)
    assert (rb.status, rb.attempts, rb.last_error) == ("queued", 0, None)


def test_release_many_reports_each_job(client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    a, b = client.claim(W, [queue], max_jobs=2)
    out = client.release_many([a.id, b.id], [a.attempt_token, uuid.uuid4()], started=False)
    assert [(o.id, o.accepted, o.status) for o in out] == [(a.id, True, "queued"), (b.id, False, "processing")]
    assert out[1].detail
    assert client.get_job(a.id).attempts == 0


# Any session's claim reclaims expired leases from every queue (and other sessions
# may be claiming while these tests run), so a lease that expires in autocommit
# mode may be reclaimed by someone else first. The tests that need to be the
# reclaimer claim and reclaim inside one transaction: the uncommitted claim is
# invisible to, and row-locked against, everyone else.
def test_reclaim_expired_returns_the_reclaimed_jobs(dsn: str, client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    with connect(dsn, autocommit=False) as tx:
        in_tx = Client(tx)
        in_tx.claim(W, [queue], lease=timedelta(hours=1))  # a live lease: left alone
        # (claimed last: a claim first reclaims expired leases, ours included)
        expired = in_tx.claim(W, [queue], lease=timedelta(milliseconds=1))[0]
        tx.execute("SELECT pg_sleep(0.01)")
        reclaimed = [r for r in in_tx.reclaim_expired(max_jobs=10000) if r.id == expired.id]
        tx.commit()
    assert reclaimed == [Reclaimed(id=expired.id, status="queued", reclaim_count=1)]
    row = client.get_job(expired.id)
    assert (row.status, row.reclaim_count, row.last_error, row.attempts) == ("queued", 1, LEASE_EXPIRED, 1)
    assert [(s.status, s.jobs) for s in client.stats() if s.queue == queue] == [("processing", 1), ("queued", 1)]


def test_stats_counts_expired_leases(dsn: str, client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    with connect(dsn, autocommit=False) as tx:
        in_tx = Client(tx)
        in_tx.claim(W, [queue], lease=timedelta(hours=1))
        in_tx.claim(W, [queue], lease=timedelta(milliseconds=1))
        tx.execute("SELECT pg_sleep(0.01)")
        rows = [(s.status, s.jobs, s.expired_leases) for s in in_tx.stats() if s.queue == queue]
        tx.rollback()
    assert rows == [("processing", 2, 1)]


def test_sweep_reclaims_every_expired_lease_and_returns_the_count(client: Client, sweep_paused: Any,
                                                                   queue: str) -> None:
    client.enqueue_many(["k"] * 3, queue=queue)
    jobs = client.claim(W, [queue], lease=timedelta(milliseconds=1), max_jobs=3)
    n = client.sweep()
    # n counts every queue's expired leases; another session's claim may have
    # reclaimed ours first, so only its type is certain. The SQL tests pin the count.
    assert isinstance(n, int) and n >= 0
    for j in jobs:
        row = wait_for(lambda: job_if(client, j.id, "queued"), 5, f"job {j.id} reclaimed")
        assert (row.reclaim_count, row.last_error, row.attempts) == (1, LEASE_EXPIRED, 1)


def test_requeue_and_cancel_move_the_job(client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue)
    assert client.cancel(job_id) is None
    row = client.get_job(job_id)
    assert (row.status, row.finished_at is not None) == ("cancelled", True)
    assert client.requeue(job_id) is None
    row = client.get_job(job_id)
    assert (row.status, row.finished_at) == ("queued", None)


def test_stats_counts_jobs_per_queue_and_status(client: Client, queue: str) -> None:
    client.enqueue_many(["k"] * 3, queue=queue)
    client.claim(W, [queue], max_jobs=1)
    rows = [s for s in client.stats() if s.queue == queue]
    assert all(isinstance(s, QueueStats) for s in rows)
    assert [(s.status, s.jobs, s.expired_leases) for s in rows] == [("processing", 1, 0), ("queued", 2, 0)]
    processing, queued = rows
    assert processing.oldest_runnable_age is None
    assert isinstance(queued.oldest_runnable_age, timedelta) and queued.oldest_runnable_age >= timedelta(0)


def test_get_job_of_an_unknown_id_raises_job_not_found(client: Client) -> None:
    with pytest.raises(JobNotFound) as exc:
        client.get_job(UNKNOWN_ID)
    assert exc.value.sqlstate == "PF002" and str(UNKNOWN_ID) in exc.value.message


def test_check_schema_returns_the_deployed_version(client: Client) -> None:
    assert client.check_schema() == SCHEMA_VERSION == 3


def test_sweeper_last_pass_and_active_follow_the_background_sweeper(
        dsn: str, client: Client, conn: psycopg.Connection[Any]) -> None:
    first = wait_for(client.sweeper_last_pass, 90, "a first pass of the pg_cron sweeper")
    assert isinstance(first, datetime) and first.tzinfo is not None and first <= db_now(conn)
    assert client.sweeper_active() is True
    assert client.sweep_scheduled() is True  # the deprecated name
    assert client.sweeper_health().state == "running"
    # Paused (pause_sweeper), it completes no pass, and says so.
    assert client.pause_sweeper() is True
    try:
        assert client.pause_sweeper() is False  # already paused
        paused_at = client.sweeper_last_pass()
        conn.execute("SELECT pg_sleep(0.7)")
        assert client.sweeper_last_pass() == paused_at
        health = client.sweeper_health()
        assert (health.state, health.paused_by) == ("paused", "postgres") and health.paused_at is not None
        assert client.sweeper_active(timedelta(milliseconds=200)) is False
        assert client.sweeper_active() is False
    finally:
        assert client.resume_sweeper() is True
    assert client.resume_sweeper() is False
    wait_for(lambda: client.sweeper_last_pass() != paused_at, 10, "a pass after resume_sweeper")
    assert client.sweeper_health().state == "running"


def test_attempts_lists_each_ended_attempt(client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue)
    first = claim_one(client, queue)
    client.fail(first.id, first.attempt_token, "E1", retry_in=timedelta(0))
    second = claim_one(client, queue)
    client.complete(second.id, second.attempt_token, {"ok": True})
    history = client.attempts(job_id)
    assert all(isinstance(a, Attempt) for a in history)
    assert [(a.job_id, a.attempt, a.attempt_token, a.worker, a.outcome, a.error) for a in history] == [
        (job_id, 1, first.attempt_token, W, "failed", "E1"),
        (job_id, 2, second.attempt_token, W, "done", None)]
    assert all(a.claimed_at <= a.ended_at for a in history)
    assert client.attempts(UNKNOWN_ID) == []


def test_a_refused_single_call_is_recorded_as_a_rejection(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    client.cancel(job.id)
    with pytest.raises(LeaseLost):
        client.complete(job.id, job.attempt_token, {"late": True})
    with pytest.raises(LeaseLost):
        client.heartbeat(job.id, job.attempt_token)
    refused = client.rejections(job.id)
    assert all(isinstance(r, Rejection) for r in refused)
    assert [(r.job_id, r.attempt_token, r.operation) for r in refused] == \
        [(job.id, job.attempt_token, "complete"), (job.id, job.attempt_token, "heartbeat")]
    assert all(r.caller and r.detail and "cancelled" in r.detail for r in refused)


def test_refused_batch_calls_record_their_own_rejections(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    first = claim_one(client, queue)
    client.release(first.id, first.attempt_token)  # its attempt is over: the token is stale
    job = claim_one(client, queue)
    stale = first.attempt_token
    assert [o.accepted for o in client.complete_many([job.id], [stale])] == [False]
    assert [o.accepted for o in client.fail_many([job.id], [stale], ["late"])] == [False]
    assert [(r.operation, r.attempt_token) for r in client.rejections(job.id)] == \
        [("complete", stale), ("fail", stale)]
    assert client.get_job(job.id).status == "processing"


def test_report_rejection_refuses_the_current_token(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    first = claim_one(client, queue)
    client.release(first.id, first.attempt_token)
    job = claim_one(client, queue)
    with pytest.raises(InvalidArgument) as exc:
        client.report_rejection(job.id, job.attempt_token, "complete")
    assert exc.value.sqlstate == "22023" and exc.value.hint
    with pytest.raises(InvalidArgument):
        client.report_rejection(job.id, first.attempt_token, "explode")
    with pytest.raises(JobNotFound):
        client.report_rejection(UNKNOWN_ID, uuid.uuid4(), "complete")
    with pytest.raises(InvalidArgument) as exc:  # a token that never held an attempt of the job
        client.report_rejection(job.id, uuid.uuid4(), "complete")
    assert "never held an attempt" in exc.value.message
    client.report_rejection(job.id, first.attempt_token, "complete")
    assert [r.operation for r in client.rejections(job.id)] == ["complete"]


# -------------------------------------------------------------- errors ----
def test_complete_with_a_stale_token_raises_lease_lost_with_detail(client: Client, queue: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    with pytest.raises(LeaseLost) as exc:
        client.complete(job.id, uuid.uuid4(), {"x": 1})
    e = exc.value
    assert isinstance(e, PgfenceError) and e.sqlstate == "PF001"
    assert str(job.id) in e.message and e.detail and e.hint
    assert f"DETAIL: {e.detail}" in str(e)
    assert client.get_job(job.id).status == "processing"


def test_snooze_returns_the_job_to_the_queue_without_counting_the_attempt(client: Client, queue: str) -> None:
    client.enqueue_many(["k", "k"], queue=queue)
    a, b = client.claim(W, [queue], max_jobs=2)
    assert client.snooze(a.id, a.attempt_token, timedelta(hours=1)) == "queued"
    ra = client.get_job(a.id)
    assert (ra.status, ra.attempts, ra.max_attempts, ra.last_error) == ("queued", 1, 4, None)
    assert [(x.attempt, x.outcome) for x in client.attempts(a.id)] == [(1, "snoozed")]
    out = client.snooze_many([b.id, a.id], [b.attempt_token, uuid.uuid4()], [timedelta(minutes=1)] * 2)
    assert [(o.id, o.accepted, o.status) for o in out] == [(b.id, True, "queued"), (a.id, False, "queued")]
    assert client.snooze(a.id, a.attempt_token, timedelta(seconds=1)) == "queued"  # a repeat: accepted, no change
    assert client.get_job(a.id) == ra
    with pytest.raises(LeaseLost):
        client.snooze(b.id, a.attempt_token, timedelta(seconds=1))


@pytest.mark.parametrize("call", ["heartbeat", "complete", "fail", "release", "snooze"])
def test_every_fenced_call_of_a_cancelled_attempt_raises_lease_lost(client: Client, queue: str, call: str) -> None:
    client.enqueue("k", queue=queue)
    job = claim_one(client, queue)
    client.cancel(job.id)
    calls = {
        "heartbeat": lambda: client.heartbeat(job.id, job.attempt_token),
        "complete": lambda: client.complete(job.id, job.attempt_token, {"late": True}),
        "fail": lambda: client.fail(job.id, job.attempt_token, "late"),
        "release": lambda: client.release(job.id, job.attempt_token),
        "snooze": lambda: client.snooze(job.id, job.attempt_token, timedelta(minutes=1)),
    }
    with pytest.raises(LeaseLost) as exc:
        calls[call]()
    assert exc.value.sqlstate == "PF001" and exc.value.detail and "cancelled" in exc.value.detail
    row = client.get_job(job.id)
    assert (row.status, row.result, row.last_error) == ("cancelled", None, None)


@pytest.mark.parametrize("call", ["heartbeat", "complete", "fail", "release", "requeue", "cancel"])
def test_calls_on_an_unknown_job_raise_job_not_found(client: Client, call: str) -> None:
    token = uuid.uuid4()
    calls = {
        "heartbeat": lambda: client.heartbeat(UNKNOWN_ID, token),
        "complete": lambda: client.complete(UNKNOWN_ID, token),
        "fail": lambda: client.fail(UNKNOWN_ID, token, "e"),
        "release": lambda: client.release(UNKNOWN_ID, token),
        "requeue": lambda: client.requeue(UNKNOWN_ID),
        "cancel": lambda: client.cancel(UNKNOWN_ID),
    }
    with pytest.raises(JobNotFound) as exc:
        calls[call]()
    assert exc.value.sqlstate == "PF002" and exc.value.hint


def test_refused_transitions_raise_invalid_transition(client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue)
    with pytest.raises(InvalidTransition) as exc:
        client.requeue(job_id)  # queued cannot be requeued
    assert exc.value.sqlstate == "PF003" and "queued" in exc.value.message and exc.value.hint
    job = claim_one(client, queue)
    client.complete(job.id, job.attempt_token)
    with pytest.raises(InvalidTransition) as exc:
        client.cancel(job_id)   # done cannot be cancelled
    assert exc.value.sqlstate == "PF003" and "done" in exc.value.message
    assert client.get_job(job_id).status == "done"


def test_claim_inside_a_repeatable_read_transaction_raises_wrong_isolation(dsn: str, queue: str) -> None:
    with connect(dsn, autocommit=False) as tx:
        tx.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        in_tx = Client(tx)
        in_tx.enqueue("k", queue=queue)
        with pytest.raises(WrongIsolation) as exc:
            in_tx.claim(W, [queue])
        assert exc.value.sqlstate == "PF004" and "READ COMMITTED" in exc.value.message and exc.value.hint
        tx.rollback()


def test_a_bad_argument_raises_invalid_argument_with_message_and_hint(client: Client, queue: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        client.claim(W, [queue], max_jobs=0)
    e = exc.value
    assert isinstance(e, ValueError)
    assert e.sqlstate == "22023" and "max_jobs" in e.message and "0" in e.message
    assert e.hint and "max_jobs" in e.hint and f"HINT: {e.hint}" in str(e)
    with pytest.raises(InvalidArgument) as exc:
        client.enqueue("k", [1, 2], queue=queue)
    assert exc.value.sqlstate == "22023" and "payload" in exc.value.message and exc.value.hint
    with pytest.raises(InvalidArgument) as exc:
        client.claim(W, [queue], lease=timedelta(0))
    assert exc.value.sqlstate == "22023" and "lease" in exc.value.message


def test_a_null_argument_raises_invalid_argument_22004(client: Client, queue: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        client.enqueue(None, queue=queue)  # type: ignore[arg-type]
    e = exc.value
    assert e.sqlstate == "22004" and "kind" in e.message and "NULL" in e.message and e.hint
    with pytest.raises(InvalidArgument) as exc:
        client.fail_many([1], [uuid.uuid4()], [None])  # type: ignore[list-item]
    assert exc.value.sqlstate == "22004" and "errors[1]" in exc.value.message
    assert [s for s in client.stats() if s.queue == queue] == []


@pytest.fixture
def undeployed_dsn(dsn: str) -> Iterator[str]:
    """A scratch database without the pgfence schema, dropped afterwards."""
    with scratch_database(dsn, "pgfence_nodeploy") as scratch:
        yield scratch


def test_a_database_without_the_schema_raises_schema_mismatch(undeployed_dsn: str) -> None:
    with connect(undeployed_dsn) as c:
        with pytest.raises(SchemaMismatch) as exc:
            Client(c)
        assert "sqitch deploy" in str(exc.value)
    with pytest.raises(SchemaMismatch) as exc:
        Client.connect(undeployed_dsn)
    assert "sqitch deploy" in str(exc.value)


def test_a_client_needs_exactly_one_connection_source(dsn: str) -> None:
    with pytest.raises(TypeError):
        Client()


def test_a_method_written_with_the_helpers_of_before_pgfence_calls_still_works(dsn: str, queue: str) -> None:
    # Client keeps _scalar, _rows, _fenced and _call (over _do) for methods added that way
    # on branches begun before pgfence.calls.
    c = Client.connect(dsn, max_size=2)
    try:
        job_id = int(c._scalar("SELECT pgfence.enqueue(kind => 'k', queue => %s)", (queue,)))
        assert [s.jobs for s in c._rows(QueueStats, "SELECT queue, status, jobs, oldest_runnable_age,"
                                        " expired_leases FROM pgfence.stats()") if s.queue == queue] == [1]
        job = c.claim(W, [queue])[0]
        c.cancel(job_id)
        with pytest.raises(LeaseLost):
            c._fenced("complete", job_id, job.attempt_token,
                      "SELECT pgfence.complete(job_id => %s, attempt_token => %s)", (job_id, job.attempt_token))
        assert [r.operation for r in c.rejections(job_id)] == ["complete"]
        with pytest.raises(JobNotFound), c._call() as conn:
            conn.execute("SELECT pgfence.requeue(job_id => %s)", (-1,))
    finally:
        c.close()


def test_a_set_of_queues_is_defined_claimed_from_listed_and_dropped(client: Any, queue: str) -> None:
    name = f"{queue}-set"
    others = [f"{queue}-{i}" for i in range(30)]
    try:
        assert client.define_queue_set(name, [queue, *others, queue]) == 31
        [row] = [s for s in client.queue_sets() if s.queue_set == name]
        assert (row.queue_count, row.names) == (31, sorted([queue, *others])) and row.defined_by
        job_id = client.enqueue("k", {"n": 1}, queue=queue)
        client.enqueue("k", {"n": 2}, queue=f"{queue}-not-in-it")
        jobs = client.claim(W, queue_set=name, max_jobs=5)
        assert [(j.id, j.queue, j.payload) for j in jobs] == [(job_id, queue, {"n": 1})]
        with pytest.raises(InvalidArgument) as bad:
            client.claim(W, [queue], queue_set=name)
        assert "queue_set" in str(bad.value) and bad.value.hint
        with pytest.raises(InvalidArgument):
            client.define_queue_set(name, [])
        assert client.drop_queue_set(name) is True
        with pytest.raises(InvalidArgument) as gone:
            client.claim(W, queue_set=name)
        assert "not defined" in str(gone.value)
    finally:
        client.drop_queue_set(name)
        for left in client.claim(W, [queue, f"{queue}-not-in-it"], max_jobs=5):  # (none left for others)
            client.complete(left.id, left.attempt_token)
