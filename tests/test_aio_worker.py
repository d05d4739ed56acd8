"""The asyncio worker (pgfence.aio.AsyncWorker) and client end to end, against the real database.

Each test runs its own event loop (``asyncio.run``) in the test's thread: the worker is a
task of it, and the test waits with the worker's loop running (``until``, never a
blocking sleep). Checks go through a second AsyncClient. The same behaviour of the
threaded worker is tested in tests/test_worker*.py; tests/test_worker_robustness.py and
tests/test_client.py run parts of theirs against both flavours.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from collections.abc import Awaitable, Coroutine
from datetime import timedelta
from typing import Any, Callable, Optional

import psycopg
import pytest

from pgfence import (Client, Interrupted, Job, JobNotFound, JobRecord, LeaseLost, PermanentFailure, RetryAfter,
                     SchemaMismatch)
from pgfence.aio import AsyncClient, AsyncWorker

TIMEOUT = 20.0


async def until(predicate: Callable[[], Awaitable[Any]], what: str, timeout: float = TIMEOUT) -> Any:
    """Await ``predicate()`` until it is truthy (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def status_of(client: AsyncClient, job_id: int, *statuses: str) -> Optional[JobRecord]:
    row = await client.get_job(job_id)
    return row if row.status in statuses else None


async def wait_status(client: AsyncClient, job_id: int, *statuses: str) -> JobRecord:
    row: JobRecord = await until(lambda: status_of(client, job_id, *statuses), f"job {job_id} {statuses}")
    return row


class Running:
    """An AsyncWorker run as a task of the test's loop: ``async with Running(...) as r``;
    leaving stops it (gracefully) and checks that ``run()`` returned without raising."""

    def __init__(self, dsn: str, queue: str, handlers: dict[str, Any], **options: Any) -> None:
        self.dsn, self.queue, self.handlers = dsn, queue, handlers
        options.setdefault("poll_interval", 0.2)
        options.setdefault("run_sweeper", False)
        self.options = options

    async def __aenter__(self) -> "Running":
        self.client = await AsyncClient.connect(self.dsn, max_size=8)
        self.worker = AsyncWorker(self.client, self.handlers, queues=[self.queue], **self.options)
        self.task = asyncio.ensure_future(self.worker.run(handle_signals=False))
        return self

    async def stop(self, timeout: float = TIMEOUT) -> None:
        self.worker.stop()
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if not self.task.done():
                await self.stop()
            if exc[0] is None:
                self.task.result()
        finally:
            await self.client.close()


def run(dsn: str, body: Callable[[AsyncClient], Coroutine[Any, Any, None]]) -> None:
    """Run ``body(checker)`` on a fresh event loop, with an AsyncClient for the checks."""
    async def main() -> None:
        checker = await AsyncClient.connect(dsn, max_size=2)
        try:
            await body(checker)
        finally:
            await checker.close()
    asyncio.run(main())


# ------------------------------------------------------------ the client ----
def test_the_async_client_has_the_sync_clients_methods_with_the_same_signatures() -> None:
    public = [n for n, f in inspect.getmembers(Client, inspect.isfunction) if not n.startswith("_")] + ["connect"]
    assert len(public) > 35
    for name in public:
        ours = getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(ours), name
        theirs = str(inspect.signature(getattr(Client, name)))
        assert str(inspect.signature(ours)).replace("AsyncClient", "Client") == theirs, name


def test_an_enqueue_joins_the_callers_async_transaction(dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            in_tx = AsyncClient(conn)
            rolled_back = await in_tx.enqueue("email", {"n": 1}, queue=queue)
            await conn.rollback()
            committed = await in_tx.enqueue("email", {"n": 2}, queue=queue)
            assert (await in_tx.get_job(committed)).status == "queued"  # seen inside the transaction
            with pytest.raises(JobNotFound):
                await checker.get_job(committed)  # not outside it, before the commit
            await conn.commit()
        with pytest.raises(JobNotFound):
            await checker.get_job(rolled_back)
        assert (await checker.get_job(committed)).payload == {"n": 2}
    run(dsn, body)


def test_a_refused_call_in_the_callers_transaction_raises_lease_lost_and_records_no_rejection(
        dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        job_id = await checker.enqueue("k", queue=queue)
        [job] = await checker.claim("test-aio", [queue])
        await checker.cancel(job_id)
        with pytest.raises(LeaseLost) as err:
            await checker.complete(job_id, job.attempt_token, {"late": True})
        assert err.value.sqlstate == "PF001"
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            with pytest.raises(LeaseLost):
                await AsyncClient(conn, check_schema=False).heartbeat(job_id, job.attempt_token)
            await conn.rollback()
        # The pool client's refusal is recorded; the one in the caller's transaction is the caller's.
        assert [r.operation for r in await checker.rejections(job_id)] == ["complete"]
    run(dsn, body)


# ------------------------------------------------------------ the worker ----
def test_an_async_worker_drains_a_queue_with_prefetch(dsn: str, queue: str) -> None:
    seen: list[int] = []

    async def double(job: Job) -> Any:
        seen.append(job.id)
        await asyncio.sleep(0)
        return {"n2": job.payload["n"] * 2}

    async def body(checker: AsyncClient) -> None:
        rows = await checker.enqueue_many(["double"] * 300, [{"n": i} for i in range(300)], queue=queue)
        async with Running(dsn, queue, {"double": double}, concurrency=4, prefetch=50) as r:
            await wait_status(checker, rows[-1].id, "done")
            for row in rows:
                await wait_status(checker, row.id, "done")
        assert [(await checker.get_job(row.id)).result for row in rows[::37]] == \
            [{"n2": 2 * i} for i in range(0, 300, 37)]
        assert sorted(seen) == sorted(row.id for row in rows)
        assert (r.worker.counters["claimed"], r.worker.counters["completed"]) == (300, 300)
    run(dsn, body)


def test_a_sync_handler_runs_on_the_workers_threads(dsn: str, queue: str) -> None:
    threads: list[str] = []

    def blocking(job: Job) -> Any:
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # blocks its thread, not the loop
        return {"n": job.payload["n"]}

    async def body(checker: AsyncClient) -> None:
        rows = await checker.enqueue_many(["blocking"] * 6, [{"n": i} for i in range(6)], queue=queue)
        async with Running(dsn, queue, {"blocking": blocking}, concurrency=3):
            done = [await wait_status(checker, row.id, "done") for row in rows]
        assert [d.result for d in done] == [{"n": i} for i in range(6)]
        assert threads and all(name.startswith("pgfence-handler") for name in threads), threads
    run(dsn, body)


def test_permanent_failure_retry_after_and_exceptions_end_attempts_as_the_database_decides(
        dsn: str, queue: str) -> None:
    async def permanent(job: Job) -> Any:
        raise PermanentFailure("do not retry")

    async def later(job: Job) -> Any:
        raise RetryAfter(timedelta(hours=1), "come back later")

    async def broken(job: Job) -> Any:
        raise ValueError("broken handler")

    async def body(checker: AsyncClient) -> None:
        p = await checker.enqueue("permanent", queue=queue, max_attempts=5)
        r = await checker.enqueue("later", queue=queue, max_attempts=5)
        b = await checker.enqueue("broken", queue=queue, max_attempts=1)
        u = await checker.enqueue("unknown", queue=queue, max_attempts=5)
        async with Running(dsn, queue, {"permanent": permanent, "later": later, "broken": broken}):
            prow = await wait_status(checker, p, "failed")
            brow = await wait_status(checker, b, "failed")
            urow = await wait_status(checker, u, "failed")
            rrow = await until(lambda: _retried(checker, r), "the RetryAfter job to be queued again")
        assert (prow.attempts, brow.attempts, urow.attempts) == (1, 1, 1)
        assert prow.last_error and "PermanentFailure: do not retry" in prow.last_error
        assert brow.last_error and "ValueError: broken handler" in brow.last_error
        assert urow.last_error and urow.last_error.startswith("UnknownKind")
        assert rrow.last_error and "RetryAfter: come back later" in rrow.last_error
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
        assert timedelta(minutes=59) < rrow.available_at - now <= timedelta(hours=1)
    run(dsn, body)


async def _retried(checker: AsyncClient, job_id: int) -> Optional[JobRecord]:
    row = await checker.get_job(job_id)
    return row if row.status == "queued" and row.attempts == 1 else None


def test_should_stop_and_interrupted_give_a_running_job_back_at_shutdown(dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def patient(job: Job) -> Any:
            running.set()
            while not job.should_stop():
                await asyncio.sleep(0.01)
            raise Interrupted()

        job_id = await checker.enqueue("patient", queue=queue)
        async with Running(dsn, queue, {"patient": patient}, shutdown_grace=10) as r:
            await asyncio.wait_for(running.wait(), TIMEOUT)
            await r.stop()
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts, row.result) == ("queued", 1, None)
        assert r.worker.counters["released"] == 1
    run(dsn, body)


def test_a_graceful_shutdown_returns_unstarted_jobs_uncounted_and_lets_the_running_one_finish(
        dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def winds_down(job: Job) -> Any:
            running.set()
            while not job.should_stop():
                await asyncio.sleep(0.01)
            return {"finished": job.id}  # returning completes the job

        rows = await checker.enqueue_many(["winds_down"] * 6, queue=queue)
        async with Running(dsn, queue, {"winds_down": winds_down}, concurrency=1, prefetch=5,
                           shutdown_grace=10) as r:
            await asyncio.wait_for(running.wait(), TIMEOUT)
            await until(lambda: _count(checker, queue, "processing", 6), "the prefetched claim")
            await r.stop()
        statuses = [await checker.get_job(row.id) for row in rows]
        done = [s for s in statuses if s.status == "done"]
        assert len(done) == 1 and done[0].result == {"finished": done[0].id}
        assert sorted((s.status, s.attempts) for s in statuses if s is not done[0]) == [("queued", 0)] * 5
        assert (r.worker.counters["completed"], r.worker.counters["released"]) == (1, 5)
    run(dsn, body)


async def _count(checker: AsyncClient, queue: str, status: str, n: int) -> bool:
    return sum(s.jobs for s in await checker.stats() if s.queue == queue and s.status == status) == n


def test_a_zombie_whose_lease_was_reclaimed_is_fenced_and_its_result_not_recorded(
        dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        release = asyncio.Event()
        started = asyncio.Event()

        async def zombie(job: Job) -> Any:
            started.set()
            await release.wait()  # ignores should_stop(): finishes late
            return {"by": "zombie"}

        job_id = await checker.enqueue("zombie", queue=queue)
        # (concurrency 1: the zombie holds the worker's only slot, so the worker does not
        # claim the job again itself once its lease has expired)
        async with Running(dsn, queue, {"zombie": zombie}, lease=timedelta(seconds=1), concurrency=1) as r:
            await asyncio.wait_for(started.wait(), TIMEOUT)

            async def unreachable(*args: Any, **kwargs: Any) -> Any:
                raise psycopg.OperationalError("heartbeats cut off (test)")
            r.client.heartbeat_many = unreachable  # type: ignore[method-assign]
            # The lease expires; another worker's claim reclaims the job and completes it.
            other: list[Job] = await until(lambda: checker.claim("test-other", [queue], lease=timedelta(seconds=30)),
                                           "the expired lease to be claimed by another worker")
            assert other[0].id == job_id and other[0].attempts == 2
            await checker.complete(job_id, other[0].attempt_token, {"by": "other"})
            release.set()  # the zombie returns: its complete_many is refused
            await until(lambda: _counted(r.worker, "lease_lost"), "the refused outcome")
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts, row.result) == ("done", 2, {"by": "other"})
        assert r.worker.counters["completed"] == 0
        assert "complete" in {x.operation for x in await checker.rejections(job_id)}
    run(dsn, body)


async def _counted(worker: AsyncWorker, name: str) -> bool:
    return worker.counters[name] > 0


def test_the_jobs_of_a_claim_whose_reply_was_lost_are_found_with_claim_results(dsn: str, queue: str) -> None:
    async def echo(job: Job) -> Any:
        return {"n": job.payload["n"]}

    async def body(checker: AsyncClient) -> None:
        ids = [r.id for r in await checker.enqueue_many(["echo"] * 4, [{"n": n} for n in range(4)], queue=queue)]
        async with Running(dsn, queue, {"echo": echo}, lease=timedelta(seconds=60)) as r:
            real = r.client.claim
            lost: list[list[Job]] = []

            async def lose_reply(*args: Any, **kwargs: Any) -> Any:
                jobs = await real(*args, **kwargs)
                if jobs and not lost:
                    lost.append(jobs)
                    raise psycopg.OperationalError("server closed the connection unexpectedly (test: reply lost)")
                return jobs
            r.client.claim = lose_reply  # type: ignore[method-assign]
            rows = [await wait_status(checker, i, "done") for i in ids]
        assert lost and {j.id for j in lost[0]} <= set(ids)
        assert [(row.attempts, row.result) for row in rows] == [(1, {"n": n}) for n in range(4)]
        assert r.worker.counters["completed"] == 4
    run(dsn, body)


def test_sigterm_stops_a_worker_run_from_the_main_thread(dsn: str, queue: str) -> None:
    # add_signal_handler: only in the main thread (pytest's), as a CLI process would run it.
    assert threading.current_thread() is threading.main_thread()

    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def patient(job: Job) -> Any:
            running.set()
            while not job.should_stop():
                await asyncio.sleep(0.01)
            raise Interrupted()

        job_id = await checker.enqueue("patient", queue=queue)
        client = await AsyncClient.connect(dsn, max_size=4)
        try:
            worker = AsyncWorker(client, {"patient": patient}, queues=[queue], poll_interval=0.2, run_sweeper=False)
            task = asyncio.ensure_future(worker.run())
            await asyncio.wait_for(running.wait(), TIMEOUT)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(task, TIMEOUT)
        finally:
            await client.close()
        assert (await checker.get_job(job_id)).status == "queued"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    run(dsn, body)


def test_a_second_sigterm_gives_a_stubborn_async_handlers_job_back_at_once(dsn: str, queue: str) -> None:
    assert threading.current_thread() is threading.main_thread()

    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()
        cancelled: list[bool] = []

        async def stubborn(job: Job) -> Any:
            running.set()
            try:
                await asyncio.sleep(60)  # ignores should_stop()
            except asyncio.CancelledError:
                cancelled.append(True)  # the shutdown cancels it once its job is given back
                raise
            return {"late": True}

        job_id = await checker.enqueue("stubborn", queue=queue)
        client = await AsyncClient.connect(dsn, max_size=4)
        try:
            worker = AsyncWorker(client, {"stubborn": stubborn}, queues=[queue], poll_interval=0.2,
                                 run_sweeper=False, shutdown_grace=30)
            task = asyncio.ensure_future(worker.run())
            await asyncio.wait_for(running.wait(), TIMEOUT)
            began = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.3)
            assert not task.done()  # the first signal waits for the handler (grace 30 s)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(task, 10)
            assert time.monotonic() - began < 10
        finally:
            await client.close()
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts, row.result) == ("queued", 1, None)
        assert cancelled == [True] and worker.counters["released"] == 1
    run(dsn, body)


def test_an_async_worker_needs_a_pooled_client_and_sane_sizes(dsn: str) -> None:
    async def body(checker: AsyncClient) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            with pytest.raises(TypeError, match="own pool"):
                AsyncWorker(AsyncClient(conn), {})
        with pytest.raises(ValueError, match="concurrency"):
            AsyncWorker(checker, {}, concurrency=0)
        with pytest.raises(ValueError, match="prefetch"):
            AsyncWorker(checker, {}, prefetch=-1)
        with pytest.raises(TypeError, match="exactly one"):
            AsyncClient()
    run(dsn, body)


def test_an_async_client_on_a_database_without_the_schema_raises_schema_mismatch(dsn: str) -> None:
    from support.db import scratch_database

    async def body(undeployed: str) -> None:
        with pytest.raises(SchemaMismatch, match="sqitch deploy"):
            await AsyncClient.connect(undeployed)
        async with await psycopg.AsyncConnection.connect(undeployed, autocommit=True) as conn:
            client = AsyncClient(conn)  # checked on its first call
            for _ in range(2):  # and again on the next one: a failed check is not forgotten
                with pytest.raises(SchemaMismatch, match="sqitch deploy"):
                    await client.enqueue("k")
            with pytest.raises(psycopg.errors.InvalidSchemaName):  # unchecked: the plain error
                await AsyncClient(conn, check_schema=False).enqueue("k")
    with scratch_database(dsn, "pgfence_nodeploy") as scratch:
        asyncio.run(body(scratch))


def test_cancelling_run_shuts_the_worker_down_as_stop_does(dsn: str, queue: str) -> None:
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def winds_down(job: Job) -> Any:
            running.set()
            while not job.should_stop():
                await asyncio.sleep(0.01)
            return {"finished": True}

        rows = await checker.enqueue_many(["winds_down"] * 4, queue=queue)
        client = await AsyncClient.connect(dsn, max_size=4)
        try:
            worker = AsyncWorker(client, {"winds_down": winds_down}, queues=[queue], concurrency=1, prefetch=3,
                                 poll_interval=0.2, run_sweeper=False, shutdown_grace=10)
            task = asyncio.ensure_future(worker.run(handle_signals=False))
            await asyncio.wait_for(running.wait(), TIMEOUT)
            await until(lambda: _count(checker, queue, "processing", 4), "the prefetched claim")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, TIMEOUT)
        finally:
            await client.close()
        got = sorted([((await checker.get_job(r.id)).status, (await checker.get_job(r.id)).attempts) for r in rows])
        assert got == [("done", 1)] + [("queued", 0)] * 3
    run(dsn, body)


def test_a_handler_that_swallows_the_shutdowns_cancellation_does_not_hold_run_forever(
        dsn: str, queue: str) -> None:
    # Regression: run() gathered the cancelled runners with no bound; an async handler
    # that caught CancelledError and went on held run() until it returned (as a sync
    # handler's thread cannot, since the threaded Worker abandons it).
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()
        let_go = asyncio.Event()
        ignored: list[bool] = []

        async def deaf(job: Job) -> Any:
            running.set()
            while not let_go.is_set():
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    ignored.append(True)  # swallowed: goes on
            return {"late": True}

        job_id = await checker.enqueue("deaf", queue=queue)
        async with Running(dsn, queue, {"deaf": deaf}, shutdown_grace=0.2) as r:
            await asyncio.wait_for(running.wait(), TIMEOUT)
            try:
                await r.stop(timeout=60)  # returns although the handler still runs
            finally:
                let_go.set()
        assert ignored
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts, row.result) == ("queued", 1, None)  # given back, late result void
        assert r.worker.counters["released"] == 1
    run(dsn, body)


