"""The ``pgfence`` command line: run a worker, enqueue, inspect and repair jobs.

Every command is a thin wrapper over one :class:`~pgfence.Client` method (or,
for ``worker``, :class:`~pgfence.Worker`); the queue decisions stay in SQL.

Global options (before or after the command):

* ``--dsn`` [env ``PGFENCE_DSN``, else empty so that the libpq variables
  PGHOST/PGPORT/PGDATABASE/PGUSER apply]: the database to use.
* ``-v/--verbose``: more logging (DEBUG for pgfence), and a traceback on
  unexpected errors.

Exit codes: 0 success, 1 a database or queue error (unknown job, refused
transition, cannot connect, schema not deployed), 2 a usage error (bad
option, bad JSON, bad ``MODULE:HANDLERS``), 130 interrupted. Errors are one
line on stderr, ``pgfence: error: ...``, followed by a ``hint:`` line when the
server (or the CLI) has one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Callable, NoReturn, Optional, Sequence

import psycopg
from psycopg_pool import PoolTimeout

from ._text import escaped_logger, printable, printable_lines
from .client import Client
from .errors import PgfenceError
from .metrics_text import prometheus_text
from .models import Attempt, JobRecord, Rejection
from .worker import Handler, Worker
from .worker_metrics import MetricsError
from .worker_options import WorkerOptionError

PROG = "pgfence"
log = escaped_logger("pgfence.cli")


class CliError(Exception):
    """A failure to report as ``pgfence: error: message`` (+ ``hint:``) with exit code ``code``."""

    def __init__(self, message: str, *, hint: Optional[str] = None, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are reported like every other error (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(message, hint=f"run '{self.prog} --help' for usage", code=2)


# -- argument types -------------------------------------------------------

def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _duration(text: str) -> timedelta:
    """``--timeout``: a positive number of seconds."""
    return timedelta(seconds=_positive_seconds(text))


def _duration_or_zero(text: str) -> timedelta:
    """``--unique-for``: 0 or a positive number of seconds."""
    return timedelta(seconds=_nonnegative_seconds(text))


def _nonnegative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 0..65535 (0: any free port), got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _seconds(text: str, *, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value != value or value < 0 or (value == 0 and not allow_zero) or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be {'0 or more' if allow_zero else 'more than 0'} seconds, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    return _seconds(text, allow_zero=False)


def _nonnegative_seconds(text: str) -> float:
    return _seconds(text, allow_zero=True)


def _timestamp(text: str) -> datetime:
    """ISO-8601; a trailing ``Z`` means UTC; without an offset, this machine's local time."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO-8601 timestamp: {text!r} (e.g. 2030-01-31T12:00:00Z)") from None
    return value if value.tzinfo is not None else value.astimezone()


# -- the parser -------------------------------------------------------------

_NOT_GIVEN: Any = object()  # (an optional positional left out)


