"""The worker's parts alone: the in-flight ledger, the reporter, the heartbeats, stopping.

The end-to-end tests (tests/test_worker.py, tests/test_worker_robustness.py) run whole
workers against the database. These call one part at a time, with no thread, so each
decision the client makes itself (not the database) is pinned: which attempt counts,
which outcomes go together in one call, what an accepted, refused or failed call means
for the ledger. Most give the part a stand-in for its database calls (``FakeCalls``),
which answers as the SQL functions do and records what was sent; the last tests give the
reporter and the heartbeats the real Client.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Sequence

import psycopg
import pytest

from pgfence import Client, Interrupted, Job, Limits, Outcome, PermanentFailure, RawJson, RetryAfter, Snooze
from pgfence import aio_worker as aio_worker_module
from pgfence.aio_parts import AsyncReporter, wait_event
from pgfence import claimer as claimer_module
from pgfence.claimer import CLAIM_HOLDOFF, Claimer, ReadyBell, holdoff
from pgfence.handlers import run_handler
from pgfence.heartbeats import AFTER_EXPIRY, Heartbeats, chunks, interval
from pgfence.ledger import Entry, Ledger, LockedLedger, Result
from pgfence.reporter import MAX_REPORT_BATCH, Reporter, Reporting, due, split, take_batch
from pgfence.stopping import Stop, install_signals

W = "parts-test-worker"
LEASE = datetime(2030, 1, 1, tzinfo=timezone.utc)


def job(job_id: int, attempt: int = 1, kind: str = "k") -> Job:
    return Job(job_id, "q", kind, {}, attempt, 3, uuid.uuid4(), LEASE)


def counters() -> dict[str, int]:
    return {"claimed": 0, "completed": 0, "failed": 0, "lease_lost": 0, "released": 0, "snoozed": 0}


# ------------------------------------------------------------- the ledger ----
def test_admitted_jobs_wait_in_claim_order_and_count_against_the_capacity() -> None:
    ledger = Ledger()
    entries, displaced = ledger.admit([job(1), job(2), job(3)])
    assert displaced == [] and [e.id for e in entries] == [1, 2, 3]
    assert [e.id for e in ledger.ready] == [1, 2, 3] and ledger.free(5) == 2
    assert all(e.job._attempt is e for e in entries)
    first = ledger.take()
    assert first is entries[0] and ledger.running == {1: first} and [e.id for e in ledger.ready] == [2, 3]
    assert ledger.free(5) == 2  # running still holds its slot


def test_a_returned_handler_frees_its_slot_but_its_job_stays_held_until_settled() -> None:
    ledger = Ledger()
    [entry], _ = ledger.admit([job(1)])
    assert ledger.take() is entry
    result = Result(entry, True)
    ledger.finish(result)
    assert ledger.running == {} and ledger.finishing == {1} and list(ledger.results) == [result]
    assert ledger.free(1) == 1 and ledger.held_entries() == [entry] and ledger.unreported()
    ledger.results.popleft()
    ledger.settle([entry])
    assert ledger.held == {} and ledger.finishing == set() and not ledger.unreported()


def test_a_job_claimed_again_makes_its_running_attempt_lose_its_lease() -> None:
    ledger = Ledger()
    [old], _ = ledger.admit([job(7, attempt=1)])
    assert ledger.take() is old
    [new], displaced = ledger.admit([job(7, attempt=2)])
    assert displaced == [(old, new)]
    assert old.lost and old.job.lease_lost and old.job.should_stop()
    assert not new.lost and not new.job.lease_lost and ledger.held == {7: new}
    # The stale attempt returns: its outcome is void, and the newer attempt keeps the job.
    ledger.finish(Result(old, True))
    assert ledger.finishing == set() and ledger.held == {7: new}
    ledger.settle([old])
    assert ledger.held == {7: new}


def test_a_job_claimed_again_after_its_handler_returned_loses_nothing() -> None:
    # The outcome of the old attempt is on its way; the database says whether it counted.
    ledger = Ledger()
    [old], _ = ledger.admit([job(7, attempt=1)])
    assert ledger.take() is old
    ledger.finish(Result(old, False, "error"))
    [new], displaced = ledger.admit([job(7, attempt=2)])
    assert displaced == [] and not old.lost
    assert ledger.held == {7: new} and ledger.finishing == set()


def test_a_revoked_attempt_that_waited_never_starts_and_a_running_one_stays_held() -> None:
    ledger = Ledger()
    waiting, running, finishing = ledger.admit([job(1), job(2), job(3)])[0]
    ledger.ready.rotate(-1)  # (take 2 and 3 first)
    assert ledger.take() is running and ledger.take() is finishing
    ledger.finish(Result(finishing, True))
    assert ledger.revoke(waiting) and waiting.lost and 1 not in ledger.held
    assert ledger.revoke(running) and running.lost and ledger.held[2] is running
    assert not ledger.revoke(finishing) and not finishing.lost  # being reported: the database decides
    assert ledger.take() is None  # the revoked attempt left in ready is dropped
    assert not ledger.revoke(waiting)  # no longer held


def test_nothing_starts_once_the_worker_is_stopping_and_should_stop_says_so() -> None:
    stopping = threading.Event()
    ledger = Ledger(stopping.is_set)
    [entry], _ = ledger.admit([job(1)])
    assert not entry.job.should_stop()
    stopping.set()
    assert entry.job.should_stop() and not entry.job.lease_lost
    assert ledger.take() is None and [e.id for e in ledger.ready] == [1]


def test_the_shutdown_takes_the_unstarted_and_gives_back_the_running() -> None:
    ledger = Ledger()
    a, b, c, d = ledger.admit([job(1), job(2), job(3), job(4)])[0]
    assert ledger.take() is a and ledger.take() is b
    b.lost = True  # its heartbeat was refused while it ran
    assert ledger.any_running()
    assert ledger.unstarted() == [c, d] and not ledger.ready
    assert ledger.give_back_running() == [a, b]
    assert (a.lost, a.given_back) == (True, True)
    assert (b.lost, b.given_back) == (True, False)  # stays reported as a lost lease


def test_a_job_no_worker_holds_never_stops() -> None:
    j = job(1)
    assert not j.lease_lost and not j.should_stop()


def test_the_locked_ledger_runs_each_method_under_its_lock() -> None:
    class CountingLock:
        def __init__(self) -> None:
            self.entered = 0
            self.held = False

        def __enter__(self) -> None:
            assert not self.held, "re-entered"
            self.held = True
            self.entered += 1

        def __exit__(self, *exc: Any) -> None:
            self.held = False

    lock = CountingLock()
    ledger = LockedLedger(lock)
    [entry], _ = ledger.admit([job(1)])
    ledger.take()
    ledger.finish(Result(entry, True))
    ledger.free(1)
    ledger.settle([entry])
    assert lock.entered == 5 and not lock.held


# ---------------------------------------------------------- the reporter ----
def results_for(ledger: Ledger, *specs: tuple[int, bool]) -> list[Result]:
    """Admit, run and finish one attempt per (job id, ok); returns their results."""
    entries, _ = ledger.admit([job(i) for i, _ in specs])
    out = []
    for entry, (_, ok) in zip(entries, specs):
        assert ledger.take() is entry
        result = Result(entry, ok, RawJson('{"ok": true}') if ok else f"Boom: job {entry.id}")
        ledger.finish(result)
        out.append(result)
    ledger.results.clear()
    return out


def test_a_batch_whose_report_fails_counts_each_attempt_once_in_the_metrics() -> None:
    """The void attempts of a batch are counted (rejected) before anything is sent; when
    the complete_many after them raises, report_failed counts only the attempts not yet
    settled as unreported (it counted the whole batch, the void ones a second time)."""
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def ended(self, kind: str, outcome: str) -> None:
            self.calls.append(outcome)

    metrics = Recorder()
    ledger = LockedLedger(threading.Lock())
    batch = results_for(ledger, (1, True), (2, True), (3, True))
    batch[0].entry.lost = True
    reporting = Reporting(ledger, worker_id=W, counters=counters(), hurried=lambda: False,
                          metrics=metrics)  # type: ignore[arg-type]
    steps = reporting.report_steps(batch)
    assert next(steps).method == "complete_many"
    with pytest.raises(RuntimeError):
        steps.throw(RuntimeError("the connection's codec broke"))
    reporting.report_failed(batch)
    assert sorted(metrics.calls) == ["rejected", "unreported", "unreported"]
    assert ledger.held == {}


def test_a_batch_takes_at_most_the_limit_and_stops_before_a_second_attempt_of_a_job() -> None:
    ledger = Ledger()
    entries, _ = ledger.admit([job(i) for i in range(1, 6)])
    results = deque(Result(e, True) for e in entries)
    assert [r.entry.id for r in take_batch(results, 2)] == [1, 2]
    [again], _ = ledger.admit([job(3, attempt=2)])
    results.insert(1, Result(again, True))  # 3, 3 (attempt 2), 4, 5
    assert [r.entry.id for r in take_batch(results, 10)] == [3]
    assert [r.entry.id for r in take_batch(results, 10)] == [3, 4, 5] and not results


def test_outcomes_are_reported_when_a_batch_is_full_the_oldest_waited_or_the_worker_stops() -> None:
    assert not due(499, 0.004, flush_batch=500, flush_interval=0.005, stopping=False)
    assert due(500, 0.0, flush_batch=500, flush_interval=0.005, stopping=False)
    assert due(1, 0.005, flush_batch=500, flush_interval=0.005, stopping=False)
    assert due(1, 0.0, flush_batch=500, flush_interval=0.005, stopping=True)


def test_a_batch_splits_into_void_released_completed_and_failed() -> None:
    ledger = Ledger()
    a, b, c, d = ledger.admit([job(1), job(2), job(3), job(4)])[0]
    a.lost = True
    batch = [Result(a, True), Result(b, False, interrupted=True), Result(c, True), Result(d, False, "x")]
    s = split(batch)
    assert [[r.entry.id for r in part] for part in (s.void, s.interrupted, s.done, s.failed)] == [[1], [2], [3], [4]]
    e = ledger.admit([job(5)])[0][0]
    assert [r.entry.id for r in split([Result(e, False, None, snooze=timedelta(seconds=1))]).snoozed] == [5]


class FakeCalls:
    """complete_many/fail_many/release_many as the SQL answers them: a token in ``stale``
    is refused (accepted false), a result or error text in ``bad`` makes the whole call
    raise 22023 (refused for its values); ``errors`` are raised first, one per call."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int], list[Any]]] = []
        self.stale: set[int] = set()
        self.bad: set[str] = set()
        self.errors: list[BaseException] = []

    def _call(self, name: str, ids: Sequence[int], values: Sequence[Any]) -> None:
        self.sent.append((name, list(ids), list(values)))
        if self.errors:
            raise self.errors.pop(0)
        if any(str(v) in self.bad for v in values):
            raise psycopg.errors.InvalidParameterValue("refused for its values (test)")

    def complete_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                      results: Optional[Sequence[Any]] = None, *, refused_only: bool = False) -> list[Outcome]:
        assert refused_only
        self._call("complete", job_ids, list(results or []))
        return [Outcome(i, False, "cancelled", "the job was cancelled") for i in job_ids if i in self.stale]

    def fail_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], errors: Sequence[str], *,
                  retry_ins: Optional[Sequence[Optional[timedelta]]] = None,
                  permanents: Optional[Sequence[bool]] = None) -> list[Outcome]:
        self._call("fail", job_ids, list(errors))
        return [Outcome(i, i not in self.stale, None if i in self.stale else "queued",
                        "the job was cancelled" if i in self.stale else None) for i in job_ids]

    def release_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                     started: bool = True) -> list[Outcome]:
        self._call("release" if started else "release unstarted", job_ids, [])
        return [Outcome(i, i not in self.stale, None if i in self.stale else "queued", None) for i in job_ids]

    def snooze_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID],
                    delays: Sequence[timedelta]) -> list[Outcome]:
        self._call("snooze", job_ids, list(delays))
        return [Outcome(i, i not in self.stale, "processing" if i in self.stale else "queued",
                        "the lease was taken over" if i in self.stale else None) for i in job_ids]


