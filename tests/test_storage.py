"""Storage: a done job leaves pgfence.jobs for one row of the partitioned history
(pgfence.finished_jobs: the job, its result, its final and earlier attempts); failed and
cancelled jobs stay; idempotency keys of done jobs stay held (pgfence.held_keys) until
their history goes; the partitions are made ahead and dropped whole by one routine whose
table names come only from dates; a completion whose partition is missing lands in the
default partition, which that routine empties. Readers (job(), all_jobs, all_attempts,
the fencing answers) see a done job as before."""
from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from support.api import claim_job, complete, enqueue, fail
from support.db import (Conn, assert_error, connect, connection, expire_history, job, narrow_history, one, rows,
                        scratch_database, sql_error, sqitch, sqitch_target)
from support.roles import login_roles, set_role

pytestmark = pytest.mark.usefixtures("job_id_floor")

_RUN = secrets.token_hex(3)
PRODUCER_A = f"t_store_prod_a_{_RUN}"
PRODUCER_B = f"t_store_prod_b_{_RUN}"
OPERATOR = f"t_store_oper_{_RUN}"


def _run_to_done(conn: Conn, queue: str, **kw: Any) -> tuple[int, Any]:
    job_id = enqueue(conn, queue, **kw)
    token = claim_job(conn, queue, job_id)
    complete(conn, job_id, token, {"ok": True})
    return job_id, token


# ------------------------------------------------------------ the hot table --
def test_a_done_job_leaves_the_hot_table_for_one_history_row_with_its_attempts(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue, payload={"n": 1})
    first = claim_job(conn, queue, job_id, "worker-A")
    assert fail(conn, job_id, first, "boom", retry_in="0 seconds") == "queued"
    second = claim_job(conn, queue, job_id, "worker-B")
    complete(conn, job_id, second, {"r": 2})

    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = %s", (job_id,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.attempts WHERE job_id = %s", (job_id,)) == 0
    [h] = rows(conn, "SELECT h.*, h.purge_at - h.finished_at AS kept FROM pgfence.finished_jobs h WHERE h.id = %s",
               (job_id,))
    assert (h["queue"], h["attempt_token"], h["reserved_by"], h["result"]) == (queue, second, "worker-B", {"r": 2})
    assert h["kept"] == one(conn, "SELECT retain_done FROM pgfence.retention WHERE queue = ''")
    assert [(a["attempt"], a["outcome"], a["worker"], a["error"]) for a in h["earlier_attempts"]] == [
        (1, "failed", "worker-A", "boom")]
    assert [(r["attempt"], r["attempt_token"], r["outcome"], r["worker"])
            for r in rows(conn, "SELECT * FROM pgfence.attempts_of(%s)", (job_id,))] == [
        (1, first, "failed", "worker-A"), (2, second, "done", "worker-B")]
    j = job(conn, job_id)
    assert (j["status"], j["result"], j["attempts"], j["lease_expires_at"], j["finished_at"]) == (
        "done", {"r": 2}, 2, None, h["finished_at"])
    assert one(conn, "SELECT status FROM pgfence.job(%s)", (job_id,)) == "done"


def test_a_condition_on_all_jobs_reaches_both_tables(conn: Conn) -> None:
    """pgfence.all_jobs is a UNION ALL that PostgreSQL flattens, so a condition on it is
    tested in each table (by its indexes), and a status other than done never reads the
    history. When the jobs branch gave its domain columns' types instead of the union's
    (text), the condition stayed above the union: the dashboard's inbox read all
    1,000,000 jobs of its benchmark (46 ms -> 3.9 s)."""
    def plan(where: str) -> str:
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN SELECT id FROM pgfence.all_jobs WHERE {where}"))
    for where in ("status = 'manual_review'", "status = 'queued' AND queue = 'q'", "kind = 'k'",
                  "recovery_policy = 'manual'", "attempts > 2", "idempotency_key = 'x'"):
        text = plan(where)
        assert "Subquery Scan" not in text, (where, text)
    assert "finished_jobs" not in plan("status = 'manual_review'")
    assert "finished_jobs" in plan("status = 'done'")


def test_failed_and_cancelled_jobs_stay_in_the_hot_table(conn: Conn, queue: str) -> None:
    dead = enqueue(conn, queue, max_attempts=1)
    fail(conn, dead, claim_job(conn, queue, dead), "fatal")
    gone = enqueue(conn, queue)
    conn.execute("SELECT pgfence.cancel(%s)", (gone,))
    assert [r["status"] for r in rows(conn, "SELECT status FROM pgfence.jobs WHERE id IN (%s, %s) ORDER BY id",
                                      (dead, gone))] == ["failed", "cancelled"]
    assert one(conn, "SELECT count(*) FROM pgfence.finished_jobs WHERE id IN (%s, %s)", (dead, gone)) == 0


