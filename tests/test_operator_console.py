"""The operator console's SQL layer (issue 18): every action audited, mark_done,
bulk actions by id and by filter with a cap, the read-only pgfence_viewer role.

Roles: the full role matrix (every routine for every role, the viewer included) is in
test_security.py; here, what each action does and records."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any, Iterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from support.api import claim_job, enqueue, release, start_blocked
from support.db import UNKNOWN_ID, assert_error, connect, one, queues_removed_after, rows, sql_error
from support.roles import connect_as, login_roles

Conn = psycopg.Connection[Any]


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    with queues_removed_after(conn, queue):
        yield queue


def manual_review_job(conn: Conn, queue: str, **kw: Any) -> int:
    """A job in manual_review: a manual job claimed and released after it started."""
    job_id = enqueue(conn, queue, recovery_policy="manual", **kw)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    assert release(conn, job_id, token) == "manual_review"
    return job_id


def audit(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    return rows(conn, "SELECT * FROM pgfence.operator_audit WHERE job_ids @> ARRAY[%s::bigint] ORDER BY id",
                (job_id,))


def status(conn: Conn, job_id: int) -> str:
    return one(conn, "SELECT status FROM pgfence.job(%s)", (job_id,))


# ------------------------------------------------------------------- audit --
def test_requeue_and_cancel_record_role_login_actor_and_note(conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    conn.execute("SET pgfence.actor = 'alice@example.com'")
    conn.execute("SELECT pgfence.requeue(%s, note => 'retry after the PSP fix')", (job_id,))
    conn.execute("SELECT pgfence.cancel(%s)", (job_id,))  # the old positional call still works
    got = audit(conn, job_id)
    assert [(a["action"], a["note"], a["queues"], a["job_ids"], a["count"]) for a in got] == [
        ("requeue", "retry after the PSP fix", [q], [job_id], 1),
        ("cancel", None, [q], [job_id], 1)]
    assert {(a["db_role"], a["login"], a["actor"]) for a in got} == {("postgres", "postgres", "alice@example.com")}
    assert [(a["action"], a["note"]) for a in rows(conn, "SELECT * FROM pgfence.audit_of(%s)", (job_id,))] == [
        ("requeue", "retry after the PSP fix"), ("cancel", None)]


def test_a_refused_action_writes_no_audit_row(conn: Conn, q: str) -> None:
    job_id = enqueue(conn, q)
    assert_error(sql_error(conn, "SELECT pgfence.requeue(%s, 'n')", (job_id,)), "PF003", "requeue")
    assert_error(sql_error(conn, "SELECT pgfence.cancel(9223372036854775000, 'n')"), "PF002")
    assert audit(conn, job_id) == []


@pytest.mark.parametrize(("note", "state"), [("", "22023"), ("  \n", "22023"), ("x" * 10001, "22023")])
def test_a_blank_or_long_note_is_refused_and_nothing_changes(conn: Conn, q: str, note: str, state: str) -> None:
    job_id = manual_review_job(conn, q)
    for call in ("SELECT pgfence.requeue(%s, %s)", "SELECT pgfence.cancel(%s, %s)", "SELECT pgfence.mark_done(%s, %s)"):
        assert_error(sql_error(conn, call, (job_id, note)), state, "note")
    assert status(conn, job_id) == "manual_review" and audit(conn, job_id) == []


def test_audit_retention_is_its_own_and_purge_audit_deletes_only_older_rows(conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    conn.execute("SELECT pgfence.requeue(%s)", (job_id,))
    conn.execute("SELECT pgfence.cancel(%s)", (job_id,))
    old, new = [a["id"] for a in audit(conn, job_id)]
    conn.execute("UPDATE pgfence.operator_audit SET at = at - interval '91 days' WHERE id = %s", (old,))
    assert one(conn, "SELECT retain FROM pgfence.operator_audit_settings") == __import__("datetime").timedelta(days=90)
    assert one(conn, "SELECT pgfence.purge_audit()") >= 1
    assert [a["id"] for a in audit(conn, job_id)] == [new]
    assert_error(sql_error(conn, "SELECT pgfence.set_audit_retention('1 hour')"), "22023", "retain")
    assert_error(sql_error(conn, "SELECT pgfence.set_audit_retention(NULL)"), "22004", "retain")
    assert_error(sql_error(conn, "SELECT pgfence.purge_audit(0)"), "22023", "max_rows")


def test_purge_finished_purges_the_audit_too(conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    conn.execute("SELECT pgfence.cancel(%s)", (job_id,))
    conn.execute("UPDATE pgfence.operator_audit SET at = at - interval '100 days' WHERE job_ids @> ARRAY[%s::bigint]",
                 (job_id,))
    conn.execute("SELECT pgfence.purge_finished()")
    assert audit(conn, job_id) == []


# --------------------------------------------------------------- mark_done --
def test_mark_done_ends_a_manual_review_job_as_complete_would(conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q, idempotency_key="charge-42")
    conn.execute("SELECT pgfence.mark_done(%s, 'charged: PSP ref 991', %s)", (job_id, Jsonb({"psp": 991})))
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = %s", (job_id,)) == 0
    h = rows(conn, "SELECT * FROM pgfence.finished_jobs WHERE id = %s", (job_id,))
    assert len(h) == 1 and h[0]["result"] == {"psp": 991} and h[0]["attempt_token"] is None
    assert [a["outcome"] for a in h[0]["earlier_attempts"]] == ["released"]
    assert one(conn, "SELECT count(*) FROM pgfence.attempts WHERE job_id = %s", (job_id,)) == 0
    assert status(conn, job_id) == "done"
    assert [(a["outcome"], a["worker"]) for a in rows(conn, "SELECT * FROM pgfence.attempts_of(%s)", (job_id,))] == [
        ("released", "worker-A"), ("done", None)]
    # its idempotency key is held, as a completed job's
    assert enqueue(conn, q, idempotency_key="charge-42") == job_id
    [a] = audit(conn, job_id)
    assert (a["action"], a["note"], a["detail"]) == ("mark_done", "charged: PSP ref 991", {"result": {"psp": 991}})
    # and a done job cannot be requeued, cancelled or marked done again
    for call in ("SELECT pgfence.requeue(%s)", "SELECT pgfence.cancel(%s)", "SELECT pgfence.mark_done(%s, 'again')"):
        assert_error(sql_error(conn, call, (job_id,)), "PF003")


def test_mark_done_holds_the_key_as_the_jobs_unique_for_says(conn: Conn, q: str) -> None:
    """A job marked done keeps its idempotency key as complete would: unique_for 0 frees it
    at once, a period holds it until created_at + unique_for."""
    free = manual_review_job(conn, q, idempotency_key="free", unique_for="0")
    held = manual_review_job(conn, q, idempotency_key="held", unique_for="1 hour")
    conn.execute("SELECT count(*) FROM pgfence.mark_done_many(ARRAY[%s, %s]::bigint[], 'checked')", (free, held))
    assert enqueue(conn, q, idempotency_key="free") != free
    assert enqueue(conn, q, idempotency_key="held") == held
    assert one(conn, "SELECT held_until = (SELECT created_at + interval '1 hour' FROM pgfence.all_jobs WHERE id = %s)"
               " FROM pgfence.held_keys WHERE queue = %s AND idempotency_key = 'held'", (held, q)) is True


@pytest.mark.parametrize("setup", ["queued", "processing", "failed", "cancelled"])
def test_mark_done_refuses_a_job_not_in_manual_review(conn: Conn, q: str, setup: str) -> None:
    job_id = enqueue(conn, q, max_attempts=1)
    if setup != "queued":
        token = claim_job(conn, q, job_id)
        if setup == "failed":
            conn.execute("SELECT pgfence.fail(%s, %s, 'boom', permanent => true)", (job_id, token))
        elif setup == "cancelled":
            conn.execute("SELECT pgfence.cancel(%s)", (job_id,))
    err = sql_error(conn, "SELECT pgfence.mark_done(%s, 'note')", (job_id,))
    assert_error(err, "PF003", "mark_done")
    assert status(conn, job_id) == setup


def test_mark_done_checks_its_arguments_first(conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    assert_error(sql_error(conn, "SELECT pgfence.mark_done(NULL, 'n')"), "22004", "job_id")
    assert_error(sql_error(conn, "SELECT pgfence.mark_done(%s, NULL)", (job_id,)), "22004", "note")
    deep = "[" * 70 + "]" * 70
    assert_error(sql_error(conn, "SELECT pgfence.mark_done(%s, 'n', %s::jsonb)", (job_id, deep)), "22023", "result")
    assert_error(sql_error(conn, "SELECT pgfence.mark_done(9223372036854775000, 'n')"), "PF002")
    assert status(conn, job_id) == "manual_review" and audit(conn, job_id) == []


def test_mark_done_waits_for_a_concurrent_requeue_and_then_refuses(dsn: str, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    with connect(dsn, autocommit=False) as tx:
        tx.execute("SELECT pgfence.requeue(%s)", (job_id,))
        blocked = start_blocked(dsn, conn, "SELECT pgfence.mark_done(%s, 'it went through')", (job_id,))
        tx.commit()
    blocked.finish()
    assert blocked.error is not None and blocked.error.sqlstate == "PF003", blocked.error
    assert status(conn, job_id) == "queued"
    assert [a["action"] for a in audit(conn, job_id)] == ["requeue"]


def test_a_requeue_waits_for_a_concurrent_mark_done_and_then_refuses(dsn: str, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    with connect(dsn, autocommit=False) as tx:
        tx.execute("SELECT pgfence.mark_done(%s, 'it went through')", (job_id,))
        requeue = start_blocked(dsn, conn, "SELECT pgfence.requeue(%s)", (job_id,))
        cancel = start_blocked(dsn, conn, "SELECT pgfence.cancel(%s)", (job_id,))
        tx.commit()
    for call in (requeue.finish(), cancel.finish()):
        assert call.error is not None and call.error.sqlstate == "PF003", call.error
    assert status(conn, job_id) == "done"
    assert [a["action"] for a in audit(conn, job_id)] == ["mark_done"]


# ------------------------------------------------------------------- bulk --
def test_requeue_many_acts_on_what_it_may_and_audits_those_ids_once(conn: Conn, q: str) -> None:
    review = [manual_review_job(conn, q) for _ in range(3)]
    queued = enqueue(conn, q)
    conn.execute("SET pgfence.actor = 'bob'")
    got = rows(conn, "SELECT * FROM pgfence.requeue_many(%s, note => 'bulk retry')",
               ([queued, *reversed(review), 9223372036854775000],))
    assert [(r["id"], r["acted"], r["job_status"]) for r in got] == [
        *[(j, True, "queued") for j in review], (queued, False, "queued"), (9223372036854775000, False, None)]
    assert got[-1]["detail"] == "no job with this id" and "applies only to" in got[-2]["detail"]
    [a] = rows(conn, "SELECT * FROM pgfence.operator_audit WHERE job_ids && %s::bigint[]", (review,))
    assert (a["action"], a["job_ids"], a["count"], a["note"], a["actor"], a["queues"]) == (
        "requeue", review, 3, "bulk retry", "bob", [q])
    assert a["detail"] == {"bulk": "ids", "asked": 5, "refused": 2}


def test_requeue_many_of_jobs_without_a_key_opens_no_subtransaction(dsn: str, conn: Conn, q: str) -> None:
    """Each job requeued in a subtransaction took a subtransaction id: 10,000 of them in one
    transaction, far past the 64 a snapshot lists (every session's visibility checks then
    read pg_subtrans). Jobs without a key are updated in the call's own transaction."""
    plain = [enqueue(conn, q) for _ in range(3)]
    keyed = enqueue(conn, q, idempotency_key="k1")
    conn.execute("SELECT count(*) FROM pgfence.cancel_many(%s)", ([*plain, keyed],))
    with connect(dsn, autocommit=False) as tx:
        got = rows(tx, "SELECT id, acted FROM pgfence.requeue_many(%s)", ([*plain, keyed],))
        assert all(r["acted"] for r in got)
        own = one(tx, "SELECT pg_current_xact_id()::xid::text")
        assert [r[0] for r in tx.execute("SELECT xmin::text FROM pgfence.jobs WHERE id = ANY(%s)", (plain,))] == [
            own] * 3
        assert one(tx, "SELECT xmin::text FROM pgfence.jobs WHERE id = %s", (keyed,)) != own  # (a key: still one)
        tx.rollback()