@pytest.fixture(params=["threads", "asyncio"])
def driver(request: pytest.FixtureRequest) -> str:
    """Who makes the reporter's calls: the threaded worker's Reporter (blocking calls) or
    the asyncio worker's AsyncReporter (awaited): the same steps must decide the same."""
    return str(request.param)


class Awaited:
    """FakeCalls' methods as coroutines (what an AsyncReporter awaits)."""

    def __init__(self, calls: FakeCalls) -> None:
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.calls, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)
        return call


class AsyncDriven:
    """An AsyncReporter called like a Reporter: report() and release() run to completion
    on a fresh event loop."""

    def __init__(self, rep: AsyncReporter) -> None:
        self.rep = rep

    def report(self, batch: list[Result]) -> None:
        asyncio.run(self.rep.report(batch))

    def release(self, entries: list[Entry], *, started: bool) -> None:
        asyncio.run(self.rep.release(entries, started=started))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rep, name)


def reporter(calls: FakeCalls, ledger: Ledger, *, hurried: bool = False, limits: Limits = Limits(),
             driver: str = "threads") -> tuple[Any, dict[str, int], list[float]]:
    waits: list[float] = []
    c = counters()
    if driver == "asyncio":
        async def wait(seconds: float) -> None:
            waits.append(seconds)
        return AsyncDriven(AsyncReporter(Awaited(calls), ledger, worker_id=W, counters=c,  # type: ignore[arg-type]
                                         hurried=lambda: hurried, wait=wait, limits=limits)), c, waits
    return Reporter(calls, ledger, worker_id=W, counters=c, hurried=lambda: hurried, wait=waits.append,
                    limits=limits), c, waits