def test_the_fencing_answers_of_a_done_job_are_unchanged(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    stale = claim_job(conn, queue, job_id, "worker-A", lease="1 hour")
    conn.execute("SELECT pgfence.release(%s, %s)", (job_id, stale))
    token = claim_job(conn, queue, job_id, "worker-B")
    complete(conn, job_id, token)
    complete(conn, job_id, token)  # a repeat after a lost reply is accepted
    err = sql_error(conn, "SELECT pgfence.complete(%s, %s)", (job_id, stale))
    assert_error(err, "PF001")
    assert err.diag.message_detail == "the job was completed by another attempt"
    assert rows(conn, "SELECT accepted, status, detail FROM pgfence.complete_many(%s, %s)",
                ([job_id], [stale])) == [{"accepted": False, "status": "done",
                                          "detail": "the job was completed by another attempt"}]
    assert [r["operation"] for r in rows(conn, "SELECT operation FROM pgfence.rejections_of(%s)", (job_id,))] == [
        "complete"]
    for action in ("cancel", "requeue"):
        assert_error(sql_error(conn, f"SELECT pgfence.{action}(%s)", (job_id,)), "PF003")


# --------------------------------------------------------- idempotency keys --
def test_a_done_jobs_key_is_held_until_its_history_goes(conn: Conn, queue: str) -> None:
    job_id, _ = _run_to_done(conn, queue, idempotency_key="k-1")
    assert one(conn, "SELECT job_id FROM pgfence.held_keys WHERE queue = %s AND idempotency_key = 'k-1'",
               (queue,)) == job_id
    assert enqueue(conn, queue, idempotency_key="k-1") == job_id
    assert [r["created"] for r in rows(conn, "SELECT created FROM pgfence.enqueue_many(ARRAY['k','k'], queue => %s,"
                                             " idempotency_keys => ARRAY['k-1','k-2'])", (queue,))] == [False, True]
    # Its retention over (the time passed): held until the purge frees it.
    conn.execute("UPDATE pgfence.held_keys SET purge_at = clock_timestamp() - interval '1 second'"
                 " WHERE queue = %s AND idempotency_key = 'k-1'", (queue,))
    assert enqueue(conn, queue, idempotency_key="k-1") == job_id
    assert one(conn, "SELECT pgfence.purge_finished()") >= 0
    assert one(conn, "SELECT count(*) FROM pgfence.held_keys WHERE queue = %s AND idempotency_key = 'k-1'",
               (queue,)) == 0
    assert enqueue(conn, queue, idempotency_key="k-1") != job_id


@pytest.mark.parametrize("batch", [False, True], ids=["enqueue", "enqueue_many"])
def test_an_enqueue_waiting_on_a_completing_holder_returns_the_done_job(dsn: str, queue: str, batch: bool) -> None:
    """The holder's complete deletes its row (leaving the unique index) and holds the key
    in held_keys, in one transaction; an enqueue of the same key that waited for it must
    answer with the done job, not make a second one."""
    with connection(dsn) as a:
        job_id = enqueue(a, queue, idempotency_key="race")
        token = claim_job(a, queue, job_id)
        a.autocommit = False
        complete(a, job_id, token)  # open: the row is deleted, not yet committed
        got: list[Any] = []

        def other() -> None:
            with connection(dsn) as b:
                if batch:
                    got.append(one(b, "SELECT id FROM pgfence.enqueue_many(ARRAY['task'], queue => %s,"
                                      " idempotency_keys => ARRAY['race'])", (queue,)))
                else:
                    got.append(enqueue(b, queue, idempotency_key="race"))

        t = threading.Thread(target=other)
        t.start()
        deadline = time.monotonic() + 30
        with connection(dsn) as watch:  # (autocommit: pg_stat_activity is read afresh each time)
            while one(watch, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                             " AND query LIKE '%enqueue%'") == 0:
                assert time.monotonic() < deadline, "the second enqueue never waited"
                time.sleep(0.02)
        a.commit()
        t.join(30)
        assert got == [job_id]
        assert one(a, "SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s", (queue,)) == 1
        a.commit()


def test_under_repeatable_read_a_key_completed_since_the_snapshot_raises_40001(dsn: str, queue: str) -> None:
    with connection(dsn) as a, connection(dsn) as b:
        job_id = enqueue(a, queue, idempotency_key="rr")
        token = claim_job(a, queue, job_id)
        b.autocommit = False
        b.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        one(b, "SELECT count(*) FROM pgfence.held_keys")  # the snapshot
        complete(a, job_id, token)
        err = sql_error(b, "SELECT pgfence.enqueue('task', queue => %s, idempotency_key => 'rr')", (queue,))
        assert err.sqlstate == "40001", err
        assert one(a, "SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s", (queue,)) == 1


def test_requeue_is_refused_while_a_done_job_holds_the_key(conn: Conn, queue: str) -> None:
    dead = enqueue(conn, queue, idempotency_key="shared", max_attempts=1)
    fail(conn, dead, claim_job(conn, queue, dead), "fatal")  # the key is free
    done_id, _ = _run_to_done(conn, queue, idempotency_key="shared")
    err = sql_error(conn, "SELECT pgfence.requeue(%s)", (dead,))
    assert_error(err, "PF003")
    assert str(done_id) in err.diag.message_primary  # type: ignore[operator]


# ------------------------------------------------------ row-level security --
@pytest.fixture(scope="module")
def store_roles(dsn: str) -> Iterator[None]:
    with login_roles(dsn, {PRODUCER_A: "pgfence_producer", PRODUCER_B: "pgfence_producer",
                           OPERATOR: "pgfence_operator"}):
        yield


def test_readers_of_done_jobs_keep_row_level_security(conn: Conn, queue: str, store_roles: None) -> None:
    with set_role(conn, PRODUCER_A):
        mine = enqueue(conn, queue)
    complete(conn, mine, claim_job(conn, queue, mine))
    for view in ("pgfence.all_jobs", "pgfence.finished_jobs"):
        for role, seen in ((PRODUCER_A, 1), (PRODUCER_B, 0), (OPERATOR, 1)):
            with set_role(conn, role):
                assert one(conn, f"SELECT count(*) FROM {view} WHERE id = %s", (mine,)) == seen, (view, role)
    with set_role(conn, PRODUCER_B):
        assert rows(conn, "SELECT * FROM pgfence.job(%s)", (mine,)) == []
        assert sql_error(conn, "SELECT count(*) FROM pgfence.held_keys").sqlstate == "42501"
    assert one(conn, "SELECT relrowsecurity FROM pg_class WHERE oid = 'pgfence.finished_jobs'::regclass") is True
    assert one(conn, "SELECT reloptions FROM pg_class WHERE oid = 'pgfence.all_jobs'::regclass") == [
        "security_invoker=true"]


# ---------------------------------------------------------------- partitions --
@pytest.fixture(scope="module")
def history_db(dsn: str) -> Iterator[str]:
    """A database of its own (the partition tests drop and make partitions, and would
    disturb the shared one's), deployed with sqitch; no pg_cron, so no sweeper."""
    with scratch_database(dsn, "pgfence_history") as scratch:
        r = sqitch("deploy", target=sqitch_target(scratch), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        yield scratch


def _partitions(c: Conn) -> list[str]:
    return [r["name"] for r in rows(c, "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                                       " WHERE i.inhparent = 'pgfence.finished_jobs'::regclass ORDER BY 1")]


def test_partitions_are_made_ahead_for_the_longest_retention(history_db: str) -> None:
    with connection(history_db) as c:
        made = rows(c, "SELECT lower_bound, upper_bound, name FROM pgfence.history_partitions ORDER BY 1")
        assert "finished_jobs_default" in _partitions(c)
        assert {m["name"] for m in made} == set(_partitions(c)) - {"finished_jobs_default"}
        assert all(m["name"] == one(c, "SELECT pgfence._history_partition_name(%s)", (m["lower_bound"],))
                   for m in made)
        assert all(a["upper_bound"] == b["lower_bound"] for a, b in zip(made, made[1:]))  # no gap
        assert made[-1]["upper_bound"] >= one(c, "SELECT now() + interval '1 day' + interval '1 hour'")
        # A longer retention: the next pass makes the partitions it needs.
        c.execute("SELECT pgfence.set_retention('long', interval '2 days', interval '7 days')")
        created = one(c, "SELECT created FROM pgfence.maintain_history()")
        assert created == 24
        assert one(c, "SELECT max(upper_bound) FROM pgfence.history_partitions") >= one(
            c, "SELECT now() + interval '2 days'")
        c.execute("DELETE FROM pgfence.retention WHERE queue = 'long'")


def test_partitions_are_not_vacuumed_for_inserts_and_summarize_their_brin_index(history_db: str) -> None:
    """A partition is only appended to and then dropped whole: autovacuum does not vacuum
    it for its inserts (that read every page the drain wrote, holding a worker of the
    database), analyzes it when it has grown fivefold rather than by a tenth (the planner
    needs its statistics to read a time range through the BRIN index), and its BRIN index
    on finished_at, attached to the parent's, summarizes each filled range itself
    (autosummarize), which vacuum did before. The default partition, which the maintenance
    deletes from, keeps autovacuum as is."""
    with connection(history_db) as c:
        c.execute("SELECT pgfence.maintain_history()")
        made = rows(c, """
            SELECT c.relname AS name, c.reloptions AS opts, t.reloptions AS toast_opts,
                   (SELECT array_agg(ic.reloptions::text) FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
                     JOIN pg_am am ON am.oid = ic.relam WHERE x.indrelid = c.oid AND am.amname = 'brin') AS brin_opts,
                   (SELECT array_agg(i2.inhparent::regclass::text) FROM pg_index x JOIN pg_inherits i2 ON i2.inhrelid = x.indexrelid
                     JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_am am ON am.oid = ic.relam
                     WHERE x.indrelid = c.oid AND am.amname = 'brin') AS brin_parent
              FROM pgfence.history_partitions h JOIN pg_class c ON c.oid = ('pgfence.' || quote_ident(h.name))::regclass
              LEFT JOIN pg_class t ON t.oid = c.reltoastrelid""")
        assert made
        for m in made:
            assert m["opts"] == ["autovacuum_vacuum_insert_threshold=-1", "autovacuum_analyze_scale_factor=4"], m
            assert m["toast_opts"] in (None, ["autovacuum_vacuum_insert_threshold=-1"]), m
            assert m["brin_opts"] == ["{autosummarize=on}"], m  # one BRIN index, not a second one
            assert m["brin_parent"] == ["pgfence.finished_jobs_finished_idx"], m
        assert one(c, "SELECT reloptions FROM pg_class WHERE oid = 'pgfence.finished_jobs_default'::regclass") is None


def test_an_expired_partition_is_dropped_whole_with_its_jobs_keys_and_rejections(history_db: str) -> None:
    with connection(history_db) as c:
        c.execute("SELECT pgfence.set_retention('brief', interval '0', interval '0')")
        job_id = enqueue(c, "brief", idempotency_key="gone-with-it")
        stale = claim_job(c, "brief", job_id, lease="1 hour")
        c.execute("SELECT pgfence.release(%s, %s)", (job_id, stale))
        complete(c, job_id, claim_job(c, "brief", job_id))
        c.execute("SELECT * FROM pgfence.complete_many(%s, %s)", ([job_id], [stale]))
        assert one(c, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,)) == 1
        [p] = rows(c, "SELECT tableoid::regclass::text AS part, purge_at FROM pgfence.finished_jobs WHERE id = %s",
                   (job_id,))
        # Time passes: that partition's range is over (moved back by hand, as the clock would).
        lower = one(c, "SELECT lower_bound FROM pgfence.history_partitions WHERE %s >= lower_bound"
                       " AND %s < upper_bound", (p["purge_at"], p["purge_at"]))
        assert p["part"] == "pgfence." + one(c, "SELECT pgfence._history_partition_name(%s)", (lower,))
        c.execute("UPDATE pgfence.history_partitions SET upper_bound = clock_timestamp() - interval '1 second'"
                  " WHERE lower_bound = %s", (lower,))
        c.execute("UPDATE pgfence.held_keys SET purge_at = clock_timestamp() - interval '1 second'"
                  " WHERE job_id = %s", (job_id,))
        before = one(c, "SELECT %s::regclass::oid", (p["part"],))
        assert one(c, "SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = %s", (before,)) == 0
        assert one(c, "SELECT pgfence.purge_finished()") == 0
        assert one(c, "SELECT cleanup_due FROM pgfence.history_settings") is True
        assert one(c, "SELECT count(*) FROM pgfence.held_keys WHERE job_id = %s", (job_id,)) == 0  # with the drop
        # (the rejections of dropped jobs go on the next purge: none runs after a DROP)
        assert one(c, "SELECT pgfence.purge_finished()") == 0
        assert one(c, "SELECT cleanup_due FROM pgfence.history_settings") is False
        # Dropped (the slot, now in the past only by our hand, is made again, empty).
        assert one(c, "SELECT to_regclass(%s)::oid", (p["part"],)) != before
        assert one(c, "SELECT count(*) FROM pg_class WHERE oid = %s", (before,)) == 0
        assert rows(c, "SELECT * FROM pgfence.job(%s)", (job_id,)) == []
        assert one(c, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (job_id,)) == 0
        assert one(c, "SELECT count(*) FROM pgfence.held_keys WHERE job_id = %s", (job_id,)) == 0
        assert enqueue(c, "brief", idempotency_key="gone-with-it") != job_id


def test_a_completion_with_no_partition_lands_in_the_default_which_maintenance_empties(history_db: str) -> None:
    with connection(history_db) as c:
        c.execute("SELECT pgfence.set_retention('fallback', interval '3 hours', interval '3 hours')")
        job_id = enqueue(c, "fallback")
        token = claim_job(c, "fallback", job_id)
        # The partition its purge_at falls in is missing (dropped by hand).
        target = one(c, "SELECT lower_bound FROM pgfence.history_partitions"
                        " WHERE clock_timestamp() + interval '3 hours' >= lower_bound"
                        " AND clock_timestamp() + interval '3 hours' < upper_bound")
        name = one(c, "SELECT pgfence._history_partition_name(%s)", (target,))
        c.execute(f'DROP TABLE pgfence."{name}"')
        c.execute("DELETE FROM pgfence.history_partitions WHERE lower_bound >= %s", (target,))
        for n in [n for n in _partitions(c) if n > name and n != "finished_jobs_default"]:
            c.execute(f'DROP TABLE pgfence."{n}"')
        complete(c, job_id, token)
        assert one(c, "SELECT tableoid::regclass::text FROM pgfence.finished_jobs WHERE id = %s",
                   (job_id,)) == "pgfence.finished_jobs_default"
        assert one(c, "SELECT status FROM pgfence.job(%s)", (job_id,)) == "done"
        got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
        assert got["moved"] == 1 and got["created"] >= 1
        assert one(c, "SELECT tableoid::regclass::text FROM pgfence.finished_jobs WHERE id = %s",
                   (job_id,)) == f"pgfence.{name}"
        # A default row past its purge_at is deleted.
        other = enqueue(c, "fallback")
        complete(c, other, claim_job(c, "fallback", other))
        # (Put there by hand: detached, the default partition takes any row.)
        c.execute("ALTER TABLE pgfence.finished_jobs DETACH PARTITION pgfence.finished_jobs_default")
        c.execute("INSERT INTO pgfence.finished_jobs_default SELECT * FROM pgfence.finished_jobs WHERE id = %s",
                  (other,))
        c.execute("UPDATE pgfence.finished_jobs_default SET purge_at = clock_timestamp() - interval '1 day'"
                  " WHERE id = %s", (other,))
        c.execute("DELETE FROM pgfence.finished_jobs WHERE id = %s", (other,))
        c.execute("ALTER TABLE pgfence.finished_jobs ATTACH PARTITION pgfence.finished_jobs_default DEFAULT")
        assert rows(c, "SELECT * FROM pgfence.maintain_history()")[0]["deleted"] == 1
        assert one(c, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (other,)) == 0
        c.execute("DELETE FROM pgfence.retention WHERE queue = 'fallback'")


def test_set_history_partition_width_checks_its_argument(history_db: str) -> None:
    with connection(history_db) as c:
        for bad, state in (("NULL", "22004"), ("'5 seconds'", "22023"), ("'8 days'", "22023"), ("'-1 hour'", "22023"),
                           ("'10.3 seconds'", "22023"), ("'1 hour 0.5 seconds'", "22023")):
            err = sql_error(c, f"SELECT pgfence.set_history_partition_width({bad}::interval)")
            assert_error(err, state, "width")
        assert one(c, "SELECT partition_width FROM pgfence.history_settings").total_seconds() == 3600


def test_a_new_width_remakes_the_empty_partitions_ahead_and_keeps_those_with_rows(history_db: str) -> None:
    with connection(history_db) as c:
        job_id = enqueue(c, "width")
        complete(c, job_id, claim_job(c, "width", job_id))
        holding = one(c, "SELECT tableoid::regclass::text FROM pgfence.finished_jobs WHERE id = %s", (job_id,))
        try:
            c.execute("SELECT pgfence.set_history_partition_width('30 minutes')")
            got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
            assert got["dropped"] >= 1 and got["created"] >= 2
            assert got["created"] <= 50
            for _ in range(20):  # (as many per call as the call can make again: a few calls)
                got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
                if got["dropped"] == got["created"] == 0:
                    break
            widths = {r["name"]: r["w"] for r in rows(c, "SELECT name, upper_bound - lower_bound AS w"
                                                         " FROM pgfence.history_partitions WHERE upper_bound > now()")}
            assert widths[holding.removeprefix("pgfence.")].total_seconds() == 3600  # it holds a row
            assert 1800 in {w.total_seconds() for w in widths.values()}
            for name, w in widths.items():  # the old width only where rows are
                if w.total_seconds() != 1800:
                    assert one(c, f'SELECT count(*) FROM pgfence."{name}"') > 0, name
            assert one(c, "SELECT status FROM pgfence.job(%s)", (job_id,)) == "done"
        finally:
            c.execute("SELECT pgfence.set_history_partition_width('1 hour')")
            c.execute("SELECT * FROM pgfence.maintain_history()")


def _converge(c: Conn) -> None:
    for _ in range(40):  # (as many per call as the call can make again: a few calls)
        got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
        if got["dropped"] == got["created"] == 0:
            return
    raise AssertionError(f"the partition maintenance did not settle: {got}")


def test_after_a_new_width_expired_partitions_go_and_the_maintenance_settles(history_db: str) -> None:
    """After a width change, with a partition of the old width holding rows ahead: a
    partition whose range has passed is still dropped with its rows (every pass locked
    the parent for the one ahead, and a parent locked kept expired partitions with rows
    for as long as partitions with rows of the old width lay ahead), and once made again
    the partitions stay as they are (a slot cut short by a neighbour, or narrower than
    a wider new width, was dropped and made again on every pass)."""
    with connection(history_db) as c:
        c.execute("SELECT pgfence.set_retention('gone_soon', interval '0', interval '0')")
        try:
            held = enqueue(c, "width_held")
            complete(c, held, claim_job(c, "width_held", held))  # (a day ahead, in an hour-wide partition)
            c.execute("SELECT pgfence.set_history_partition_width('30 minutes')")
            _converge(c)
            expired = enqueue(c, "gone_soon")
            complete(c, expired, claim_job(c, "gone_soon", expired))
            assert expire_history(c, [expired]) == 1  # (as the clock would: its partition's range has passed)
            got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
            assert got["dropped"] >= 1, got
            assert one(c, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (expired,)) == 0
            assert one(c, "SELECT status FROM pgfence.job(%s)", (held,)) == "done"
            _converge(c)
            # Wider again: the 30-minute partitions ahead fill the hour's slots, and stay (but
            # the last, whose slot has none after it, made again an hour wide).
            c.execute("SELECT pgfence.set_history_partition_width('1 hour')")
            before = {r["name"] for r in rows(c, "SELECT name FROM pgfence.history_partitions")}
            _converge(c)
            assert len(before - {r["name"] for r in rows(c, "SELECT name FROM pgfence.history_partitions")}) <= 1
            _converge(c)
            assert rows(c, "SELECT * FROM pgfence.maintain_history()")[0] == {
                "created": 0, "dropped": 0, "truncated": 0, "moved": 0, "deleted": 0}
        finally:
            c.execute("SELECT pgfence.set_history_partition_width('1 hour')")
            c.execute("DELETE FROM pgfence.retention WHERE queue = 'gone_soon'")
            c.execute("SELECT * FROM pgfence.maintain_history()")


def test_a_partition_ahead_that_someone_holds_waits_for_the_next_pass(history_db: str) -> None:
    """After a width change, a partition ahead to be made again that another session holds
    (a VACUUM FULL of it, say) is left for the next pass: the maintenance still returns
    (its look at whether the partition is empty waited out its 100 ms and raised 55P03,
    and the purge's whole maintenance failed with it)."""
    with connection(history_db) as c, connection(history_db, autocommit=False) as holder:
        try:
            c.execute("SELECT pgfence.set_history_partition_width('20 minutes')")
            name = one(c, "SELECT h.name FROM pgfence.history_partitions h"
                          " WHERE h.upper_bound > now() AND h.upper_bound <= now() + interval '1 day'"  # (the horizon)
                          "   AND h.upper_bound - h.lower_bound > interval '20 minutes'"
                          "   AND NOT EXISTS (SELECT FROM pgfence.finished_jobs f"
                          "                    WHERE f.purge_at >= h.lower_bound AND f.purge_at < h.upper_bound)"
                          " ORDER BY h.lower_bound LIMIT 1")  # (the first empty one, wider: it is made again)
            holder.execute(f'LOCK TABLE pgfence."{name}" IN ACCESS EXCLUSIVE MODE')
            got = rows(c, "SELECT * FROM pgfence.maintain_history()")[0]
            assert one(c, "SELECT upper_bound - lower_bound > interval '20 minutes' FROM pgfence.history_partitions"
                          " WHERE name = %s", (name,)) is True, got  # (left as it was)
            holder.rollback()
            _converge(c)
            # (made again: 20 minutes wide, or gone when its range has begun: the slot of now
            # is made from now's 20 minutes on)
            assert one(c, "SELECT coalesce(max(upper_bound - lower_bound), interval '0') <= interval '20 minutes'"
                          " FROM pgfence.history_partitions WHERE name = %s", (name,)) is True
        finally:
            holder.rollback()
            c.execute("SELECT pgfence.set_history_partition_width('1 hour')")
            _converge(c)


def _first_purge(c: Conn) -> dict[str, Any]:
    """Step a new sweeper run to its first purge (on an autocommit connection each step
    is its own transaction, as run_sweeper commits): its next_purge and the time then."""
    state = one(c, "SELECT pgfence.sweeper_begin('10 milliseconds', NULL)::text")
    for _ in range(50):  # (a reclaim pass, then the first purge)
        state = one(c, "SELECT pgfence.sweeper_step(%s::pgfence.sweeper_state)::text", (state,))
        if one(c, "SELECT (%s::pgfence.sweeper_state).next_purge IS NOT NULL", (state,)):
            break
    return rows(c, "SELECT (%s::pgfence.sweeper_state).next_purge AS next_purge, clock_timestamp() AS now",
                (state,))[0]


def _next_boundary(c: Conn, now: Any) -> Any:
    """The end of the first history partition range that ends after ``now`` (or None)."""
    return one(c, "SELECT min(upper_bound) FROM pgfence.history_partitions WHERE upper_bound > %s", (now,))


def _normal_next(c: Conn, now: Any) -> Any:
    """When the sweeper purges next with slack enough: in 10 s, or at the end of the
    next partition's range if that comes first."""
    return min(now + timedelta(seconds=10), _next_boundary(c, now))


def test_the_sweeper_purges_again_when_the_next_partition_range_ends(history_db: str) -> None:
    """After a purge the background sweeper purges again in 10 s, or at the end of the
    next history partition's range if that comes first: a partition is dropped when its
    range has passed, not up to 10 s later (the history stays within retention plus one
    width). In one transaction, rolled back."""
    with connection(history_db, autocommit=False) as c:
        try:
            c.execute("SELECT pgfence.set_retention(NULL, interval '10 seconds', interval '10 seconds')")
            c.execute("DELETE FROM pgfence.retention WHERE queue IS NOT NULL")
            narrow_history(c)  # (the empty hour-wide partitions ahead, made again 10 s wide)
            got = _first_purge(c)
            got["boundary"] = _next_boundary(c, got["now"])
            assert got["next_purge"] is not None
            assert got["boundary"] is not None and (got["boundary"] - got["now"]).total_seconds() <= 10
            assert got["next_purge"] <= got["boundary"]
        finally:
            c.rollback()


def test_the_sweeper_tries_sooner_while_the_partitions_ahead_run_short(history_db: str) -> None:
    """A purge whose maintenance could not make the partitions ahead (its lock not had in
    100 ms: completions in flight under load) is tried again sooner while they reach
    less than 40 s past the longest retain_done: in a quarter of that slack, at least
    1 s (a completion past them would land in the default partition). With no slack
    left, and once they are made, every 10 s (or at the next partition's end)."""
    with connection(history_db) as c, connection(history_db, autocommit=False) as blocker:
        short = one(c, "SELECT max(upper_bound) FROM pgfence.history_partitions")
        try:
            blocker.execute("LOCK TABLE pgfence.finished_jobs IN ROW EXCLUSIVE MODE")  # (a completion in flight)
            # A retention that leaves 20 s of slack, then one that leaves none.
            c.execute("SELECT pgfence.set_retention('longer', %s - clock_timestamp() - interval '20 seconds',"
                      " interval '1 day')", (short,))
            got = _first_purge(c)
            assert one(c, "SELECT max(upper_bound) FROM pgfence.history_partitions") == short  # none made
            slack = short - got["now"] - one(c, "SELECT retain_done FROM pgfence.retention WHERE queue = 'longer'")
            assert timedelta(seconds=15) < slack < timedelta(seconds=21)
            assert got["next_purge"] is not None
            assert abs(got["next_purge"] - min(got["now"] + slack / 4, _normal_next(c, got["now"]))) < timedelta(
                seconds=0.5)
            c.execute("SELECT pgfence.set_retention('longer', %s - clock_timestamp() + interval '1 minute',"
                      " interval '1 day')", (short,))
            got = _first_purge(c)
            assert one(c, "SELECT max(upper_bound) FROM pgfence.history_partitions") == short
            assert abs(got["next_purge"] - _normal_next(c, got["now"])) < timedelta(seconds=0.5)
            blocker.rollback()
            got = _first_purge(c)
            assert one(c, "SELECT max(upper_bound) FROM pgfence.history_partitions") > short  # made now
            assert abs(got["next_purge"] - _normal_next(c, got["now"])) < timedelta(seconds=0.5)
        finally:
            blocker.rollback()
            c.execute("DELETE FROM pgfence.retention WHERE queue = 'longer'")
            # (the partitions made for it, past the other tests' horizon, go: empty)
            for name in [r["name"] for r in rows(c, "SELECT name FROM pgfence.history_partitions"
                                                    " WHERE lower_bound >= %s", (short,))]:
                c.execute(f'DROP TABLE pgfence."{name}"')
            c.execute("DELETE FROM pgfence.history_partitions WHERE lower_bound >= %s", (short,))


def test_retention_and_width_are_refused_beyond_900_partitions(history_db: str) -> None:
    with connection(history_db) as c:
        err = sql_error(c, "SELECT pgfence.set_retention('too_long', interval '38 days', interval '1 day')")
        assert_error(err, "22023", "retain_done")
        c.execute("SELECT pgfence.set_retention('long_ok', interval '37 days', interval '1 day')")
        try:
            assert_error(sql_error(c, "SELECT pgfence.set_history_partition_width('1 minute')"), "22023", "width")
            assert one(c, "SELECT partition_width FROM pgfence.history_settings").total_seconds() == 3600
        finally:
            c.execute("DELETE FROM pgfence.retention WHERE queue = 'long_ok'")
            c.execute("SELECT * FROM pgfence.maintain_history()")


def test_a_partition_dropped_by_hand_does_not_stop_the_purge(history_db: str) -> None:
    with connection(history_db) as c:
        lower, name = rows(c, "SELECT lower_bound, name FROM pgfence.history_partitions"
                              " WHERE lower_bound > now() ORDER BY lower_bound DESC LIMIT 1")[0].values()
        c.execute(f'DROP TABLE pgfence."{name}"')
        c.execute("UPDATE pgfence.history_partitions SET upper_bound = lower_bound + interval '1 microsecond'"
                  " WHERE lower_bound = %s", (lower,))  # (its range over: the purge drops it, IF EXISTS)
        assert one(c, "SELECT pgfence.purge_finished()") == 0  # (no 42P01)
        # Its bookkeeping went, and the slot, still ahead, was made again.
        assert one(c, "SELECT upper_bound - lower_bound FROM pgfence.history_partitions WHERE lower_bound = %s",
                   (lower,)).total_seconds() == 3600
        assert one(c, "SELECT to_regclass(%s) IS NOT NULL", (f"pgfence.{name}",)) is True
        job_id = enqueue(c, "by_hand")
        complete(c, job_id, claim_job(c, "by_hand", job_id))
        assert one(c, "SELECT status FROM pgfence.job(%s)", (job_id,)) == "done"


# ---------------------------------------------- the routine that runs DDL --
def test_the_partition_routine_takes_table_names_only_from_dates(conn: Conn) -> None:
    """_maintain_history is the one routine that builds SQL at run time besides
    _apply_privileges (test_security's scan allows exactly it): it takes no argument,
    every identifier it formats is %I of v_name, and v_name is only ever set from
    _history_partition_name(a timestamp)."""
    src = one(conn, "SELECT prosrc FROM pg_proc WHERE oid = 'pgfence._maintain_history()'::regprocedure")
    assert one(conn, "SELECT pronargs FROM pg_proc WHERE oid = 'pgfence._maintain_history()'::regprocedure") == 0
    formats = re.findall(r"EXECUTE\s+format\((.*?)\)\s*(?:USING[^;]*|INTO\s+v_\w+)?;", src, re.S)
    # (7, and since the metric totals 5 more: the lock and the count of a partition before its
    # drop, and again before its truncate; whether it is empty, once the parent is locked;
    # and the new partition's BRIN index, named by PostgreSQL after it; and one more:
    # whether a partition ahead is empty, before the parent is locked)
    assert len(formats) == 14, formats
    assert len(re.findall(r"\bEXECUTE\b", src)) == 14  # (every EXECUTE is one of those)
    for f in formats:
        literal = "".join(re.findall(r"'([^']*)'", f))
        assert re.findall(r"%[A-Za-z]", literal) in (["%I"], ["%I", "%L", "%L"]), f
        assert re.sub(r"'[^']*'", "", f).split(",")[1].strip() == "v_name", f
    assigns = re.findall(r"v_name\s*:=\s*([^;]*);", src)
    assert assigns and all(a.startswith("pgfence._history_partition_name(") for a in assigns), assigns
    assert re.search(r"%[sL]", "".join(re.findall(r"'([^']*)'", src.split("ATTACH")[0]))) is None
