"""A rate limit per queue, enforced by claim for every caller: set_queue_rate_limit(queue,
max_claims, per) lets claims hand out at most max_claims of the queue's jobs per `per`,
across every claimer, by a token bucket of max_claims refilled at max_claims per `per`
(a burst of max_claims, then the rate); the jobs beyond stay queued. NULL removes it.
An operator action, recorded in pgfence.queue_controls; shown by queue_limits()."""
from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from support.api import claim, complete
from support.db import assert_error, connect, delete_queues, one, queue_count, rows, sql_error

Conn = psycopg.Connection[Any]


@pytest.fixture(autouse=True)
def no_controls_left(conn: Conn, queue: str) -> Iterator[None]:
    """Every control a test made is removed after it (while any queue has one, every claim
    of the shared test database takes the controlled path), and its queues' jobs too."""
    yield
    conn.execute("DELETE FROM pgfence.queue_controls WHERE starts_with(queue, %s)", (queue,))
    delete_queues(conn, [r[0] for r in conn.execute(
        "SELECT DISTINCT queue FROM pgfence.all_jobs WHERE starts_with(queue, %s)", (queue,))])


def _enqueue_n(conn: Conn, queue: str, n: int) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT id FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[%s]), queue => %s)", (n, queue))]


def _limit(conn: Conn, queue: str, max_claims: Any, per: str = "1 second") -> None:
    conn.execute("SELECT pgfence.set_queue_rate_limit(%s, %s::integer, %s::interval)", (queue, max_claims, per))


def test_a_rate_limited_queue_hands_out_at_most_its_allowance_to_concurrent_claimers(
        dsn: str, conn: Conn, queue: str) -> None:
    """8 claimers on connections of their own, each looping over claim(3) for ~1.5 s, on a
    queue limited to 5 per 500 ms: by every claim's time t (its reserved_at, which is after
    the bucket was read), at most 5 + 5 * (t - t0) / 500 ms were claimed (t0: the bucket
    filled by set_queue_rate_limit); at least the burst was handed out; the rest stay queued."""
    n, per_s, burst = 300, 0.5, 5
    _enqueue_n(conn, queue, n)
    _limit(conn, queue, burst, "500 milliseconds")
    t0 = one(conn, "SELECT rate_refilled_at FROM pgfence.queue_controls WHERE queue = %s", (queue,))
    stop = time.monotonic() + 1.5
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        try:
            with connect(dsn) as c:
                while time.monotonic() < stop:
                    claim(c, [queue], f"worker-{k}", lease="1 hour", max_jobs=3)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    times = [r["reserved_at"] for r in rows(conn, "SELECT reserved_at FROM pgfence.jobs WHERE queue = %s"
                                                  " AND status = 'processing' ORDER BY reserved_at", (queue,))]
    assert len(times) >= burst  # the full bucket at least (a lower bound left generous)
    for k, t in enumerate(times, start=1):
        allowed = burst + burst * (t - t0).total_seconds() / per_s
        assert k <= allowed + 1e-6, (k, t - t0, allowed)
    # over 1.5 s: at most the burst and 3 intervals' worth
    assert len(times) <= burst + burst * ((times[-1] - t0).total_seconds() / per_s)
    assert queue_count(conn, queue, "queued") == n - len(times)
    assert queue_count(conn, queue, "failed") == 0


def test_the_bucket_refills_at_the_rate_and_holds_at_most_max_claims(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 20)
    _limit(conn, queue, 4, "200 milliseconds")
    assert len(claim(conn, [queue], max_jobs=10)) == 4  # the burst
    emptied = one(conn, "SELECT rate_refilled_at FROM pgfence.queue_controls WHERE queue = %s", (queue,))
    time.sleep(0.12)
    # at 20 per second, 0.12 s gives at least 2 tokens back; never more than the time since allows
    got = len(claim(conn, [queue], max_jobs=10))
    refilled = one(conn, "SELECT rate_refilled_at FROM pgfence.queue_controls WHERE queue = %s", (queue,))
    assert 2 <= got <= min(4, 20 * (refilled - emptied).total_seconds() + 1e-6), (got, refilled - emptied)
    time.sleep(0.6)  # refills to full, and not beyond
    assert len(claim(conn, [queue], max_jobs=10)) == 4
    assert queue_count(conn, queue, "queued") == 20 - 8 - got


