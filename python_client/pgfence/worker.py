"""The worker runtime: claim in batches, run handlers on threads, report in batches.

:class:`Worker` wires the parts, each in a module of its own, around one in-flight
ledger (:mod:`pgfence.ledger`: which attempt holds which job, what runs, what waits to
be reported), and runs each on a thread with its own pooled connection:

* the claimer (:mod:`pgfence.claimer`, on the thread that calls :meth:`Worker.run`)
  claims up to the free capacity (``concurrency + prefetch``);
* ``concurrency`` handler threads take ready attempts from the ledger and run their
  handlers (:mod:`pgfence.handlers`: what a handler's return or raise becomes);
* the flusher (:mod:`pgfence.reporter`) reports outcomes with ``complete_many`` /
  ``fail_many`` / ``snooze_many`` every few milliseconds;
* the heartbeat thread (:mod:`pgfence.heartbeats`) extends every held lease every
  ``lease / 3``;
* the listener (:mod:`pgfence.listener`) wakes the claimer on ``NOTIFY pgfence_enqueue``;
* optionally a sweeper (:mod:`pgfence.sweeper`) calls ``CALL pgfence.sweep()`` when
  pg_cron does not;
* optionally, given ``metrics_port``, a ``/metrics`` server (:mod:`pgfence.worker_metrics`).

Stopping (:mod:`pgfence.stopping`): :meth:`Worker.stop` or SIGTERM/SIGINT stops
claiming, gives unstarted jobs back, waits ``shutdown_grace`` for running handlers and
gives the rest back (the shutdown sequence is here); a second signal hurries it.
The database's limits come from one :class:`~pgfence.limits.Limits`; the options, shared
with :class:`pgfence.aio.AsyncWorker`, are checked by :mod:`pgfence.worker_options`.

Every decision (retry or dead letter, backoff, fencing) is made by the database.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from . import sweeper
from ._text import escaped_logger
from .claimer import Claimer, ReadyBell
from .client import Client
from .handlers import Handler, Interrupted, PermanentFailure, RetryAfter, Snooze, is_async, run_handler
from .heartbeats import Heartbeats
from .ledger import Entry, LockedLedger
from .limits import Limits
from .listener import Listener
from .reporter import Reporter
from .stopping import Stop, install_signals
from .worker_options import WorkerOptionError, WorkerOptions

if TYPE_CHECKING:
    from .worker_metrics import WorkerMetrics

log = escaped_logger("pgfence.worker")


class Worker(WorkerOptions):
    """Runs handlers for claimed jobs until stopped.

    Options (defaults in brackets):

    * ``handlers``: ``{kind: callable(job) -> JSON-able result}`` (an ``async def`` one is refused:
      :class:`pgfence.aio.AsyncWorker` awaits them).
    * ``queues`` [all queues]: queue names to claim from.
    * ``queue_set`` [None]: instead of ``queues``, the name of a set of queues stored with
      :meth:`Client.define_queue_set` (claims send the name, not the list; the listener
      reads the set's names when it connects).
    * ``concurrency`` [8]: handler threads.
    * ``prefetch`` [0]: extra jobs claimed ahead of free threads (they are leased
      and heartbeated while they wait); raises throughput for short jobs.
    * ``lease`` [30 s]: lease per claim; heartbeats every ``lease / 3``.
    * ``poll_interval`` [1 s]: longest wait between claims when no NOTIFY arrives (each
      idle wait is drawn from ``[poll_interval / 2, poll_interval]``, so that workers do
      not poll in step).
    * ``shutdown_grace`` [30 s]: how long SIGTERM/SIGINT waits for running
      handlers before giving their jobs back (fenced ``release``).
    * ``run_sweeper`` [None = while ``pgfence.sweeper_health()`` says no background sweeper
      runs (no pass in 2 minutes, and not paused by an operator), looked at every minute]: run
      ``CALL pgfence.sweep()`` every ``sweep_interval`` [1 s] from this process.
    * ``flush_interval`` [5 ms] and ``flush_batch`` [500]: outcomes are reported when
      ``flush_batch`` are waiting or the oldest has waited ``flush_interval``.
    * ``worker_id`` [host:pid:random]: recorded as ``reserved_by``.
    * ``limits`` [what ``pgfence.limits()`` says, read at start]: the database's limits
      (claim size, batch size).
    * ``metrics_port`` [None: no metrics]: serve this worker's own Prometheus metrics
      (handler duration, enqueue-to-start and claim-to-start histograms by kind, attempts
      by kind and outcome, attempts in flight; :mod:`pgfence.worker_metrics`) at
      ``http://metrics_bind:metrics_port/metrics``, from :meth:`run`'s start (before it
      claims anything; :class:`~pgfence.worker_metrics.MetricsError` when the port is in
      use) until it returns. 0 picks a free port: ``metrics_address`` is ``(host, port)``
      while it serves, else None. Needs ``prometheus_client`` (``pgfence[metrics]``).
    * ``metrics_bind`` ["127.0.0.1"]: the address to serve the metrics on (no
      authentication: bind beyond loopback only where the network is trusted).

    Every option is checked here, before anything connects or claims
    (:mod:`pgfence.worker_options`): :class:`~pgfence.WorkerOptionError` names a bad one.
    """

    def __init__(self, client: Client, handlers: Mapping[str, Handler], *,
                 queues: Optional[Sequence[str]] = None, queue_set: Optional[str] = None,
                 concurrency: int = 8, prefetch: int = 0,
                 lease: timedelta = timedelta(seconds=30), poll_interval: float = 1.0,
                 shutdown_grace: float = 30.0, run_sweeper: Optional[bool] = None,
                 sweep_interval: float = 1.0, flush_interval: float = 0.005, flush_batch: int = 500,
                 worker_id: Optional[str] = None, listen: bool = True, limits: Optional[Limits] = None,
                 metrics_port: Optional[int] = None, metrics_bind: str = "127.0.0.1") -> None:
        if client.pool is None:
            raise TypeError("Worker needs a Client with its own pool: Client.connect(dsn)")
        self._check_options(handlers, queues=queues, queue_set=queue_set, concurrency=concurrency, prefetch=prefetch,
                            lease=lease, poll_interval=poll_interval, shutdown_grace=shutdown_grace,
                            run_sweeper=run_sweeper, sweep_interval=sweep_interval, flush_interval=flush_interval,
                            flush_batch=flush_batch, worker_id=worker_id, listen=listen, limits=limits)
        for kind, handler in self.handlers.items():
            if is_async(handler):  # (it would return a coroutine for every job, unrun)
                raise WorkerOptionError(f"handlers[{kind!r}]", handler, "is an async def function, which this "
                                        "threaded Worker cannot await", "run it with pgfence.aio.AsyncWorker "
                                        "(pgfence worker --asyncio), or pass a plain function")
        self.client = client
        # (the database's own statement of its limits, read once: pgfence.limits())
        self.limits = client.limits() if limits is None else limits
        self._stop = Stop()
        self._ledger = LockedLedger(threading.Lock(), self._stop.stopping.is_set)
        self.metrics_port = metrics_port
        self.metrics_bind = metrics_bind
        self._metrics: Optional[WorkerMetrics] = None
        if metrics_port is not None:  # (else nothing of it is imported)
            from .worker_metrics import create
            self._metrics = create(self._ledger, self.handlers, port=metrics_port, bind=metrics_bind)
        # Wake-ups: the claimer and the flusher once per batch, the handler threads one per job:
        self._wake = threading.Event()     # the claimer: a slot freed, a NOTIFY, a stop
        self._work = ReadyBell()           # the handler threads: jobs are ready (one rung per job)
        self._outcome = threading.Event()  # the flusher: an outcome is waiting
        self._threads: list[threading.Thread] = []
        self._claimer = Claimer(client, self._ledger, self._stop, worker_id=self.worker_id, queues=self.queues,
                                lease=self.lease, capacity=self.capacity, poll_interval=self.poll_interval,
                                counters=self.counters, wake=self._wake, work=self._work, limits=self.limits,
                                queue_set=self.queue_set)
        self._reporter = Reporter(client, self._ledger, worker_id=self.worker_id, counters=self.counters,
                                  hurried=self._stop.hurry.is_set, wait=self._stop.hurry.wait, limits=self.limits,
                                  metrics=self._metrics)
        self._heartbeats = Heartbeats(client, self._ledger, worker_id=self.worker_id, lease=self.lease,
                                      counters=self.counters, limits=self.limits)

    @property
    def metrics_address(self) -> Optional[tuple[str, int]]:
        """``(host, port)`` of the metrics server while :meth:`run` serves it, else None."""
        return None if self._metrics is None else self._metrics.address

    # -- public -----------------------------------------------------------

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM/SIGINT do): stop claiming, let running
        handlers finish within ``shutdown_grace``, give the rest back."""
        self._stop.stopping.set()
        self._wake.set()
        self._work.ring_all()

    def run(self) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT when called from the main thread); once
        (a second call raises RuntimeError)."""
        self._running_once()
        if self._metrics is not None:
            self._metrics.start()  # before anything is claimed: a port in use fails here, with nothing to undo
        restore = install_signals(self._on_signal)
        try:
            self._start_threads()
            log.info("worker %s started: queues=%s concurrency=%s prefetch=%s lease=%s",
                     self.worker_id, self.queues or (f"set {self.queue_set}" if self.queue_set else "all"),
                     self.concurrency,
                     self.capacity - self.concurrency, self.lease)
            try:
                self._claimer.run()
            except BaseException:
                log.exception("worker %s: claiming failed; shutting down", self.worker_id)
                self._stop.stopping.set()
                self._work.ring_all()
                self._shutdown()
                raise
            self._shutdown()
        finally:
            self._stop.done.set()
            self._outcome.set()  # wake an idle flusher to see done
            for t in self._threads:
                if t.name.startswith("pgfence-flusher") or t.name.startswith("pgfence-heartbeat"):
                    t.join(timeout=5)
            restore()
            if self._metrics is not None:
                self._metrics.stop()
            log.info("worker %s stopped: %s", self.worker_id, self.counters)

    # -- threads ----------------------------------------------------------

    def _start_threads(self) -> None:
        specs: list[tuple[str, Callable[[], None]]] = [
            ("pgfence-flusher", self._flush_loop), ("pgfence-heartbeat", self._heartbeat_loop)]
        specs += [(f"pgfence-handler-{i}", self._handler_loop) for i in range(self.concurrency)]
        if self.listen:
            listener = Listener(self.client, self.queues, queue_set=self.queue_set, worker_id=self.worker_id,
                                wake=self._wake.set,
                                done=self._stop.done)
            specs.append(("pgfence-listener", listener.run))
        if self.run_sweeper is not False:
            specs.append(("pgfence-sweeper", self._sweep_loop))
        for name, target in specs:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _handler_loop(self) -> None:
        ledger, work, outcome, done = self._ledger, self._work, self._outcome, self._stop.done
        stopping, handlers, worker_id, limits = self._stop.stopping, self.handlers, self.worker_id, self.limits
        ready, metrics = ledger.ready, self._metrics
        while not done.is_set():
            # Taking a job and marking it running is one step under the ledger's lock, so
            # the shutdown sees every job as either running or still waiting (to release).
            entry = ledger.take()
            if entry is None:
                if stopping.is_set():
                    return
                work.wait(ready, stopping, 0.2)
                continue
            if metrics is None:
                ledger.finish(run_handler(entry, handlers, worker_id, limits))
            else:
                started = metrics.starting(entry)
                result = run_handler(entry, handlers, worker_id, limits)
                metrics.ran(entry, started)
                ledger.finish(result)
            if not outcome.is_set():  # the flusher clears it, then re-checks the results
                outcome.set()
            if len(ready) < self.concurrency:
                self._wake.set()  # a slot is free: the claimer may fetch more
            # No time.sleep(0) here: yielding the GIL after every job cost a system call and
            # a thread switch per job (measured: 22 -> 12 us of worker CPU per no-op job, one
            # process, 500 prefetch); the interpreter's switch interval already lets the
            # claimer and flusher in.

    def _flush_loop(self) -> None:
        self._reporter.run(self._outcome, flush_batch=self.flush_batch, flush_interval=self.flush_interval,
                           done=self._stop.done.is_set, stopping=self._stop.stopping.is_set,
                           clock=time.monotonic, sleep=time.sleep)

    def _heartbeat_loop(self) -> None:
        self._heartbeats.run(self._stop.done.wait)

    def _sweep_loop(self) -> None:
        sweeper.run(self.client, self.run_sweeper, sweep_interval=self.sweep_interval, worker_id=self.worker_id,
                    done=self._stop.done)

    # -- shutdown ---------------------------------------------------------

    def _shutdown(self) -> None:
        log.info("worker %s stopping: releasing unstarted jobs, waiting up to %ss for running handlers",
                 self.worker_id, self.shutdown_grace)
        # 1. Jobs claimed but never started go back without counting the attempt, with
        # those of a claim whose reply was lost. Handler threads take no job once
        # stopping is set (checked under the ledger's lock).
        self._claimer.recover_at_shutdown()
        self._release(self._ledger.unstarted(), started=False)
        # 2. Let running handlers finish within the grace period.
        began = time.monotonic()
        while time.monotonic() < began + self.shutdown_grace:  # a second signal sets the grace to 0
            if not self._ledger.any_running():
                break
            time.sleep(0.02)
        # 3. Give back what is still running; its late result is void (the ledger marks it
        # lost: a handler that polls should_stop stops).
        self._release(self._ledger.give_back_running(), started=True)
        # 4. Report every outcome already produced before leaving (a second signal stops
        # the flusher's retries while the database is unreachable, and so this wait).
        while self._ledger.unreported():
            time.sleep(0.01)

    def _release(self, entries: list[Entry], *, started: bool) -> None:
        self._reporter.release(entries, started=started)

    def _on_signal(self, signum: int) -> None:
        if self._stop.signal(signum, self.worker_id):
            self.shutdown_grace = 0
        self.stop()


__all__ = ["Worker", "Interrupted", "PermanentFailure", "RetryAfter", "Snooze", "Handler"]
