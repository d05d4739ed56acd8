"""The Worker runtime end to end, against the real database.

In-process workers run on a thread (``support.workers.running``) and are stopped
with ``worker.stop()``; crash, freeze and signal scenarios run the real CLI
worker (``python -m pgfence worker support.handlers:HANDLERS``) as a child
process. Every worker claims only from the test's own queue. Waits are polls
with deadlines; the background pg_cron sweeper is left running unless a test
pauses it.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support.db import LEASE_EXPIRED, RELEASED, backends, terminate_backends, unique_name
from support.handlers import until_stopped
from support.processes import worker_process
from support.workers import job_in, running, start, wait_for, wait_status
from pgfence import Client, Interrupted, Job, PermanentFailure, RetryAfter, Snooze, Worker
from pgfence.limits import Limits


def cli_flavor(flavor: str) -> list[str]:
    """The worker process's option for the flavour: ``--asyncio`` runs a pgfence.aio.AsyncWorker
    (support.handlers are plain functions: they run on its handler threads)."""
    return ["--asyncio"] if flavor == "asyncio" else []


# ----------------------------------------------------------- handlers ----
def test_handlers_run_and_their_results_are_stored(dsn: str, client: Client, queue: str,
                                                   workers: list[Client], flavor: str) -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def double(job: Job) -> Any:
        with lock:
            calls.append(job.id)
        return {"n2": job.payload["n"] * 2, "attempt": job.attempts}

    def nothing(job: Job) -> None:
        return None

    worker = start(dsn, queue, {"double": double, "nothing": nothing}, workers, flavor=flavor, concurrency=4)
    rows = client.enqueue_many(["double"] * 5 + ["nothing"], [{"n": i} for i in range(5)] + [{}], queue=queue)
    with running(worker):
        done = [wait_status(client, r.id, "done", "failed") for r in rows]
    assert [(d.status, d.result, d.attempts) for d in done[:5]] == \
        [("done", {"n2": 2 * i, "attempt": 1}, 1) for i in range(5)]
    assert (done[5].status, done[5].result) == ("done", None)
    assert sorted(calls) == sorted(r.id for r in rows[:5])
    assert (worker.counters["claimed"], worker.counters["completed"], worker.counters["failed"]) == (6, 6, 0)


def test_an_exception_is_retried_then_dead_lettered_with_its_traceback(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    attempts: list[int] = []

    def flaky_handler(job: Job) -> Any:
        attempts.append(job.attempts)
        raise ValueError(f"boom on attempt {job.attempts}")

    job_id = client.enqueue("flaky", {}, queue=queue, max_attempts=2)
    worker = start(dsn, queue, {"flaky": flaky_handler}, workers, flavor=flavor)
    with running(worker):
        # After attempt 1 the database sets the default backoff (1 s); watch for it.
        retry = wait_for(lambda: job_in(client, job_id, "failed") or (
            job_in(client, job_id, "queued") if client.get_job(job_id).attempts == 1 else None), 15,
            "the first failure")
        assert retry.status == "queued"
        assert retry.available_at - retry.updated_at == timedelta(seconds=1)  # the database's backoff
        assert (retry.last_error or "").startswith("ValueError: boom on attempt 1")
        final = wait_status(client, job_id, "failed")
    assert attempts == [1, 2]
    assert (final.attempts, final.result) == (2, None) and final.finished_at is not None
    err = final.last_error or ""
    assert err.startswith("ValueError: boom on attempt 2\n")
    assert "Traceback (most recent call last)" in err and "in flaky_handler" in err
    assert worker.counters["failed"] == 2


def test_retry_after_zero_retries_at_once(dsn: str, client: Client, queue: str, workers: list[Client],
                                          flavor: str) -> None:
    def impatient(job: Job) -> Any:
        if job.attempts < 3:
            raise RetryAfter(timedelta(0), f"not yet ({job.attempts})")
        return {"ok": job.attempts}

    job_id = client.enqueue("impatient", queue=queue, max_attempts=3)
    with running(start(dsn, queue, {"impatient": impatient}, workers, flavor=flavor)):
        final = wait_status(client, job_id, "done", "failed")
    assert (final.status, final.attempts, final.result) == ("done", 3, {"ok": 3})
    assert (final.last_error or "").startswith("RetryAfter: not yet (2)")


def test_retry_after_still_dead_letters_when_attempts_are_exhausted(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    def always_later(job: Job) -> Any:
        raise RetryAfter(timedelta(0))

    job_id = client.enqueue("later", queue=queue, max_attempts=2)
    with running(start(dsn, queue, {"later": always_later}, workers, flavor=flavor)):
        final = wait_status(client, job_id, "failed")
    assert final.attempts == 2 and (final.last_error or "").startswith("RetryAfter: retry after 0:00:00")


def test_a_handler_raising_snooze_runs_the_job_again_later_without_counting_a_failure(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    """max_attempts 1: two snoozes, then the one real attempt completes; the history has
    the two snoozed attempts, numbered, and the worker counted them as snoozed. (The
    asyncio worker gets the handler as an ``async def``: its runner decides the same.)"""
    seen: list[int] = []

    def not_yet(job: Job) -> Any:
        seen.append(job.attempts)
        if job.attempts < 3:
            raise Snooze(timedelta(milliseconds=200))
        return {"ran": job.attempts}

    job_id = client.enqueue("not_yet", queue=queue, max_attempts=1)
    if flavor == "asyncio":
        from support.aio import as_async
        worker = start(dsn, queue, {"not_yet": as_async(not_yet)}, workers, flavor=flavor)
    else:
        worker = start(dsn, queue, {"not_yet": not_yet}, workers)
    with running(worker):
        final = wait_status(client, job_id, "done", "failed")
    assert (final.status, final.result, final.attempts, final.max_attempts) == ("done", {"ran": 3}, 3, 3)
    assert seen == [1, 2, 3]
    assert [(a.attempt, a.outcome) for a in client.attempts(job_id)] == [(1, "snoozed"), (2, "snoozed"),
                                                                            (3, "done")]
    assert (worker.counters["snoozed"], worker.counters["completed"], worker.counters["failed"]) == (2, 1, 0)


def test_unknown_kind_fails_permanently_with_a_clear_error(dsn: str, client: Client, queue: str,
                                                           workers: list[Client], flavor: str) -> None:
    job_id = client.enqueue("no_such_kind", queue=queue, max_attempts=5)
    with running(start(dsn, queue, {"echo": lambda job: None}, workers, flavor=flavor)):
        final = wait_status(client, job_id, "failed")
    assert final.attempts == 1
    assert (final.last_error or "").startswith("UnknownKind: no handler for kind 'no_such_kind'")
    assert "['echo']" in (final.last_error or "")


def test_permanent_failure_dead_letters_at_once(dsn: str, client: Client, queue: str,
                                                workers: list[Client], flavor: str) -> None:
    def strict(job: Job) -> Any:
        raise PermanentFailure("bad input: missing 'to'")

    job_id = client.enqueue("strict", queue=queue, max_attempts=5)
    with running(start(dsn, queue, {"strict": strict}, workers, flavor=flavor)):
        final = wait_status(client, job_id, "failed")
    assert final.attempts == 1
    err = final.last_error or ""
    assert err.startswith("PermanentFailure: bad input: missing 'to'") and "Traceback" in err


def test_a_result_that_is_not_json_fails_permanently(dsn: str, client: Client, queue: str,
                                                     workers: list[Client], flavor: str) -> None:
    job_id = client.enqueue("odd", queue=queue, max_attempts=5)
    with running(start(dsn, queue, {"odd": lambda job: {"s": {1, 2}}}, workers, flavor=flavor)):
        final = wait_status(client, job_id, "failed")
    assert final.attempts == 1 and (final.last_error or "").startswith("ResultNotJSON:")


# -------------------------------------------------------------- leases ----
def test_heartbeats_keep_a_slow_handlers_lease_alive(dsn: str, client: Client, queue: str,
                                                     workers: list[Client], flavor: str) -> None:
    calls: list[int] = []

    def slow(job: Job) -> Any:
        calls.append(job.attempts)
        time.sleep(3)
        return {"slept": 3, "lease_lost": job.lease_lost}

    job_id = client.enqueue("slow", queue=queue)
    with running(start(dsn, queue, {"slow": slow}, workers, flavor=flavor, lease=timedelta(seconds=1))):
        final = wait_status(client, job_id, "done", "failed", timeout=20)
    assert (final.status, final.attempts, final.reclaim_count, final.last_error) == ("done", 1, 0, None)
    assert final.result == {"slept": 3, "lease_lost": False}
    assert final.heartbeat_at is not None
    assert calls == [1]


def test_a_lost_lease_stops_the_handler_and_its_result_is_never_reported(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    started = threading.Event()
    seen: dict[str, bool] = {}

    def long(job: Job) -> Any:
        started.set()
        until_stopped(job)
        seen.update(lease_lost=job.lease_lost, should_stop=job.should_stop())
        return {"late": "must not be stored"}

    job_id = client.enqueue("long", queue=queue)
    worker = start(dsn, queue, {"long": long, "echo": lambda job: {"echo": True}}, workers, flavor=flavor,
                   lease=timedelta(seconds=1.5))
    with running(worker):
        assert started.wait(15)
        client.cancel(job_id)
        wait_for(lambda: seen, 15, "the handler to notice the lost lease")
        # The flusher reports in order: once a later job is done, the voided result was handled.
        follow = client.enqueue("echo", queue=queue)
        assert wait_status(client, follow, "done").result == {"echo": True}
    assert seen == {"lease_lost": True, "should_stop": True}
    row = client.get_job(job_id)
    assert (row.status, row.result, row.attempts, row.last_error) == ("cancelled", None, 1, None)
    assert (worker.counters["lease_lost"], worker.counters["completed"]) == (1, 1)


@pytest.mark.parametrize("outcome", ["complete", "fail"])
def test_a_refused_outcome_is_never_recorded_and_counts_as_a_lost_lease(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str, outcome: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgfence.worker")
    started, go = threading.Event(), threading.Event()

    def late(job: Job) -> Any:
        started.set()
        go.wait(15)
        if outcome == "fail":
            raise ValueError("late failure")
        return {"late": True}

    job_id = client.enqueue("late", queue=queue)
    # A 30 s lease heartbeats every 10 s: the refusal comes from complete_many/fail_many.
    worker = start(dsn, queue, {"late": late}, workers, flavor=flavor, lease=timedelta(seconds=30))
    with running(worker):
        assert started.wait(15)
        client.cancel(job_id)
        go.set()
        wait_for(lambda: worker.counters["lease_lost"] == 1, 15, "the refused outcome")
    row = client.get_job(job_id)
    assert (row.status, row.result, row.last_error, row.attempts) == ("cancelled", None, None, 1)
    assert (worker.counters["completed"], worker.counters["failed"]) == (0, 0)
    # (regression: a refused fail used to be logged as "faile refused")
    assert f"job {job_id} kind=late attempt=1: lease lost, {outcome} refused: the job was cancelled" in caplog.text


def test_a_prefetched_job_that_loses_its_lease_does_not_stop_the_handler_threads(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Regression: a handler thread that dequeued a job dropped by the heartbeat loop
    # (lease lost before it started) used to put it back and exit, until no thread was left.
    started, go = threading.Event(), threading.Event()

    def block(job: Job) -> Any:
        started.set()
        go.wait(15)
        return {"blocked": True}

    first = client.enqueue("block", queue=queue)
    prefetched = client.enqueue("echo", queue=queue)
    worker = start(dsn, queue, {"block": block, "echo": lambda job: {"echo": True}}, workers, flavor=flavor,
                   concurrency=1, prefetch=1, lease=timedelta(seconds=1))
    with running(worker):
        assert started.wait(15)
        wait_status(client, prefetched, "processing")  # claimed, waiting for the busy thread
        client.cancel(prefetched)
        wait_for(lambda: worker.counters["lease_lost"] == 1, 15, "the heartbeat to find the lost lease")
        wait_for(lambda: prefetched not in worker._ledger.held, 5, "the worker to drop the prefetched job")
        go.set()
        assert wait_status(client, first, "done").result == {"blocked": True}
        later = client.enqueue("echo", queue=queue)
        row = wait_status(client, later, "done", "failed", timeout=5)
        assert (row.status, row.result) == ("done", {"echo": True})
    assert client.get_job(prefetched).status == "cancelled"


def test_a_revoked_prefetched_attempt_never_runs_when_the_job_is_claimed_again(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    started, go = threading.Event(), threading.Event()
    runs: list[tuple[int, int]] = []

    def block(job: Job) -> Any:
        started.set()
        go.wait(15)
        return {"blocked": True}

    def record(job: Job) -> Any:
        runs.append((job.id, job.attempts))
        return {"attempt": job.attempts}

    first = client.enqueue("block", queue=queue)
    prefetched = client.enqueue("record", queue=queue)
    worker = start(dsn, queue, {"block": block, "record": record}, workers, flavor=flavor,
                   concurrency=1, prefetch=1, lease=timedelta(seconds=1))
    with running(worker):
        assert started.wait(15)
        wait_status(client, prefetched, "processing")
        client.cancel(prefetched)      # attempt 1 is revoked before it started ...
        wait_for(lambda: worker.counters["lease_lost"] == 1, 15, "the heartbeat to find the lost lease")
        client.requeue(prefetched)     # ... and the same worker claims attempt 2
        wait_for(lambda: client.get_job(prefetched).attempts == 2, 15, "the job to be claimed again")
        go.set()
        final = wait_status(client, prefetched, "done", "failed", timeout=30)
    assert client.get_job(first).status == "done"
    assert runs == [(prefetched, 2)], "the handler ran the revoked attempt 1"
    assert (final.status, final.attempts, final.reclaim_count, final.result) == ("done", 2, 0, {"attempt": 2})


# ------------------------------------------------------------ shutdown ----
def test_stop_lets_a_handler_that_winds_down_within_the_grace_complete(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    started = threading.Event()

    def polite(job: Job) -> Any:
        started.set()
        until_stopped(job)
        return {"stopped": job.should_stop(), "lease_lost": job.lease_lost}

    job_id = client.enqueue("polite", queue=queue)
    worker = start(dsn, queue, {"polite": polite}, workers, flavor=flavor, shutdown_grace=10)
    with running(worker) as thread:
        assert started.wait(15)
        thread.stop()
    row = client.get_job(job_id)
    assert (row.status, row.result, row.attempts, row.last_error) == \
        ("done", {"stopped": True, "lease_lost": False}, 1, None)
    assert (worker.counters["completed"], worker.counters["released"]) == (1, 0)


def test_stop_releases_an_overrunning_job_and_returns_prefetched_ones_uncounted(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def stubborn(job: Job) -> Any:
        ran.append(job.id)
        started.set()
        release.wait(30)  # ignores job.should_stop(): overruns the shutdown grace
        return {"late": True}

    rows = client.enqueue_many(["stubborn"] * 3, queue=queue)
    ids = [r.id for r in rows]
    worker = start(dsn, queue, {"stubborn": stubborn}, workers, flavor=flavor, concurrency=1, prefetch=2,
                   shutdown_grace=0.3)
    with running(worker) as thread:
        assert started.wait(15)
        wait_for(lambda: all(client.get_job(i).status == "processing" for i in ids), 15,
                 "all three jobs to be claimed")
        thread.stop()
    try:
        assert ran == [ids[0]]
        first, *rest = [client.get_job(i) for i in ids]
        assert (first.status, first.attempts, first.last_error, first.reclaim_count, first.reserved_by) == \
            ("queued", 1, RELEASED, 0, None)
        assert [(r.status, r.attempts, r.last_error) for r in rest] == [("queued", 0, None)] * 2
        assert worker.counters["released"] == 3
    finally:
        release.set()
    # The overrunning handler returns after the worker stopped: its result goes nowhere.
    time.sleep(0.3)
    assert (client.get_job(ids[0]).status, client.get_job(ids[0]).result) == ("queued", None)


def test_a_handler_returning_just_after_its_job_was_given_back_does_not_hang_the_shutdown(
        dsn: str, client: Client, queue: str, workers: list[Client], caplog: pytest.LogCaptureFixture) -> None:
    # The overrunning handler returns right after the shutdown released its job, before
    # the shutdown's last step waits for reported outcomes: its void result must not
    # leave the worker waiting for a job it no longer holds.
    started, returned, release_done = threading.Event(), threading.Event(), threading.Event()

    def stubborn(job: Job) -> Any:
        started.set()
        release_done.wait(30)
        returned.set()
        return {"late": True}

    job_id = client.enqueue("stubborn", queue=queue)
    # (threads only: it hooks the threaded worker's _release; the asyncio worker cancels
    # what still runs after the give-back instead of waiting for its void result)
    worker = start(dsn, queue, {"stubborn": stubborn}, workers, concurrency=1, shutdown_grace=0.2)
    real_release = worker._release

    def release_then_let_the_handler_return(jobs: list[Job], *, started: bool) -> None:
        real_release(jobs, started=started)
        if started and jobs:
            release_done.set()
            assert returned.wait(10)
            time.sleep(0.3)  # the handler thread hands in its (void) outcome before the last step
    worker._release = release_then_let_the_handler_return  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="pgfence.worker")
    with running(worker) as thread:
        assert started.wait(15)
        thread.stop(timeout=15)
    assert (client.get_job(job_id).status, client.get_job(job_id).result) == ("queued", None)
    assert worker.counters["released"] == 1 and worker.counters["completed"] == 0
    # The void result is logged as what it is: given back by the shutdown, not a lost lease.
    messages = [r.getMessage() for r in caplog.records if f"job {job_id} " in r.getMessage()]
    assert any("returned after the shutdown gave it back" in m for m in messages), messages
    assert not any("lease lost" in m for m in messages), messages


def test_a_stale_attempt_returning_does_not_hide_the_new_attempt_of_its_job_from_the_shutdown(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Attempt 1 keeps running after an operator cancelled and requeued the job; the same
    # worker claims attempt 2. When attempt 1 returns, the worker must still know that
    # attempt 2 runs, so that the shutdown gives it back.
    gates = {1: threading.Event(), 2: threading.Event()}
    started = {1: threading.Event(), 2: threading.Event()}

    def stubborn(job: Job) -> Any:
        started[job.attempts].set()
        gates[job.attempts].wait(30)
        return {"attempt": job.attempts}

    job_id = client.enqueue("stubborn", queue=queue)
    worker = start(dsn, queue, {"stubborn": stubborn}, workers, flavor=flavor, concurrency=2, shutdown_grace=0.3)
    try:
        with running(worker) as thread:
            assert started[1].wait(15)
            client.cancel(job_id)
            client.requeue(job_id)
            assert started[2].wait(15)
            gates[1].set()  # the stale attempt returns; its result is void
            wait_for(lambda: worker.counters["lease_lost"] or None, 15, "the stale outcome to be refused")
            thread.stop(timeout=15)
        row = client.get_job(job_id)
        assert (row.status, row.attempts, row.last_error, row.result) == ("queued", 2, RELEASED, None)
    finally:
        gates[2].set()


# ---------------------------------------------------------- wake-ups ----
def test_notify_wakes_an_idle_worker_long_before_its_poll_interval(
        dsn: str, conn: psycopg.Connection[Any], client: Client, queue: str, workers: list[Client],
        flavor: str) -> None:
    app = unique_name("pgfence-test-notify")
    worker = start(dsn, queue, {"echo": lambda job: {"ok": True}}, workers, flavor=flavor, app=app, poll_interval=10.0)
    with running(worker):
        wait_for(lambda: any(q.strip().upper().startswith("LISTEN") for _, q in backends(conn, app)), 15,
                 "the worker's LISTEN connection")
        time.sleep(0.5)  # let the claims at startup finish: the worker now waits up to 10 s
        t0 = time.monotonic()
        job_id = client.enqueue("echo", queue=queue)
        wait_status(client, job_id, "done", timeout=9)
        elapsed = time.monotonic() - t0
    assert elapsed < 5, f"picked up after {elapsed:.1f}s: the NOTIFY did not wake the worker"


def test_without_notifications_the_poll_still_finds_the_job(dsn: str, client: Client, queue: str,
                                                             workers: list[Client], flavor: str) -> None:
    worker = start(dsn, queue, {"echo": lambda job: {"ok": True}}, workers, flavor=flavor, listen=False,
                   poll_interval=1.0)
    with running(worker):
        for _ in range(2):
            t0 = time.monotonic()
            job_id = client.enqueue("echo", queue=queue)
            wait_status(client, job_id, "done", timeout=10)
            assert time.monotonic() - t0 < 5


def test_the_worker_reconnects_after_its_backends_are_terminated(
        dsn: str, conn: psycopg.Connection[Any], client: Client, queue: str, workers: list[Client],
        flavor: str) -> None:
    app = unique_name("pgfence-test-w1")
    worker = start(dsn, queue, {"echo": lambda job: {"n": job.payload["n"]}}, workers, flavor=flavor, app=app,
                   lease=timedelta(seconds=3))
    with running(worker) as wt:
        first = client.enqueue("echo", {"n": 1}, queue=queue)
        assert wait_status(client, first, "done").result == {"n": 1}
        wait_for(lambda: any(q.strip().upper().startswith("LISTEN") for _, q in backends(conn, app)), 15,
                 "the worker's LISTEN connection")
        killed = backends(conn, app)
        assert terminate_backends(conn, app) >= 2  # the pool's and the listener's
        wait_for(lambda: not ({p for p, _ in killed} & {p for p, _ in backends(conn, app)}), 15,
                 "the terminated backends to exit")
        for n in (2, 3):
            job_id = client.enqueue("echo", {"n": n}, queue=queue)
            row = wait_status(client, job_id, "done", "failed", timeout=30)
            assert (row.status, row.result, row.attempts) == ("done", {"n": n}, 1)
        assert wt.thread.is_alive()
        new = {p for p, _ in backends(conn, app)}
        assert new and not (new & {p for p, _ in killed})


# ------------------------------------------------- worker processes (CLI) ----
def test_a_sigkilled_worker_process_is_recovered_by_its_lease(
        dsn: str, client: Client, queue: str, tmp_path: Path, flavor: str) -> None:
    marker, started = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold", {"marker": str(marker), "started": str(started)}, queue=queue)
    with worker_process(dsn, tmp_path / "a.log", "--queue", queue, "--lease", "1", "--worker-id", "A",
                        *cli_flavor(flavor)) as a:
        wait_for(lambda: started.exists() and started.read_text().strip() == str(a.pid), 20,
                 "worker A's handler to start")
        row = client.get_job(job_id)
        assert (row.status, row.reserved_by, row.attempts) == ("processing", "A", 1)
        a.signal(signal.SIGKILL)
        assert a.wait(10) == -signal.SIGKILL
    reclaimed = wait_status(client, job_id, "queued", "done", "failed", timeout=20)
    assert (reclaimed.status, reclaimed.reclaim_count, reclaimed.attempts, reclaimed.last_error) == \
        ("queued", 1, 1, LEASE_EXPIRED)
    marker.unlink()
    with worker_process(dsn, tmp_path / "b.log", "--queue", queue, "--lease", "5", "--worker-id", "B",
                        *cli_flavor(flavor)) as b:
        final = wait_status(client, job_id, "done", "failed", timeout=20)
        b.signal(signal.SIGTERM)
        assert b.wait(20) == 0
        log_b = b.log()
    assert (final.status, final.attempts, final.reclaim_count, final.reserved_by) == ("done", 2, 1, "B")
    assert final.result == {"pid": b.pid, "attempt": 2}
    assert log_b.count(f"completed job {job_id} ") == 1


def test_a_frozen_worker_is_fenced_after_its_lease_is_reclaimed(
        dsn: str, client: Client, queue: str, tmp_path: Path, flavor: str) -> None:
    marker, started = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold", {"marker": str(marker), "started": str(started)}, queue=queue)
    with worker_process(dsn, tmp_path / "a.log", "--queue", queue, "--lease", "1", "--worker-id", "A",
                        *cli_flavor(flavor)) as a:
        wait_for(lambda: started.exists() and started.read_text().strip() == str(a.pid), 20,
                 "worker A's handler to start")
        a.signal(signal.SIGSTOP)
        try:
            reclaimed = wait_status(client, job_id, "queued", "done", "failed", timeout=20)
            assert (reclaimed.status, reclaimed.reclaim_count) == ("queued", 1)
            marker.unlink()  # A's handler would finish now, if it were running
            with worker_process(dsn, tmp_path / "b.log", "--queue", queue, "--worker-id", "B",
                                *cli_flavor(flavor)) as b:
                done = wait_status(client, job_id, "done", "failed", timeout=20)
                assert (done.status, done.result, done.reserved_by) == ("done", {"pid": b.pid, "attempt": 2}, "B")
                b.signal(signal.SIGTERM)
                assert b.wait(20) == 0
        finally:
            a.signal(signal.SIGCONT)
        # A wakes up, its handler returns, and its heartbeat or complete is refused.
        wait_for(lambda: "lease lost" in a.log(), 20, "worker A to log the lost lease")
        a.signal(signal.SIGTERM)
        assert a.wait(20) == 0
        log_a = a.log()
    final = client.get_job(job_id)
    assert (final.status, final.result, final.attempts, final.reclaim_count, final.reserved_by) == \
        ("done", {"pid": b.pid, "attempt": 2}, 2, 1, "B")
    assert f"completed job {job_id} " not in log_a
    assert f"job {job_id} kind=hold attempt=1: lease lost" in log_a


def test_sigterm_gives_an_overrunning_job_back(dsn: str, client: Client, queue: str, tmp_path: Path,
                                               flavor: str) -> None:
    marker, started = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold_stubborn", {"marker": str(marker), "started": str(started)}, queue=queue)
    try:
        with worker_process(dsn, tmp_path / "a.log", "--queue", queue, "--shutdown-grace", "0.5",
                            "--worker-id", "A", *cli_flavor(flavor)) as a:
            wait_for(lambda: started.exists(), 20, "the handler to start")
            a.signal(signal.SIGTERM)
            assert a.wait(30) == 0
            log_a = a.log()
    finally:
        marker.unlink()
    row = client.get_job(job_id)
    assert (row.status, row.attempts, row.last_error, row.reserved_by, row.result) == \
        ("queued", 1, RELEASED, None, None)
    assert "SIGTERM received" in log_a
    assert f"released job {job_id} kind=hold_stubborn attempt=1 (started) -> queued" in log_a


def test_a_second_sigterm_gives_running_jobs_back_at_once(dsn: str, client: Client, queue: str,
                                                          tmp_path: Path, flavor: str) -> None:
    # Regression: the second signal used to log "giving running jobs back now" and
    # then still wait out the grace deadline computed at the first.
    marker, started = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold_stubborn", {"marker": str(marker), "started": str(started)}, queue=queue)
    try:
        with worker_process(dsn, tmp_path / "a.log", "--queue", queue, "--shutdown-grace", "8",
                            "--worker-id", "A", *cli_flavor(flavor)) as a:
            wait_for(lambda: started.exists(), 20, "the handler to start")
            a.signal(signal.SIGTERM)
            wait_for(lambda: "stopping" in a.log(), 10, "the shutdown to begin")
            a.signal(signal.SIGTERM)
            wait_for(lambda: "second signal" in a.log(), 10, "the second signal to be seen")
            assert a.wait(4) == 0  # well inside the 8 s grace: the second signal skips it
    finally:
        marker.unlink()
    row = client.get_job(job_id)
    assert (row.status, row.attempts, row.last_error) == ("queued", 1, RELEASED)


def test_a_handler_that_raises_interrupted_on_stop_gives_its_job_back(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    started = threading.Event()

    def interruptible(job: Job) -> Any:
        started.set()
        until_stopped(job)
        raise Interrupted()

    job_id = client.enqueue("interruptible", queue=queue)
    worker = start(dsn, queue, {"interruptible": interruptible}, workers, flavor=flavor, shutdown_grace=10)
    with running(worker) as thread:
        assert started.wait(15)
        thread.stop()
    row = client.get_job(job_id)
    assert (row.status, row.result, row.attempts, row.last_error) == \
        ("queued", None, 1, "released by worker before completion")
    assert (worker.counters["completed"], worker.counters["released"]) == (0, 1)
    assert [a.outcome for a in client.attempts(job_id)] == ["released"]


def test_a_worker_claims_from_a_stored_set_of_queues_and_wakes_on_its_queues(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    """Worker(queue_set=...): claims name the set (its queues only), and the listener
    wakes on the set's queues (a long poll_interval: the job starts well before a poll)."""
    others = [f"{queue}-{i}" for i in range(40)]
    name = f"{queue}-set"
    client.define_queue_set(name, [queue, *others])
    seen: list[tuple[str, float]] = []

    def record(job: Job) -> None:
        seen.append((job.queue, time.monotonic()))

    outside = client.enqueue("record", {}, queue=f"{queue}-outside")
    try:
        worker = start(dsn, queue, {"record": record}, workers, flavor=flavor, queue_set=name, poll_interval=30.0)
        with running(worker):
            time.sleep(0.5)  # (listening by now)
            ids = [client.enqueue("record", {}, queue=q) for q in (others[7], queue)]
            # (the claimer's idle wait is 15-30 s: only a wake-up gets them done sooner)
            done = [wait_status(client, i, "done", timeout=12) for i in ids]
        assert {d.queue for d in done} == {others[7], queue}
        assert sorted(q for q, _ in seen) == sorted([others[7], queue])
        assert client.get_job(outside).status == "queued"  # not in the set
    finally:
        client.drop_queue_set(name)
        for left in client.claim("cleanup", [f"{queue}-outside"]):
            client.complete(left.id, left.attempt_token)


