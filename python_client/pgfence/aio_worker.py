"""The asyncio worker: :class:`AsyncWorker`, the threaded :class:`~pgfence.Worker`'s runtime on an event loop.

The same parts, each a task of the loop around one :class:`~pgfence.ledger.Ledger` (no
lock: only the loop touches it), deciding as the threaded worker does with the same code:

* the claimer (the task that awaits :meth:`AsyncWorker.run`) claims up to
  ``concurrency + prefetch`` with :meth:`AsyncClient.claim`, looks up a claim whose reply
  was lost with ``claim_results``, and enters jobs in the ledger
  (:func:`pgfence.claimer.admit`);
* ``concurrency`` runner tasks take ready attempts and run their handlers: an
  ``async def`` handler is awaited on the loop, any other runs on one of
  ``concurrency`` daemon threads (:class:`~pgfence.aio_parts.HandlerThreads`); what a
  return or raise becomes is :mod:`pgfence.handlers`' (``refusal``, ``raised``, ``returned``);
* the flusher reports outcomes in batches (``complete_many``, ``fail_many``,
  ``snooze_many``): when is :func:`pgfence.reporter.due` and :func:`~pgfence.reporter.take_batch`, what to send and what the answers mean are the
  steps of :class:`pgfence.reporter.Reporting`, which
  :class:`~pgfence.aio_parts.AsyncReporter` awaits;
* the heartbeat task renews every held lease with ``heartbeat_many`` every ``lease / 3``,
  and just after a lease capped by a run timeout ends (:class:`pgfence.heartbeats.Rounds`
  decides when, :func:`pgfence.heartbeats.revoke_refused` reads the answers);
* the LISTEN wake-up is the threaded :class:`~pgfence.listener.Listener`, on a thread of
  its own with its own connection, and the stand-in sweeper is :func:`pgfence.sweeper.run`
  on another, calling the AsyncClient through the loop;
* given ``metrics_port``, the ``/metrics`` server of :mod:`pgfence.worker_metrics`, on a
  thread of its own, recording what the runners and the reporter tell it.

Stopping: :meth:`AsyncWorker.stop` (callable from any thread) or SIGTERM/SIGINT (through
the loop's ``add_signal_handler`` when run in the main thread) stops claiming, gives
unstarted jobs back, waits ``shutdown_grace`` for running handlers and gives the rest
back; async handlers still running then are cancelled (their attempts were released and
their results would be void; one that ignores its cancellation is left on the loop after 5
s, and :meth:`AsyncWorker.run` returns all the same); a second signal, or a cancellation
of :meth:`AsyncWorker.run` during the shutdown, hurries it.
A plain handler that returns an awaitable (a lambda around an ``async def``) has it awaited
on the loop.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Optional, Sequence, Union

from . import sweeper
from ._text import escaped_logger
from .aio_client import AsyncClient
from .aio_parts import AsyncReporter, BlockingCalls, HandlerThreads, wait_event
from .claimer import SHUTDOWN_LOOKUP_WAIT, admit, claim_size, holdoff, idle_wait, may_have_claimed
from .handlers import Handler, Pending, called, is_async, raised, refusal, returned
from .heartbeats import Rounds, chunks, interval, revoke_refused
from .ledger import Entry, Ledger, Result
from .limits import Limits
from .listener import Listener
from .models import Job
from .reporter import due, take_batch
from .retries import RETRYABLE
from .stopping import Stop
from .worker_options import WorkerOptions

if TYPE_CHECKING:
    from .worker_metrics import WorkerMetrics

log = escaped_logger("pgfence.worker")

#: A handler of the asyncio worker: ``async def handler(job) -> result``, or a plain
#: function (run on a thread).
AsyncHandler = Union[Callable[[Job], Awaitable[Any]], Handler]


class AsyncWorker(WorkerOptions):
    """Runs handlers for claimed jobs on an event loop until stopped: ``await worker.run()``.

    The options of :class:`pgfence.Worker`, with these differences:

    * ``handlers``: ``{kind: async def handler(job) -> JSON-able result}``; a plain
      function runs on a thread of the worker's own pool of ``concurrency`` threads (it
      may block; an ``async def`` handler must not).
    * ``concurrency`` [8]: handlers running at once (async and sync together).
    * ``limits`` [read from ``pgfence.limits()`` when :meth:`run` starts].
    * ``client``: an :class:`AsyncClient` with its own pool (``await AsyncClient.connect(dsn)``).
    * ``metrics_port`` [None: no metrics] and ``metrics_bind`` ["127.0.0.1"]: as
      :class:`pgfence.Worker`'s (the server runs on a thread of its own, from the start of
      :meth:`run`, before it claims anything, until it returns; ``metrics_address``).
    """

    def __init__(self, client: AsyncClient, handlers: Mapping[str, AsyncHandler], *,
                 queues: Optional[Sequence[str]] = None, queue_set: Optional[str] = None,
                 concurrency: int = 8, prefetch: int = 0,
                 lease: timedelta = timedelta(seconds=30), poll_interval: float = 1.0,
                 shutdown_grace: float = 30.0, run_sweeper: Optional[bool] = None,
                 sweep_interval: float = 1.0, flush_interval: float = 0.005, flush_batch: int = 500,
                 worker_id: Optional[str] = None, listen: bool = True, limits: Optional[Limits] = None,
                 metrics_port: Optional[int] = None, metrics_bind: str = "127.0.0.1") -> None:
        if client.pool is None:
            raise TypeError("AsyncWorker needs an AsyncClient with its own pool: await AsyncClient.connect(dsn)")
        self._check_options(handlers, queues=queues, queue_set=queue_set, concurrency=concurrency, prefetch=prefetch,
                            lease=lease, poll_interval=poll_interval, shutdown_grace=shutdown_grace,
                            run_sweeper=run_sweeper, sweep_interval=sweep_interval, flush_interval=flush_interval,
                            flush_batch=flush_batch, worker_id=worker_id, listen=listen, limits=limits)
        self.client = client
        self.limits = limits
        self._async_kinds = {kind for kind, h in self.handlers.items() if is_async(h)}
        self._stop = Stop()
        self._ledger = Ledger(self._stop.stopping.is_set)
        self.metrics_port = metrics_port
        self.metrics_bind = metrics_bind
        self._metrics: Optional[WorkerMetrics] = None
        if metrics_port is not None:  # (else nothing of it is imported)
            from .worker_metrics import create
            self._metrics = create(self._ledger, self.handlers, port=metrics_port, bind=metrics_bind)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._threads: Optional[HandlerThreads] = None
        # The claim whose reply was lost (see pgfence.claimer), and until when to look it up.
        self._unanswered: Optional[uuid.UUID] = None
        self._unanswered_until = 0.0
        # The runner tasks the shutdown cancelled: a CancelledError in any other comes from
        # its handler, and fails the attempt.
        self._cancelled: set[asyncio.Task[Any]] = set()

    @property
    def metrics_address(self) -> Optional[tuple[str, int]]:
        """``(host, port)`` of the metrics server while :meth:`run` serves it, else None."""
        return None if self._metrics is None else self._metrics.address

    # -- public -----------------------------------------------------------

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM/SIGINT do); may be called from any thread."""
        self._stop.stopping.set()
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake_all)
            except RuntimeError:  # the loop is closed: run() is over
                pass

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT when ``handle_signals`` and run from the
        main thread; pass False where the application owns the signals, as uvicorn does); once
        (a second call raises RuntimeError)."""
        self._running_once()
        metrics = self._metrics
        if metrics is None:
            await self._run(handle_signals)
            return
        metrics.start()  # before anything is claimed: a port in use fails here, with nothing to undo
        try:
            await self._run(handle_signals)
        finally:
            # (its shutdown waits up to the server's poll interval: not on the loop)
            await asyncio.get_running_loop().run_in_executor(None, metrics.stop)

    async def _run(self, handle_signals: bool) -> None:
        # (asyncio events are made here, on the running loop, before stop() may use them)
        self._wake, self._work, self._outcome = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._stopping, self._hurry, self._done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = self._loop = asyncio.get_running_loop()
        if self._stop.stopping.is_set():
            self._wake_all()
        if self.limits is None:
            self.limits = await self.client.limits()
        hurry = self._hurry
        self._reporter = AsyncReporter(self.client, self._ledger, worker_id=self.worker_id, counters=self.counters,
                                       hurried=self._stop.hurry.is_set,
                                       wait=lambda seconds: wait_event(hurry, seconds), limits=self.limits,
                                       metrics=self._metrics)
        if set(self.handlers) - self._async_kinds:
            self._threads = HandlerThreads(self.concurrency, loop)
        signals = self._install_signals(loop) if handle_signals else []
        flusher = asyncio.ensure_future(self._flush_loop())
        beats = asyncio.ensure_future(self._heartbeat_loop())
        self._runners = [asyncio.ensure_future(self._runner()) for _ in range(self.concurrency)]
        threads = self._start_threads(loop)
        log.info("worker %s started (asyncio): queues=%s concurrency=%s prefetch=%s lease=%s", self.worker_id,
                 self.queues or (f"set {self.queue_set}" if self.queue_set else "all"), self.concurrency,
                 self.capacity - self.concurrency, self.lease)
        try:
            try:
                await self._claim_loop()
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    log.info("worker %s: run() was cancelled; shutting down", self.worker_id)
                else:
                    log.exception("worker %s: claiming failed; shutting down", self.worker_id)
                self.stop()
                self._wake_all()
                await self._shutdown_to_its_end()
                raise
            if await self._shutdown_to_its_end():
                raise asyncio.CancelledError()
        finally:
            self._stop.done.set()
            self._done.set()
            self._outcome.set()
            try:
                await asyncio.wait([flusher, beats], timeout=5)
                # What is still running now (runners; a flusher still retrying after 5 s) is
                # cancelled, not left behind on the loop: its outcomes are left to the leases.
                leftover = [t for t in [flusher, beats, *self._runners] if not t.done()]
                self._cancel(leftover)
                if leftover:
                    # (bounded: an async handler may catch its CancelledError and go on)
                    _, deaf = await asyncio.wait(leftover, timeout=5)
                    if deaf:
                        log.warning("worker %s: %s task(s) ignored their cancellation and are left running on "
                                    "the loop (their attempts were given back; their results are void)",
                                    self.worker_id, len(deaf))
            finally:  # (also when cancelled in those waits: the signals and the threads are not left behind)
                for s in signals:
                    loop.remove_signal_handler(s)
                if self._threads is not None:
                    self._threads.close()
            for t in threads:
                await loop.run_in_executor(None, t.join, 5)
            log.info("worker %s stopped: %s", self.worker_id, self.counters)

    # -- claiming -----------------------------------------------------------

    async def _claim_loop(self) -> None:
        """Claim until stopping: the loop of :meth:`pgfence.claimer.Claimer.run`, awaited, with
        its decisions (``claim_size``, ``idle_wait``, ``holdoff``, ``may_have_claimed``, ``admit``)."""
        assert self.limits is not None
        backoff = 0.1
        threshold = max(1, self.capacity // 2)
        ledger, wake, stopping = self._ledger, self._wake, self._stop.stopping
        max_jobs = self.limits.max_jobs
        after_wake = False  # the next claim follows a wake-up (see holdoff)
        while not stopping.is_set():
            wake.clear()
            free = ledger.free(self.capacity)
            idle_runners = not ledger.ready
            drained = False
            if self._unanswered is not None and time.monotonic() > self._unanswered_until:
                log.warning("worker %s: gave up looking up the claim whose reply was lost (request %s) after its "
                            "lease; its jobs, if it took any, are reclaimed as their leases expire",
                            self.worker_id, self._unanswered)
                self._unanswered = None
            if self._unanswered is not None:
                try:
                    await self._recover_unanswered()
                    backoff = 0.1
                except RETRYABLE as exc:
                    log.warning("worker %s: looking up a claim whose reply was lost failed (%s); retrying in %.1fs",
                                self.worker_id, str(exc).strip(), backoff)
                    await wait_event(self._stopping, backoff)
                    backoff = min(backoff * 2, 5.0)
                continue
            want = claim_size(free, threshold, idle_runners, max_jobs)
            if want:
                request_id = uuid.uuid4()
                try:
                    jobs = await self.client.claim(self.worker_id, self.queues, lease=self.lease, max_jobs=want,
                                                   request_id=request_id, queue_set=self.queue_set)
                    backoff = 0.1
                except asyncio.CancelledError:
                    # run() was cancelled with the claim in flight: it may have committed (its
                    # reply unread). The shutdown looks it up and gives its jobs back unstarted.
                    self._unanswered = request_id
                    self._unanswered_until = time.monotonic() + self.lease.total_seconds()
                    raise
                except RETRYABLE as exc:
                    if may_have_claimed(exc):
                        self._unanswered = request_id
                        self._unanswered_until = time.monotonic() + self.lease.total_seconds()
                    log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id,
                                str(exc).strip(), backoff)
                    await wait_event(self._stopping, backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self._dispatch(jobs)
                if len(jobs) == want:
                    continue
                drained = True
            waited_from = time.monotonic()
            woken = await wait_event(wake, idle_wait(drained, free, self.poll_interval))
            rest = holdoff(drained, after_wake, time.monotonic() - waited_from)
            if rest > 0:
                await wait_event(self._stopping, rest)
            after_wake = woken

    async def _recover_unanswered(self, wait: Optional[float] = None) -> None:
        """Take over the jobs of the claim whose reply was lost (see
        :meth:`pgfence.claimer.Claimer.recover_unanswered`)."""
        assert self._unanswered is not None and self.client.pool is not None
        try:
            if wait is None:
                jobs = await self.client.claim_results(self.worker_id, [self._unanswered], lease=self.lease)
            else:
                async with self.client.pool.connection(timeout=wait) as conn:
                    jobs = await AsyncClient(conn, check_schema=False).claim_results(
                        self.worker_id, [self._unanswered], lease=self.lease)
        except RETRYABLE:
            raise
        except Exception:
            log.exception("worker %s: could not look up the claim whose reply was lost (request %s); its jobs, "
                          "if it took any, wait for their leases to expire", self.worker_id, self._unanswered)
            jobs = []
        self._unanswered = None
        if jobs:
            log.warning("worker %s: the claim whose reply was lost had taken %s jobs (%s)",
                        self.worker_id, len(jobs), [j.id for j in jobs][:20])
        self._dispatch(jobs)

    def _dispatch(self, jobs: list[Job]) -> None:
        if jobs:
            admit(self._ledger, jobs, self.counters)
            self._work.set()

    # -- running -------------------------------------------------------------

    async def _runner(self) -> None:
        ledger, work, stopping, done = self._ledger, self._work, self._stop.stopping, self._stop.done
        metrics = self._metrics
        while not done.is_set():
            entry = ledger.take()
            if entry is None:
                if stopping.is_set():
                    return
                work.clear()
                await work.wait()
                continue
            if metrics is None:
                ledger.finish(await self._run_one(entry))
            else:
                started = metrics.starting(entry)
                result = await self._run_one(entry)
                metrics.ran(entry, started)
                ledger.finish(result)
            self._outcome.set()
            if len(ledger.ready) < self.concurrency:
                self._wake.set()
            await asyncio.sleep(0)  # let the flusher, heartbeats and claimer in between jobs

    async def _run_one(self, entry: Entry) -> Result:
        """The handler's outcome: awaited here (async), or run on a handler thread (sync)."""
        assert self.limits is not None
        refused = refusal(entry, self.handlers, self.worker_id)
        if refused is not None:
            return refused
        job = entry.job
        try:
            if job.kind in self._async_kinds:
                value = await self.handlers[job.kind](job)
            else:
                assert self._threads is not None
                outcome = await self._threads.run(called, entry, self.handlers, self.limits)
                if not isinstance(outcome, Pending):
                    return outcome
                value = await outcome.awaitable  # a plain handler's awaitable, awaited here
        except asyncio.CancelledError as exc:
            if asyncio.current_task() in self._cancelled:
                raise  # the shutdown cancels what it gave back
            # raised by the handler itself (an inner task it awaited was cancelled, say)
            return raised(entry, exc if str(exc) else asyncio.CancelledError("the handler was cancelled"),
                          self.limits)
        except BaseException as exc:  # noqa: B036 - as run_handler: anything a handler raises ends the attempt
            return raised(entry, exc, self.limits)
        return returned(entry, value)

    def _cancel(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        """Cancel ``tasks``, noting them as cancelled by the shutdown (see :meth:`_run_one`)."""
        self._cancelled.update(tasks)
        for task in tasks:
            task.cancel()

    # -- reporting and heartbeats ----------------------------------------------

    async def _flush_loop(self) -> None:
        """The flusher (the loop of :meth:`pgfence.reporter.Reporter.run`)."""
        results, outcome = self._ledger.results, self._outcome
        pending_since: Optional[float] = None
        while True:
            if not results:
                if self._stop.done.is_set():
                    return
                pending_since = None
                outcome.clear()
                await outcome.wait()
                continue
            now = time.monotonic()
            if pending_since is None:
                pending_since = now
            if not due(len(results), now - pending_since, flush_batch=self.flush_batch,
                       flush_interval=self.flush_interval, stopping=self._stop.stopping.is_set()):
                await asyncio.sleep(min(self.flush_interval / 4, pending_since + self.flush_interval - now))
                continue
            pending_since = None
            await self._reporter.report(take_batch(results, self._reporter.max_batch))

    async def _heartbeat_loop(self) -> None:
        """Renew every held lease every ``lease / 3``, and just after a lease capped by a run
        timeout ends (the rounds of :class:`pgfence.heartbeats.Rounds`, as the threaded
        worker's heartbeats; see :mod:`pgfence.heartbeats`)."""
        assert self.limits is not None
        rounds = Rounds(self._ledger, interval(self.lease))
        rounds.start()
        while not await wait_event(self._done, rounds.sleep()):
            if not rounds.due():
                continue
            entries = self._ledger.held_entries()
            rounds.begin(entries)
            for chunk in chunks(entries, self.limits.batch):
                try:
                    outcomes = await self.client.heartbeat_many(
                        [e.job.id for e in chunk], [e.job.attempt_token for e in chunk], lease=self.lease)
                except RETRYABLE as exc:
                    log.warning("worker %s: heartbeat failed (%s); next try in %.1fs", self.worker_id,
                                str(exc).strip(), rounds.interval)
                    break
                except Exception:  # (the task must outlive any one call: without it no lease is renewed)
                    log.exception("worker %s: heartbeat failed; next try in %.1fs", self.worker_id,
                                  rounds.interval)
                    break
                revoke_refused(self._ledger, chunk, outcomes, self.counters)

    # -- threads: the listener and the stand-in sweeper -----------------------------

    def _start_threads(self, loop: asyncio.AbstractEventLoop) -> list[threading.Thread]:
        specs: list[tuple[str, Callable[[], None]]] = []
        if self.listen:
            def wake() -> None:
                try:
                    loop.call_soon_threadsafe(self._wake.set)
                except RuntimeError:  # the loop closed
                    pass
            listener = Listener(self.client, self.queues, queue_set=self.queue_set, worker_id=self.worker_id, wake=wake,
                                done=self._stop.done)
            specs.append(("pgfence-listener", listener.run))
        if self.run_sweeper is not False:
            blocking = BlockingCalls(self.client, loop)
            specs.append(("pgfence-sweeper", lambda: sweeper.run(
                blocking, self.run_sweeper, sweep_interval=self.sweep_interval, worker_id=self.worker_id,
                done=self._stop.done)))
        threads = []
        for name, target in specs:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            threads.append(t)
        return threads

    # -- shutdown -------------------------------------------------------------

    async def _shutdown_to_its_end(self) -> bool:
        """:meth:`_shutdown`, run to its end: a cancellation of :meth:`run` meanwhile (a second
        one, when the first began it) hurries it, as a second signal does, instead of cutting
        it off before it gave the jobs back; one more, once hurried, ends it (a call to an
        unreachable database may not return). True when it was cancelled meanwhile."""
        shutdown = asyncio.ensure_future(self._shutdown())
        cancelled = False
        while True:
            try:
                await asyncio.shield(shutdown)
                return cancelled
            except asyncio.CancelledError:
                if shutdown.done():
                    raise
                if self._stop.hurry.is_set():
                    # already hurried, and cancelled again: a call to the database may hang (a
                    # dead network); what is left goes to the leases
                    shutdown.cancel()
                    log.warning("worker %s: cancelled again while shutting down; what was not given back "
                                "is reclaimed as its leases expire", self.worker_id)
                    raise
                cancelled = True
                log.warning("worker %s: cancelled while shutting down; giving running jobs back now",
                            self.worker_id)
                self._stop.hurry.set()
                self.shutdown_grace = 0
                self._wake_all()

    async def _shutdown(self) -> None:
        """The shutdown sequence of :class:`pgfence.Worker`, awaited."""
        log.info("worker %s stopping: releasing unstarted jobs, waiting up to %ss for running handlers",
                 self.worker_id, self.shutdown_grace)
        # 1. Jobs claimed but never started go back without counting the attempt, with those
        # of a claim whose reply was lost (one look-up, none after a second signal).
        if self._unanswered is not None and not self._stop.hurry.is_set():
            try:
                await self._recover_unanswered(wait=SHUTDOWN_LOOKUP_WAIT)
            except RETRYABLE as exc:
                log.warning("worker %s: could not look up a claim whose reply was lost (%s); its jobs, if any, "
                            "wait for their leases to expire", self.worker_id, str(exc).strip())
        self._unanswered = None
        await self._reporter.release(self._ledger.unstarted(), started=False)
        # 2. Let running handlers finish within the grace period (a second signal ends it).
        began = time.monotonic()
        while time.monotonic() < began + self.shutdown_grace and self._ledger.any_running():
            if await wait_event(self._hurry, 0.02):
                break
        # 3. Give back what still runs; its late result is void. An async handler still
        # running is cancelled (a sync one's thread cannot be: its result is discarded).
        given_back = self._ledger.give_back_running()
        await self._reporter.release(given_back, started=True)
        if given_back:
            self._cancel(self._runners)
        # 4. Report every outcome already produced before leaving.
        while self._ledger.unreported():
            await asyncio.sleep(0.01)

    def _wake_all(self) -> None:
        """On the loop: make every waiting part see the stop."""
        if self._stop.stopping.is_set():
            self._stopping.set()
        if self._stop.hurry.is_set():
            self._hurry.set()
        self._wake.set()
        self._work.set()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[int] = []
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, self._on_signal, s)
            except (NotImplementedError, RuntimeError):  # (no add_signal_handler on this loop)
                continue
            installed.append(s)
        return installed

    def _on_signal(self, signum: int) -> None:
        if self._stop.signal(signum, self.worker_id):
            self.shutdown_grace = 0
        self.stop()
        self._wake_all()


__all__ = ["AsyncWorker", "AsyncHandler"]
