"""The procrastinate App used by the benchmark (bench/.peers/venv only).

A module of its own (not __main__) so procrastinate's CLI can import `app`.
Task "noop" on queue "bench": does nothing, or in latency mode appends
`time.time() - t` to the open file in `out`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from procrastinate import App, PsycopgConnector

QUEUE = "bench"
out: Optional[Any] = None  # set by the worker in latency mode


def make_app(dsn: str, pool_size: int) -> App:
    connector = PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size)
    app = App(connector=connector)

    @app.task(name="noop", queue=QUEUE)
    async def noop(i: int = 0, t: Optional[float] = None) -> None:
        if out is not None and t is not None:
            out.write(f"{time.time() - t:.6f}\n")

    return app


# For `procrastinate --app=procrastinate_app.app schema --apply` (DSN from $BENCH_DSN).
app = make_app(os.environ.get("BENCH_DSN", ""), 1)