def test_a_worker_on_a_stored_set_wakes_on_the_queues_the_set_is_defined_again_with(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    """define_queue_set notifies the set's own tag: the listener of a running worker reads
    the set's queues again, so a queue added to the set, or the queues of a set defined
    again over others, wake it (a long poll_interval: only a wake-up gets the job done
    within the wait; before, the listener kept the tags it read when it connected)."""
    name, added, other = f"{queue}-set", f"{queue}-added", f"{queue}-other"
    client.define_queue_set(name, [queue])
    try:
        worker = start(dsn, queue, {"noop": lambda job: None}, workers, flavor=flavor, queue_set=name,
                       poll_interval=30.0)
        with running(worker):
            time.sleep(0.5)  # (listening by now)
            client.define_queue_set(name, [queue, added])
            time.sleep(0.5)  # (the listener has read the set again)
            wait_status(client, client.enqueue("noop", {}, queue=added), "done", timeout=12)
            client.define_queue_set(name, [other])
            time.sleep(0.5)
            wait_status(client, client.enqueue("noop", {}, queue=other), "done", timeout=12)
    finally:
        client.drop_queue_set(name)


def test_a_worker_takes_queues_or_a_queue_set_not_both(client: Client) -> None:
    with pytest.raises(ValueError, match="queue_set"):
        Worker(client, {}, queues=["a"], queue_set="s", limits=Limits())