def build_parser() -> argparse.ArgumentParser:
    """The ``pgfence`` argument parser (one subcommand per operation)."""
    # Global options are accepted before and after the command; SUPPRESS keeps a
    # value given before the command from being reset by the subparser's default.
    common = _Parser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS,
                        help="database connection string (default: $PGFENCE_DSN, else the libpq "
                             "variables PGHOST, PGPORT, PGDATABASE, PGUSER, ...)")
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more logging; repeat for psycopg's own logging")

    parser = _Parser(prog=PROG, parents=[common],
                     description="pgfence: a fenced job queue that lives in PostgreSQL.",
                     epilog="Run 'pgfence COMMAND --help' for a command's options.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=description)

    w = command("worker", "run a worker in the foreground",
                "Run handlers for claimed jobs until SIGTERM/SIGINT (graceful: running handlers get "
                "--shutdown-grace seconds, then their jobs are given back). Logs one line per claim, "
                "completion, failure and lost lease to stderr.")
    w.add_argument("handlers", metavar="MODULE:HANDLERS",
                   help="import MODULE (the current directory is importable) and use its attribute "
                        "HANDLERS, a dict {kind: callable(job)}; e.g. myapp.jobs:HANDLERS")
    which = w.add_mutually_exclusive_group()
    which.add_argument("--queue", dest="queues", action="append", metavar="QUEUE",
                       help="claim from this queue (repeatable; default: every queue)")
    which.add_argument("--queue-set", metavar="NAME",
                       help="claim from the queues of this set, stored with pgfence.define_queue_set")
    w.add_argument("--concurrency", type=_positive_int, default=8, help="handler threads (default 8)")
    w.add_argument("--prefetch", type=_nonnegative_int, default=0,
                   help="jobs claimed ahead of free threads (default 0)")
    w.add_argument("--lease", type=_positive_seconds, default=30.0, metavar="SECONDS",
                   help="lease per claim, heartbeated every lease/3 (default 30)")
    w.add_argument("--poll-interval", type=_positive_seconds, default=1.0, metavar="SECONDS",
                   help="longest wait between claims without a NOTIFY (default 1.0, at least 0.001)")
    w.add_argument("--shutdown-grace", type=_nonnegative_seconds, default=30.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, how long running handlers may finish (default 30)")
    w.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=None,
                   help="run the reclaim sweep in this process (default: while the background sweeper "
                        "has recorded no pass in 2 minutes, looked at every minute)")
    w.add_argument("--worker-id", metavar="ID", help="recorded as reserved_by (default host:pid:random)")
    w.add_argument("--asyncio", action="store_true",
                   help="run a pgfence.aio.AsyncWorker: async def handlers are awaited on an event loop, "
                        "the others run on --concurrency threads")
    w.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve this worker's Prometheus metrics at http://BIND:PORT/metrics (needs "
                        "prometheus_client: pip install 'pgfence[metrics]'; 0: any free port; default: off)")
    w.add_argument("--metrics-bind", default="127.0.0.1", metavar="ADDRESS",
                   help="the address of --metrics-port (default 127.0.0.1; no authentication)")
    w.set_defaults(func=cmd_worker)

    e = command("enqueue", "enqueue one job and print its id",
                "Enqueue one job (pgfence.enqueue) and print its id. With --idempotency-key, prints the "
                "id of the live or done job holding that key instead of creating one.")
    e.add_argument("kind", metavar="KIND", help="the job kind (selects the handler)")
    e.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", default="{}",
                   help="a JSON object (default {}); '-' reads it from stdin")
    e.add_argument("--queue", default="default", help="queue name (default 'default')")
    e.add_argument("--priority", type=_int, default=0, help="higher runs first (default 0)")
    e.add_argument("--run-at", type=_timestamp, metavar="TIMESTAMP",
                   help="not runnable before this ISO-8601 time (default now); without an offset, "
                        "local time")
    e.add_argument("--max-attempts", type=_positive_int, default=3, help="claims before dead-lettering (default 3)")
    e.add_argument("--recovery-policy", choices=("auto", "manual"), default="auto",
                   help="when a lease expires: auto requeues, manual sends to manual_review (default auto)")
    e.add_argument("--idempotency-key", metavar="KEY", help="at most one live or done job per (queue, key)")
    e.add_argument("--timeout", type=_duration, metavar="SECONDS",
                   help="run timeout of each attempt (default: the queue's, else none)")
    e.add_argument("--unique-for", type=_duration_or_zero, metavar="SECONDS",
                   help="how long a done job keeps holding its key: 0 not at all, else until its creation "
                        "plus that (default: its retention)")
    e.set_defaults(func=cmd_enqueue)

    s = command("stats", "jobs per queue and status, and the sweeper's health",
                "Jobs per queue and status (pgfence.stats()), with the age of the oldest runnable job "
                "and the number of expired leases waiting for the sweep; then when the background "
                "sweeper last ran and whether its pg_cron job exists.")
    s.add_argument("--queue", dest="queues", action="append", metavar="QUEUE",
                   help="only this queue (repeatable; default: every queue)")
    s.set_defaults(func=cmd_stats)

    sh = command("show", "print every field of a job", "Print every column of one job; payload and "
                 "result as indented JSON.")
    sh.add_argument("job_id", metavar="ID", type=_positive_int, help="the job id")
    sh.set_defaults(func=cmd_show)

    actor_help = ("who you are, recorded as the audit row's actor (informational: the database role is "
                  "what the database vouches for; default $PGFENCE_ACTOR, else $USER)")
    rq = command("requeue", "put a failed, manual_review or cancelled job back in the queue",
                 "pgfence.requeue: failed, manual_review or cancelled -> queued, runnable now (an "
                 "exhausted job gets one more attempt). Recorded in the operator audit.")
    rq.add_argument("job_id", metavar="ID", type=_positive_int, help="the job id")
    rq.add_argument("--note", help="why (optional), kept in the operator audit")
    rq.add_argument("--actor", help=actor_help)
    rq.set_defaults(func=cmd_requeue)

    c = command("cancel", "cancel a queued, processing or manual_review job",
                "pgfence.cancel: queued, processing or manual_review -> cancelled. A worker running "
                "the job loses its lease and its result is never recorded. Recorded in the operator audit.")
    c.add_argument("job_id", metavar="ID", type=_positive_int, help="the job id")
    c.add_argument("--note", help="why (optional), kept in the operator audit")
    c.add_argument("--actor", help=actor_help)
    c.set_defaults(func=cmd_cancel)

    md = command("mark-done", "end a manual_review job done: its side effect happened",
                 "pgfence.mark_done: manual_review -> done. You assert the job's side effect happened "
                 "(its lease expired while it ran and you checked); it ends as a completed job, with "
                 "--result. Refused (exit 1) when the job is not in manual_review.")
    md.add_argument("job_id", metavar="ID", type=_positive_int, help="the job id")
    md.add_argument("--note", required=True, help="why (required), kept in the operator audit")
    md.add_argument("--result", metavar="JSON", help="the job's result, any JSON value (default none)")
    md.add_argument("--actor", help=actor_help)
    md.set_defaults(func=cmd_mark_done)

    b = command("bulk", "requeue, cancel, mark done or purge many jobs: by id or by filter",
                "Bulk operator actions. With IDs: pgfence.requeue_many / cancel_many / mark_done_many / "
                "purge_many (delete failed or cancelled jobs now, before their retention ends). "
                "Without: every job matching the filter (pgfence.act_on_filter), at most --max-jobs "
                "(refused, nothing changed, when more match); --preview only counts them "
                "(pgfence.preview_action). One audit row per call with the ids acted on.")
    b.add_argument("action", choices=("requeue", "cancel", "mark-done", "purge"), help="what to do")
    b.add_argument("job_ids", metavar="ID", type=_positive_int, nargs="*", help="job ids (else: the filter)")
    b.add_argument("--status", help="filter: jobs in this status")
    b.add_argument("--queue", help="filter: jobs of this queue")
    b.add_argument("--kind", help="filter: jobs of this kind")
    b.add_argument("--error-contains", metavar="TEXT", help="filter: last error contains TEXT (as is)")
    b.add_argument("--updated-after", type=_timestamp, metavar="TIMESTAMP", help="filter: updated_at >= it")
    b.add_argument("--updated-before", type=_timestamp, metavar="TIMESTAMP", help="filter: updated_at < it")
    b.add_argument("--max-jobs", type=_positive_int, default=10000, help="the cap for a filter (default 10000)")
    b.add_argument("--preview", action="store_true", help="only print how many jobs the filter would touch")
    b.add_argument("--note", help="why (required for mark-done and purge), kept in the operator audit")
    b.add_argument("--result", metavar="JSON", help="for mark-done: the result of each job")
    b.add_argument("--actor", help=actor_help)
    b.set_defaults(func=cmd_bulk)

    au = command("audit", "print the operator actions on a job",
                 "pgfence.audit_of: who did what to the job, when, and the note (operators, viewers).")
    au.add_argument("job_id", metavar="ID", type=_positive_int, help="the job id")
    au.set_defaults(func=cmd_audit)

    me = command("metrics", "print pgfence.metrics() in the Prometheus text format",
                 "Every metric of pgfence.metrics() (operators, viewers) in the Prometheus text "
                 "exposition format, for a textfile collector or a look by eye.")
    me.set_defaults(func=cmd_metrics)

    q = command("queue", "pause, resume, cap or rate-limit a queue, or list the controlled ones",
                "Flow control per queue (operators): 'pause' makes claims take nothing from QUEUE (jobs "
                "already claimed finish; enqueue still works), 'resume' undoes it, 'limit' caps how many "
                "of its jobs are processing at once across every worker ('none' removes the cap), 'rate' "
                "lets claims hand out at most N of its jobs per --per seconds (a token bucket; 'none' "
                "removes it), 'timeout' sets the default run timeout in seconds of its jobs enqueued from "
                "now on ('none' removes it), 'list' prints the paused, capped and rate-limited queues with "
                "their running jobs.")
    q.add_argument("action", choices=("pause", "resume", "limit", "rate", "timeout", "list"), help="what to do")
    q.add_argument("queue", metavar="QUEUE", nargs="?", help="the queue (not for 'list')")
    q.add_argument("max_running", metavar="N", nargs="?", type=_limit, default=_NOT_GIVEN,
                   help="for 'limit': MAX_RUNNING; for 'rate': MAX_CLAIMS; for 'timeout': SECONDS; a positive "
                        "number, or 'none' to remove the cap, the rate limit or the timeout")
    q.add_argument("--per", type=_positive_seconds, default=None, metavar="SECONDS",
                   help="for 'rate': the interval of MAX_CLAIMS, in seconds (default 1; 0.001..86400)")
    q.set_defaults(func=cmd_queue)

    sc = command("schedule", "add, remove, pause, resume or list schedules",
                 "Schedules (operators): pgfence enqueues a job at each slot of a cron expression (5 fields, "
                 "in --time-zone) or every fixed interval; the background sweeper fires due slots, each "
                 "exactly once.")
    scs = sc.add_subparsers(dest="schedule_action", metavar="ACTION", parser_class=_Parser)
    scs.required = True
    sa = scs.add_parser("add", parents=[common], help="create (or with --replace, change) a schedule",
                        description="pgfence.schedule: enqueue KIND with PAYLOAD_JSON at each slot of --cron or "
                                    "--every; prints the first slot.")
    sa.add_argument("name", metavar="NAME", help="the schedule's name")
    sa.add_argument("kind", metavar="KIND", help="the kind of the jobs it enqueues")
    sa.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", default="{}",
                    help="a JSON object (default {}); '-' reads it from stdin")
    when = sa.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="5 fields: minute hour day-of-month month day-of-week "
                      "(e.g. '*/5 * * * *', '0 3 * * mon-fri'), or @hourly, @daily, ...")
    when.add_argument("--every", type=_positive_int, metavar="SECONDS",
                      help="every SECONDS seconds (slots at multiples of it since the Unix epoch)")
    sa.add_argument("--queue", default="default", help="queue name (default 'default')")
    sa.add_argument("--priority", type=_int, default=0, help="higher runs first (default 0)")
    sa.add_argument("--max-attempts", type=_positive_int, default=3, help="claims before dead-lettering (default 3)")
    sa.add_argument("--recovery-policy", choices=("auto", "manual"), default="auto",
                    help="when a lease expires: auto requeues, manual sends to manual_review (default auto)")
    sa.add_argument("--time-zone", default="UTC", help="the zone of the cron's wall-clock times (default UTC)")
    sa.add_argument("--catch-up", choices=("all", "latest", "none"), default="latest",
                    help="slots missed while nothing fired: all (at most 100), latest (default) or none")
    sa.add_argument("--replace", action="store_true", help="change the schedule if NAME exists")
    sa.add_argument("--slot-key", metavar="KEY",
                    help="put each job's slot (ISO 8601, UTC) into its payload under KEY (default: not)")
    for action, summary in (("remove", "remove a schedule (its jobs stay)"),
                            ("pause", "stop a schedule firing until resumed"),
                            ("resume", "fire a paused schedule again, from its next slot")):
        one = scs.add_parser(action, parents=[common], help=summary, description=summary + ".")
        one.add_argument("name", metavar="NAME", help="the schedule's name")
    scs.add_parser("list", parents=[common], help="every schedule with its next and last fire time",
                   description="pgfence.schedules(): every schedule with its next and last fire time.")
    sc.set_defaults(func=cmd_schedule)

    r = command("reclaim", "reclaim every expired lease now",
                "CALL pgfence.sweep(): reclaim every expired lease now (what the background sweeper "
                "does every 0.5 s) and print how many jobs were reclaimed.")
    r.set_defaults(func=cmd_reclaim)

    db = command("dashboard", "serve the web dashboard (operators; needs pgfence[dashboard])",
                 "Serve the web dashboard: overview, manual-review inbox, jobs, dead letter, queues "
                 "(docs/dashboard.md). Connects as a role in pgfence_operator (pgfence_viewer: read-only); "
                 "refuses a superuser unless --allow-superuser. Log-in token from $PGFENCE_DASHBOARD_TOKEN "
                 "or --token-file, else generated and printed at start (never an option's value).")
    db.add_argument("--bind", default="127.0.0.1:8484", metavar="HOST:PORT",
                    help="address to listen on (default 127.0.0.1:8484)")
    db.add_argument("--token-file", metavar="PATH", help="a file holding the log-in token (16+ characters)")
    db.add_argument("--no-auth", action="store_true", help="no log-in (loopback binds only)")
    db.add_argument("--read-only", action="store_true", help="hide and refuse every action")
    db.add_argument("--allow-superuser", action="store_true", help="start even when connected as a superuser")
    db.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                    help="a Host header to accept besides the bind address and localhost (repeatable; "
                         "the name a reverse proxy forwards)")
    db.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (with --tls-key)")
    db.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    db.set_defaults(func=cmd_dashboard)
    return parser


