"""One pgfence worker OS process for the benchmark (main venv).

    python bench/pgfence_worker.py --dsn DSN --queue Q [--concurrency 8] [--prefetch P]
        [--poll-interval 0.05] [--mode noop|latency] [--out FILE] [--async]

A `pgfence.Worker` over `pgfence.Client.connect(DSN)`; with --async a
`pgfence.aio.AsyncWorker` over `await pgfence.aio.AsyncClient.connect(DSN)`, whose
handlers are `async def` (awaited on the event loop).
mode latency: the handler appends `time.time() - payload["t"]` (seconds) to --out.
Prints `READY <epoch>` right before the worker's run() is called.
SIGTERM/SIGINT stop the worker (w.stop(); the AsyncWorker handles them itself).
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import time
from typing import Any, Callable

from pgfence import Client, Worker


def make_handler(mode: str, out: str | None) -> Callable[[Any], None]:
    if mode == "noop":
        def noop(job: Any) -> None:
            return None
        return noop
    if out is None:
        raise SystemExit("--out is required with --mode latency")
    fh = open(out, "a", buffering=1)
    lock = threading.Lock()

    def record(job: Any) -> None:
        delay = time.time() - float(job.payload["t"])
        with lock:
            fh.write(f"{delay:.6f}\n")
    return record


def make_async_handler(mode: str, out: str | None) -> Callable[[Any], Any]:
    """The handler of ``mode`` as an ``async def`` (one event loop: no lock needed)."""
    handler = make_handler(mode, out)

    async def run(job: Any) -> None:
        return handler(job)
    return run


async def run_async(a: argparse.Namespace) -> None:
    from pgfence.aio import AsyncClient, AsyncWorker

    client = await AsyncClient.connect(a.dsn)
    try:
        worker = AsyncWorker(client, handlers={"noop": make_async_handler(a.mode, a.out)}, queues=[a.queue],
                             concurrency=a.concurrency, prefetch=a.prefetch, poll_interval=a.poll_interval)
        print(f"READY {time.time():.6f}", flush=True)
        await worker.run()
    finally:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prefetch", type=int, default=8)
    ap.add_argument("--poll-interval", type=float, default=0.05)
    ap.add_argument("--mode", choices=["noop", "latency"], default="noop")
    ap.add_argument("--out")
    ap.add_argument("--async", dest="use_async", action="store_true")
    a = ap.parse_args()

    if a.use_async:
        asyncio.run(run_async(a))
        return 0

    handler = make_handler(a.mode, a.out)
    client = Client.connect(a.dsn)
    worker = Worker(client, handlers={"noop": handler}, queues=[a.queue], concurrency=a.concurrency,
                    prefetch=a.prefetch, poll_interval=a.poll_interval)

    def on_signal(signum: int, frame: object) -> None:
        worker.stop()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    print(f"READY {time.time():.6f}", flush=True)
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