def test_a_cancelled_error_a_handler_raises_itself_during_the_grace_period_fails_its_attempt(
        dsn: str, queue: str) -> None:
    # Regression: while stopping, any CancelledError out of an async handler was taken for
    # the shutdown's own cancellation and re-raised: the runner died with the attempt
    # still marked running, the shutdown waited out the whole grace period and released
    # the job as if the handler still ran, where the threaded worker fails the attempt.
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def gives_up(job: Job) -> Any:
            running.set()
            while not job.should_stop():
                await asyncio.sleep(0.01)
            raise asyncio.CancelledError("an inner task was cancelled")  # not the worker's doing

        job_id = await checker.enqueue("gives_up", queue=queue, max_attempts=3)
        async with Running(dsn, queue, {"gives_up": gives_up}, shutdown_grace=60) as r:
            await asyncio.wait_for(running.wait(), TIMEOUT)
            await r.stop(timeout=30)  # well before the grace period's end
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts) == ("queued", 1)
        assert row.last_error and "CancelledError" in row.last_error, row.last_error
        assert (r.worker.counters["failed"], r.worker.counters["released"]) == (1, 0)
    run(dsn, body)


def test_a_plain_handler_returning_an_awaitable_has_it_awaited_on_the_loop(dsn: str, queue: str) -> None:
    # Regression: a plain callable that returns a coroutine (a lambda around an async
    # function, a decorator hiding the async def) ran on a handler thread, and its result,
    # the coroutine itself, was not JSON: the job was dead-lettered without its work done,
    # and the coroutine was never awaited.
    async def send(job: Job, to: str) -> Any:
        await asyncio.sleep(0)
        return {"sent": to, "n": job.payload["n"]}

    async def body(checker: AsyncClient) -> None:
        ids = [r.id for r in await checker.enqueue_many(["send"] * 3, [{"n": n} for n in range(3)], queue=queue)]
        async with Running(dsn, queue, {"send": lambda job: send(job, "a@example.com")}, concurrency=2) as r:
            rows = [await wait_status(checker, i, "done", "failed") for i in ids]
        assert [(row.status, row.result) for row in rows] == \
            [("done", {"sent": "a@example.com", "n": n}) for n in range(3)], [row.last_error for row in rows]
        assert r.worker.counters["completed"] == 3
    run(dsn, body)