def test_cancel_many_keeps_refusing_the_dead_letter(conn: Conn, q: str) -> None:
    failed = enqueue(conn, q, max_attempts=1)
    token = claim_job(conn, q, failed)
    conn.execute("SELECT pgfence.fail(%s, %s, 'boom')", (failed, token))
    queued = enqueue(conn, q)
    got = rows(conn, "SELECT id, acted, job_status FROM pgfence.cancel_many(%s)", ([failed, queued],))
    assert got == [{"id": failed, "acted": False, "job_status": "failed"},
                   {"id": queued, "acted": True, "job_status": "cancelled"}]


def test_mark_done_many_requires_a_note_and_marks_each(conn: Conn, q: str) -> None:
    jobs = [manual_review_job(conn, q) for _ in range(2)]
    assert_error(sql_error(conn, "SELECT * FROM pgfence.mark_done_many(%s, NULL)", (jobs,)), "22004", "note")
    got = rows(conn, "SELECT * FROM pgfence.mark_done_many(%s, 'both charged', '1')", (jobs,))
    assert [r["acted"] for r in got] == [True, True]
    assert [one(conn, "SELECT result FROM pgfence.job(%s)", (j,)) for j in jobs] == [1, 1]


def _dead(conn: Conn, q: str, error: str = "boom") -> int:
    job_id = enqueue(conn, q, max_attempts=1)
    token = claim_job(conn, q, job_id)
    conn.execute("SELECT pgfence.fail(%s, %s, %s)", (job_id, token, error))
    return job_id


