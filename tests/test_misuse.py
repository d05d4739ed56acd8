"""Misuse is refused cleanly: fenced calls outside READ COMMITTED get PF004 (never a
raw 40001 from deep inside), oversized or malformed batches and payloads get
22023/22004 naming the argument, with a hint, before anything is written; and the
background sweeper keeps its own pg_cron log bounded and reports its passes."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import IsolationLevel

from support.api import claim_job, enqueue, heartbeat
from support.db import (UNKNOWN_ID, ZERO_TOKEN, assert_error, connect, one, queues_removed_after, rows,
                        sql_error)
from pgfence import Client

Conn = psycopg.Connection[Any]

BIG_PAYLOAD = '{"blob": "' + "x" * (1024 * 1024 + 1) + '"}'  # just over 1 MiB as jsonb


_FLOORS: dict[str, int] = {}  # queue -> id_floor when the test started (find its jobs by primary key)


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    """The test's queue; its jobs and history are removed afterwards."""
    with queues_removed_after(conn, queue) as floor:
        _FLOORS[queue] = floor
        yield queue
    del _FLOORS[queue]


def queue_state(conn: Conn, q: str) -> dict[str, list[dict[str, Any]]]:
    """Everything pgfence keeps about a queue: its jobs (all columns), their ended
    attempts and their recorded rejections."""
    jobs = rows(conn, "SELECT * FROM pgfence.jobs WHERE id > %s AND queue = %s ORDER BY id", (_FLOORS[q], q))
    ids = [j["id"] for j in jobs]
    return {
        "jobs": jobs,
        "attempts": rows(conn, "SELECT * FROM pgfence.attempts WHERE job_id = ANY(%s) ORDER BY job_id, attempt",
                         (ids,)),
        "rejections": rows(conn, "SELECT * FROM pgfence.rejections WHERE job_id = ANY(%s)"
                                 " ORDER BY job_id, rejected_at", (ids,)),
    }


# ================================================== isolation level: PF004 ==
FENCED_CALLS: dict[str, str] = {
    "claim": "SELECT * FROM pgfence.claim('worker-rr', ARRAY[%(q)s], '1 hour', 5)",
    "heartbeat": "SELECT pgfence.heartbeat(%(id)s, %(tok)s, '1 hour')",
    "heartbeat_many": "SELECT * FROM pgfence.heartbeat_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[], '1 hour')",
    "complete": "SELECT pgfence.complete(%(id)s, %(tok)s, '{\"r\": 1}')",
    "complete_many": "SELECT * FROM pgfence.complete_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
    "fail": "SELECT pgfence.fail(%(id)s, %(tok)s, 'boom')",
    "fail_many": "SELECT * FROM pgfence.fail_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[], ARRAY['boom'])",
    "release": "SELECT pgfence.release(%(id)s, %(tok)s)",
    "release_many": "SELECT * FROM pgfence.release_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
}
LEVELS = {"repeatable_read": IsolationLevel.REPEATABLE_READ, "serializable": IsolationLevel.SERIALIZABLE}


@dataclass
class Racing:
    """A processing job and a queued job, both changed by another session after the
    test's transaction took its snapshot: exactly where a fenced UPDATE or a
    FOR UPDATE would raise 40001 under REPEATABLE READ or SERIALIZABLE."""
    queue: str
    processing_id: int
    token: uuid.UUID
    queued_id: int