def test_cancelling_run_while_a_claim_is_in_flight_gives_its_jobs_back(dsn: str, queue: str) -> None:
    # Regression: a claim that the cancellation of run() interrupted may have committed
    # (its reply never read): its jobs stayed leased to this worker, which never knew
    # them, until their leases expired with the attempt counted. They are now looked up
    # by the claim's request id, as those of a claim whose reply was lost, and go back
    # unstarted with the rest.
    async def body(checker: AsyncClient) -> None:
        ids = [r.id for r in await checker.enqueue_many(["echo"] * 3, queue=queue)]
        committed = asyncio.Event()
        ran: list[int] = []

        async def echo(job: Job) -> Any:
            ran.append(job.id)

        client = await AsyncClient.connect(dsn, max_size=4)
        try:
            worker = AsyncWorker(client, {"echo": echo}, queues=[queue], poll_interval=0.2, run_sweeper=False,
                                 lease=timedelta(seconds=120))
            real = client.claim

            async def slow_reply(*args: Any, **kwargs: Any) -> Any:
                jobs = await real(*args, **kwargs)
                if jobs:
                    committed.set()
                    await asyncio.sleep(60)  # the reply is on its way when run() is cancelled
                return jobs
            client.claim = slow_reply  # type: ignore[method-assign]
            task = asyncio.ensure_future(worker.run(handle_signals=False))
            await asyncio.wait_for(committed.wait(), TIMEOUT)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, TIMEOUT)
        finally:
            await client.close()
        rows = [await checker.get_job(i) for i in ids]
        assert [(row.status, row.attempts) for row in rows] == [("queued", 0)] * 3
        assert ran == [] and worker.counters["released"] == 3
    run(dsn, body)