def test_purge_many_deletes_dead_letters_with_their_attempts_and_keeps_the_counters(conn: Conn, q: str) -> None:
    dead, dead2 = _dead(conn, q), _dead(conn, q)
    more = [_dead(conn, q, "smtp 550") for _ in range(3)] + [_dead(conn, q, "other")]
    cancelled, queued = enqueue(conn, q), enqueue(conn, q)
    conn.execute("SELECT pgfence.cancel(%s)", (cancelled,))
    conn.execute("SELECT * FROM pgfence.fail_many(%s, %s, %s)", ([dead], ["00000000-0000-0000-0000-000000000000"],
                                                                   ["stale"]))  # (a stored rejection)

    def counters() -> dict[tuple[str, str], float]:
        return {(r["name"], r["labels"].get("outcome", "")): r["value"] for r in rows(
            conn, "SELECT name, labels, value FROM pgfence.metrics() WHERE type = 'counter' AND labels->>'queue' = %s",
            (q,))}
    before = counters()
    assert before[("pgfence_attempts_ended_total", "failed")] == 6
    assert_error(sql_error(conn, "SELECT * FROM pgfence.purge_many(%s, NULL)", ([dead],)), "22004", "note")
    got = rows(conn, "SELECT id, acted, job_status FROM pgfence.purge_many(%s, 'bounced, customer told')",
               ([queued, dead2, dead, cancelled],))
    assert [r["id"] for r in got] == sorted([queued, dead2, dead, cancelled])  # (id order)
    assert sorted((r["id"], r["acted"], r["job_status"]) for r in got) == sorted(
        [(dead, True, "deleted"), (dead2, True, "deleted"), (cancelled, True, "deleted"), (queued, False, "queued")])
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = ANY(%s)", ([dead, dead2, cancelled],)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.attempts WHERE job_id = ANY(%s)", ([dead, dead2],)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (dead,)) == 0
    assert status(conn, queued) == "queued"
    assert counters() == before  # (what went is in metric_totals)
    [a] = rows(conn, "SELECT * FROM pgfence.operator_audit WHERE action = 'purge' AND job_ids && %s::bigint[]",
               ([dead],))
    assert (sorted(a["job_ids"]), a["note"], a["detail"]["refused"]) == (sorted([dead, dead2, cancelled]),
                                                                        "bounced, customer told", 1)
    # and by filter, previewed first
    assert one(conn, "SELECT jobs FROM pgfence.preview_action('purge', queue => %s, error_contains => 'smtp')",
               (q,)) == 3
    got = rows(conn, "SELECT id FROM pgfence.act_on_filter('purge', 'smtp gone', queue => %s,"
                     " error_contains => 'smtp') WHERE acted", (q,))
    assert sorted(r["id"] for r in got) == sorted(more[:3])
    assert status(conn, more[3]) == "failed"