# -- connections ------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__


def _connect_error(exc: BaseException) -> CliError:
    return CliError(f"cannot connect to the database: {_one_line(exc)}",
                    hint="pass --dsn or set PGFENCE_DSN (or PGHOST, PGPORT, PGDATABASE, PGUSER)")


def _open(dsn: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as exc:
        raise _connect_error(exc) from exc
    except psycopg.ProgrammingError as exc:  # a malformed connection string
        raise CliError(f"invalid connection string: {_one_line(exc)}",
                       hint="use postgresql://user@host:port/dbname or 'host=... dbname=...'", code=2) from exc


def _with_client(args: argparse.Namespace, body: Callable[[Client, psycopg.Connection[Any]], int]) -> int:
    """Run a one-shot command on one autocommit connection."""
    conn = _open(args.dsn)
    try:
        return body(Client(conn), conn)
    finally:
        conn.close()


# -- commands ---------------------------------------------------------------

def load_handlers(spec: str) -> dict[str, Handler]:
    """Import ``MODULE:HANDLERS`` (cwd importable) and check it is a dict of kind -> callable."""
    module_name, sep, attr = spec.partition(":")
    hint = "pass MODULE:HANDLERS, e.g. myapp.jobs:HANDLERS, where HANDLERS = {'kind': function}"
    if not sep or not module_name or not attr or ":" in attr:
        raise CliError(f"invalid handler spec {spec!r}: expected MODULE:HANDLERS", hint=hint, code=2)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CliError(f"invalid handler spec {spec!r}: no module named {module_name!r}",
                           hint=f"run from the directory that contains {module_name.split('.')[0]!r} "
                                "or add it to PYTHONPATH", code=2) from exc
        raise CliError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}",
                       hint="run with -v for the traceback") from exc
    except Exception as exc:
        raise CliError(f"importing {module_name!r} failed: {type(exc).__name__}: {_one_line(exc)}",
                       hint="run with -v for the traceback") from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(f"invalid handler spec {spec!r}: module {module_name!r} has no attribute {attr!r}",
                           hint=hint, code=2) from None
    if not isinstance(value, Mapping):
        raise CliError(f"invalid handler spec {spec!r}: {attr} is a {type(value).__name__}, not a dict",
                       hint=hint, code=2)
    bad = [k for k, v in value.items() if not isinstance(k, str) or not callable(v)]
    if bad:
        raise CliError(f"invalid handler spec {spec!r}: {attr}[{bad[0]!r}] is not a str -> callable entry",
                       hint=hint, code=2)
    if not value:
        raise CliError(f"invalid handler spec {spec!r}: {attr} is empty", hint=hint, code=2)
    return dict(value)


