"""Worker robustness: outcomes the database cannot store, handlers that escape the
usual ``Exception`` path, two attempts of one job in one flush, the listener's
connection settings, naive ``run_at`` datetimes, and a shutdown while the
database is unreachable (each found by a review of the client; each of these tests
failed on the worker before those fixes).

Every test checks liveness too: ordinary jobs of the same queue still end
``done`` and ``worker.stop()`` returns promptly. Timeouts are generous and only
detect a wedged worker; nothing here measures speed.
"""
from __future__ import annotations

import inspect
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from support.db import backends, sqitch_deploy, unique_name
from support.processes import worker_process
from support.workers import WorkerThread, start, wait_for, wait_status
from pgfence import Client, Job, RawJson, RetryAfter, Worker

#: How long ``worker.stop()`` may take to make ``run()`` return once nothing runs.
STOP_TIMEOUT = 10.0


def handler_for(flavor: str, handler: Any) -> Any:
    """``handler`` as the flavour runs it: the asyncio worker gets it as an ``async def``
    (for handlers that do not block; a blocking one stays a plain function, run on a thread)."""
    if flavor == "asyncio":
        from support.aio import as_async
        return as_async(handler)
    return handler


@contextmanager
def running_bounded(worker: Worker, stop_timeout: float = STOP_TIMEOUT) -> Iterator[WorkerThread]:
    """Like ``support.workers.running``, but a wedged worker does not cost 30 s nor hide the
    test's own failure: when the block failed, the worker is asked to stop and waited for
    briefly, and the block's error is what the test reports. When the block passed,
    ``run()`` must return within ``stop_timeout`` after ``stop()``."""
    wt = WorkerThread(worker).start()
    try:
        yield wt
    except BaseException as exc:
        # Diagnostic only (never asserted): which of the worker's threads had died.
        dead = [t.name for t in getattr(worker, "_threads", []) if not t.is_alive()]
        exc.add_note(f"worker threads no longer alive: {dead or 'none'}; counters: {worker.counters}")
        worker.stop()
        wt.thread.join(2)
        raise
    if wt.thread.is_alive():
        wt.stop(timeout=stop_timeout)


def statuses(client: Client, ids: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in ids:
        s = client.get_job(i).status
        counts[s] = counts.get(s, 0) + 1
    return counts


def wait_all(client: Client, ids: list[int], status: str, timeout: float = 15.0) -> None:
    """Wait until every job in ``ids`` has ``status``; on timeout say where they are."""
    deadline = time.monotonic() + timeout
    while True:
        if all(client.get_job(i).status == status for i in ids):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout}s, {len(ids)} jobs expected {status!r} are {statuses(client, ids)}")
        time.sleep(0.05)


def echo(job: Job) -> Any:
    return {"n": job.payload.get("n")}


# ------------------------------------------- outcomes the database refuses ----
class PoisonError(Exception):
    pass


class UnreadableMapping(dict):  # type: ignore[type-arg]
    """A result json.dumps cannot walk: its items() raises (a lazily loaded mapping, say)."""

    def items(self) -> Any:
        raise RuntimeError("the mapping could not be loaded")


def _poison_handler(case: str) -> Any:
    def poison(job: Job) -> Any:
        if case == "nan_result":
            return {"x": float("nan")}
        if case == "nul_result":
            return {"x": "a\x00b"}
        if case == "surrogate_result":
            return {"file": os.fsdecode(b"/data/\xff.csv")}
        if case == "invalid_rawjson":
            return RawJson("{not json")
        if case == "too_deep_rawjson":  # jsonb: 54001 stack depth limit exceeded (an OperationalError)
            return RawJson("[" * 200_000 + "]" * 200_000)
        if case == "unreadable_result":
            return UnreadableMapping(a=1)
        if case == "nul_error":
            raise PoisonError("bad byte \x00 in input")
        if case == "surrogate_error":
            raise PoisonError("cannot parse " + os.fsdecode(b"/data/\xff.csv"))
        if case == "retry_after_400_days":
            raise RetryAfter(timedelta(days=400))
        if case == "retry_after_negative":
            raise RetryAfter(timedelta(seconds=-1))
        raise AssertionError(case)
    return poison


