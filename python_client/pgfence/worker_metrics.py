"""A worker's own ``/metrics``: what this process ran, how long it took, what it holds.

Off unless the worker is given ``metrics_port``; then :func:`create` imports
``prometheus_client`` (the ``metrics`` extra: ``pip install 'pgfence[metrics]'``) and
:class:`WorkerMetrics` keeps the worker's metrics in a registry of its own (never the
process-wide default registry: two workers in one process do not collide), served over
HTTP from :meth:`WorkerMetrics.start`, which the worker calls before it claims anything,
to :meth:`WorkerMetrics.stop`, when ``run()`` returns. Both workers (:class:`pgfence.Worker`
and :class:`pgfence.aio.AsyncWorker`) record through the same object:

* ``pgfence_worker_handler_duration_seconds{kind}`` (histogram): from taking an attempt
  to its handler's outcome;
* ``pgfence_worker_enqueue_to_start_seconds{kind}`` (histogram): from the job becoming
  runnable (enqueued, its ``run_at``, or its retry's backoff ended: ``available_at``) to
  its handler's start: ``claim``'s ``waited_s`` (the database's clock, up to the claim)
  plus the worker's own monotonic clock from the claim's answer to the start (no
  comparison of the two hosts' clocks);
* ``pgfence_worker_claim_to_start_seconds{kind}`` (histogram): from the claim's answer
  reaching the worker to the handler's start (the wait for a free handler; prefetch);
* ``pgfence_worker_jobs_total{kind, outcome}`` (counter): each attempt this worker took,
  once, when the database has answered for it (see :data:`OUTCOMES`);
* ``pgfence_worker_in_flight{state}`` (gauge): the attempts it holds now, ``waiting`` for a
  handler, ``running``, or ``reporting`` (the handler returned, its outcome not yet
  answered), read from the ledger when scraped.

``kind`` is a handler's kind as the worker was given it (written with
:func:`~pgfence._text.printable`, as ``pgfence metrics`` writes label values); a job of a
kind this worker has no handler for is counted under ``kind=""``, so that whoever can
enqueue cannot add series. Every series of the handlers' kinds exists (at 0) from the start.

The hot path: one dict look-up and a ``prometheus_client`` observe or increment per
event, on children bound at start (no ``labels()`` call per job); the gauges cost nothing
until scraped. With metrics off the workers test ``None`` and do nothing else.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

from ._text import printable
from .ledger import Entry, Ledger

if TYPE_CHECKING:  # (imported when metrics are on: see create())
    from wsgiref.simple_server import WSGIServer

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from prometheus_client.metrics import Counter, Histogram
    from prometheus_client.metrics_core import Metric

#: ``outcome`` of ``pgfence_worker_jobs_total``: what became of an attempt, as the
#: database answered.
#:
#: * ``done``: completed (``complete_many`` accepted it).
#: * ``retried``: failed, and the database queued the job again (``fail_many`` answered
#:   ``queued``).
#: * ``failed``: failed, and the database dead-lettered the job (answered ``failed``: a
#:   ``PermanentFailure``, the last attempt, an unknown kind, a result jsonb cannot store;
#:   or a snooze past the snooze limit on the last attempt).
#: * ``snoozed``: snoozed (``snooze_many`` accepted it; past the snooze limit the
#:   database fails the attempt instead, and a retry then also counts here).
#: * ``released``: given back with a fenced release (``Interrupted``, or the shutdown
#:   gave back a running attempt), and the database accepted it.
#: * ``rejected``: the attempt's lease was no longer current (PF001): the database
#:   refused its outcome or its release, or refused a heartbeat / handed the job out
#:   again before the outcome was reported. Its result was discarded.
#: * ``unreported``: the outcome was never answered: given up after a second signal
#:   while the database was unreachable, a failure refused twice for its value, or a
#:   report that raised. The lease expires and the reclaim rule applies.
OUTCOMES = ("done", "retried", "failed", "snoozed", "released", "rejected", "unreported")

#: In-flight states of ``pgfence_worker_in_flight``.
STATES = ("waiting", "running", "reporting")

#: Histogram buckets (seconds), for handlers from a millisecond to an hour.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
           900.0, 3600.0)

#: How often the server's loop looks for a shutdown request (seconds): stopping a worker
#: waits at most this long for it.
POLL_INTERVAL = 0.2

_clock = time.monotonic


class MetricsError(RuntimeError):
    """The worker cannot serve ``/metrics``: ``prometheus_client`` is not installed, or the
    address cannot be bound (the port is in use, say). Raised before anything is claimed.
    ``hint``: what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message} ({hint})")
        self.message = message
        self.hint = hint