def cmd_worker(args: argparse.Namespace) -> int:
    handlers = load_handlers(args.handlers)
    _open(args.dsn).close()  # fail fast, before the pool retries for its whole timeout
    try:
        if args.asyncio:
            asyncio.run(_async_worker(args, handlers))
            return 0
        try:
            client = Client.connect(args.dsn)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise _connect_error(exc) from exc
        try:
            worker = Worker(client, handlers, **_worker_options(args))
            worker.run()
        finally:
            client.close()
    except MetricsError as exc:  # (prometheus_client missing, or the port in use: nothing was claimed)
        raise CliError(exc.message, hint=exc.hint) from exc
    except WorkerOptionError as exc:  # (checked before anything is claimed)
        raise CliError(exc.message, hint=exc.hint, code=2) from None
    return 0


def _worker_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``pgfence worker`` as Worker's and AsyncWorker's keywords (the same for both)."""
    return {"queues": args.queues, "queue_set": args.queue_set, "concurrency": args.concurrency, "prefetch": args.prefetch,
            "lease": timedelta(seconds=args.lease), "poll_interval": args.poll_interval,
            "shutdown_grace": args.shutdown_grace, "run_sweeper": args.sweep, "worker_id": args.worker_id,
            "metrics_port": args.metrics_port, "metrics_bind": args.metrics_bind}


async def _async_worker(args: argparse.Namespace, handlers: dict[str, Any]) -> None:
    """``worker --asyncio``: a pgfence.aio.AsyncWorker on this process's event loop (it
    handles SIGTERM/SIGINT itself)."""
    from .aio import AsyncClient, AsyncWorker

    try:
        client = await AsyncClient.connect(args.dsn)
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise _connect_error(exc) from exc
    try:
        worker = AsyncWorker(client, handlers, **_worker_options(args))
        await worker.run()
    finally:
        await client.close()


def _read_payload(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"PAYLOAD_JSON is not valid JSON: {exc}",
                       hint="""pass a JSON object in single quotes, e.g. '{"to": "a@example.com"}'""",
                       code=2) from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = _read_payload(args.payload)

    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        job_id = client.enqueue(args.kind, payload, queue=args.queue, priority=args.priority,
                                run_at=args.run_at, max_attempts=args.max_attempts,
                                recovery_policy=args.recovery_policy, idempotency_key=args.idempotency_key,
                                timeout=args.timeout, unique_for=args.unique_for)
        print(job_id)
        return 0
    return _with_client(args, body)


def format_age(value: Optional[timedelta]) -> str:
    """A short human duration: 850ms, 12.3s, 4m05s, 3h04m, 2d03h; '-' for None."""
    if value is None:
        return "-"
    secs = value.total_seconds()
    sign = "-" if secs < 0 else ""
    secs = abs(secs)
    if secs < 1:
        return f"{sign}{secs * 1000:.0f}ms"
    if secs < 60:
        return f"{sign}{secs:.1f}s"
    whole = int(secs)
    if whole < 3600:
        return f"{sign}{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{sign}{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{sign}{whole // 86400}d{whole % 86400 // 3600:02d}h"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """Plain aligned text: a header line, then one line per row (numbers right-aligned)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(out).rstrip()
    return "\n".join([line(headers)] + [line(r) for r in rows])