def test_a_worker_runs_once(dsn: str, queue: str) -> None:
    # Adversarial finding: a second run(), beside the first or after it, shared the first's
    # ledger, stop state and counters (two claim loops on one ledger; after a stop, a run
    # that claimed with its parts already told to be done).
    async def echo(job: Job) -> Any:
        return job.payload

    async def body(checker: AsyncClient) -> None:
        job_id = await checker.enqueue("echo", {"n": 1}, queue=queue)
        async with Running(dsn, queue, {"echo": echo}) as r:
            await wait_status(checker, job_id, "done")
            with pytest.raises(RuntimeError, match="already called"):
                await r.worker.run(handle_signals=False)   # beside the first
        with pytest.raises(RuntimeError, match="already called"):
            await r.worker.run(handle_signals=False)       # after it
        assert r.worker.counters["completed"] == 1
    run(dsn, body)


def test_a_second_cancel_hurries_the_shutdown_and_still_gives_the_jobs_back(dsn: str, queue: str) -> None:
    # Adversarial finding: a cancellation of run() while it shut down (the second, when the
    # first began the shutdown) cut the shutdown off inside its grace period: the running
    # job was never given back and stayed leased to a worker that was gone. Now it hurries
    # the shutdown, as a second signal does.
    async def body(checker: AsyncClient) -> None:
        running = asyncio.Event()

        async def long(job: Job) -> Any:
            running.set()
            await asyncio.sleep(120)   # ignores should_stop(): only the end of the grace period ends it

        job_id = await checker.enqueue("long", queue=queue)
        client = await AsyncClient.connect(dsn, max_size=4)
        try:
            worker = AsyncWorker(client, {"long": long}, queues=[queue], poll_interval=0.2, run_sweeper=False,
                                 shutdown_grace=120, lease=timedelta(seconds=120))
            task = asyncio.ensure_future(worker.run(handle_signals=False))
            await asyncio.wait_for(running.wait(), TIMEOUT)
            task.cancel()   # the shutdown begins, and waits for the handler
            await asyncio.sleep(0.5)
            assert not task.done()
            task.cancel()   # hurried: the job goes back now
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, TIMEOUT)
        finally:
            await client.close()
        row = await checker.get_job(job_id)
        assert (row.status, row.attempts) == ("queued", 1)
        assert worker.counters["released"] == 1
    run(dsn, body)


