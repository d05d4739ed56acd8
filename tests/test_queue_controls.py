"""Queue pause and the global concurrency cap, enforced by claim for every caller.

``pause_queue(queue)``: claim takes nothing from it (jobs already claimed finish, enqueue
still works) until ``resume_queue(queue)``. ``set_queue_limit(queue, max_running)``: never
more than max_running jobs of the queue processing at once, across all claimers; NULL
removes the cap. Operator actions, recorded in pgfence.queue_controls."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from support.api import claim, complete, enqueue, release, start_blocked
from support.db import assert_error, connect, delete_queues, job, one, queue_count, sql_error

Conn = psycopg.Connection[Any]


@pytest.fixture(autouse=True)
def no_controls_left(conn: Conn, queue: str) -> Iterator[None]:
    """Every control a test made is removed after it (while any queue has one, every
    claim of the shared test database takes the controlled path), and so are the jobs of
    its queues: leases left to expire would be reclaimed later by other tests' claims
    (a claim reclaims the oldest expired leases first, max_jobs of them)."""
    yield
    conn.execute("DELETE FROM pgfence.queue_controls")
    delete_queues(conn, [r[0] for r in conn.execute(
        "SELECT DISTINCT queue FROM pgfence.all_jobs WHERE starts_with(queue, %s)", (queue,))])


def _enqueue_n(conn: Conn, queue: str, n: int) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT id FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[%s]), queue => %s)", (n, queue))]


def _claim_everywhere(conn: Conn, ours: str, worker: str = "worker-A", max_jobs: int = 1) -> list[dict[str, Any]]:
    """claim(queues => NULL), with the jobs of other tests' queues it took given back at
    once (release_many, started => false: as if never claimed), so that no lease of
    theirs is left to expire; the jobs of queues named ours... are returned."""
    got = claim(conn, None, worker, max_jobs=max_jobs)
    theirs = [g for g in got if not g["queue"].startswith(ours)]
    if theirs:
        conn.execute("SELECT count(*) FROM pgfence.release_many(%s::bigint[], %s::uuid[], started => false)",
                     ([g["id"] for g in theirs], [g["attempt_token"] for g in theirs]))
    return [g for g in got if g["queue"].startswith(ours)]


# ------------------------------------------------------------------ pause --
def test_a_paused_queue_gives_nothing_to_any_claim_and_the_others_go_on(conn: Conn, queue: str) -> None:
    other = queue + "_other"
    mine = enqueue(conn, queue)
    theirs = enqueue(conn, other)
    assert one(conn, "SELECT pgfence.pause_queue(%s)", (queue,)) is True
    assert one(conn, "SELECT pgfence.pause_queue(%s)", (queue,)) is False  # paused already
    assert claim(conn, [queue]) == []
    assert [c["id"] for c in claim(conn, [queue, other], max_jobs=10)] == [theirs]
    later = enqueue(conn, queue)  # enqueue still works
    assert [c["id"] for c in _claim_everywhere(conn, queue, max_jobs=1000) if c["queue"] == queue] == []
    assert job(conn, mine)["status"] == "queued"
    paused_at, paused_by = conn.execute("SELECT paused_at, paused_by FROM pgfence.queue_controls"
                                        " WHERE queue = %s", (queue,)).fetchone() or (None, None)
    assert paused_at is not None and paused_by == "postgres"
    assert one(conn, "SELECT pgfence.resume_queue(%s)", (queue,)) is True
    assert one(conn, "SELECT pgfence.resume_queue(%s)", (queue,)) is False
    assert sorted(c["id"] for c in claim(conn, [queue], max_jobs=10)) == [mine, later]
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 0


def test_a_job_claimed_before_the_pause_finishes_normally(conn: Conn, queue: str) -> None:
    job_id = enqueue(conn, queue)
    [c] = claim(conn, [queue])
    conn.execute("SELECT pgfence.pause_queue(%s)", (queue,))
    conn.execute("SELECT pgfence.heartbeat(%s, %s)", (job_id, c["attempt_token"]))
    complete(conn, job_id, c["attempt_token"])
    assert job(conn, job_id)["status"] == "done"


def test_a_claim_over_every_queue_finds_work_behind_a_paused_backlog(conn: Conn, queue: str) -> None:
    """The paused queue's jobs fill the front of the claim order (older, higher
    priority): a claim over every queue still finds the others' jobs behind them."""
    behind = queue + "_behind"
    conn.execute("SELECT pgfence.enqueue_many(array_fill('k'::text, ARRAY[500]), queue => %s,"
                 " priorities => array_fill(100, ARRAY[500]))",
                 (queue,))
    wanted = enqueue(conn, behind, priority=100)
    conn.execute("SELECT pgfence.pause_queue(%s)", (queue,))
    got = [c for c in _claim_everywhere(conn, queue, max_jobs=5) if c["queue"] in (queue, behind)]
    assert [c["id"] for c in got] == [wanted]