def test_a_purge_waits_for_a_concurrent_requeue_and_then_refuses(dsn: str, conn: Conn, q: str) -> None:
    dead, dead2 = _dead(conn, q), _dead(conn, q)
    with connect(dsn, autocommit=False) as tx:
        tx.execute("SELECT pgfence.requeue(%s)", (dead,))
        blocked = start_blocked(dsn, conn, "SELECT acted, job_status FROM pgfence.purge_many(%s, 'gone')", ([dead],))
        tx.commit()
    got = blocked.finish()
    assert got.error is None, got.error
    assert got.rows == [(False, "queued")]
    assert status(conn, dead) == "queued"
    # a requeue after a purge finds no job
    with connect(dsn, autocommit=False) as tx:
        tx.execute("SELECT * FROM pgfence.purge_many(%s, 'gone')", ([dead2],))
        requeue = start_blocked(dsn, conn, "SELECT pgfence.requeue(%s)", (dead2,))
        tx.commit()
    assert requeue.finish().error is not None and requeue.error.sqlstate == "PF002", requeue.error


@pytest.mark.parametrize(("ids", "state", "names"), [
    (None, "22004", "job_ids"), ([], "22023", "job_ids"), ([1, 1], "22023", "job_ids"),
    ([1, None], "22004", "job_ids[2]"), (list(range(1, 10002)), "22023", "job_ids")])