#: The keyword each case's last_error must hold: the README promises the exception's
#: type in last_error ("type, message and traceback"); a result the database cannot
#: store has no such promise, so only a non-NULL explanation is required.
POISON_CASES = {
    "nan_result": None,
    "nul_result": None,
    "surrogate_result": None,
    "invalid_rawjson": None,
    "too_deep_rawjson": None,
    "unreadable_result": None,
    "nul_error": "PoisonError",
    "surrogate_error": "PoisonError",
    "retry_after_400_days": "RetryAfter",   # README: retry_in 0..365 days
    "retry_after_negative": "RetryAfter",
}


@pytest.mark.parametrize("case", list(POISON_CASES))
def test_an_outcome_the_database_cannot_store_fails_its_job_and_the_worker_carries_on(
        dsn: str, client: Client, queue: str, workers: list[Client], case: str, flavor: str) -> None:
    # Regression: the refused complete_many/fail_many killed the flusher
    # thread; the worker then claimed the whole queue, recorded nothing, heartbeated it
    # forever and could not stop.
    poison = client.enqueue("poison", queue=queue, max_attempts=1)
    ordinary = [r.id for r in client.enqueue_many(["echo"] * 20, [{"n": i} for i in range(20)], queue=queue)]
    worker = start(dsn, queue, {"poison": handler_for(flavor, _poison_handler(case)), "echo": echo}, workers,
                   concurrency=4, flavor=flavor)
    with running_bounded(worker):
        row = wait_status(client, poison, "failed")
        wait_all(client, ordinary, "done")
        # The worker still reports outcomes after the poison one.
        later = [r.id for r in client.enqueue_many(["echo"] * 5, [{"n": i} for i in range(5)], queue=queue)]
        wait_all(client, later, "done")
    assert (row.attempts, row.result) == (1, None)
    assert row.last_error, "the failed job does not say why"
    keyword = POISON_CASES[case]
    if keyword is not None:
        assert keyword in row.last_error, row.last_error
    assert [client.get_job(i).result for i in ordinary] == [{"n": i} for i in range(20)]


# ------------------------------------- handlers escaping `except Exception` ----
class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


def _escaping_handler(case: str) -> Any:
    def bad(job: Job) -> Any:
        if case == "sys_exit":
            sys.exit("handler called sys.exit")
        if case == "unprintable_exception":
            raise UnprintableError()
        raise AssertionError(case)
    return bad


@pytest.mark.parametrize("case, keyword", [("sys_exit", "SystemExit"),
                                           ("unprintable_exception", "UnprintableError")])
def test_a_handler_raising_systemexit_or_an_unprintable_exception_fails_its_job_and_keeps_its_thread(
        dsn: str, client: Client, queue: str, workers: list[Client], case: str, keyword: str, flavor: str) -> None:
    # Regression (audit finding 3): the handler thread died, its job stayed leased and
    # heartbeated forever, and with one thread the worker did nothing more.
    bad = client.enqueue("bad", queue=queue, max_attempts=1)
    worker = start(dsn, queue, {"bad": handler_for(flavor, _escaping_handler(case)), "echo": echo}, workers,
                   concurrency=1, shutdown_grace=30, flavor=flavor)
    with running_bounded(worker):
        row = wait_status(client, bad, "failed")
        # The only handler thread is still there: later jobs run.
        later = [r.id for r in client.enqueue_many(["echo"] * 3, [{"n": i} for i in range(3)], queue=queue)]
        wait_all(client, later, "done")
    assert (row.attempts, row.result) == (1, None)
    assert row.last_error and keyword in row.last_error, row.last_error
    assert [client.get_job(i).result for i in later] == [{"n": i} for i in range(3)]


