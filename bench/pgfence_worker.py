"""One pgfence worker OS process for the benchmark (main venv).

    python bench/pgfence_worker.py --dsn DSN --queue Q [--concurrency 8] [--prefetch P]
        [--poll-interval 0.05] [--mode noop|latency] [--out FILE]

A `pgfence.Worker` over `pgfence.Client.connect(DSN)`.
mode latency: the handler appends `time.time() - payload["t"]` (seconds) to --out.
Prints `READY <epoch>` right before the worker's run() is called.
SIGTERM/SIGINT stop the worker (w.stop()).
"""
from __future__ import annotations

import argparse
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prefetch", type=int, default=8)
    ap.add_argument("--poll-interval", type=float, default=0.05)
    ap.add_argument("--mode", choices=["noop", "latency"], default="noop")
    ap.add_argument("--out")
    a = ap.parse_args()

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