def test_bulk_ids_are_checked_first(conn: Conn, ids: Any, state: str, names: str) -> None:
    for fn in ("requeue_many", "cancel_many"):
        assert_error(sql_error(conn, f"SELECT * FROM pgfence.{fn}(%s::bigint[])", (ids,)), state, names)
    assert_error(sql_error(conn, "SELECT * FROM pgfence.purge_many(%s::bigint[], 'n')", (ids,)), state, names)


BULK = ("requeue_many", "cancel_many", "mark_done_many", "purge_many")


def _ids_refusal(ids: Any) -> Any:
    """What the bulk calls answer for job_ids: None when they take it, else (SQLSTATE, what the message names)."""
    if ids is None:
        return ("22004", "argument job_ids must")
    if not 1 <= len(ids) <= 10000:
        return ("22023", "job_ids length")
    if None in ids:
        return ("22004", f"argument job_ids[{ids.index(None) + 1}] must")
    dups = sorted({i for i in ids if ids.count(i) > 1})
    return ("22023", f"job_ids {dups[0]}: appears more than once") if dups else None


def test_bulk_ids_follow_one_rule_and_a_refused_call_changes_nothing(dsn: str, conn: Conn, q: str) -> None:
    review = [manual_review_job(conn, q) for _ in range(3)]
    pool = [*review, UNKNOWN_ID, -1]

    @settings(max_examples=80, deadline=None)
    @given(ids=st.one_of(st.none(), st.lists(st.one_of(st.none(), st.sampled_from(pool)), max_size=6)),
           fn=st.sampled_from(BULK))
    def check(ids: Any, fn: str) -> None:
        refusal = _ids_refusal(ids)
        with connect(dsn, autocommit=False) as tx:
            try:
                got = rows(tx, f"SELECT * FROM pgfence.{fn}(%s::bigint[], 'n')", (ids,))
            except psycopg.Error as err:
                assert refusal is not None, (ids, err)
                assert_error(err, refusal[0], refusal[1])
            else:
                assert refusal is None, (ids, got)
                assert [r["id"] for r in got] == sorted(ids)
            tx.rollback()

    check()
    assert {status(conn, j) for j in review} == {"manual_review"} and audit(conn, review[0]) == []


ACTIONS = {"requeue": {"failed", "manual_review", "cancelled"}, "cancel": {"queued", "processing", "manual_review"},
           "mark_done": {"manual_review"}, "purge": {"failed", "cancelled"}}