def create(ledger: Ledger, kinds: Iterable[str], *, port: int, bind: str) -> "WorkerMetrics":
    """The metrics of a worker whose attempts are in ``ledger`` and whose handlers are for
    ``kinds``, to be served on ``bind``:``port`` (0: any free port). Raises
    :class:`MetricsError` when ``prometheus_client`` is not installed, ValueError for a
    port outside 0..65535."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"metrics_port must be an integer in 0..65535 (0: any free port), got {port!r}")
    try:
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise MetricsError("metrics_port needs the prometheus_client package, which is not installed",
                           "install pgfence's metrics extra: pip install 'pgfence[metrics]'") from exc
    return WorkerMetrics(ledger, kinds, port=port, bind=bind)


class _Kind:
    """The children of one kind's series, bound once (no ``labels()`` per job)."""

    __slots__ = ("duration", "queued", "wait", "jobs")

    def __init__(self, label: str, duration: "Histogram", queued: "Histogram", wait: "Histogram",
                 jobs: "Counter") -> None:
        self.duration = duration.labels(kind=label)
        self.queued = queued.labels(kind=label)
        self.wait = wait.labels(kind=label)
        self.jobs = {outcome: jobs.labels(kind=label, outcome=outcome) for outcome in OUTCOMES}


class WorkerMetrics:
    """One worker's metrics (see the module's docstring), in ``registry``.

    * ``address``: ``(host, port)`` while the server runs (the port actually bound, when
      asked for port 0); None before :meth:`start` and after :meth:`stop`.
    """

    def __init__(self, ledger: Ledger, kinds: Iterable[str], *, port: int, bind: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.port = port
        self.bind = bind
        self.address: Optional[tuple[str, int]] = None
        self.registry = CollectorRegistry()
        duration = Histogram("pgfence_worker_handler_duration_seconds",
                             "Seconds from taking an attempt to its handler's outcome, by kind.",
                             ["kind"], registry=self.registry, buckets=BUCKETS)
        queued = Histogram("pgfence_worker_enqueue_to_start_seconds",
                           "Seconds from the job becoming runnable (available_at) to its handler's start, by kind.",
                           ["kind"], registry=self.registry, buckets=BUCKETS)
        wait = Histogram("pgfence_worker_claim_to_start_seconds",
                         "Seconds from the claim's answer reaching this worker to the handler's start, by kind.",
                         ["kind"], registry=self.registry, buckets=BUCKETS)
        jobs = Counter("pgfence_worker_jobs",
                       "Attempts this worker ran, by kind and by what the database made of their outcome.",
                       ["kind", "outcome"], registry=self.registry)
        self.registry.register(_InFlight(ledger))
        ledger.clock = _clock  # each claimed attempt is stamped (Entry.claimed_at): its wait begins
        self._kinds = {kind: _Kind(printable(kind), duration, queued, wait, jobs) for kind in kinds}
        self._unknown = _Kind("", duration, queued, wait, jobs)
        self._server: Optional[WSGIServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- the hot path ----------------------------------------------------------

    def starting(self, entry: Entry) -> float:
        """A handler takes ``entry`` now: observe its wait; returns the start time."""
        now = _clock()
        of_kind = self._kinds.get(entry.job.kind, self._unknown)
        wait = max(0.0, now - entry.claimed_at)
        of_kind.wait.observe(wait)
        if entry.job.waited_s is not None:
            of_kind.queued.observe(entry.job.waited_s + wait)
        return now

    def ran(self, entry: Entry, started: float) -> None:
        """The handler of ``entry``, started at ``started``, has its outcome."""
        self._kinds.get(entry.job.kind, self._unknown).duration.observe(_clock() - started)

    def ended(self, kind: str, outcome: str) -> None:
        """An attempt of ``kind`` ended with ``outcome`` (one of :data:`OUTCOMES`)."""
        self._kinds.get(kind, self._unknown).jobs[outcome].inc()

    # -- the server ------------------------------------------------------------

    def start(self) -> None:
        """Serve ``/metrics`` on ``bind``:``port`` from a daemon thread. Raises
        :class:`MetricsError` naming the address when it cannot be bound (in use, not
        an address of this host, a privileged port)."""
        from prometheus_client import make_wsgi_app

        if self._server is not None:
            return
        server = _bind(self.bind, self.port, _only_metrics(make_wsgi_app(self.registry)))
        host, port = server.server_address[:2]
        self.address = (str(host), int(port))
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL},
                                        name="pgfence-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (the port is free again). Blocks up to
        :data:`POLL_INTERVAL`; does nothing when not serving."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        self.address = None
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(5)


class _InFlight:
    """``pgfence_worker_in_flight``, read from the ledger when scraped (``len`` of its
    dicts: atomic under the GIL, no lock taken)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator["Metric"]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        ledger = self.ledger
        running, reporting = len(ledger.running), len(ledger.finishing)
        waiting = max(0, len(ledger.held) - running - reporting)
        family = GaugeMetricFamily("pgfence_worker_in_flight",
                                   "Attempts this worker holds now: waiting for a handler, running, or reporting "
                                   "(the handler returned, the database has not yet answered).",
                                   labels=["state"])
        family.add_metric(["waiting"], waiting)
        family.add_metric(["running"], running)
        family.add_metric(["reporting"], reporting)
        yield family


_NOT_FOUND = b"not found: this worker serves its metrics at /metrics\n"
_NOT_ALLOWED = b"method not allowed: use GET\n"


def _only_metrics(app: "WSGIApplication") -> "WSGIApplication":
    """``app`` for ``GET /metrics``; a fixed 404 or 405 text for anything else
    (prometheus_client's app answers every path, and echoes an unknown method)."""

    def serve(environ: "WSGIEnvironment", start_response: "StartResponse") -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        if environ.get("PATH_INFO") != "/metrics":
            status, body = "404 Not Found", _NOT_FOUND
        elif method != "GET":
            status, body = "405 Method Not Allowed", _NOT_ALLOWED
        else:
            def nosniff(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], Any]:
                return start_response(status, [*headers, ("X-Content-Type-Options", "nosniff")], exc_info)

            return app(environ, nosniff)
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff"),
                                ("Allow", "GET"), ("Content-Length", str(len(body)))])
        return [body]

    return serve