def test_pause_and_resume_refuse_a_bad_queue_name_and_change_nothing(conn: Conn) -> None:
    for fn in ("pause_queue", "resume_queue"):
        assert_error(sql_error(conn, f"SELECT pgfence.{fn}(NULL)"), "22004", "queue")
        assert_error(sql_error(conn, f"SELECT pgfence.{fn}(%s)", (" padded",)), "22023", "queue")
        assert_error(sql_error(conn, f"SELECT pgfence.{fn}(%s)", ("bad\x01name",)), "22023", "queue")
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls") == 0


# -------------------------------------------------------------------- cap --
def test_a_capped_queue_hands_out_only_its_free_slots(conn: Conn, queue: str) -> None:
    ids = _enqueue_n(conn, queue, 10)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 3)", (queue,))
    first = claim(conn, [queue], max_jobs=10)
    assert [c["id"] for c in first] == ids[:3]
    assert claim(conn, [queue], max_jobs=10) == []
    assert all(c["queue"] != queue for c in _claim_everywhere(conn, queue, "w2", max_jobs=1000))
    complete(conn, first[0]["id"], first[0]["attempt_token"])  # a slot frees
    release(conn, first[1]["id"], first[1]["attempt_token"])   # and another
    again = claim(conn, [queue], max_jobs=10)
    assert len(again) == 2 and queue_count(conn, queue, "processing") == 3
    limits = conn.execute("SELECT max_running, running FROM pgfence.queue_limits() WHERE queue = %s",
                          (queue,)).fetchone()
    assert limits == (3, 3)