def test_act_on_filter_and_preview_action_match_what_the_filter_says(dsn: str, conn: Conn, q: str) -> None:
    """A model of the filter (status, kind, error_contains as a plain substring, updated_at
    in [updated_after, updated_before)) against preview_action's count and the jobs
    act_on_filter acts on (each call rolled back)."""
    jobs: list[dict[str, Any]] = []
    for kind, state, error in [("a", "manual_review", None), ("a", "failed", "smtp 550"),  # (claimed: first)
                               ("b", "failed", "smtp 421 100%"), ("a", "failed", "dns 1"), ("a", "manual_review", None),
                               ("a", "queued", None), ("b", "queued", None), ("b", "cancelled", None)]:
        if state == "manual_review":
            job_id = manual_review_job(conn, q, kind=kind)
        elif state == "failed":
            job_id = enqueue(conn, q, kind, max_attempts=1)
            conn.execute("SELECT pgfence.fail(%s, %s, %s)", (job_id, claim_job(conn, q, job_id), error))
        else:
            job_id = enqueue(conn, q, kind)
            if state == "cancelled":
                conn.execute("SELECT pgfence.cancel(%s)", (job_id,))
        jobs.append({"id": job_id, "kind": kind, "status": state, "error": error, "minute": len(jobs)})
    base = one(conn, "SELECT date_trunc('hour', now()) - interval '1 day'")
    for j in jobs:  # (updated_at a minute apart: the range filters have edges to hit)
        conn.execute("UPDATE pgfence.jobs SET updated_at = %s + make_interval(mins => %s) WHERE id = %s",
                     (base, j["minute"], j["id"]))
    minute = st.one_of(st.none(), st.integers(-1, len(jobs)))

    @settings(max_examples=120, deadline=None)
    @given(action=st.sampled_from(sorted(ACTIONS)),
           state=st.sampled_from([None, "queued", "processing", "manual_review", "failed", "cancelled"]),
           kind=st.sampled_from([None, "a", "b"]),
           error=st.sampled_from([None, "smtp", "100%", "_", "dns 1", "SMTP", "550"]), after=minute, before=minute)
    def check(action: str, state: Any, kind: Any, error: Any, after: Any, before: Any) -> None:
        args = {"status": state, "kind": kind, "error_contains": error,
                "updated_after": None if after is None else base + dt.timedelta(minutes=after),
                "updated_before": None if before is None else base + dt.timedelta(minutes=before)}
        flt = ", ".join(f"{k} => %({k})s" for k in args)
        params = {**args, "q": q, "action": action}
        if after is not None and before is not None and before <= after:
            assert_error(sql_error(conn, f"SELECT * FROM pgfence.preview_action(%(action)s, queue => %(q)s, {flt})",
                                   params), "22023", "updated_before")
            return
        want = sorted(j["id"] for j in jobs if j["status"] in ACTIONS[action]
                      and state in (None, j["status"]) and kind in (None, j["kind"])
                      and (error is None or (j["error"] is not None and error in j["error"]))
                      and (after is None or j["minute"] >= after) and (before is None or j["minute"] < before))
        assert one(conn, f"SELECT jobs FROM pgfence.preview_action(%(action)s, queue => %(q)s, {flt})",
                   params) == len(want)
        with connect(dsn, autocommit=False) as tx:
            got = rows(tx, f"SELECT id, acted FROM pgfence.act_on_filter(%(action)s, 'n', queue => %(q)s, {flt})",
                       params)
            tx.rollback()
        assert got == [{"id": i, "acted": True} for i in want]

    check()
    assert [status(conn, j["id"]) for j in jobs] == [j["status"] for j in jobs]


def test_act_on_filter_previews_caps_and_audits_the_ids(conn: Conn, q: str) -> None:
    jobs = [manual_review_job(conn, q, kind="charge") for _ in range(3)]
    other = manual_review_job(conn, q, kind="email")
    assert rows(conn, "SELECT * FROM pgfence.preview_action('mark_done', queue => %s, kind => 'charge')", (q,)) == [
        {"jobs": 3, "max_jobs": 10000}]
    err = sql_error(conn, "SELECT * FROM pgfence.act_on_filter('mark_done', 'n', queue => %s, kind => 'charge',"
                          " max_jobs => 2)", (q,))
    assert_error(err, "22023", "max_jobs")
    assert "narrow the filter" in (err.diag.message_hint or "")
    assert {status(conn, j) for j in jobs} == {"manual_review"}
    got = rows(conn, "SELECT * FROM pgfence.act_on_filter('mark_done', 'all charged', queue => %s, kind => 'charge',"
                     " max_jobs => 3)", (q,))
    assert [(r["id"], r["acted"]) for r in got] == [(j, True) for j in jobs]
    assert status(conn, other) == "manual_review"
    [a] = rows(conn, "SELECT * FROM pgfence.operator_audit WHERE job_ids && %s::bigint[]", (jobs,))
    assert a["job_ids"] == jobs and a["detail"]["filter"] == {"queue": q, "kind": "charge"}
    assert a["detail"]["bulk"] == "filter"
    assert rows(conn, "SELECT * FROM pgfence.act_on_filter('requeue', queue => %s, kind => 'charge')", (q,)) == []