def _sweeper_line(client: Client) -> str:
    """The background sweeper as ``pgfence.sweeper_health()`` sees it: its last pass (aged
    by the database clock) and whether it runs, is paused, or does not run."""
    health = client.sweeper_health()
    if health.last_pass_at is None:
        text = "sweeper: last pass never"
    else:
        text = (f"sweeper: last pass {health.last_pass_at.isoformat(sep=' ', timespec='seconds')} "
                f"({format_age(health.last_pass_age)} ago)")
    if health.state == "running":
        return f"{text}; pg_cron job pgfence-reclaim: active"
    if health.state == "paused":
        assert health.paused_at is not None
        return (f"{text}; PAUSED since {health.paused_at.isoformat(sep=' ', timespec='seconds')} by "
                f"{printable(health.paused_by)} (SELECT pgfence.resume_sweeper() lets it run)")
    return (f"{text}; pg_cron job pgfence-reclaim: NOT active (no pass within 2 minutes: schedule it with "
            "pg_cron, run workers with --sweep, or CALL pgfence.sweep() from a scheduler)")


def _sweeper_error_line(conn: psycopg.Connection[Any]) -> Optional[str]:
    """The last error the background sweeper survived (a failed purge), with its age;
    None when there was none (or the role may not call ``pgfence.sweeper_health()``)."""
    try:
        row = conn.execute("SELECT last_error, last_error_at, clock_timestamp() - last_error_at "
                           "FROM pgfence.sweeper_health() WHERE last_error_at IS NOT NULL").fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return None
    if row is None:
        return None
    error, at, age = row
    return f"sweeper error: {at.isoformat(sep=' ', timespec='seconds')} ({format_age(age)} ago): {printable(error)}"


