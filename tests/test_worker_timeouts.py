"""Run timeouts and unique_for through the Python client and worker.

A handler that outlives its job's run timeout sees ``job.should_stop()`` turn true
soon after the deadline (the heartbeats ask the database just after the capped lease
ends, not a third of the lease later), and its completion is refused: the attempt is
recorded ``timed_out``. The worker tests run against both workers (``flavor``: the
threaded one and the asyncio one, whose heartbeat task decides with the same
``pgfence.heartbeats.Rounds``).
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from support.processes import run_cli
from support.workers import running, start, wait_for, wait_status
from pgfence import Client, Job, LeaseLost


def test_a_handler_outliving_its_timeout_sees_should_stop_and_is_not_completed(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    seen: dict[str, Any] = {}

    def long(job: Job) -> Any:
        t0 = time.monotonic()
        while not job.should_stop() and time.monotonic() - t0 < 20:
            time.sleep(0.02)
        seen.update(after=time.monotonic() - t0, lease_lost=job.lease_lost)
        return {"late": "must not be stored"}

    job_id = client.enqueue("long", queue=queue, timeout=timedelta(seconds=1), max_attempts=1)
    # A 30 s lease: the regular heartbeat comes every 10 s; should_stop must not wait for it.
    worker = start(dsn, queue, {"long": long}, workers, lease=timedelta(seconds=30), flavor=flavor)
    with running(worker):
        wait_for(lambda: seen, 25, "the handler to see should_stop")
        final = wait_status(client, job_id, "failed", "done", timeout=20)
    assert seen["lease_lost"] is True
    assert 0.9 <= seen["after"] < 5, seen  # just after the 1 s deadline, long before 10 s
    assert (final.status, final.result, final.attempts) == ("failed", None, 1)
    assert final.last_error is not None and final.last_error.startswith("timed out after")
    [a] = client.attempts(job_id)
    assert a.outcome == "timed_out"
    assert worker.counters["lease_lost"] == 1 and worker.counters["completed"] == 0


def test_a_handler_ignoring_should_stop_has_its_late_completion_refused(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    done = threading.Event()

    def stubborn(job: Job) -> Any:
        time.sleep(1.5)  # past its 0.5 s timeout, whatever should_stop says
        done.set()
        return {"late": True}

    job_id = client.enqueue("stubborn", queue=queue, timeout=timedelta(milliseconds=500),
                            recovery_policy="manual")
    worker = start(dsn, queue, {"stubborn": stubborn}, workers, lease=timedelta(seconds=30), flavor=flavor)
    with running(worker):
        assert done.wait(15)
        final = wait_status(client, job_id, "manual_review", "done", timeout=15)
        time.sleep(0.3)  # (the late result reaches the database, and is refused)
    assert (final.status, final.result) == ("manual_review", None)
    assert [a.outcome for a in client.attempts(job_id)] == ["timed_out"]
    assert client.get_job(job_id).status == "manual_review"


def test_the_client_refuses_calls_of_a_timed_out_attempt_with_lease_lost(client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue, timeout=timedelta(milliseconds=200))
    [job] = client.claim("w", [queue], lease=timedelta(seconds=30))
    assert job.lease_expires_at == client.heartbeat(job.id, job.attempt_token, lease=timedelta(hours=1))
    time.sleep(0.3)
    with pytest.raises(LeaseLost) as err:
        client.complete(job.id, job.attempt_token, {"late": True})
    assert "timed out after" in str(err.value.detail)
    assert client.get_job(job_id).status in ("processing", "queued")  # (the sweeper ends it)


def test_set_queue_timeout_and_queue_timeouts(client: Client, queue: str) -> None:
    client.set_queue_timeout(queue, timedelta(minutes=2))
    try:
        assert client.queue_timeouts()[queue] == timedelta(minutes=2)
        job_id = client.enqueue("k", queue=queue)
        own = client.enqueue_many(["k"], queue=queue, timeout=timedelta(seconds=5))[0].id
        [job] = client.claim("w", [queue], lease=timedelta(hours=1))
        assert job.id == job_id
        assert client.heartbeat(job.id, job.attempt_token, lease=timedelta(hours=1)) == job.lease_expires_at
        [job2] = client.claim("w", [queue], lease=timedelta(hours=1))
        assert job2.id == own
        client.complete(job.id, job.attempt_token)
        client.complete(job2.id, job2.attempt_token)
    finally:
        client.set_queue_timeout(queue, None)
    assert queue not in client.queue_timeouts()


def test_unique_for_zero_frees_the_key_once_done(client: Client, queue: str) -> None:
    first = client.enqueue("k", queue=queue, idempotency_key="nightly", unique_for=timedelta(0))
    assert client.enqueue("k", queue=queue, idempotency_key="nightly", unique_for=timedelta(0)) == first
    [job] = client.claim("w", [queue])
    client.complete(job.id, job.attempt_token)
    second = client.enqueue("k", queue=queue, idempotency_key="nightly", unique_for=timedelta(0))
    assert second != first
    [again] = client.enqueue_many(["k"], queue=queue, idempotency_keys=["nightly"], unique_for=timedelta(0))
    assert (again.id, again.created) == (second, False)


def test_the_cli_sets_a_queues_timeout_and_enqueues_with_timeout_and_unique_for(
        dsn: str, client: Client, queue: str) -> None:
    r = run_cli(dsn, "queue", "timeout", queue, "300")
    assert r.returncode == 0 and r.stdout == f"queue {queue}: run timeout 300s for jobs enqueued from now on\n", r.stderr
    try:
        assert client.queue_timeouts()[queue] == timedelta(seconds=300)
        job_id = int(run_cli(dsn, "enqueue", "k", "--queue", queue, "--timeout", "2.5",
                             "--idempotency-key", "x", "--unique-for", "0").stdout)
        [job] = client.claim("w", [queue], lease=timedelta(hours=1))
        assert job.id == job_id
        assert client.heartbeat(job.id, job.attempt_token, lease=timedelta(hours=1)) == job.lease_expires_at
        client.complete(job.id, job.attempt_token)
        assert int(run_cli(dsn, "enqueue", "k", "--queue", queue, "--idempotency-key", "x").stdout) != job_id
        for args, fragment in ((("enqueue", "k", "--queue", queue, "--timeout", "0"), "more than 0"),
                               (("enqueue", "k", "--queue", queue, "--unique-for", "-1"), "0 or more"),
                               (("queue", "timeout", queue), "needs SECONDS")):
            r = run_cli(dsn, *args)
            assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    finally:
        assert run_cli(dsn, "queue", "timeout", queue, "none").stdout == f"queue {queue}: no default run timeout\n"
    assert queue not in client.queue_timeouts()