def test_a_reclaimed_lease_frees_its_slot_and_an_expired_one_counts_until_reclaimed(
        conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 3)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 1)", (queue,))
    [c] = claim(conn, [queue], lease="200 milliseconds", max_jobs=5)
    time.sleep(0.3)
    # an expired lease still counts as running; claim's own recovery reclaims it first
    # (the job goes back to the queue), and then the slot is free
    got = claim(conn, [queue], max_jobs=5)
    assert len(got) == 1 and queue_count(conn, queue, "processing") == 1
    assert one(conn, "SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (c["id"],)) == "reclaimed"


def test_lowering_a_cap_lets_running_jobs_finish_and_claims_wait_for_fewer(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 6)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 4)", (queue,))
    running = claim(conn, [queue], max_jobs=10)
    assert len(running) == 4
    conn.execute("SELECT pgfence.set_queue_limit(%s, 2)", (queue,))
    assert claim(conn, [queue], max_jobs=10) == []
    for c in running[:2]:
        complete(conn, c["id"], c["attempt_token"])
    assert claim(conn, [queue], max_jobs=10) == []  # still 2 running: at the cap
    complete(conn, running[2]["id"], running[2]["attempt_token"])
    assert len(claim(conn, [queue], max_jobs=10)) == 1
    conn.execute("SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))  # no cap
    assert len(claim(conn, [queue], max_jobs=10)) == 1  # the last one
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 0


def test_a_paused_capped_queue_stays_paused_when_its_cap_is_removed(conn: Conn, queue: str) -> None:
    enqueue(conn, queue)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 5)", (queue,))
    conn.execute("SELECT pgfence.pause_queue(%s)", (queue,))
    assert claim(conn, [queue]) == []
    conn.execute("SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))
    assert claim(conn, [queue]) == []
    assert one(conn, "SELECT pgfence.resume_queue(%s)", (queue,)) is True
    assert len(claim(conn, [queue])) == 1


def test_set_queue_limit_refuses_bad_input_and_changes_nothing(conn: Conn, queue: str) -> None:
    conn.execute("SELECT pgfence.set_queue_limit(%s, 7)", (queue,))
    for bad in (0, -1, 1_000_001):
        assert_error(sql_error(conn, "SELECT pgfence.set_queue_limit(%s, %s)", (queue, bad)), "22023", "max_running")
    assert_error(sql_error(conn, "SELECT pgfence.set_queue_limit(NULL, 3)"), "22004", "queue")
    assert_error(sql_error(conn, "SELECT pgfence.set_queue_limit(%s, 3)", ("bad\x07name",)), "22023", "queue")
    assert one(conn, "SELECT max_running FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 7
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls") == 1


def test_a_claim_holding_a_capped_queue_makes_the_others_skip_it_until_it_commits(
        conn: Conn, conn2: Conn, tx_conn: Conn, queue: str) -> None:
    """Two claims of a capped queue never count at once: while one that took from it is
    uncommitted, the others take nothing from that queue (without waiting, so a caller's
    long transaction stalls no claimer and no two claims deadlock) but still take from
    the others; once it commits, the next claim counts its jobs as running."""
    other = queue + "_other"
    _enqueue_n(conn, queue, 5)
    theirs = enqueue(conn, other)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 3)", (queue,))
    held = claim(tx_conn, [queue], max_jobs=2)  # an open transaction holding the queue's row
    assert len(held) == 2
    assert claim(conn2, [queue], max_jobs=5) == []
    assert [c["id"] for c in claim(conn2, [queue, other], max_jobs=5)] == [theirs]
    tx_conn.commit()
    assert len(claim(conn2, [queue], max_jobs=5)) == 1  # 2 running: one slot left
    assert claim(conn2, [queue], max_jobs=5) == []


def test_claims_in_two_transactions_over_two_capped_queues_do_not_deadlock(
        dsn: str, conn: Conn, queue: str) -> None:
    a, b = queue + "_a", queue + "_b"
    for q in (a, b):
        _enqueue_n(conn, q, 4)
        conn.execute("SELECT pgfence.set_queue_limit(%s, 2)", (q,))
    with connect(dsn, autocommit=False) as t1, connect(dsn, autocommit=False) as t2:
        assert len(claim(t1, [a])) == 1
        assert len(claim(t2, [b])) == 1
        assert claim(t1, [b]) == [] and claim(t2, [a]) == []  # each skips the other's queue
        t1.commit()
        t2.commit()
    assert queue_count(conn, a, "processing") == 1 and queue_count(conn, b, "processing") == 1


def test_resume_and_uncap_keep_a_concurrent_operator_change(dsn: str, conn: Conn, tx_conn: Conn,
                                                            queue: str) -> None:
    """resume_queue and set_queue_limit(NULL) lock the row first: an uncommitted pause or
    cap of another operator is waited for and kept, not lost to a DELETE."""
    conn.execute("SELECT pgfence.set_queue_limit(%s, 4)", (queue,))
    tx_conn.execute("SELECT pgfence.pause_queue(%s)", (queue,))
    blocked = start_blocked(dsn, conn, "SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))
    tx_conn.commit()
    assert blocked.finish().error is None
    assert conn.execute("SELECT max_running, paused_at IS NOT NULL FROM pgfence.queue_controls WHERE queue = %s",
                        (queue,)).fetchone() == (None, True)
    tx_conn.execute("SELECT pgfence.set_queue_limit(%s, 4)", (queue,))
    blocked = start_blocked(dsn, conn, "SELECT pgfence.resume_queue(%s)", (queue,))
    tx_conn.commit()
    assert blocked.finish().rows == [(True,)]
    assert conn.execute("SELECT max_running, paused_at FROM pgfence.queue_controls WHERE queue = %s",
                        (queue,)).fetchone() == (4, None)


def test_sixteen_claimers_never_run_more_than_the_cap(dsn: str, conn: Conn, queue: str) -> None:
    """16 threads claim (batches of 1-3), hold each job a moment and complete it, over
    one capped queue and an uncapped one; a sampler counts the capped queue's processing
    jobs meanwhile, and afterwards the attempt history (claim to finish of every done
    job) never overlaps more than the cap at any instant."""
    cap, n = 3, 240
    free = queue + "_free"
    _enqueue_n(conn, queue, n)
    _enqueue_n(conn, free, 60)
    conn.execute("SELECT pgfence.set_queue_limit(%s, %s)", (queue, cap))
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        try:
            with connect(dsn) as c:
                idle = 0
                while idle < 40:
                    got = (claim(c, [queue, free], f"w{k}", max_jobs=1 + k % 3) if k % 2
                           else _claim_everywhere(c, queue, f"w{k}", max_jobs=1 + k % 3))
                    if not got:
                        idle += 1
                        time.sleep(0.01)
                        continue
                    idle = 0
                    time.sleep(0.002)
                    c.execute("SELECT * FROM pgfence.complete_many(%s::bigint[], %s::uuid[])",
                              ([g["id"] for g in got], [g["attempt_token"] for g in got]))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def sampler() -> None:
        with connect(dsn) as c:
            while not stop.is_set():
                seen.append(queue_count(c, queue, "processing"))

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(16)]
    s = threading.Thread(target=sampler)
    s.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    s.join(10)
    assert not errors, errors
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s AND status = 'done'", (queue,)) == n
    assert seen and max(seen) <= cap, max(seen)
    assert max(seen) == cap  # the cap was reached, so the test could have seen more
    # the history: at every claim, how many attempts of the queue had begun and not ended
    overlap = one(conn, """
        SELECT max(c) FROM (
            SELECT (SELECT count(*) FROM pgfence.all_attempts b JOIN pgfence.all_jobs bj ON bj.id = b.job_id
                     WHERE bj.queue = %(q)s AND b.claimed_at <= a.claimed_at AND b.ended_at > a.claimed_at) AS c
              FROM pgfence.all_attempts a JOIN pgfence.all_jobs j ON j.id = a.job_id
             WHERE j.queue = %(q)s) x""", {"q": queue})
    assert overlap <= cap, overlap


def test_only_operators_may_pause_resume_or_cap_a_queue(dsn: str, queue: str) -> None:
    from support.roles import connect_as, login_roles
    with login_roles(dsn, {"t_qc_worker": "pgfence_worker", "t_qc_prod": "pgfence_producer",
                           "t_qc_oper": "pgfence_operator"}):
        for role in ("t_qc_worker", "t_qc_prod"):
            with connect_as(dsn, role) as c:
                for call in ("SELECT pgfence.pause_queue(%s)", "SELECT pgfence.resume_queue(%s)",
                             "SELECT pgfence.set_queue_limit(%s, 1)"):
                    assert_error(sql_error(c, call, (queue,)), "42501", hint=False)
        with connect_as(dsn, "t_qc_oper") as c:
            assert one(c, "SELECT pgfence.pause_queue(%s)", (queue,)) is True
            assert one(c, "SELECT paused_by FROM pgfence.queue_limits() WHERE queue = %s", (queue,)) == "t_qc_oper"
            c.execute("SELECT pgfence.set_queue_limit(%s, 2)", (queue,))
            assert one(c, "SELECT pgfence.resume_queue(%s)", (queue,)) is True


# ---------------------------------------------------- client and command line --
def test_the_python_client_pauses_caps_and_lists_queues(client: Any, conn: Conn, queue: str) -> None:
    from pgfence import InvalidArgument, QueueLimit
    _enqueue_n(conn, queue, 3)
    assert client.pause_queue(queue) is True
    assert client.claim("w", queues=[queue], max_jobs=3) == []
    assert client.resume_queue(queue) is True and client.resume_queue(queue) is False
    client.set_queue_limit(queue, 2)
    assert len(client.claim("w", queues=[queue], max_jobs=3)) == 2
    [row] = [r for r in client.queue_limits() if r.queue == queue]
    assert isinstance(row, QueueLimit) and (row.max_running, row.running, row.paused_at) == (2, 2, None)
    with pytest.raises(InvalidArgument) as bad:
        client.set_queue_limit(queue, 0)
    assert "max_running" in str(bad.value)
    client.set_queue_limit(queue, None)
    assert [r for r in client.queue_limits() if r.queue == queue] == []


def test_the_queue_command_pauses_caps_lists_and_escapes_names(dsn: str, conn: Conn, queue: str) -> None:
    from support.processes import run_cli
    hostile = queue + "\u200eltr"  # a bidi mark inside: refused by the SQL, never printed raw
    r = run_cli(dsn, "queue", "pause", queue)
    assert r.returncode == 0 and r.stdout == f"queue {queue} paused\n", r.stderr
    assert run_cli(dsn, "queue", "pause", queue).stdout == f"queue {queue} was paused already\n"
    r = run_cli(dsn, "queue", "limit", queue, "4")
    assert r.returncode == 0 and r.stdout == f"queue {queue}: at most 4 running\n"
    out = run_cli(dsn, "queue", "list").stdout
    assert f"{queue}: paused since " in out and "0/4 running" in out
    assert run_cli(dsn, "queue", "resume", queue).stdout == f"queue {queue} resumed\n"
    assert run_cli(dsn, "queue", "limit", queue, "none").stdout == f"queue {queue}: no cap\n"
    assert "no queue is paused, capped or rate-limited" in run_cli(dsn, "queue", "list").stdout
    for args, code, fragment in ((("queue", "limit", queue), 2, "needs MAX_RUNNING"),
                                 (("queue", "limit", queue, "0"), 2, "at least 1"),
                                 (("queue", "pause"), 2, "needs a QUEUE"),
                                 (("queue", "pause", queue, "3"), 2, "takes no MAX_RUNNING"),
                                 (("queue", "pause", hostile), 1, "queue")):
        r = run_cli(dsn, *args)
        assert r.returncode == code and fragment in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert "\u200e" not in r.stderr
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls") == 0