# ------------------------------------------ two attempts of the same job ----
def _two_attempts(client: Client, queue: str, dsn: str, workers: list[Client], flavor: str, **options: Any) -> tuple[
        int, Worker, dict[int, threading.Event], dict[int, threading.Event], dict[int, Job]]:
    gates = {1: threading.Event(), 2: threading.Event()}
    started = {1: threading.Event(), 2: threading.Event()}
    jobs: dict[int, Job] = {}

    def stubborn(job: Job) -> Any:
        jobs[job.attempts] = job
        started[job.attempts].set()
        gates[job.attempts].wait(30)  # ignores should_stop()
        return {"attempt": job.attempts}

    job_id = client.enqueue("stubborn", queue=queue)
    worker = start(dsn, queue, {"stubborn": stubborn, "echo": echo}, workers, concurrency=2, flavor=flavor,
                   **options)
    return job_id, worker, gates, started, jobs


def test_two_attempts_of_one_job_finishing_in_one_flush_do_not_break_the_flusher(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Regression (audit finding 4): both outcomes went into one complete_many, which refuses
    # duplicate job ids (22023); the flusher thread died.
    # flush_interval 0.3 s: both outcomes surely wait in the same batch.
    job_id, worker, gates, started, _ = _two_attempts(client, queue, dsn, workers, flavor,
                                                      lease=timedelta(seconds=30), flush_interval=0.3)
    try:
        with running_bounded(worker):
            assert started[1].wait(15)
            client.cancel(job_id)    # an operator cancels the running attempt 1 ...
            client.requeue(job_id)   # ... and puts the job back: the same worker claims attempt 2
            assert started[2].wait(15), "the worker did not claim attempt 2"
            gates[1].set()
            gates[2].set()           # both attempts return together
            row = wait_status(client, job_id, "done", "failed")
            later = client.enqueue("echo", {"n": 1}, queue=queue)
            assert wait_status(client, later, "done").result == {"n": 1}
    finally:
        gates[1].set()
        gates[2].set()
    assert (row.status, row.attempts, row.result) == ("done", 2, {"attempt": 2})
    # Attempt 1's result is void: only attempt 2 and the later job were completed.
    assert worker.counters["completed"] == 2, worker.counters


def test_a_stale_attempt_is_told_to_stop_when_the_same_worker_claims_its_job_again(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Regression (audit finding 4): once the ledger held attempt 2, the heartbeat
    # counted attempt 1's refusals as "settling" and never set its lease_lost, so
    # attempt 1's should_stop() stayed False while it kept running.
    job_id, worker, gates, started, jobs = _two_attempts(client, queue, dsn, workers, flavor,
                                                         lease=timedelta(seconds=3))
    try:
        with running_bounded(worker):
            assert started[1].wait(15)
            client.cancel(job_id)
            client.requeue(job_id)
            assert started[2].wait(15), "the worker did not claim attempt 2"
            # The heartbeat runs every lease / 3 = 1 s; several rounds are allowed.
            wait_for(lambda: jobs[1].should_stop(), 10, "attempt 1's should_stop() to become True")
            assert not jobs[2].should_stop()
            gates[1].set()
            gates[2].set()
            row = wait_status(client, job_id, "done", "failed")
    finally:
        gates[1].set()
        gates[2].set()
    assert (row.status, row.attempts, row.result) == ("done", 2, {"attempt": 2})
    assert jobs[1].lease_lost and not jobs[2].lease_lost


# ------------------------------------------------- a claim reply that is lost --
def _lose_replies(worker: Any, method: str, times: int, then: Any = None) -> list[Any]:
    """Make the worker's client.<method> run in the database and then raise as if the
    connection had dropped before the reply came, the first ``times`` calls that return
    rows (``then`` runs before raising). Returns what those calls had returned."""
    real = getattr(worker.client, method)
    lost: list[Any] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if result and len(lost) < times:
            lost.append(result)
            if then is not None:
                then()
            raise psycopg.OperationalError("server closed the connection unexpectedly (test: reply lost)")
        return result

    async def acall(*args: Any, **kwargs: Any) -> Any:  # the same, for an AsyncClient's coroutine
        result = await real(*args, **kwargs)
        if result and len(lost) < times:
            lost.append(result)
            if then is not None:
                pending = then()
                if inspect.isawaitable(pending):
                    await pending
            raise psycopg.OperationalError("server closed the connection unexpectedly (test: reply lost)")
        return result
    setattr(worker.client, method, acall if inspect.iscoroutinefunction(real) else call)
    return lost


def test_jobs_of_a_claim_whose_reply_was_lost_run_at_once_with_their_attempt(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Before: the claim had committed, so its jobs stayed leased to this worker, unknown to
    # it, until their leases expired (here 60 s); then reclaimed with the attempt spent.
    ids = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(5)]
    worker = start(dsn, queue, {"echo": echo}, workers, flavor=flavor, lease=timedelta(seconds=60), concurrency=2)
    lost_claims = _lose_replies(worker, "claim", 1)
    lost_lookups = _lose_replies(worker, "claim_results", 1)  # and the first look-up fails too
    with running_bounded(worker):
        wait_all(client, ids, "done", timeout=15)
    assert len(lost_claims) == 1 and len(lost_lookups) == 1
    assert {j.id for j in lost_claims[0]} == {j.id for j in lost_lookups[0]}
    rows = [client.get_job(i) for i in ids]
    assert [(r.attempts, r.result) for r in rows] == [(1, {"n": n}) for n in range(5)]
    assert {r.attempt_token for r in rows} >= {j.attempt_token for j in lost_claims[0]}
    assert worker.counters["completed"] == 5, worker.counters


def test_a_shutdown_gives_back_the_jobs_of_a_claim_whose_reply_was_lost(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    ids = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(3)]
    worker = start(dsn, queue, {"echo": echo}, workers, flavor=flavor, lease=timedelta(seconds=60))
    lost_claims = _lose_replies(worker, "claim", 1, then=worker.stop)
    with running_bounded(worker) as wt:
        wait_for(lambda: not wt.thread.is_alive(), STOP_TIMEOUT, "the worker to stop")
    assert len(lost_claims) == 1 and {j.id for j in lost_claims[0]} == set(ids)
    rows = [client.get_job(i) for i in ids]
    assert [(r.status, r.attempts) for r in rows] == [("queued", 0)] * 3
    assert worker.counters["released"] == 3, worker.counters


def test_a_lookup_the_database_refuses_is_logged_and_the_worker_carries_on(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Review finding: a non-retryable error from claim_results() (here: a role without EXECUTE
    # on it) escaped the claim loop, and the shutdown then raised on the same lookup
    # before giving anything back.
    first = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(2)]
    worker = start(dsn, queue, {"echo": echo}, workers, flavor=flavor, lease=timedelta(seconds=60))
    lost_claims = _lose_replies(worker, "claim", 1)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise psycopg.errors.InsufficientPrivilege("permission denied for function claim_results (test)")
    worker.client.claim_results = refused  # type: ignore[method-assign]
    with running_bounded(worker):
        wait_for(lambda: lost_claims, 15, "the first claim")
        later = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(2, 4)]
        wait_all(client, later, "done")
    # The lost claim's jobs are left to their leases, as before there was a lookup.
    assert {j.id for j in lost_claims[0]} == set(first)
    assert [client.get_job(i).status for i in first] == ["processing", "processing"]


def test_a_worker_stops_looking_up_a_lost_claim_after_its_lease_and_claims_again(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # A claim stuck in the server (say, sending its rows to a dead socket) keeps its request
    # lock, so every look-up ends in 55P03: the worker must not stop claiming for it.
    first = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(2)]
    worker = start(dsn, queue, {"echo": echo}, workers, flavor=flavor, lease=timedelta(seconds=1))
    lost_claims = _lose_replies(worker, "claim", 1)
    lookups: list[int] = []

    def stuck(*args: Any, **kwargs: Any) -> Any:
        lookups.append(1)
        raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout (test)")
    worker.client.claim_results = stuck  # type: ignore[method-assign]
    with running_bounded(worker):
        wait_for(lambda: lost_claims, 15, "the first claim")
        later = [client.enqueue("echo", {"n": n}, queue=queue) for n in range(2, 4)]
        wait_all(client, later, "done")
        # The lost claim's jobs: their leases expired, the worker's own claims reclaimed and ran them.
        wait_all(client, first, "done")
    assert lookups
    assert [client.get_job(i).attempts for i in first] == [2, 2]


def test_a_shutdown_looks_up_a_lost_claim_only_briefly_while_the_database_is_unreachable(
        dsn: str, client: Client, queue: str, workers: list[Client], proxy: TcpProxy, flavor: str) -> None:
    # Review finding: the shutdown's lookup could wait out the pool's timeout (30 s) once
    # more during an outage. It now waits SHUTDOWN_LOOKUP_WAIT (5 s) at most.
    job_id = client.enqueue("echo", {"n": 0}, queue=queue)
    worker_dsn = make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port), connect_timeout="2")
    worker = start(worker_dsn, queue, {"echo": echo}, workers, lease=timedelta(seconds=60), flavor=flavor)

    def outage_then_stop() -> Any:
        proxy.cut()      # the database becomes unreachable for this worker only
        assert worker.client.pool is not None
        checked = worker.client.pool.check()  # the pool drops its broken connections: a lookup must wait
        if not inspect.isawaitable(checked):
            worker.stop()
            return None

        async def then_stop() -> None:  # (an AsyncConnectionPool's check is awaited)
            await checked
            worker.stop()
        return then_stop()
    lost_claims = _lose_replies(worker, "claim", 1, then=outage_then_stop)
    with running_bounded(worker) as wt:
        wait_for(lambda: not wt.thread.is_alive(), STOP_TIMEOUT, "the worker to stop")
    assert [j.id for j in lost_claims[0]] == [job_id]
    assert client.get_job(job_id).status == "processing"  # left to its lease, as after a crash


