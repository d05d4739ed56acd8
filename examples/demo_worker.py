"""The worker processes of ``examples/demo.py`` (run by the demo, not by hand).

Each mode is one OS process that talks to the database only through
:class:`pgfence.Client` (plus, in ``poll`` mode, one extra connection that reads
``clock_timestamp()`` around every claim, so the demo can tell whether a reclaim
happened inside this worker's claim call). Every event is one JSON object per
stdout line; timestamps come from the database clock (ISO 8601).

Modes (the DSN comes from the environment variable ``PGFENCE_DSN``, "" = libpq defaults):

``hold``
    Claim up to ``--max-jobs`` jobs with ``--lease``, read their ``reserved_at``
    back from the database, print ``{"event": "claimed", ...}`` and then idle
    until killed (workers A and E: the demo SIGKILLs them). Exits 4 if nobody
    kills it within ``--max-seconds``.
``zombie``
    Claim one job, print ``claimed``, then wait (sleeping 0.05 s at a time) until
    ``--go-file`` exists (the demo SIGSTOPs the process meanwhile, and creates the
    file after SIGCONT). Then call ``heartbeat`` and ``complete`` (result
    ``{"by": <--result-by>}``) and print one ``outcome`` line per call:
    operation, accepted, exception class, sqlstate, message, detail (worker C).
``poll``
    Every ``--poll`` seconds: ``claim`` (``--max-jobs``, ``--lease``), then
    ``complete`` each claimed job with ``{"by": <--result-by>}``; every accepted
    completion is appended as a JSON line to ``--completions`` (job id, token,
    worker). Claims again at once after a non-empty claim. Stops after
    ``--until`` completions (0 = no target) or ``--max-seconds`` (workers B, D, F).
    Exit status 0, or 3 when ``--until`` was not reached in time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import psycopg

from pgfence import Client, PgfenceError


def _emit(event: str, **fields: Any) -> None:
    fields = {"event": event, "pid": os.getpid(), **fields}
    sys.stdout.write(json.dumps(fields, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _dsn() -> str:
    return os.environ.get("PGFENCE_DSN", "")


def _client() -> Client:
    return Client.connect(_dsn(), min_size=1, max_size=2)


def _error_fields(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, PgfenceError):
        return {"exception": type(exc).__name__, "sqlstate": exc.sqlstate, "message": exc.message,
                "detail": exc.detail}
    return {"exception": type(exc).__name__, "sqlstate": getattr(exc, "sqlstate", None),
            "message": str(exc).strip(), "detail": None}


def _hold(a: argparse.Namespace) -> int:
    client = _client()
    jobs = client.claim(a.worker_id, [a.queue], lease=timedelta(seconds=a.lease), max_jobs=a.max_jobs)
    claimed = []
    for job in jobs:
        rec = client.get_job(job.id)  # reserved_at: the database's claim time
        claimed.append({"id": job.id, "token": str(job.attempt_token), "reserved_at": rec.reserved_at,
                        "lease_expires_at": job.lease_expires_at, "attempts": job.attempts})
    _emit("claimed", worker=a.worker_id, jobs=claimed)
    # Idle, holding nothing but the leases in the database, until the demo kills us.
    deadline = time.monotonic() + a.max_seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    _emit("not_killed", worker=a.worker_id)
    return 4


def _zombie(a: argparse.Namespace) -> int:
    client = _client()
    jobs = client.claim(a.worker_id, [a.queue], lease=timedelta(seconds=a.lease), max_jobs=1)
    if not jobs:
        _emit("claimed", worker=a.worker_id, jobs=[])
        return 3
    job = jobs[0]
    rec = client.get_job(job.id)
    _emit("claimed", worker=a.worker_id, jobs=[{
        "id": job.id, "token": str(job.attempt_token), "reserved_at": rec.reserved_at,
        "lease_expires_at": job.lease_expires_at, "attempts": job.attempts}])
    # The demo SIGSTOPs us somewhere in this loop and creates the go file after SIGCONT.
    go = Path(a.go_file)
    deadline = time.monotonic() + a.max_seconds
    while not go.exists():
        if time.monotonic() >= deadline:
            _emit("go_timeout", worker=a.worker_id)
            return 4
        time.sleep(0.05)
    _emit("resumed", worker=a.worker_id)
    for op in ("heartbeat", "complete"):
        try:
            if op == "heartbeat":
                value: Any = client.heartbeat(job.id, job.attempt_token, lease=timedelta(seconds=a.lease))
            else:
                client.complete(job.id, job.attempt_token, {"by": a.result_by})
                value = None
        except (PgfenceError, psycopg.Error) as exc:
            _emit("outcome", worker=a.worker_id, op=op, job_id=job.id, accepted=False, **_error_fields(exc))
        else:
            _emit("outcome", worker=a.worker_id, op=op, job_id=job.id, accepted=True, exception=None,
                  sqlstate=None, message=None, detail=None, value=value)
    client.close()
    return 0


def _poll(a: argparse.Namespace) -> int:
    client = _client()
    book = psycopg.connect(_dsn(), autocommit=True, connect_timeout=10)

    def db_now() -> datetime:
        row = book.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    out = open(a.completions, "a", encoding="utf-8") if a.completions else None
    completed = polls = refused = 0
    deadline = time.monotonic() + a.max_seconds
    reason = "deadline"
    _emit("started", worker=a.worker_id, at=db_now())
    while True:
        if a.until and completed >= a.until:
            reason = "until"
            break
        if time.monotonic() >= deadline:
            break
        t_before = db_now()
        jobs = client.claim(a.worker_id, [a.queue], lease=timedelta(seconds=a.lease), max_jobs=a.max_jobs)
        t_after = db_now()
        polls += 1
        _emit("poll", worker=a.worker_id, n=polls, t_before=t_before, t_after=t_after,
              jobs=[{"id": j.id, "token": str(j.attempt_token), "lease_expires_at": j.lease_expires_at,
                     "attempts": j.attempts} for j in jobs])
        for job in jobs:
            try:
                client.complete(job.id, job.attempt_token, {"by": a.result_by})
            except PgfenceError as exc:
                refused += 1
                _emit("complete_refused", worker=a.worker_id, job_id=job.id, token=str(job.attempt_token),
                      **_error_fields(exc))
                continue
            completed += 1
            line = {"job_id": job.id, "token": str(job.attempt_token), "worker": a.worker_id}
            if out is not None:
                out.write(json.dumps(line) + "\n")
                out.flush()
            _emit("completed", **line)
        if not jobs:
            time.sleep(a.poll)
    _emit("exit", worker=a.worker_id, polls=polls, completed=completed, refused=refused, reason=reason,
          at=db_now())
    if out is not None:
        out.close()
    book.close()
    client.close()
    return 3 if a.until and completed < a.until else 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python examples/demo_worker.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["hold", "zombie", "poll"])
    ap.add_argument("--queue", required=True)
    ap.add_argument("--worker-id", required=True)
    ap.add_argument("--lease", type=float, required=True, help="lease in seconds")
    ap.add_argument("--max-jobs", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=60.0, help="upper bound on this process's life")
    ap.add_argument("--go-file", help="zombie: proceed once this file exists")
    ap.add_argument("--poll", type=float, default=0.1, help="poll: seconds between empty claims")
    ap.add_argument("--until", type=int, default=0, help="poll: stop after this many completions (0 = none)")
    ap.add_argument("--completions", help="poll: append one JSON line per accepted completion")
    ap.add_argument("--result-by", default="?", help='result stored by complete: {"by": RESULT_BY}')
    a = ap.parse_args(argv)
    if a.mode == "zombie" and not a.go_file:
        ap.error("zombie needs --go-file")
    try:
        if a.mode == "hold":
            return _hold(a)
        if a.mode == "zombie":
            return _zombie(a)
        return _poll(a)
    except Exception as exc:  # report, then fail: the demo prints it
        _emit("error", worker=a.worker_id, **_error_fields(exc))
        raise


if __name__ == "__main__":
    sys.exit(main())