@pytest.fixture
def racing_tx(dsn: str, conn: Conn, q: str, request: pytest.FixtureRequest) -> Iterator[tuple[Conn, Racing]]:
    level = LEVELS[request.param]
    pid = enqueue(conn, q, priority=1)
    tok = claim_job(conn, q, pid, "worker-A", lease="1 hour")
    qid = enqueue(conn, q)
    tx = connect(dsn, autocommit=False)
    try:
        tx.isolation_level = level
        tx.execute("SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (q,))  # takes the snapshot
        assert one(tx, "SHOW transaction_isolation") == request.param.replace("_", " ")
        # another session: a heartbeat on the processing job; the queued job claimed and
        # given back unstarted (a new row version, still queued)
        heartbeat(conn, pid, tok, "2 hours")
        other = claim_job(conn, q, qid, "worker-B", lease="1 hour")
        assert one(conn, "SELECT pgfence.release(%s, %s, started => false)", (qid, other)) == "queued"
        yield tx, Racing(q, pid, tok, qid)
    finally:
        tx.rollback()
        tx.close()


@pytest.mark.parametrize("racing_tx", list(LEVELS), indirect=True)
def test_direct_update_in_that_transaction_would_be_a_serialization_failure(conn: Conn,
                                                                            racing_tx: tuple[Conn, Racing]) -> None:
    """Control: the scenario really is one where a write raises 40001."""
    tx, r = racing_tx
    err = sql_error(tx, "UPDATE pgfence.jobs SET updated_at = updated_at WHERE id = %s", (r.processing_id,))
    assert err.sqlstate == "40001"


@pytest.mark.parametrize("call", list(FENCED_CALLS))
@pytest.mark.parametrize("racing_tx", list(LEVELS), indirect=True)
def test_fenced_call_outside_read_committed_is_refused_with_pf004(conn: Conn, racing_tx: tuple[Conn, Racing],
                                                                  call: str) -> None:
    tx, r = racing_tx
    before = queue_state(conn, r.queue)
    err = sql_error(tx, FENCED_CALLS[call], {"q": r.queue, "id": r.processing_id, "tok": r.token})
    assert err.sqlstate == "PF004", f"{call}: SQLSTATE {err.sqlstate}: {err}"
    assert "READ COMMITTED" in (err.diag.message_primary or "")
    assert err.diag.message_hint
    assert queue_state(conn, r.queue) == before
    assert before["jobs"][0]["status"] == "processing" and before["jobs"][1]["status"] == "queued"


def test_reclaim_expired_outside_read_committed_is_refused_with_pf004(dsn: str, conn: Conn, q: str) -> None:
    pid = enqueue(conn, q)
    tok = claim_job(conn, q, pid, "worker-A", lease="1 second")
    with connect(dsn, autocommit=False) as holder, connect(dsn, autocommit=False) as tx:
        # holder locks the row before the lease ends, so no other reclaimer takes it
        assert holder.execute("SELECT id FROM pgfence.jobs WHERE id = %s AND lease_expires_at > clock_timestamp()"
                              " FOR UPDATE", (pid,)).fetchall() == [(pid,)]
        holder.execute("SELECT pg_sleep(greatest(0, extract(epoch FROM lease_expires_at - clock_timestamp()))"
                       " + 0.05) FROM pgfence.jobs WHERE id = %s", (pid,))
        tx.isolation_level = IsolationLevel.REPEATABLE_READ
        assert one(tx, "SELECT lease_expires_at < clock_timestamp() FROM pgfence.jobs WHERE id = %s",
                   (pid,)) is True  # the snapshot: an expired lease
        heartbeat(holder, pid, tok, "1 hour")  # a late heartbeat renews it (new row version) ...
        holder.commit()                        # ... and lets go of the row
        err = sql_error(tx, "SELECT * FROM pgfence.reclaim_expired(10000)")
    assert err.sqlstate == "PF004", f"SQLSTATE {err.sqlstate}: {err}"
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (pid,)) == "processing"


def test_fenced_calls_work_in_an_explicit_read_committed_transaction(dsn: str, conn: Conn, q: str) -> None:
    """Control: the check refuses the isolation level, not explicit transactions."""
    ids = [enqueue(conn, q) for _ in range(4)]
    with connect(dsn, autocommit=False) as tx:
        tx.isolation_level = IsolationLevel.READ_COMMITTED
        got = rows(tx, "SELECT id, attempt_token FROM pgfence.claim('w', ARRAY[%s], '1 hour', 4)", (q,))
        tok = {g["id"]: g["attempt_token"] for g in got}
        j1, j2, j3, j4 = ids
        tx.execute(FENCED_CALLS["heartbeat"], {"id": j1, "tok": tok[j1]})
        tx.execute(FENCED_CALLS["heartbeat_many"], {"id": j2, "tok": tok[j2]})
        tx.execute(FENCED_CALLS["complete"], {"id": j1, "tok": tok[j1]})
        tx.execute(FENCED_CALLS["complete_many"], {"id": j2, "tok": tok[j2]})
        tx.execute(FENCED_CALLS["fail"], {"id": j3, "tok": tok[j3]})
        tx.execute(FENCED_CALLS["release_many"], {"id": j4, "tok": tok[j4]})
        tx.commit()
    assert dict(conn.execute("SELECT id, status FROM pgfence.all_jobs WHERE queue = %s", (q,)).fetchall()) == {
        ids[0]: "done", ids[1]: "done", ids[2]: "queued", ids[3]: "queued"}