def cmd_stats(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        stats = client.stats()
        if args.queues:
            stats = [s for s in stats if s.queue in args.queues]
        if stats:
            print(format_table(
                ["QUEUE", "STATUS", "JOBS", "OLDEST RUNNABLE", "EXPIRED LEASES"],
                [[printable(s.queue), printable(s.status), str(s.jobs), format_age(s.oldest_runnable_age),
                  str(s.expired_leases)] for s in stats],
                [False, False, True, True, True]))
        else:
            print("no jobs" + (f" in queue {', '.join(map(printable, args.queues))}" if args.queues else ""))
        print()
        print(_sweeper_line(client))
        error = _sweeper_error_line(conn)
        if error:
            print(error)
        print(_history_line(client))
        return 0
    return _with_client(args, body)


def _history_line(client: Client) -> str:
    """Attempts ended and calls refused in the last hour (needs pgfence_operator)."""
    try:
        counts = client.history_summary(timedelta(hours=1))
    except psycopg.errors.InsufficientPrivilege:
        return "last hour: attempt history needs the pgfence_operator role"
    outcomes = ["done", "failed", "reclaimed", "released", "cancelled", "snoozed"]
    parts = [f"{o} {counts.get(o, 0)}" for o in outcomes]
    return f"last hour: attempts {', '.join(parts)}; refused stale calls {counts.get('rejected', 0)}"


def _show_value(name: str, value: Any) -> str:
    """A field as shown: JSON indented, None as '-', every string escaped (printable).
    Only JSON (whose strings json.dumps escapes itself) and last_error (a traceback) keep
    their lines, each escaped on its own; format_job indents the lines after the first."""
    if name in ("payload", "result"):
        if value is None:
            return "null"
        return printable_lines(json.dumps(value, indent=2, ensure_ascii=False))
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if name == "last_error":
        return printable_lines(value)
    return printable(value)


def format_job(job: JobRecord) -> str:
    """Every field of a job, one per line; multi-line values (JSON, tracebacks) indented."""
    names = [f.name for f in dataclasses.fields(job)]
    width = max(len(n) for n in names)
    lines = []
    for name in names:
        text = _show_value(name, getattr(job, name))
        first, *rest = text.splitlines() or [""]
        lines.append(f"{name.ljust(width)}  {first}")
        lines.extend(" " * (width + 2) + r for r in rest)
    return "\n".join(lines)


def format_history(attempts: list[Attempt], rejections: list[Rejection], not_stored: int = 0) -> str:
    """The ended attempts and the refused stale calls of a job, as two tables (and how many
    more refused calls were counted but not stored)."""
    def ts(value: Optional[datetime]) -> str:
        return "-" if value is None else value.isoformat(sep=" ", timespec="milliseconds")
    out = ["", "attempts:"]
    if attempts:
        out.append(format_table(
            ["#", "WORKER", "CLAIMED", "LAST HEARTBEAT", "LEASE", "ENDED", "OUTCOME", "ERROR", "TOKEN"],
            [[str(a.attempt), printable(a.worker), ts(a.claimed_at), ts(a.heartbeat_at), ts(a.lease_expires_at),
              ts(a.ended_at), a.outcome, printable((a.error or "-").split("\n")[0][:60]), str(a.attempt_token)]
             for a in attempts],
            [True, False, False, False, False, False, False, False, False]))
    else:
        out.append("  (none ended yet)")
    out += ["", "refused stale calls:"]
    if rejections:
        out.append(format_table(
            ["WHEN", "OPERATION", "CALLER", "TOKEN", "WHY"],
            [[ts(r.rejected_at), printable(r.operation), printable(r.caller), str(r.attempt_token),
              printable(r.detail or "-")] for r in rejections],
            [False] * 5))
    else:
        out.append("  (none)")
    if not_stored:
        out.append(f"  (and {not_stored} more, counted but not stored: at most 100 are kept per job)")
    return "\n".join(out)


def cmd_show(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        print(format_job(client.get_job(args.job_id)))
        try:
            print(format_history(client.attempts(args.job_id), client.rejections(args.job_id),
                                 client.rejections_not_stored(args.job_id)))
        except psycopg.errors.InsufficientPrivilege:
            print("\n(attempt history: needs the pgfence_operator role)")
        return 0
    return _with_client(args, body)


def _set_actor(conn: psycopg.Connection[Any], args: argparse.Namespace) -> None:
    """The session's ``pgfence.actor`` (the audit's informational user): --actor, else
    $PGFENCE_ACTOR, else $USER."""
    actor = args.actor or os.environ.get("PGFENCE_ACTOR") or os.environ.get("USER") or ""
    conn.execute("SELECT set_config('pgfence.actor', %s, false)", (actor,))


def _read_result(text: Optional[str]) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"--result is not JSON: {exc}", hint="pass a JSON value, e.g. '{\"ok\": true}'",
                       code=2) from exc


def cmd_requeue(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        _set_actor(conn, args)
        client.requeue(args.job_id, note=args.note)
        print(f"job {args.job_id} requeued")
        return 0
    return _with_client(args, body)


def cmd_cancel(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        _set_actor(conn, args)
        client.cancel(args.job_id, note=args.note)
        print(f"job {args.job_id} cancelled")
        return 0
    return _with_client(args, body)


def cmd_mark_done(args: argparse.Namespace) -> int:
    result = _read_result(args.result)

    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        _set_actor(conn, args)
        client.mark_done(args.job_id, args.note, result=result)
        print(f"job {args.job_id} marked done")
        return 0
    return _with_client(args, body)


def cmd_bulk(args: argparse.Namespace) -> int:
    action = args.action.replace("-", "_")
    result = _read_result(args.result)
    filters = {"status": args.status, "queue": args.queue, "kind": args.kind, "error_contains": args.error_contains,
               "updated_after": args.updated_after, "updated_before": args.updated_before}
    if args.job_ids and (any(v is not None for v in filters.values()) or args.preview):
        raise CliError("give job ids or a filter, not both", hint="drop the ids to act on a filter", code=2)

    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        if args.preview:
            p = client.preview_action(action, **filters)
            print(f"{args.action} would act on {p.jobs} job{'' if p.jobs == 1 else 's'} (at most {p.max_jobs} per call)")
            return 0
        _set_actor(conn, args)
        if args.job_ids:
            if action == "mark_done":
                rows = client.mark_done_many(args.job_ids, args.note, result=result)
            elif action == "purge":
                rows = client.purge_many(args.job_ids, args.note)
            elif action == "requeue":
                rows = client.requeue_many(args.job_ids, note=args.note)
            else:
                rows = client.cancel_many(args.job_ids, note=args.note)
        else:
            rows = client.act_on_filter(action, note=args.note, result=result, max_jobs=args.max_jobs, **filters)
        acted = sum(r.acted for r in rows)
        for r in rows:
            if not r.acted:
                print(f"job {r.id}: not acted on: {printable(r.detail or '')}")
        print(f"{args.action}: acted on {acted} of {len(rows)} job{'' if len(rows) == 1 else 's'}")
        return 0
    return _with_client(args, body)


def cmd_audit(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        rows = client.audit_of(args.job_id)
        if not rows:
            print(f"no operator action on job {args.job_id}")
        for r in rows:
            who = printable(r.db_role) + (f" (login {printable(r.login)})" if r.login != r.db_role else "")
            actor = f", actor {printable(r.actor)}" if r.actor else ""
            scope = f" ({r.count} jobs)" if r.count > 1 else ""
            note = f": {printable(r.note)}" if r.note else ""
            print(f"{r.at.isoformat(sep=' ', timespec='seconds')} {printable(r.action)}{scope} by {who}{actor}{note}")
        return 0
    return _with_client(args, body)


def cmd_metrics(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        sys.stdout.write(prometheus_text(client.metrics()))
        return 0
    return _with_client(args, body)


def _limit(text: str) -> Optional[int]:
    """MAX_RUNNING of ``pgfence queue limit``: a positive integer or 'none'."""
    if text.strip().lower() == "none":
        return None
    return _positive_int(text)


def _rate_text(max_claims: int, per: timedelta) -> str:
    seconds = per.total_seconds()
    return f"at most {max_claims} claimed per {seconds:g} second{'' if seconds == 1 else 's'}"


def cmd_queue(args: argparse.Namespace) -> int:
    if args.action == "list":
        if args.queue is not None:
            raise CliError("'queue list' takes no QUEUE", hint="run 'pgfence queue list'", code=2)
    elif args.queue is None:
        raise CliError(f"'queue {args.action}' needs a QUEUE", hint=f"run 'pgfence queue {args.action} NAME'", code=2)
    needs = {"limit": "MAX_RUNNING", "rate": "MAX_CLAIMS", "timeout": "SECONDS"}
    removes = {"limit": "cap", "rate": "rate limit", "timeout": "default run timeout"}
    if args.action in needs and args.max_running is _NOT_GIVEN:
        raise CliError(f"'queue {args.action}' needs {needs[args.action]}",
                       hint=f"pass a positive number, or 'none' to remove the {removes[args.action]}", code=2)
    if args.action not in needs and args.max_running is not _NOT_GIVEN:
        raise CliError(f"'queue {args.action}' takes no MAX_RUNNING, MAX_CLAIMS or SECONDS",
                       hint="only 'queue limit', 'queue rate' and 'queue timeout' do", code=2)
    if args.action != "rate" and args.per is not None:
        raise CliError(f"'queue {args.action}' takes no --per", hint="only 'queue rate' does", code=2)

    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        name = printable(args.queue or "")
        if args.action == "pause":
            print(f"queue {name} paused" if client.pause_queue(args.queue) else f"queue {name} was paused already")
        elif args.action == "resume":
            print(f"queue {name} resumed" if client.resume_queue(args.queue) else f"queue {name} was not paused")
        elif args.action == "limit":
            client.set_queue_limit(args.queue, args.max_running)
            print(f"queue {name}: no cap" if args.max_running is None
                  else f"queue {name}: at most {args.max_running} running")
        elif args.action == "timeout":
            client.set_queue_timeout(args.queue, None if args.max_running is None
                                     else timedelta(seconds=args.max_running))
            print(f"queue {name}: no default run timeout" if args.max_running is None
                  else f"queue {name}: run timeout {args.max_running}s for jobs enqueued from now on")
        elif args.action == "rate":
            per = timedelta(seconds=args.per if args.per is not None else 1.0)
            client.set_queue_rate_limit(args.queue, args.max_running, per)
            print(f"queue {name}: no rate limit" if args.max_running is None
                  else f"queue {name}: {_rate_text(args.max_running, per)}")
        else:
            rows = client.queue_limits()
            if not rows:
                print("no queue is paused, capped or rate-limited")
            for r in rows:
                paused = (f"paused since {r.paused_at.isoformat(sep=' ', timespec='seconds')} by {printable(r.paused_by or '')}"
                          if r.paused_at else "running")
                cap = f"{r.running}/{r.max_running} running" if r.max_running is not None else f"{r.running} running, no cap"
                rate = (f"; {_rate_text(r.max_claims, r.claims_per)} ({r.claims_available} available now)"
                        if r.max_claims is not None and r.claims_per is not None else "")
                print(f"{printable(r.queue)}: {paused}; {cap}{rate}")
        return 0
    return _with_client(args, body)


def _when(value: Optional[datetime]) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value is not None else "never"


def cmd_schedule(args: argparse.Namespace) -> int:
    payload = _read_payload(args.payload) if args.schedule_action == "add" else None

    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        action = args.schedule_action
        name = printable(getattr(args, "name", ""))
        if action == "add":
            first = client.schedule(args.name, args.cron, args.kind, payload, queue=args.queue,
                                    priority=args.priority, max_attempts=args.max_attempts,
                                    recovery_policy=args.recovery_policy, time_zone=args.time_zone,
                                    catch_up=args.catch_up,
                                    every=None if args.every is None else timedelta(seconds=args.every),
                                    replace=args.replace, slot_key=args.slot_key)
            print(f"schedule {name}: first slot {_when(first)}")
        elif action == "remove":
            print(f"schedule {name} removed" if client.unschedule(args.name) else f"no schedule {name}")
        elif action == "pause":
            print(f"schedule {name} paused" if client.pause_schedule(args.name)
                  else f"schedule {name} was paused already")
        elif action == "resume":
            print(f"schedule {name} resumed" if client.resume_schedule(args.name)
                  else f"schedule {name} was not paused")
        else:
            rows = client.schedules()
            if not rows:
                print("no schedules")
            for r in rows:
                when = (f"cron {printable(r.cron)} {printable(r.time_zone)}" if r.cron is not None
                        else f"every {int(r.every.total_seconds()) if r.every else 0}s")
                state = (f"paused since {_when(r.paused_at)} by {printable(r.paused_by or '')}"
                         if r.paused_at else f"next {_when(r.next_fire_at)}")
                print(f"{printable(r.name)}: {when}; kind {printable(r.kind)} queue {printable(r.queue)};"
                      f" catch-up {printable(r.catch_up)}; {state}; last {_when(r.last_fire_at)}"
                      f"{'' if r.last_job_id is None else f' (job {r.last_job_id})'}; by {printable(r.created_by)}"
                      f"{'' if r.last_error is None else f'; failing since {_when(r.last_error_at)}: {printable(r.last_error)}'}")
        return 0
    return _with_client(args, body)


def cmd_reclaim(args: argparse.Namespace) -> int:
    def body(client: Client, conn: psycopg.Connection[Any]) -> int:
        n = client.sweep()
        print(f"reclaimed {n} expired lease{'' if n == 1 else 's'}")
        return 0
    return _with_client(args, body)


# -- entry point ------------------------------------------------------------

def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from .dashboard.server import Options, StartError, run
    except ImportError as exc:
        raise CliError(f"the dashboard's dependencies are missing ({exc.name})",
                       hint="pip install 'pgfence[dashboard]'") from None
    try:
        return run(Options(dsn=args.dsn, dsn_from_cli=args.dsn_from_cli, bind=args.bind,
                           token_file=args.token_file, no_auth=args.no_auth, read_only=args.read_only,
                           allow_superuser=args.allow_superuser, tls_cert=args.tls_cert, tls_key=args.tls_key,
                           allowed_hosts=args.allowed_host))
    except StartError as exc:
        raise CliError(exc.message, hint=exc.hint, code=exc.code) from None


def _setup_logging(verbose: int, command: str) -> None:
    level = logging.DEBUG if verbose else (logging.INFO if command in ("worker", "dashboard") else logging.WARNING)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        logging.getLogger("psycopg").setLevel(max(level, logging.WARNING))


def _report(message: str, hint: Optional[str]) -> None:
    if message.startswith(f"{PROG}: "):
        message = message[len(PROG) + 2:]
    print(f"{PROG}: error: {printable(message)}", file=sys.stderr)
    if hint:
        print(f"hint: {printable(hint)}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``pgfence`` command line; returns the exit code."""
    verbose = 0
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help
            return exc.code if isinstance(exc.code, int) else 0
        args.dsn_from_cli = hasattr(args, "dsn")
        if not args.dsn_from_cli:
            args.dsn = os.environ.get("PGFENCE_DSN", "")
        verbose = getattr(args, "verbose", 0) or 0
        _setup_logging(verbose, args.command)
        code: int = args.func(args)
        return code
    except CliError as exc:
        _report(exc.message, exc.hint)
        return exc.code
    except PgfenceError as exc:
        message = exc.message + (f" ({exc.detail})" if exc.detail else "")
        _report(message, exc.hint)
        return 1
    except (psycopg.OperationalError, PoolTimeout) as exc:
        _report(f"database connection failed: {_one_line(exc)}",
                "check that the database is reachable (--dsn / PGFENCE_DSN)")
        return 1
    except psycopg.errors.InsufficientPrivilege as exc:
        _report(f"database error: {_one_line(exc)}",
                "connect as a role granted pgfence_producer (enqueue), pgfence_worker (worker) or "
                "pgfence_operator (stats, show, requeue, cancel, reclaim)")
        return 1
    except psycopg.Error as exc:
        diag = getattr(exc, "diag", None)
        _report(f"database error: {_one_line(exc)}", getattr(diag, "message_hint", None))
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except Exception as exc:
        if verbose:
            log.exception("unexpected error")
        _report(f"unexpected {type(exc).__name__}: {_one_line(exc)}",
                None if verbose else "run with -v for the traceback")
        return 1


__all__ = ["main", "build_parser", "load_handlers", "format_table", "format_age", "format_job"]