# ---------------------------------------------------- the NOTIFY listener ----
def test_the_listener_uses_the_connection_keywords_given_to_client_connect(
        dsn: str, conn: psycopg.Connection[Any], client: Client, queue: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression (audit finding 5): the listener connected with pool.conninfo only (""
    # here), i.e. libpq defaults, so no NOTIFY ever arrived and jobs waited for the poll.
    for var in ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"):
        monkeypatch.delenv(var, raising=False)
    params: dict[str, Any] = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    assert {"host", "port", "dbname"} <= params.keys(), f"the test DSN does not name them: {params}"
    app = unique_name("pgfence-test-kwargs")
    kwclient = Client.connect("", max_size=4, application_name=app, **params)
    handler_started = threading.Event()

    def mark(job: Job) -> Any:
        handler_started.set()
        return {"ok": True}

    try:
        worker = Worker(kwclient, {"mark": mark}, queues=[queue], poll_interval=30.0, run_sweeper=False)
        with running_bounded(worker):
            time.sleep(1.0)  # the first claim at startup is done: the worker now waits 15-30 s
            job_id = client.enqueue("mark", queue=queue)
            woke = handler_started.wait(3.0)
            listening = any(q.strip().upper().startswith("LISTEN") for _, q in backends(conn, app))
            assert woke, ("the handler did not start within 3 s of the enqueue (the poll is 15-30 s): "
                          f"no NOTIFY reached the worker; LISTEN connection on the test database: {listening}")
            assert wait_status(client, job_id, "done").result == {"ok": True}
    finally:
        kwclient.close()


# -------------------------------------------------- naive run_at datetimes ----
def _session_utc_offset(conn: psycopg.Connection[Any]) -> timedelta:
    row = conn.execute("SELECT extract(timezone FROM now())::int").fetchone()
    assert row is not None
    return timedelta(seconds=int(row[0]))


@pytest.fixture
def local_tz_unlike_the_server(conn: psycopg.Connection[Any]) -> Iterator[str]:
    """Set this process's local time zone (TZ + time.tzset()) to one whose UTC offset now
    differs by hours from the database session's; restored afterwards."""
    server = _session_utc_offset(conn)
    now = datetime.now(timezone.utc)
    name = next(n for n in ("America/New_York", "Asia/Kolkata", "Pacific/Auckland")
                if abs(now.astimezone(ZoneInfo(n)).utcoffset() - server) >= timedelta(hours=3))  # type: ignore[operator]
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield name
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def _due_in(client: Client, job_id: int) -> timedelta:
    return client.get_job(job_id).available_at - datetime.now(timezone.utc)


def test_enqueue_reads_a_naive_run_at_as_local_time(client: Client, queue: str,
                                                    local_tz_unlike_the_server: str) -> None:
    # Regression (audit finding 7): a naive datetime was read in the server session's
    # TimeZone, hours off from the caller's "in ten minutes".
    run_at = datetime.now() + timedelta(minutes=10)
    assert run_at.tzinfo is None
    job_id = client.enqueue("later", queue=queue, run_at=run_at)
    due = _due_in(client, job_id)
    assert abs(due - timedelta(minutes=10)) < timedelta(minutes=1), \
        f"local time zone {local_tz_unlike_the_server}: due in {due}, expected about 10 minutes"


def test_enqueue_many_reads_naive_run_ats_as_local_time(client: Client, queue: str,
                                                        local_tz_unlike_the_server: str) -> None:
    naive = datetime.now() + timedelta(minutes=10)
    aware = datetime.now(timezone.utc) + timedelta(minutes=20)
    rows = client.enqueue_many(["later", "later"], queue=queue, run_ats=[naive, aware])
    dues = [_due_in(client, r.id) for r in rows]
    assert abs(dues[0] - timedelta(minutes=10)) < timedelta(minutes=1), \
        f"local time zone {local_tz_unlike_the_server}: naive run_at due in {dues[0]}, expected about 10 minutes"
    assert abs(dues[1] - timedelta(minutes=20)) < timedelta(minutes=1), f"aware run_at due in {dues[1]}"


# ------------------------------------------ shutdown with the database gone ----
class TcpProxy:
    """A TCP forwarder to the test server that the test can cut: after :meth:`cut`, the
    forwarded connections are closed and new ones are refused. Only the worker that
    connects through it loses the database; the shared test database is untouched."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        threading.Thread(target=self._accept_loop, name="test-proxy", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._cut.is_set():
            try:
                down, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=5)
                up.settimeout(None)
                down.settimeout(None)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._cut.is_set():
                    down.close()
                    up.close()
                    return
                self._socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), name="test-proxy-pump", daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self._cut.set()
        self.listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def proxy(dsn: str) -> Iterator[TcpProxy]:
    params = conninfo_to_dict(dsn)
    host, port = str(params.get("host") or ""), int(params.get("port") or 5432)
    if not host or host.startswith("/") or "," in host:
        pytest.skip(f"the test database is not reached over one TCP host ({host!r}): no proxy")
    p = TcpProxy(host, port)
    try:
        yield p
    finally:
        p.cut()


def test_a_second_sigterm_ends_the_shutdown_even_while_the_database_is_unreachable(
        dsn: str, client: Client, queue: str, tmp_path: Path, proxy: TcpProxy) -> None:
    # Regression: releasing the running job retried forever while the
    # database was down, so even a second signal left the worker hanging until SIGKILL.
    # The worker process reaches the database through a proxy that the test cuts.
    marker, started = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold_stubborn", {"marker": str(marker), "started": str(started)}, queue=queue)
    worker_dsn = make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port), connect_timeout="2")
    try:
        with worker_process(worker_dsn, tmp_path / "a.log", "--queue", queue, "--shutdown-grace", "30",
                            "--lease", "30", "--worker-id", "A") as a:
            wait_for(lambda: started.exists(), 20, "the handler to start")
            a.signal(signal.SIGTERM)
            # Now in the grace period: the main thread waits for the stubborn handler.
            wait_for(lambda: "stopping" in a.log(), 10, "the shutdown to begin")
            proxy.cut()  # the database becomes unreachable for this worker only
            a.signal(signal.SIGTERM)
            wait_for(lambda: "second signal" in a.log(), 10, "the second signal to be seen")
            a.wait(15)   # raises "did not exit within 15s" (with the log) when the shutdown hangs
    finally:
        marker.unlink()
    # The job could not be given back: it stays processing until its lease expires.
    assert client.get_job(job_id).status in ("processing", "queued")


def test_a_worker_sweeps_only_while_no_background_sweeper_is_seen(
        scratch_dsn: str, queue: str, workers: list[Client], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, flavor: str) -> None:
    """run_sweeper=None: the worker keeps looking at pgfence.sweeper_health() (every
    minute; here every 0.1 s) and sweeps while it says no background sweeper runs (no
    pass in 2 minutes, or never), not while an operator paused it. It used to look once,
    at start, so a pg_cron sweeper that stopped later was never stood in for. (A
    database of its own, where pg_cron runs no sweeper: sweeper_status changes only here.)"""
    sqitch_deploy(scratch_dsn)
    monkeypatch.setattr("pgfence.sweeper.SWEEPER_LOOK_INTERVAL", 0.1)
    caplog.set_level("INFO", logger="pgfence.worker")
    with psycopg.connect(scratch_dsn, autocommit=True) as c:
        c.execute("UPDATE pgfence.sweeper_status SET last_pass_at = clock_timestamp()")
        worker = start(scratch_dsn, queue, {"echo": echo}, workers, run_sweeper=None, sweep_interval=0.05,
                       flavor=flavor)
        with running_bounded(worker):
            time.sleep(0.5)
            assert "runs the reclaim sweep" not in caplog.text  # a pass was just recorded
            c.execute("UPDATE pgfence.sweeper_status SET last_pass_at = clock_timestamp() - interval '10 minutes'")
            wait_for(lambda: "runs the reclaim sweep" in caplog.text or None, 10, "the worker to start sweeping")
            c.execute("UPDATE pgfence.sweeper_status SET last_pass_at = clock_timestamp()")
            wait_for(lambda: "stops the reclaim sweep" in caplog.text or None, 10, "the worker to stop sweeping")
            # paused by an operator: the worker does not stand in, however old the last pass
            caplog.clear()
            c.execute("SELECT pgfence.pause_sweeper()")
            c.execute("UPDATE pgfence.sweeper_status SET last_pass_at = clock_timestamp() - interval '10 minutes'")
            time.sleep(0.5)
            assert "runs the reclaim sweep" not in caplog.text
            c.execute("SELECT pgfence.resume_sweeper()")
            wait_for(lambda: "runs the reclaim sweep" in caplog.text or None, 10, "the worker to sweep after resume")

# --------------------------------------------------- payloads no decoder reads ----
def _deep_payload_job(dsn: str, queue: str, depth: int = 5000) -> int:
    """A job whose payload Python's json cannot decode (nested `depth` deep), written as
    the database accepted it before the 64-level limit (a row older than the rule)."""
    text = '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("INSERT INTO pgfence.jobs (queue, kind, payload, max_attempts) VALUES (%s, 'echo', %s::jsonb, 1)"
                        " RETURNING id", (queue, text)).fetchone()
        assert row is not None
        return int(row[0])


def test_claim_returns_a_job_whose_payload_cannot_be_decoded_with_its_reason(dsn: str, client: Client,
                                                                          queue: str) -> None:
    before = client.enqueue("echo", {"n": 1}, queue=queue)
    poison = _deep_payload_job(dsn, queue)
    after = client.enqueue("echo", {"n": 2}, queue=queue)
    jobs = {j.id: j for j in client.claim("w", [queue], max_jobs=10)}
    assert set(jobs) == {before, poison, after}
    assert jobs[before].payload == {"n": 1} and jobs[after].payload == {"n": 2}
    assert jobs[before].payload_error is None
    assert jobs[poison].payload is None and jobs[poison].payload_error is not None
    assert jobs[poison].payload_error.startswith("RecursionError")


def test_a_payload_the_worker_cannot_decode_fails_alone_and_the_rest_of_the_batch_runs(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    """One poison payload used to raise RecursionError for the whole claimed batch: the
    worker died (three times, before the poison job was dead-lettered) and innocent
    max_attempts => 1 jobs of its batches were dead-lettered without running."""
    poison = _deep_payload_job(dsn, queue)
    innocent = [e.id for e in client.enqueue_many(["echo"] * 40, [{"n": i} for i in range(40)], queue=queue,
                                                  max_attempts=1)]
    worker = start(dsn, queue, {"echo": echo}, workers, flavor=flavor, prefetch=50)
    with running_bounded(worker):
        bad = wait_status(client, poison, "failed", timeout=20)
        for job_id in innocent:
            wait_status(client, job_id, "done", timeout=20)
    assert bad.attempts == 1 and (bad.last_error or "").startswith("PayloadNotDecodable: ")
    assert worker.counters["completed"] == 40 and worker.counters["failed"] == 1


def test_a_heartbeat_error_no_retry_mends_is_logged_and_the_next_round_renews_the_lease(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    # Adversarial finding: an error outside RETRYABLE (a RuntimeError here; a permission
    # revoked, a function dropped) killed the heartbeat thread (the task, in AsyncWorker) for
    # good: no lease was renewed again, and every running job was reclaimed under its handler.
    release = threading.Event()

    def slow(job: Job) -> Any:
        release.wait(30)
        return {"ok": True}

    job_id = client.enqueue("slow", {}, queue=queue)
    worker = start(dsn, queue, {"slow": slow}, workers, flavor=flavor, lease=timedelta(seconds=3))
    real = worker.client.heartbeat_many
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:   # (for AsyncClient, returns the coroutine awaited)
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("test: an error no retry mends")
        return real(*args, **kwargs)
    worker.client.heartbeat_many = flaky  # type: ignore[method-assign]
    try:
        with running_bounded(worker):
            first = wait_status(client, job_id, "processing")
            wait_for(lambda: len(calls) >= 1, 10, "the failed heartbeat")
            # past the claim's own lease: only a later round can have moved its end
            wait_for(lambda: client.get_job(job_id).lease_expires_at > first.lease_expires_at + timedelta(seconds=1),
                     15, "a lease renewed after the failed round")
            row = client.get_job(job_id)
            assert (row.status, row.attempt_token) == ("processing", first.attempt_token)
            release.set()
            wait_all(client, [job_id], "done")
    finally:
        release.set()
    assert client.get_job(job_id).attempts == 1
    assert worker.counters["lease_lost"] == 0, worker.counters


def test_the_threaded_worker_refuses_async_handlers_and_never_takes_an_awaitable_for_a_result(
        dsn: str, client: Client, queue: str, workers: list[Client]) -> None:
    # Adversarial finding: Worker took an async def handler, called it and got a coroutine for
    # every job: each was dead-lettered "ResultNotJSON" with its work never done, and Python
    # warned "coroutine was never awaited" at collection.
    async def send(job: Job) -> Any:
        return {"sent": True}

    from pgfence import WorkerOptionError
    with pytest.raises(WorkerOptionError) as info:
        start(dsn, queue, {"send": send, "echo": echo}, workers)
    assert info.value.option == "handlers['send']" and "AsyncWorker" in info.value.hint
    # a plain function that returns one (a lambda around it) is only seen when it returns
    job_id = client.enqueue("send", {}, queue=queue, max_attempts=5)
    made: list[Any] = []

    def wrapped(job: Job) -> Any:
        made.append(send(job))
        return made[-1]
    worker = start(dsn, queue, {"send": wrapped, "echo": echo}, workers)
    with running_bounded(worker):
        row = wait_status(client, job_id, "failed")
        ordinary = client.enqueue("echo", {"n": 1}, queue=queue)
        wait_all(client, [ordinary], "done")
    # closed unrun: not left to warn "was never awaited" at collection
    assert [inspect.getcoroutinestate(c) for c in made] == [inspect.CORO_CLOSED]
    assert row.attempts == 1 and row.last_error.startswith("HandlerReturnedAwaitable: handler for 'send' returned "
                                                           "coroutine"), row.last_error


def test_a_threaded_worker_runs_once(dsn: str, client: Client, queue: str, workers: list[Client]) -> None:
    job_id = client.enqueue("echo", {"n": 1}, queue=queue)
    worker = start(dsn, queue, {"echo": echo}, workers)
    with running_bounded(worker):
        wait_all(client, [job_id], "done")
        with pytest.raises(RuntimeError, match="already called"):
            worker.run()   # beside the first (it returns at once, claiming nothing)
    with pytest.raises(RuntimeError, match="already called"):
        worker.run()       # after it
    assert worker.counters["completed"] == 1