def test_a_cancel_of_a_hurried_shutdown_ends_it_though_a_database_call_hangs(dsn: str, queue: str) -> None:
    # Review finding: once a cancellation hurried the shutdown, every later one was swallowed,
    # so a release_many hanging on a dead network held run() (and asyncio.run's Ctrl-C) until
    # TCP gave up. One more cancellation now ends it; the job is left to its lease.
    async def body(checker: AsyncClient) -> None:
        running, hanging = asyncio.Event(), asyncio.Event()

        async def long(job: Job) -> Any:
            running.set()
            await asyncio.sleep(120)

        job_id = await checker.enqueue("long", queue=queue)
        client = await AsyncClient.connect(dsn, max_size=4)

        async def dead_network(*args: Any, **kwargs: Any) -> Any:
            hanging.set()
            await asyncio.sleep(3600)
        try:
            worker = AsyncWorker(client, {"long": long}, queues=[queue], poll_interval=0.2, run_sweeper=False,
                                 shutdown_grace=120, lease=timedelta(seconds=120))
            task = asyncio.ensure_future(worker.run(handle_signals=False))
            await asyncio.wait_for(running.wait(), TIMEOUT)
            client.release_many = dead_network  # type: ignore[method-assign]
            task.cancel()   # the shutdown begins
            await asyncio.sleep(0.3)
            task.cancel()   # hurried: the release hangs
            await asyncio.wait_for(hanging.wait(), TIMEOUT)
            task.cancel()   # ends it
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, TIMEOUT)
        finally:
            await client.close()
        assert (await checker.get_job(job_id)).status == "processing"   # left to its lease
    run(dsn, body)