def test_filters_match_as_given_not_as_patterns(conn: Conn, q: str) -> None:
    a = enqueue(conn, q, max_attempts=1)
    b = enqueue(conn, q, max_attempts=1)
    for job_id, error in ((a, "timeout 100%"), (b, "timeout 1000")):
        conn.execute("SELECT pgfence.fail(%s, %s, %s)", (job_id, claim_job(conn, q, job_id), error))
    assert one(conn, "SELECT jobs FROM pgfence.preview_action('requeue', queue => %s, error_contains => '100%%')",
               (q,)) == 1
    assert one(conn, "SELECT jobs FROM pgfence.preview_action('requeue', queue => %s, error_contains => '_')",
               (q,)) == 0


def test_act_on_filter_skips_a_job_a_claim_took_meanwhile_when_the_filter_says_queued(
        dsn: str, conn: Conn, q: str) -> None:
    """The filter is checked again on each job once it is locked: a queued job a worker
    claims between the selection and the lock is processing then, which cancel applies to
    but the operator's filter (status queued) does not; it is left running."""
    job_id = enqueue(conn, q)
    with connect(dsn, autocommit=False) as worker:
        token = claim_job(worker, q, job_id)
        blocked = start_blocked(dsn, conn, "SELECT id, acted, job_status, detail FROM pgfence.act_on_filter("
                                           "'cancel', queue => %s, status => 'queued')", (q,))
        worker.commit()
    got = blocked.finish()
    assert got.error is None, got.error
    assert got.rows == [(job_id, False, "processing", "no longer matches the filter")]
    assert status(conn, job_id) == "processing" and audit(conn, job_id) == []
    conn.execute("SELECT pgfence.complete(%s, %s)", (job_id, token))  # (its worker still holds it)
    assert status(conn, job_id) == "done"


def test_act_on_filter_skips_a_job_whose_last_error_changed_meanwhile(dsn: str, conn: Conn, q: str) -> None:
    dead = _dead(conn, q, "smtp 550")
    with connect(dsn, autocommit=False) as tx:  # (requeued, run and failed again, with another error)
        tx.execute("SELECT pgfence.requeue(%s)", (dead,))
        tx.execute("SELECT pgfence.fail(%s, %s, 'dns failure', permanent => true)", (dead, claim_job(tx, q, dead)))
        blocked = start_blocked(dsn, conn, "SELECT id, acted, job_status, detail FROM pgfence.act_on_filter("
                                           "'purge', 'smtp gone', queue => %s, error_contains => 'smtp')", (q,))
        tx.commit()
    got = blocked.finish()
    assert got.error is None, got.error
    assert got.rows == [(dead, False, "failed", "no longer matches the filter")]
    assert one(conn, "SELECT last_error FROM pgfence.job(%s)", (dead,)) == "dns failure"


def test_an_empty_updated_range_is_refused(conn: Conn) -> None:
    for fn in ("preview_action('requeue',", "act_on_filter('requeue',"):
        err = sql_error(conn, f"SELECT * FROM pgfence.{fn} updated_after => '2026-01-02',"
                              " updated_before => '2026-01-01')")
        assert_error(err, "22023", "updated_before")
        assert "updated_after" in (err.diag.message_hint or "")
    assert_error(sql_error(conn, "SELECT * FROM pgfence.preview_action('requeue', updated_after => '2026-01-01',"
                                 " updated_before => '2026-01-01')"), "22023", "updated_before")


@pytest.mark.parametrize(("call", "state", "names"), [
    ("SELECT * FROM pgfence.preview_action(NULL)", "22004", "action"),
    ("SELECT * FROM pgfence.preview_action('delete')", "22023", "action"),
    ("SELECT * FROM pgfence.preview_action('requeue', status => 'done')", "22023", "status"),
    ("SELECT * FROM pgfence.preview_action('requeue', queue => ' x')", "22023", "queue"),
    ("SELECT * FROM pgfence.preview_action('requeue', error_contains => '')", "22023", "error_contains"),
    ("SELECT * FROM pgfence.preview_action('requeue', updated_after => 'infinity')", "22023", "updated_after"),
    ("SELECT * FROM pgfence.act_on_filter('mark_done')", "22004", "note"),
    ("SELECT * FROM pgfence.act_on_filter('requeue', result => '1')", "22023", "result"),
    ("SELECT * FROM pgfence.act_on_filter('requeue', max_jobs => 10001)", "22023", "max_jobs"),
])
def test_filter_arguments_are_checked_first(conn: Conn, call: str, state: str, names: str) -> None:
    assert_error(sql_error(conn, call), state, names)


