"""The worker's stand-in sweeper: ``CALL pgfence.sweep()`` when pg_cron does not.

``run_sweeper=True``: sweep every ``sweep_interval``. ``None``: sweep while
``pgfence.sweeper_health()`` says no background sweeper runs (stopped, never ran, or
unknown; not while an operator paused it), looked at every SWEEPER_LOOK_INTERVAL
seconds (pg_cron may stop, or come back, while the worker runs). A role that may not
sweep stops it for good (claim's on-claim recovery and pg_cron remain).
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import psycopg

from ._text import escaped_logger
from .client import Client
from .errors import PgfenceError

log = escaped_logger("pgfence.worker")

#: How often a worker with run_sweeper=None looks whether the background sweeper runs.
SWEEPER_LOOK_INTERVAL = 60.0


def run(client: Client, run_sweeper: Optional[bool], *, sweep_interval: float, worker_id: str,
        done: threading.Event) -> None:
    """Sweep (see the module's docstring) until ``done`` is set."""
    auto = run_sweeper is None
    sweeping = not auto
    next_look = time.monotonic()
    if not auto:
        log.info("worker %s runs the reclaim sweep every %ss", worker_id, sweep_interval)
    while True:
        if auto and time.monotonic() >= next_look:
            next_look = time.monotonic() + SWEEPER_LOOK_INTERVAL
            try:
                state = client.sweeper_health().state
            except (PgfenceError, psycopg.Error):
                state = "unknown"
            wanted = state in ("stopped", "never_ran", "unknown")
            if sweeping != wanted:
                sweeping = wanted
                log.info("worker %s %s the reclaim sweep (background sweeper: %s)", worker_id,
                         "runs" if sweeping else "stops", state)
        if done.wait(sweep_interval):
            return
        if not sweeping:
            continue
        try:
            n = client.sweep()
            if n:
                log.info("worker %s: sweep reclaimed %s expired leases", worker_id, n)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("worker %s: cannot sweep (%s); grant pgfence_operator to this role or rely on "
                        "claim's on-claim recovery and pg_cron", worker_id, str(exc).strip())
            return
        except (PgfenceError, psycopg.Error) as exc:
            log.warning("worker %s: sweep failed (%s)", worker_id, str(exc).strip())


__all__ = ["run", "SWEEPER_LOOK_INTERVAL"]