# ============================================= sizes, shapes and batches ==
@dataclass
class World:
    queue: str
    job_id: int
    token: uuid.UUID


@pytest.fixture
def world(conn: Conn, q: str) -> World:
    jid = enqueue(conn, q)
    return World(q, jid, claim_job(conn, q, jid, lease="1 hour"))


MANY = ["heartbeat_many", "complete_many", "fail_many", "release_many"]
MANY_SQL = {
    "heartbeat_many": "SELECT * FROM pgfence.heartbeat_many(%(ids)s::bigint[], %(toks)s::uuid[], '1 hour')",
    "complete_many": "SELECT * FROM pgfence.complete_many(%(ids)s::bigint[], %(toks)s::uuid[])",
    "fail_many": "SELECT * FROM pgfence.fail_many(%(ids)s::bigint[], %(toks)s::uuid[],"
                 " array_fill('boom'::text, ARRAY[cardinality(%(toks)s::uuid[])]))",
    "release_many": "SELECT * FROM pgfence.release_many(%(ids)s::bigint[], %(toks)s::uuid[])",
}
BATCH_LIMIT = 10_000


def _batch_cases() -> list[Any]:
    cases = []
    for fn in MANY:
        s = MANY_SQL[fn]
        cases += [
            pytest.param(s, lambda w: {"ids": None, "toks": [w.token]}, "22004", "job_ids", id=f"{fn}-job_ids-null"),
            pytest.param(s.replace("%(toks)s::uuid[]", "NULL::uuid[]", 1).replace(
                "cardinality(%(toks)s::uuid[])", "1"),
                lambda w: {"ids": [w.job_id]}, "22004", "attempt_tokens", id=f"{fn}-attempt_tokens-null"),
            pytest.param(s, lambda w: {"ids": [w.job_id] + [UNKNOWN_ID - i for i in range(BATCH_LIMIT)],
                                       "toks": [w.token] * (BATCH_LIMIT + 1)},
                         "22023", "job_ids length", id=f"{fn}-10001-elements"),
            pytest.param(s, lambda w: {"ids": [], "toks": []}, "22023", "job_ids length", id=f"{fn}-empty"),
            pytest.param(s, lambda w: {"ids": [w.job_id, UNKNOWN_ID, w.job_id], "toks": [w.token] * 3},
                         "22023", "job_ids", id=f"{fn}-duplicate-ids"),
            pytest.param(s, lambda w: {"ids": [w.job_id], "toks": [w.token, uuid.UUID(ZERO_TOKEN)]},
                         "22023", "attempt_tokens length", id=f"{fn}-length-mismatch"),
        ]
    w_tok = "%(ids)s::bigint[], %(toks)s::uuid[]"
    cases += [
        pytest.param(f"SELECT * FROM pgfence.complete_many({w_tok}, ARRAY['{{}}'::jsonb, '{{}}'::jsonb])",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22023", "results length",
                     id="complete_many-results-length-mismatch"),
        pytest.param(f"SELECT * FROM pgfence.fail_many({w_tok}, NULL)",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22004", "errors", id="fail_many-errors-null"),
        pytest.param(f"SELECT * FROM pgfence.fail_many({w_tok}, ARRAY['a', 'b'])",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22023", "array lengths",
                     id="fail_many-errors-length-mismatch"),
        pytest.param(f"SELECT * FROM pgfence.fail_many({w_tok}, ARRAY['a'], ARRAY['1 s', '2 s']::interval[])",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22023", "array lengths",
                     id="fail_many-retry_ins-length-mismatch"),
        pytest.param(f"SELECT * FROM pgfence.fail_many({w_tok}, ARRAY['a'], NULL, ARRAY[true, false])",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22023", "array lengths",
                     id="fail_many-permanents-length-mismatch"),
        pytest.param("SELECT * FROM pgfence.release_many(%(ids)s::bigint[], %(toks)s::uuid[], NULL)",
                     lambda w: {"ids": [w.job_id], "toks": [w.token]}, "22004", "started",
                     id="release_many-started-null"),
    ]
    return cases


ENQ = "SELECT pgfence.enqueue('k', %(p)s::jsonb, %(q)s)"
ENQ_MANY = "SELECT * FROM pgfence.enqueue_many(ARRAY['k', 'k'], ARRAY['{}'::jsonb, %(p)s::jsonb], %(q)s)"
NON_OBJECTS = {"array": "[1, 2]", "string": '"text"', "number": "42", "json-null": "null"}


def _payload_cases() -> list[Any]:
    cases = [pytest.param(ENQ, lambda w: {"p": BIG_PAYLOAD}, "22023", "payload", id="enqueue-payload-over-1MiB"),
             pytest.param(ENQ_MANY, lambda w: {"p": BIG_PAYLOAD}, "22023", "payloads[2]",
                          id="enqueue_many-payload-over-1MiB"),
             pytest.param(ENQ, lambda w: {"p": None}, "22004", "payload", id="enqueue-payload-sql-null"),
             pytest.param(ENQ_MANY, lambda w: {"p": None}, "22004", "payloads[2]", id="enqueue_many-payload-sql-null")]
    for name, value in NON_OBJECTS.items():
        cases += [pytest.param(ENQ, lambda w, v=value: {"p": v}, "22023", "payload", id=f"enqueue-payload-{name}"),
                  pytest.param(ENQ_MANY, lambda w, v=value: {"p": v}, "22023", "payloads[2]",
                               id=f"enqueue_many-payload-{name}")]
    em = "SELECT * FROM pgfence.enqueue_many(%(kinds)s::text[], queue => %(q)s"
    cases += [
        pytest.param(em + ")", lambda w: {"kinds": None}, "22004", "kinds", id="enqueue_many-kinds-null"),
        pytest.param(em + ")", lambda w: {"kinds": ["k"] * (BATCH_LIMIT + 1)}, "22023", "kinds length",
                     id="enqueue_many-10001-elements"),
        pytest.param(em + ")", lambda w: {"kinds": []}, "22023", "kinds length", id="enqueue_many-empty"),
        pytest.param(em + ", payloads => ARRAY['{}'::jsonb])", lambda w: {"kinds": ["a", "b"]}, "22023",
                     "array lengths", id="enqueue_many-payloads-length-mismatch"),
        pytest.param(em + ", priorities => ARRAY[1, 2, 3])", lambda w: {"kinds": ["a", "b"]}, "22023",
                     "array lengths", id="enqueue_many-priorities-length-mismatch"),
        pytest.param(em + ", run_ats => ARRAY[now()])", lambda w: {"kinds": ["a", "b"]}, "22023",
                     "array lengths", id="enqueue_many-run_ats-length-mismatch"),
        pytest.param(em + ", idempotency_keys => ARRAY['x'])", lambda w: {"kinds": ["a", "b"]}, "22023",
                     "array lengths", id="enqueue_many-idempotency_keys-length-mismatch"),
    ]
    return cases


@pytest.mark.parametrize(("query", "params", "sqlstate", "names"), _batch_cases() + _payload_cases())
def test_bad_batch_or_payload_is_refused_and_changes_nothing(conn: Conn, world: World, query: str, params: Any,
                                                             sqlstate: str, names: str) -> None:
    before = queue_state(conn, world.queue)
    err = sql_error(conn, query, {"q": world.queue, **params(world)})
    assert_error(err, sqlstate, names)  # SQLSTATE, the argument named, a HINT
    assert queue_state(conn, world.queue) == before
    assert [j["status"] for j in before["jobs"]] == ["processing"]
    assert before["attempts"] == [] and before["rejections"] == []


def test_a_payload_of_just_under_1_mib_is_accepted(conn: Conn, q: str) -> None:
    """Control for the size limit: the limit is on the jsonb size, and a payload just
    below it goes in."""
    payload = '{"blob": "' + "x" * (1024 * 1024 - 64) + '"}'
    size = one(conn, "SELECT pg_column_size(%s::jsonb)", (payload,))
    assert size <= 1024 * 1024
    jid = one(conn, ENQ, {"p": payload, "q": q})
    assert one(conn, "SELECT length(payload->>'blob') FROM pgfence.jobs WHERE id = %s", (jid,)) == 1024 * 1024 - 64


def test_the_payload_limit_counts_a_payload_read_from_a_table_uncompressed(conn: Conn, q: str) -> None:
    """A jsonb read from a table column reaches enqueue still compressed: 5 MB of
    repeated text is stored in well under 1 MiB, and must still be refused."""
    conn.execute("CREATE TEMP TABLE staged_payload (p jsonb)")
    try:
        conn.execute("INSERT INTO staged_payload SELECT jsonb_build_object('blob', repeat('x', 5000000))")
        assert one(conn, "SELECT pg_column_size(p) < 1048576 FROM staged_payload") is True  # stored compressed
        before = queue_state(conn, q)
        err = sql_error(conn, "SELECT pgfence.enqueue('k', p, queue => %s) FROM staged_payload", (q,))
        assert_error(err, "22023", "payload")
        assert "bytes" in str(err) and queue_state(conn, q) == before
    finally:
        conn.execute("DROP TABLE staged_payload")


# ====================================================== the sweeper's log ==
RUN_ROW = """
    INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, command, status,
                                      return_message, start_time, end_time)
    VALUES (%(jobid)s, nextval('cron.runid_seq'), 0, current_database(), current_user,
            'CALL pgfence.run_sweeper()', 'succeeded', 'pgfence test row',
            now() - %(age)s::interval - interval '1 minute', now() - %(age)s::interval)
    RETURNING runid"""


def test_run_sweeper_trims_its_own_cron_log_older_than_a_day(conn: Conn) -> None:
    if one(conn, "SELECT to_regclass('cron.job_run_details') IS NULL"):
        pytest.skip("pg_cron is not installed in the test database")
    jobid = one(conn, "SELECT jobid FROM cron.job WHERE jobname = 'pgfence-reclaim'")
    other_jobid = one(conn, "SELECT coalesce(min(jobid), 0) - 1000 FROM cron.job")  # no such job
    mine: list[int] = []
    try:
        old = one(conn, RUN_ROW, {"jobid": jobid, "age": "2 days"})
        recent = one(conn, RUN_ROW, {"jobid": jobid, "age": "1 hour"})
        foreign = one(conn, RUN_ROW, {"jobid": other_jobid, "age": "2 days"})
        mine = [old, recent, foreign]
        started = time.monotonic()
        conn.execute("CALL pgfence.run_sweeper(run_until => clock_timestamp())")
        assert time.monotonic() - started < 30  # one pass, then it returns
        left = {r[0] for r in conn.execute("SELECT runid FROM cron.job_run_details WHERE runid = ANY(%s)",
                                           (mine,))}
        assert left == {recent, foreign}  # its own day-old row went; the rest stayed
    finally:
        conn.execute("DELETE FROM cron.job_run_details WHERE runid = ANY(%s)", (mine,))


def test_sweeper_status_shows_the_last_pass(conn: Conn) -> None:
    """pg_cron starts run_sweeper every minute and it passes every 0.5 s: a pass newer
    than the start of this test shows up within 70 s (normally at once), and
    sweeper_last_pass() returns exactly what sweeper_status holds."""
    t0 = one(conn, "SELECT clock_timestamp()")
    deadline = time.monotonic() + 70
    last = None
    while time.monotonic() < deadline:
        last = one(conn, "SELECT last_pass_at FROM pgfence.sweeper_status")
        if last is not None and last >= t0:
            break
        time.sleep(0.25)
    assert last is not None and last >= t0, f"no sweeper pass since {t0} (last: {last})"
    with conn.transaction():  # one snapshot for both reads
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute(
            "SELECT (SELECT last_pass_at FROM pgfence.sweeper_status), pgfence.sweeper_last_pass(),"
            " clock_timestamp()").fetchone()
    assert row is not None
    status, via_fn, now = row
    assert status == via_fn
    assert t0 <= via_fn <= now
    client = Client(conn)
    assert client.sweeper_last_pass() >= t0
    assert client.sweeper_active() is True
    assert one(conn, "SELECT count(*) FROM pgfence.sweeper_status") == 1


def test_run_sweeper_outside_read_committed_is_refused_up_front(dsn: str) -> None:
    """Every transaction after its first COMMIT starts at default_transaction_isolation:
    refused up front with PF004, and the session holds no lock afterwards."""
    with connect(dsn) as c:
        c.execute("SET default_transaction_isolation = 'repeatable read'")
        err = sql_error(c, "CALL pgfence.run_sweeper('10 ms', clock_timestamp() + interval '1 second')")
        assert_error(err, "PF004")
        assert one(c, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()") == 0


def test_a_failing_purge_does_not_stop_the_sweeper(conn: Conn, q: str) -> None:
    """A purge that raises (here: a retention row, written by hand, that reaches past
    the earliest timestamp; set_retention refuses such a value) is logged as a WARNING
    and the passes go on reclaiming, instead of the whole run ending in the error."""
    done_id = enqueue(conn, q)  # a finished job that stays in pgfence.jobs
    conn.execute("SELECT pgfence.cancel(%s)", (done_id,))
    conn.execute("UPDATE pgfence.jobs SET finished_at = finished_at - interval '2 days' WHERE id = %s", (done_id,))
    conn.execute("INSERT INTO pgfence.retention VALUES (%s, '10000 years', '10000 years')", (q,))
    assert sql_error(conn, "SELECT pgfence.purge_finished(1000)").sqlstate == "22008"
    warnings: list[str] = []
    conn.add_notice_handler(lambda d: warnings.append(f"{d.severity_nonlocalized}: {d.message_primary}"))
    started = one(conn, "SELECT clock_timestamp()")
    # (pg_cron's sweeper may take some of the steps meanwhile: it fails the same purge,
    # in its own session, and may be the one that reclaims.)
    try:
        expired_id = enqueue(conn, q)
        # The lease ends after the first pass, whose purge fails: only a later pass reclaims it.
        claim_job(conn, q, expired_id, lease="400 milliseconds")
        assert one(conn, "SELECT lease_expires_at > clock_timestamp() + interval '100 milliseconds'"
                         " FROM pgfence.jobs WHERE id = %s", (expired_id,)) is True
        conn.execute("CALL pgfence.run_sweeper('10 ms', clock_timestamp() + interval '1.5 seconds')")
    finally:
        conn.execute("DELETE FROM pgfence.retention WHERE queue = %s", (q,))
    assert any(w.startswith("WARNING: pgfence: purge_finished failed") for w in warnings), warnings
    # Operators see it without the server log: the error and its time are kept.
    error, error_at = conn.execute("SELECT last_error, last_error_at FROM pgfence.sweeper_status").fetchone() or (None, None)
    assert error_at is not None and error_at > started
    assert error.startswith("purge_finished failed: ") and error.endswith("(SQLSTATE 22008)"), error
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (expired_id,)) == "queued"
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (done_id,)) == "cancelled"