# ------------------------------------------------------------------ viewer --
def test_viewer_reads_every_job_and_its_audit_and_changes_nothing(dsn: str, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    conn.execute("SELECT pgfence.cancel(%s, 'x')", (job_id,))
    with login_roles(dsn, {"t_console_viewer": "pgfence_viewer"}):
        with connect_as(dsn, "t_console_viewer") as v:
            assert one(v, "SELECT status FROM pgfence.job(%s)", (job_id,)) == "cancelled"
            assert one(v, "SELECT count(*) FROM pgfence.jobs WHERE id = %s", (job_id,)) == 1
            assert one(v, "SELECT count(*) FROM pgfence.attempts_of(%s)", (job_id,)) == 1
            assert [r["action"] for r in rows(v, "SELECT * FROM pgfence.audit_of(%s)", (job_id,))] == ["cancel"]
            assert one(v, "SELECT count(*) FROM pgfence.metrics()") > 0
            for call in ("SELECT pgfence.requeue(%s)", "SELECT pgfence.mark_done(%s, 'n')",
                         "SELECT * FROM pgfence.requeue_many(ARRAY[%s]::bigint[])",
                         "UPDATE pgfence.jobs SET status = 'queued' WHERE id = %s"):
                assert sql_error(v, call, (job_id,)).sqlstate == "42501", call
    assert status(conn, job_id) == "cancelled"


# ------------------------------------------------------------------ Python --
def test_client_operator_methods(dsn: str, conn: Conn, q: str) -> None:
    from pgfence import Client, InvalidTransition
    a, b, c = (manual_review_job(conn, q) for _ in range(3))
    with Client.connect(dsn) as client:
        client.mark_done(a, "checked", result={"ok": True})
        with pytest.raises(InvalidTransition):
            client.mark_done(a, "again")
        assert [(r.id, r.acted) for r in client.requeue_many([b, a], note="n")] == [(a, False), (b, True)]
        assert client.preview_action("cancel", queue=q).jobs == 2
        got = client.act_on_filter("cancel", queue=q, note="drain")
        assert {(r.id, r.acted, r.job_status) for r in got} == {(b, True, "cancelled"), (c, True, "cancelled")}
        assert [(e.action, e.note, e.count) for e in client.audit_of(b)] == [("requeue", "n", 1), ("cancel", "drain", 2)]
        assert client.audit_of(a)[0].detail == {"result": {"ok": True}}


def test_cli_mark_done_bulk_and_audit(dsn: str, conn: Conn, q: str, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from pgfence.cli import main
    monkeypatch.setenv("PGFENCE_ACTOR", "carol\x1b[31m")
    a, b = manual_review_job(conn, q), manual_review_job(conn, q)
    assert main(["mark-done", str(a), "--note", "charged\nforged line", "--result", '{"x": 1}', "--dsn", dsn]) == 0
    assert main(["bulk", "requeue", "--queue", q, "--preview", "--dsn", dsn]) == 0
    assert main(["bulk", "requeue", "--queue", q, "--dsn", dsn]) == 0
    assert main(["audit", str(a), "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert f"job {a} marked done" in out and "requeue would act on 1 job " in out
    assert "requeue: acted on 1 of 1 job" in out
    assert "mark_done by postgres, actor carol\\u001b[31m: charged\\u000aforged line" in out
    assert "\x1b" not in out
    assert status(conn, b) == "queued" and one(conn, "SELECT result FROM pgfence.job(%s)", (a,)) == {"x": 1}
    assert main(["mark-done", str(a), "--dsn", dsn]) == 2  # --note is required


def test_client_mark_done_stores_a_result_as_complete_does(dsn: str, conn: Conn, q: str) -> None:
    """The result goes through the same serialization as complete's: RawJson text is
    stored as the JSON it is, and a value JSON cannot hold is refused before the call."""
    from pgfence import Client, RawJson
    raw, plain = manual_review_job(conn, q), manual_review_job(conn, q)
    with Client.connect(dsn) as client:
        client.mark_done(raw, "checked", result=RawJson('{"psp": 991}'))
        with pytest.raises(ValueError):
            client.mark_done(plain, "checked", result=float("nan"))
        assert [r.acted for r in client.mark_done_many([plain], "checked", result=[1, "two"])] == [True]
    assert one(conn, "SELECT result FROM pgfence.job(%s)", (raw,)) == {"psp": 991}
    assert one(conn, "SELECT result FROM pgfence.job(%s)", (plain,)) == [1, "two"]