def _bind(host: str, port: int, app: "WSGIApplication") -> "WSGIServer":
    """A threading WSGI server bound to ``host``:``port`` and listening, or MetricsError."""
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Quiet(WSGIRequestHandler):
        timeout = 30  # (a client that connects and sends nothing does not hold its thread for ever)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # one line on stderr per scrape otherwise

    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except (socket.gaierror, UnicodeError) as exc:
        raise MetricsError(f"cannot serve the worker's metrics on {where}: {host!r} is not an address of "
                           f"this host ({exc})", "pass metrics_bind / --metrics-bind an IP address of this "
                           "host, e.g. 127.0.0.1") from None

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # (a scrape in progress does not hold the process at exit)

        def server_bind(self) -> None:
            # (HTTPServer.server_bind also looks the host's name up with getfqdn, which
            # can wait for a DNS server; the name is not used)
            socketserver.TCPServer.server_bind(self)
            self.server_name = "pgfence-worker"
            self.server_port = self.server_address[1]
            self.setup_environ()

    try:
        server = Server((host, port), Quiet)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsError(f"cannot serve the worker's metrics on {where}: the address is already in use "
                               "(another process listens on that port)",
                               "pick another metrics_port / --metrics-port, or 0 for any free port") from None
        raise MetricsError(f"cannot serve the worker's metrics on {where}: {exc.strerror or exc}",
                           "check metrics_bind and metrics_port (/ --metrics-bind, --metrics-port)") from None
    server.set_app(app)
    return server


__all__ = ["WorkerMetrics", "MetricsError", "create", "OUTCOMES", "STATES", "BUCKETS"]