def test_accepted_outcomes_are_counted_and_settled_in_one_call_each(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    batch = results_for(ledger, (1, True), (2, False), (3, True))
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report(batch)
    assert [(name, ids) for name, ids, _ in calls.sent] == [("complete", [1, 3]), ("fail", [2])]
    assert (c["completed"], c["failed"], c["lease_lost"]) == (2, 1, 0)
    assert ledger.held == {} and ledger.finishing == set()


def test_snoozed_outcomes_go_in_one_snooze_many_call_and_a_refused_one_marks_its_lease_lost(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    entries, _ = ledger.admit([job(1), job(2), job(3)])
    batch = []
    for entry, outcome in zip(entries, [Result(entries[0], True, None),
                                        Result(entries[1], False, None, snooze=timedelta(minutes=1)),
                                        Result(entries[2], False, None, snooze=timedelta(seconds=5))]):
        assert ledger.take() is entry
        ledger.finish(outcome)
        batch.append(outcome)
    calls.stale = {3}
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report(batch)
    assert calls.sent == [("complete", [1], [None]), ("snooze", [2, 3], [timedelta(minutes=1), timedelta(seconds=5)])]
    assert (c["completed"], c["snoozed"], c["failed"], c["lease_lost"]) == (1, 1, 0, 1)
    assert ledger.held == {} and ledger.finishing == set()


def test_a_refused_outcome_marks_its_lease_lost_and_settles(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    batch = results_for(ledger, (1, True), (2, True), (3, False))
    calls.stale = {2, 3}
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report(batch)
    assert (c["completed"], c["failed"], c["lease_lost"]) == (1, 0, 2)
    assert [r.entry.lost for r in batch] == [False, True, True]
    assert batch[1].job.lease_lost and ledger.held == {}


def test_a_void_outcome_is_never_sent_and_an_interrupted_one_is_released(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    lost, interrupted = results_for(ledger, (1, True), (2, False))
    lost.entry.lost = True
    interrupted.interrupted = True
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report([lost, interrupted])
    assert [(name, ids) for name, ids, _ in calls.sent] == [("release", [2])]
    assert (c["completed"], c["released"]) == (0, 1) and ledger.held == {}


def test_a_result_the_database_refuses_is_found_alone_and_fails_the_attempt_instead(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    good, bad = results_for(ledger, (1, True), (2, True))
    bad.value = RawJson("not json")
    calls.bad = {"not json"}
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report([good, bad])
    assert [(name, ids) for name, ids, _ in calls.sent] == [
        ("complete", [1, 2]), ("complete", [1]), ("complete", [2]), ("fail", [2])]
    assert calls.sent[-1][2][0].startswith("ResultNotStorable: the database refused the handler's result")
    assert (c["completed"], c["failed"]) == (1, 1) and ledger.held == {}


def test_a_failure_refused_twice_is_left_to_its_lease(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    [failed] = results_for(ledger, (1, False))
    calls.errors = [psycopg.errors.InvalidParameterValue("first (test)"),
                    psycopg.errors.InvalidParameterValue("second (test)")]
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.report([failed])
    assert [name for name, _, _ in calls.sent] == ["fail", "fail"]
    assert calls.sent[1][2][0].startswith("FailureNotStorable:")
    assert c["failed"] == 0 and ledger.held == {}


def test_a_lost_connection_is_retried_and_a_second_signal_gives_up(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    batch = results_for(ledger, (1, True))
    calls.errors = [psycopg.OperationalError("connection lost (test)")]
    rep, c, waits = reporter(calls, ledger, driver=driver)
    rep.report(batch)
    assert len(calls.sent) == 2 and waits == [0.05] and c["completed"] == 1

    ledger, calls = Ledger(), FakeCalls()
    batch = results_for(ledger, (1, True))
    calls.errors = [psycopg.OperationalError("connection lost (test)")]
    rep, c, waits = reporter(calls, ledger, hurried=True, driver=driver)
    rep.report(batch)
    assert len(calls.sent) == 1 and waits == [] and c["completed"] == 0 and ledger.held == {}


def test_an_unexpected_error_drops_the_batch_without_killing_the_flusher(caplog: pytest.LogCaptureFixture,
                                                                        driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    batch = results_for(ledger, (1, True), (2, True))
    calls.errors = [RuntimeError("boom (test)")]
    rep, c, _ = reporter(calls, ledger, driver=driver)
    with caplog.at_level(logging.ERROR, logger="pgfence.worker"):
        rep.report(batch)  # does not raise
    assert "reporting 2 outcomes failed" in caplog.text and ledger.held == {} and c["completed"] == 0


def test_a_report_call_carries_at_most_the_smaller_of_1000_and_the_batch_limit(driver: str) -> None:
    assert reporter(FakeCalls(), Ledger(), driver=driver)[0].max_batch == MAX_REPORT_BATCH == 1000
    assert reporter(FakeCalls(), Ledger(), limits=Limits(batch=300), driver=driver)[0].max_batch == 300


def test_a_refused_release_is_not_reported_as_given_back(driver: str) -> None:
    ledger, calls = Ledger(), FakeCalls()
    a, b = ledger.admit([job(1), job(2)])[0]
    ledger.take(), ledger.take()
    ledger.give_back_running()
    calls.stale = {2}
    rep, c, _ = reporter(calls, ledger, driver=driver)
    rep.release([a, b], started=True)
    assert (a.given_back, b.given_back) == (True, False) and c["released"] == 1 and ledger.held == {}


def test_a_release_of_more_jobs_than_a_call_takes_is_split(driver: str) -> None:
    """At shutdown every unstarted job goes back: more than the batch limit (a prefetch
    above 10,000) used to go in one release_many, which the database refuses (22023)."""
    ledger, calls = Ledger(), FakeCalls()
    entries = ledger.admit([job(i) for i in range(1, 6)])[0]
    rep, c, _ = reporter(calls, ledger, limits=Limits(batch=2), driver=driver)
    rep.release(entries, started=False)
    assert [ids for _, ids, _ in calls.sent] == [[1, 2], [3, 4], [5]]
    assert c["released"] == 5 and ledger.held == {}


# -------------------------------------------------------- the heartbeats ----
class FakeRenews:
    def __init__(self, refused: set[int], fail_after: Optional[int] = None) -> None:
        self.refused = refused
        self.calls: list[list[int]] = []
        self.fail_after = fail_after

    def heartbeat_many(self, job_ids: Sequence[int], attempt_tokens: Sequence[uuid.UUID], *,
                       lease: timedelta = timedelta(seconds=30)) -> list[Outcome]:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise psycopg.OperationalError("connection lost (test)")
        self.calls.append(list(job_ids))
        return [Outcome(i, i not in self.refused, None, "lease expired" if i in self.refused else None)
                for i in job_ids]


def test_heartbeats_renew_every_held_attempt_in_calls_of_the_batch_limit() -> None:
    ledger = Ledger()
    ledger.admit([job(i) for i in range(1, 6)])
    calls = FakeRenews(set())
    Heartbeats(calls, ledger, worker_id=W, lease=timedelta(seconds=3), counters=counters(),
               limits=Limits(batch=2)).beat()
    assert calls.calls == [[1, 2], [3, 4], [5]]
    assert [len(c) for c in chunks(ledger.held_entries(), 10_000)] == [5]
    assert interval(timedelta(seconds=30)) == 10.0 and interval(timedelta(milliseconds=3)) == 0.01


def test_a_refused_heartbeat_revokes_what_is_not_being_reported() -> None:
    ledger = Ledger()
    waiting, running, finishing, fine = ledger.admit([job(1), job(2), job(3), job(4)])[0]
    ledger.ready.rotate(-1)
    assert ledger.take() is running and ledger.take() is finishing
    ledger.finish(Result(finishing, True))
    c = counters()
    Heartbeats(FakeRenews({1, 2, 3}), ledger, worker_id=W, lease=timedelta(seconds=3), counters=c).beat()
    assert (waiting.lost, running.lost, finishing.lost, fine.lost) == (True, True, False, False)
    assert c["lease_lost"] == 2 and set(ledger.held) == {2, 3, 4}


def test_a_heartbeat_round_that_loses_its_connection_ends_quietly() -> None:
    ledger = Ledger()
    ledger.admit([job(i) for i in range(1, 6)])
    calls = FakeRenews({1}, fail_after=1)
    c = counters()
    Heartbeats(calls, ledger, worker_id=W, lease=timedelta(seconds=3), counters=c, limits=Limits(batch=2)).beat()
    assert calls.calls == [[1, 2]] and c["lease_lost"] == 1 and set(ledger.held) == {2, 3, 4, 5}


# ------------------------------------------------------------ the claimer ----
def test_holdoff_follows_only_a_claim_a_wake_up_prompted_and_that_found_too_little() -> None:
    assert holdoff(drained=True, after_wake=True, waited=0.001) == pytest.approx(CLAIM_HOLDOFF - 0.001)
    assert holdoff(drained=True, after_wake=True, waited=CLAIM_HOLDOFF + 0.001) == 0
    assert holdoff(drained=True, after_wake=False, waited=0.0) == 0  # after a poll's claim
    assert holdoff(drained=False, after_wake=True, waited=0.0) == 0  # the claim got what it asked for


@pytest.mark.parametrize("asynchronous", [False, True], ids=["Worker", "AsyncWorker"])
def test_a_wake_up_right_after_a_polls_empty_claim_is_claimed_at_once(
        asynchronous: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims that find nothing, each followed at once by a wake-up (a NOTIFY during the
    claim). The first claim followed a poll (no wake-up before it): the loop asks holdoff
    with after_wake False, so the claim after its wake-up is made at once. The next
    ones followed a wake-up: after_wake True, so the next claim waits out CLAIM_HOLDOFF
    (a flood costs one claim per 5 ms). The old rule held every wake-up within 5 ms of
    any empty claim, a poll's included. (holdoff's answers are recorded, not timed: the
    loop's own pauses are the machine's.)"""
    asked: list[tuple[bool, bool]] = []

    def recording(drained: bool, after_wake: bool, waited: float) -> float:
        asked.append((drained, after_wake))
        return 0.0  # (no wait: the decision is what is tested)
    monkeypatch.setattr(claimer_module, "holdoff", recording)
    monkeypatch.setattr(aio_worker_module, "holdoff", recording)
    if not asynchronous:
        stop = Stop()
        wake = threading.Event()

        class Calls:
            claims = 0

            def claim(self, *args: Any, **kwargs: Any) -> list[Job]:
                Calls.claims += 1
                if Calls.claims == 3:
                    stop.stopping.set()
                wake.set()  # a NOTIFY arrives while it runs
                return []
        claimer = Claimer(Calls(), Ledger(), stop, worker_id=W, queues=["q"], lease=timedelta(seconds=30),
                          capacity=8, poll_interval=30.0, counters={"claimed": 0, "lease_lost": 0}, wake=wake,
                          work=ReadyBell())
        runner = threading.Thread(target=claimer.run, daemon=True)
        runner.start()
        runner.join(10)
        assert not runner.is_alive()
    else:
        async def main() -> None:
            from pgfence.aio import AsyncWorker

            class AsyncCalls:
                pool = object()  # (AsyncWorker wants a client with a pool; this loop never uses it)
                claims = 0

                async def claim(self, *args: Any, **kwargs: Any) -> list[Job]:
                    AsyncCalls.claims += 1
                    if AsyncCalls.claims == 3:
                        worker._stop.stopping.set()
                        worker._stopping.set()
                    worker._wake.set()  # a NOTIFY arrives while it runs
                    return []
            worker = AsyncWorker(AsyncCalls(), {"k": lambda job: None}, queues=["q"], concurrency=8,  # type: ignore[arg-type]
                                 poll_interval=30.0, listen=False, run_sweeper=False, limits=Limits())
            worker._wake, worker._stopping = asyncio.Event(), asyncio.Event()  # (what run() makes on its loop)
            await asyncio.wait_for(worker._claim_loop(), 10)
        asyncio.run(main())
    assert asked == [(True, False), (True, True), (True, True)]


# ------------------------------------------------------------- stopping ----
def test_the_ready_bell_wakes_one_handler_thread_per_job_and_every_one_at_a_stop() -> None:
    """ring(n) wakes at most n sleeping handler threads (an Event woke all of them for one
    job); ring_all() wakes the rest; a thread never sleeps while a job is ready or the
    worker is stopping, so a ring made before it got to sleep is not missed."""
    bell, ready, stopping = ReadyBell(), deque[int](), threading.Event()
    woke: list[str] = []

    def sleeper(name: str) -> None:
        bell.wait(ready, stopping, 60.0)
        woke.append(name)
    threads = [threading.Thread(target=sleeper, args=(f"t{i}",), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(bell._cond._waiters) < 4 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    assert len(bell._cond._waiters) == 4  # type: ignore[attr-defined]
    bell.ring(1)
    while not woke and time.monotonic() < deadline:
        time.sleep(0.01)
    bell.ring(2)
    while (len(woke) < 3 or sum(t.is_alive() for t in threads) > 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(woke) == 3 and sum(t.is_alive() for t in threads) == 1  # (the fourth sleeps on: 60 s)
    bell.ring_all()
    for t in threads:
        t.join(10)
    assert len(woke) == 4

    # Nothing to sleep for, no ring needed: a job is ready, or the worker is stopping.
    def returns_at_once() -> bool:
        t = threading.Thread(target=bell.wait, args=(ready, stopping, 60.0), daemon=True)
        t.start()
        t.join(10)
        return not t.is_alive()
    ready.append(1)
    assert returns_at_once()
    ready.clear()
    stopping.set()
    assert returns_at_once()


def test_the_first_signal_stops_and_the_second_hurries() -> None:
    stop = Stop()
    assert stop.signal(signal.SIGTERM, W) is False and not stop.hurry.is_set()
    assert stop.signal(signal.SIGINT, W) is True and stop.hurry.is_set()
    assert not stop.stopping.is_set()  # the worker's stop() sets it


def test_installed_signals_reach_the_callback_on_a_watcher_thread_and_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    got: list[tuple[int, str]] = []
    arrived = threading.Event()

    def on_signal(signum: int) -> None:
        got.append((signum, threading.current_thread().name))
        arrived.set()

    restore = install_signals(on_signal)
    try:
        signal.raise_signal(signal.SIGTERM)
        assert arrived.wait(5)
    finally:
        restore()
    assert got == [(signal.SIGTERM, "pgfence-signals")]
    assert signal.getsignal(signal.SIGTERM) == before


# ---------------------------------------------------- limits and handlers ----
def test_limits_from_rows_take_the_names_they_know_and_keep_the_rest() -> None:
    rows = [("max_jobs", 500, "jobs per claim"), ("batch", 2000, "elements per batch call"),
            ("some_future_limit", 7, "unknown here"), ("json_depth", None, "no value")]
    limits = Limits.from_rows(rows + [{"name": "error_chars", "value": 99, "description": ""}])
    assert (limits.max_jobs, limits.batch, limits.error_chars, limits.json_depth) == (500, 2000, 99, 64)
    assert Limits.from_rows([]) == Limits()
    assert (Limits().max_jobs, Limits().batch, Limits().queues, Limits().payload_bytes) == (1000, 10_000, 10_000, 1_048_576)
    with pytest.raises(AttributeError):
        Limits().batch = 1  # type: ignore[misc]


def test_a_handler_outcome_names_the_retry_bound_of_the_limits() -> None:
    def later(j: Job) -> Any:
        raise RetryAfter(timedelta(days=2))

    entry = Entry(job(1, kind="later"))
    assert run_handler(entry, {"later": later}, W).retry_in == timedelta(days=2)
    short = run_handler(entry, {"later": later}, W, Limits(retry_in_max_s=86400))
    assert short.retry_in is None and short.value is not None
    assert short.value.startswith("RetryAfter with delay datetime.timedelta(days=2) outside 0..1 days")


def test_a_handler_raising_snooze_asks_for_a_snooze_within_the_limits() -> None:
    def later(j: Job) -> Any:
        raise Snooze(timedelta(days=2))

    def never(j: Job) -> Any:
        raise Snooze(timedelta(0))

    entry = Entry(job(1, kind="later"))
    got = run_handler(entry, {"later": later}, W)
    assert (got.ok, got.snooze, got.value, got.retry_in) == (False, timedelta(days=2), None, None)
    short = run_handler(entry, {"later": later}, W, Limits(snooze_max_s=86400))
    assert short.snooze is None and short.value is not None
    assert short.value.startswith("Snooze with delay datetime.timedelta(days=2) outside (0, 1 days]")
    zero = run_handler(Entry(job(1, kind="never")), {"never": never}, W)
    assert zero.snooze is None and (zero.value or "").startswith("Snooze with delay")


def test_a_handler_outcome_says_what_the_handler_did() -> None:
    def stop(j: Job) -> Any:
        raise Interrupted()

    def dead(j: Job) -> Any:
        raise PermanentFailure("no")

    handlers = {"stop": stop, "dead": dead, "ok": lambda j: {"n": 1}}
    assert run_handler(Entry(job(1, kind="stop")), handlers, W).interrupted
    assert run_handler(Entry(job(1, kind="dead")), handlers, W).permanent
    ok = run_handler(Entry(job(1, kind="ok")), handlers, W)
    assert (ok.ok, ok.value) == (True, '{"n": 1}')
    unknown = run_handler(Entry(job(1, kind="nope")), handlers, W)
    assert unknown.permanent and (unknown.value or "").startswith("UnknownKind: no handler for kind 'nope'")


# ------------------------------------------------ against the database ----
def test_the_reporter_and_the_heartbeats_against_the_database(client: Client, queue: str) -> None:
    ids = [client.enqueue("k", {"n": n}, queue=queue) for n in range(4)]
    ledger = Ledger()
    entries, _ = ledger.admit(client.claim(W, [queue], lease=timedelta(seconds=30), max_jobs=4))
    by_id = {e.id: e for e in entries}
    assert sorted(by_id) == sorted(ids)
    client.cancel(ids[3])  # its token is no longer current
    c = counters()
    Heartbeats(client, ledger, worker_id=W, lease=timedelta(seconds=30), counters=c).beat()
    assert by_id[ids[3]].lost and ids[3] not in ledger.held and c["lease_lost"] == 1  # never started: dropped
    batch = []
    for _ in range(3):
        entry = ledger.take()
        assert entry is not None
        n = entry.job.payload["n"]  # 0: done, 1: failed, 2: interrupted
        batch.append(Result(entry, n == 0, RawJson('{"done": true}') if n == 0 else "Boom" if n == 1 else None,
                            interrupted=n == 2))
        ledger.finish(batch[-1])
    client.cancel(ids[0])  # refused at report time
    Reporter(client, ledger, worker_id=W, counters=c, hurried=lambda: False, wait=lambda s: None).report(
        take_batch(ledger.results, 1000))
    rows = {i: client.get_job(i) for i in ids}
    assert [(rows[i].status, rows[i].result) for i in ids] == [
        ("cancelled", None), ("queued", None), ("queued", None), ("cancelled", None)]
    assert (c["completed"], c["failed"], c["released"], c["lease_lost"]) == (0, 1, 1, 2)
    assert rows[ids[1]].last_error == "Boom" and ledger.held == {} and not ledger.unreported()


def test_heartbeats_ask_once_just_after_a_capped_lease_ends_and_never_spin() -> None:
    """A run timeout caps a lease at the deadline: the next round comes just after that end
    (AFTER_EXPIRY), not a third of the lease later; once a round was made for an end, a
    clock running ahead (the database accepted the heartbeat, same end) cannot make the
    rounds spin: the regular interval applies again."""
    now = datetime.now(timezone.utc)
    ledger = Ledger()
    [capped, plain] = ledger.admit([job(1), job(2)])[0]
    capped.expires, plain.expires = now + timedelta(seconds=2), now + timedelta(seconds=30)
    hb = Heartbeats(FakeRenews(set()), ledger, worker_id=W, lease=timedelta(seconds=30), counters=counters())
    assert hb.next_wait(now) == pytest.approx(2 + AFTER_EXPIRY)
    assert hb.next_wait(now + timedelta(seconds=3)) == 0.01  # due
    capped.expires = now - timedelta(seconds=1)  # (as if the deadline had passed)
    hb.beat()  # accepted by the fake: no lease_expires_at in its reply, the end stays
    assert hb.next_wait() == pytest.approx(10.0, abs=0.5)
    # A new end (a heartbeat that renewed it) is asked about again.
    capped.expires = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert hb.next_wait() < 1.5


def test_wait_event_says_set_or_timed_out_and_never_swallows_a_cancel() -> None:
    """wait_event: True when the event is set, False after the timeout; and a cancel that
    arrives in the same turn of the loop as the event is set still cancels the waiter
    (asyncio.wait_for, before Python 3.12, returned True instead, every time: a cancelled
    AsyncWorker.run() went on claiming when a job finished as it was cancelled)."""
    async def body() -> tuple[bool, bool, int]:
        ev = asyncio.Event()
        timed_out = await wait_event(ev, 0.01)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, ev.set)
        was_set = await wait_event(ev, 5)
        kept = 0
        for _ in range(50):
            ev = asyncio.Event()
            task = asyncio.ensure_future(wait_event(ev, 5))
            await asyncio.sleep(0.001)
            ev.set()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                kept += 1
        return timed_out, was_set, kept
    assert asyncio.run(body()) == (False, True, 50)


def test_a_logged_exception_and_its_traceback_are_escaped(caplog: pytest.LogCaptureFixture) -> None:
    # A database error's message may quote what a caller sent (a queue name, an error
    # text): an exception logged as an argument, and the traceback of log.exception, are
    # written with ESC, bidi and line-breaking characters escaped (a newline in a message
    # would otherwise forge a line of the log); the frames keep their own line breaks.
    from pgfence._text import escaped_logger
    log = escaped_logger("pgfence.worker")

    def fails() -> None:
        try:
            raise KeyError("inner \x1b[31m")
        except KeyError as exc:
            raise RuntimeError("outer \x1b[2J\nFORGED line \u202e") from exc

    with caplog.at_level(logging.DEBUG, logger="pgfence.worker"):
        try:
            fails()
        except RuntimeError as exc:
            log.warning("claim failed (%s)", exc)
            log.exception("worker %s: claiming failed", "w\x1b]0;title\x07")
    text = caplog.text
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert not any(line.startswith("FORGED") for line in text.splitlines()), text
    assert "claim failed (outer \\u001b[2J\\u000aFORGED line \\u202e)" in text
    assert "RuntimeError: outer \\u001b[2J\\u000aFORGED line \\u202e" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert "in fails" in text and "Traceback (most recent call last):" in text
