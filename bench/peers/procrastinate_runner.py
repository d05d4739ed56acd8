"""procrastinate side of the benchmark. Runs in bench/.peers/venv (not the main venv).

    single  --dsn D --n N                  N sequential task.defer_async() calls, one connection
    batch   --dsn D --n N --batch B        N jobs, B per task.batch_defer_async() call
    worker  --dsn D --concurrency 8 [--mode noop|latency --out F]
    latency --dsn D --n N --rate R         N defers at R/s, kwargs t=time.time()

Timed subcommands print one JSON line {"seconds": ..., "n": ...}.
The App and its task live in procrastinate_app.py (run.py installs the schema with
procrastinate's own CLI: `procrastinate --app=procrastinate_app.app schema --apply`).
Worker: App(PsycopgConnector) -> run_worker_async(concurrency=8, queues=["bench"]);
every other worker option is procrastinate's default (LISTEN/NOTIFY on, jobs kept
as 'succeeded'). Prints READY <epoch> right before run_worker_async().
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Optional

import procrastinate_app
from procrastinate_app import QUEUE, make_app


async def single(dsn: str, n: int) -> dict[str, float]:
    a = make_app(dsn, 1)
    async with a.open_async():
        task = a.tasks["noop"]
        t0 = time.perf_counter()
        for i in range(n):
            await task.defer_async(i=i)
        return {"seconds": time.perf_counter() - t0, "n": n}


async def batch(dsn: str, n: int, size: int) -> dict[str, float]:
    a = make_app(dsn, 1)
    async with a.open_async():
        task = a.tasks["noop"]
        t0 = time.perf_counter()
        for start in range(0, n, size):
            k = min(size, n - start)
            await task.batch_defer_async(*({"i": start + j} for j in range(k)))
        return {"seconds": time.perf_counter() - t0, "n": n}


async def latency(dsn: str, n: int, rate: float) -> dict[str, float]:
    a = make_app(dsn, 1)
    async with a.open_async():
        task = a.tasks["noop"]
        t0 = time.time()
        for i in range(n):
            delay = t0 + i / rate - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await task.defer_async(i=i, t=time.time())
        return {"seconds": time.time() - t0, "n": n}


async def worker(dsn: str, concurrency: int, mode: str, out: Optional[str]) -> None:
    if mode == "latency":
        assert out, "--out is required with --mode latency"
        procrastinate_app.out = open(out, "a", buffering=1)
    # concurrency jobs + the LISTEN connection + headroom for heartbeat/abort polls
    a = make_app(dsn, concurrency + 2)
    async with a.open_async():
        print(f"READY {time.time():.6f} procrastinate", flush=True)
        await a.run_worker_async(concurrency=concurrency, queues=[QUEUE], install_signal_handlers=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["single", "batch", "worker", "latency"])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--mode", choices=["noop", "latency"], default="noop")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.cmd == "single":
        print(json.dumps(asyncio.run(single(a.dsn, a.n))))
    elif a.cmd == "batch":
        print(json.dumps(asyncio.run(batch(a.dsn, a.n, a.batch))))
    elif a.cmd == "latency":
        print(json.dumps(asyncio.run(latency(a.dsn, a.n, a.rate))))
    else:
        asyncio.run(worker(a.dsn, a.concurrency, a.mode, a.out))


if __name__ == "__main__":
    main()