@pytest.mark.parametrize(("reclaimed", "purged", "error", "names"), [
    (-5, None, None, "reclaimed"), (None, -1, None, "purged"), (10**12, None, None, "reclaimed"),
    (None, None, "", "error"), (None, None, "x" * 10001, "error")])
def test_note_sweeper_pass_refuses_bad_values(conn: Conn, sweep_paused: Conn, reclaimed: int | None,
                                              purged: int | None, error: str | None, names: str) -> None:
    before = conn.execute("SELECT * FROM pgfence.sweeper_status").fetchall()
    err = sql_error(conn, "SELECT pgfence.note_sweeper_pass(%s, %s, %s)", (reclaimed, purged, error))
    assert_error(err, "22023", names)
    assert conn.execute("SELECT * FROM pgfence.sweeper_status").fetchall() == before


@pytest.mark.parametrize(("query", "shown"), [
    ("SELECT * FROM pgfence.fail_many(%(ids)s::bigint[], %(toks)s::uuid[], ARRAY['a'], NULL, ARRAY[true, false])",
     "errors=1 retry_ins=NULL permanents=2"),
    ("SELECT * FROM pgfence.fail_many(%(ids)s::bigint[], %(toks)s::uuid[], ARRAY['a'], ARRAY['1 s', '2 s']::interval[])",
     "errors=1 retry_ins=2 permanents=NULL"),
    ("SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(q)s, priorities => ARRAY[1])",
     "payloads=NULL priorities=1 run_ats=NULL idempotency_keys=NULL"),
], ids=["fail_many-retry_ins-not-given", "fail_many-permanents-not-given", "enqueue_many-three-not-given"])
def test_array_lengths_message_shows_null_for_an_array_not_given(conn: Conn, world: World, query: str,
                                                                  shown: str) -> None:
    before = queue_state(conn, world.queue)
    err = sql_error(conn, query, {"q": world.queue, "ids": [world.job_id], "toks": [world.token]})
    assert_error(err, "22023", "array lengths")
    assert shown in (err.diag.message_primary or "")
    assert queue_state(conn, world.queue) == before