def test_removing_the_rate_limit_lets_claims_take_the_rest(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 5)
    _limit(conn, queue, 1, "1 day")
    assert len(claim(conn, [queue], max_jobs=10)) == 1
    assert claim(conn, [queue], max_jobs=10) == []
    [row] = [r for r in rows(conn, "SELECT * FROM pgfence.queue_limits()") if r["queue"] == queue]
    assert (row["max_claims"], row["claims_per"], row["claims_available"], row["max_running"], row["running"]) == (
        1, dt.timedelta(days=1), 0, None, 1)
    assert row["rate_limited_by"] == "postgres" and row["paused_at"] is None
    _limit(conn, queue, None)
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 0
    assert len(claim(conn, [queue], max_jobs=10)) == 4


def test_setting_the_limit_again_grants_no_new_burst(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 10)
    _limit(conn, queue, 3, "1 day")
    assert len(claim(conn, [queue], max_jobs=10)) == 3
    _limit(conn, queue, 3, "1 day")
    assert claim(conn, [queue], max_jobs=10) == []
    _limit(conn, queue, 2, "1 day")  # a smaller bucket keeps at most its new size
    assert claim(conn, [queue], max_jobs=10) == []


def test_changing_the_limit_keeps_the_bucket_the_old_limit_refilled(conn: Conn, queue: str) -> None:
    """A changed limit keeps the bucket as it stands when it changes, refilled at the old
    rate up to then (at most the new size), and refills at the new rate from then: the
    time before the change is not counted again at the new rate."""
    _enqueue_n(conn, queue, 20)
    _limit(conn, queue, 5, "100 milliseconds")
    assert len(claim(conn, [queue], max_jobs=10)) == 5  # emptied
    time.sleep(0.3)  # full again at 5 per 100 ms
    _limit(conn, queue, 2, "1 day")  # so the new bucket starts at 2 (its size), not at what a day's rate refills
    assert one(conn, "SELECT claims_available FROM pgfence.queue_limits() WHERE queue = %s", (queue,)) == 2
    assert len(claim(conn, [queue], max_jobs=10)) == 2
    _limit(conn, queue, 10, "1 day")  # emptied at 1 per 12 h: raising the limit gives no refill of the past at 10/day
    time.sleep(0.2)
    _limit(conn, queue, 10, "100 milliseconds")
    assert len(claim(conn, [queue], max_jobs=10)) <= 5  # (0.2 s at 10 per day: nothing; since the change: ms)


def test_a_cap_and_a_rate_limit_together_take_the_smaller_allowance(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 10)
    conn.execute("SELECT pgfence.set_queue_limit(%s, 2)", (queue,))
    _limit(conn, queue, 5, "1 day")
    first = claim(conn, [queue], max_jobs=10)
    assert len(first) == 2  # the cap
    for c in first:
        complete(conn, c["id"], c["attempt_token"])
    second = claim(conn, [queue], max_jobs=10)
    assert len(second) == 2  # the cap again (3 tokens left)
    for c in second:
        complete(conn, c["id"], c["attempt_token"])
    assert len(claim(conn, [queue], max_jobs=10)) == 1  # the rate: 5 in all
    assert claim(conn, [queue], max_jobs=10) == []
    conn.execute("SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))  # the rate limit stays
    assert one(conn, "SELECT max_claims FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 5
    assert claim(conn, [queue], max_jobs=10) == []
    assert queue_count(conn, queue, "queued") == 5


def test_pause_and_resume_keep_the_rate_limit(conn: Conn, queue: str) -> None:
    _enqueue_n(conn, queue, 4)
    _limit(conn, queue, 2, "1 day")
    assert one(conn, "SELECT pgfence.pause_queue(%s)", (queue,)) is True
    assert claim(conn, [queue], max_jobs=10) == []
    assert one(conn, "SELECT pgfence.resume_queue(%s)", (queue,)) is True
    assert one(conn, "SELECT max_claims FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 2
    assert len(claim(conn, [queue], max_jobs=10)) == 2
    assert claim(conn, [queue], max_jobs=10) == []


def test_a_claim_over_several_queues_takes_the_others_and_the_rate_limits_allowance(conn: Conn, queue: str) -> None:
    other = queue + "_free"
    _enqueue_n(conn, queue, 6)
    _enqueue_n(conn, other, 3)
    _limit(conn, queue, 2, "1 day")
    got = claim(conn, [queue, other], max_jobs=10)
    assert sorted(c["queue"] for c in got) == [queue, queue] + [other] * 3
    assert claim(conn, [queue, other], max_jobs=10) == []
    # over every queue (other tests' jobs may fill max_jobs first: only the bound is sure)
    everything = claim(conn, None, max_jobs=1000)
    others = [c for c in everything if c["queue"] != queue]
    if others:  # other tests' jobs: given back as never claimed
        conn.execute("SELECT count(*) FROM pgfence.release_many(%s::bigint[], %s::uuid[], started => false)",
                     ([c["id"] for c in others], [c["attempt_token"] for c in others]))
    assert [c for c in everything if c["queue"] == queue] == []
    assert queue_count(conn, queue, "queued") == 4


@pytest.mark.parametrize("args, sqlstate, names", [
    ("NULL, 1, '1 second'", "22004", "queue"),
    ("%(q)s, 0, '1 second'", "22023", "max_claims"),
    ("%(q)s, -1, '1 second'", "22023", "max_claims"),
    ("%(q)s, 1000001, '1 second'", "22023", "max_claims"),
    ("%(q)s, 1, NULL", "22004", "per"),
    ("%(q)s, 1, '0'", "22023", "per"),
    ("%(q)s, 1, '2 days'", "22023", "per"),
    ("%(q)s, 1, '1 day -1 hour'", "22023", "per"),
])
def test_set_queue_rate_limit_refuses_bad_input_and_changes_nothing(conn: Conn, queue: str, args: str,
                                                                     sqlstate: str, names: str) -> None:
    assert_error(sql_error(conn, f"SELECT pgfence.set_queue_rate_limit({args}::interval)", {"q": queue}),
                 sqlstate, names)
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 0


def test_only_operators_may_rate_limit_a_queue(dsn: str, queue: str) -> None:
    from support.roles import connect_as, login_roles
    with login_roles(dsn, {"t_rl_worker": "pgfence_worker", "t_rl_prod": "pgfence_producer",
                           "t_rl_oper": "pgfence_operator"}):
        for role in ("t_rl_worker", "t_rl_prod"):
            with connect_as(dsn, role) as c:
                assert_error(sql_error(c, "SELECT pgfence.set_queue_rate_limit(%s, 1)", (queue,)), "42501", hint=False)
        with connect_as(dsn, "t_rl_oper") as c:
            c.execute("SELECT pgfence.set_queue_rate_limit(%s, 3, '1 minute')", (queue,))
            assert one(c, "SELECT rate_limited_by FROM pgfence.queue_limits() WHERE queue = %s", (queue,)) == "t_rl_oper"
            c.execute("SELECT pgfence.set_queue_rate_limit(%s, NULL)", (queue,))


# ---------------------------------------------------- client and command line --
def test_the_client_sets_shows_and_removes_a_rate_limit(client: Any, queue: str) -> None:
    client.set_queue_rate_limit(queue, 7, dt.timedelta(minutes=1))
    [row] = [r for r in client.queue_limits() if r.queue == queue]
    assert (row.max_claims, row.claims_per, row.claims_available, row.max_running) == (
        7, dt.timedelta(minutes=1), 7, None)
    client.set_queue_rate_limit(queue, None)
    assert [r for r in client.queue_limits() if r.queue == queue] == []


def test_the_queue_command_sets_lists_and_removes_a_rate_limit(dsn: str, conn: Conn, queue: str) -> None:
    from support.processes import run_cli
    r = run_cli(dsn, "queue", "rate", queue, "50", "--per", "2")
    assert r.returncode == 0 and r.stdout == f"queue {queue}: at most 50 claimed per 2 seconds\n", r.stderr
    out = run_cli(dsn, "queue", "list").stdout
    assert f"{queue}: running; 0 running, no cap; at most 50 claimed per 2 seconds (50 available now)" in out
    assert run_cli(dsn, "queue", "rate", queue, "none").stdout == f"queue {queue}: no rate limit\n"
    for args, fragment in ((("queue", "rate", queue), "needs MAX_CLAIMS"),
                           (("queue", "rate", queue, "0"), "at least 1"),
                           (("queue", "rate", queue, "5", "--per", "0"), "more than 0"),
                           (("queue", "limit", queue, "5", "--per", "1"), "takes no --per")):
        r = run_cli(dsn, *args)
        assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert one(conn, "SELECT count(*) FROM pgfence.queue_controls WHERE queue = %s", (queue,)) == 0
