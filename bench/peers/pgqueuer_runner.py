"""pgqueuer side of the benchmark. Runs in bench/.peers/venv (not the main venv).

    single  --dsn D --n N                  N sequential single enqueues, one connection
    batch   --dsn D --n N --batch B        N jobs, B per Queries.enqueue(list...) call
    worker  --dsn D --batch-size B --max-tasks M [--mode noop|latency --out F]
    latency --dsn D --n N --rate R         N single enqueues at R/s, payload {"t": time.time()}

Timed subcommands print one JSON line {"seconds": ..., "n": ...}.
The schema is installed by run.py with pgqueuer's own CLI (`pgq install`).
Worker: QueueManager over one asyncpg connection (AsyncpgDriver, as in pgqueuer's
quick start), entrypoint "noop" (async no-op), QueueManager.run(batch_size=B,
max_concurrent_tasks=M). Prints READY <epoch> right before run().
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

ENTRYPOINT = "noop"


async def _queries(dsn: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(dsn)
    return conn, Queries(AsyncpgDriver(conn))


async def single(dsn: str, n: int) -> dict[str, float]:
    conn, q = await _queries(dsn)
    try:
        t0 = time.perf_counter()
        for i in range(n):
            await q.enqueue(ENTRYPOINT, json.dumps({"i": i}).encode(), 0)
        return {"seconds": time.perf_counter() - t0, "n": n}
    finally:
        await conn.close()


async def batch(dsn: str, n: int, size: int) -> dict[str, float]:
    conn, q = await _queries(dsn)
    try:
        t0 = time.perf_counter()
        for start in range(0, n, size):
            k = min(size, n - start)
            await q.enqueue([ENTRYPOINT] * k, [json.dumps({"i": start + j}).encode() for j in range(k)], [0] * k)
        return {"seconds": time.perf_counter() - t0, "n": n}
    finally:
        await conn.close()


async def latency(dsn: str, n: int, rate: float) -> dict[str, float]:
    conn, q = await _queries(dsn)
    try:
        t0 = time.time()
        for i in range(n):
            delay = t0 + i / rate - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await q.enqueue(ENTRYPOINT, json.dumps({"t": time.time(), "i": i}).encode(), 0)
        return {"seconds": time.time() - t0, "n": n}
    finally:
        await conn.close()


async def worker(dsn: str, batch_size: int, max_tasks: int, mode: str, out: str | None) -> None:
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    fh = open(out, "a", buffering=1) if out else None

    if mode == "latency":
        assert fh is not None, "--out is required with --mode latency"

        @qm.entrypoint(ENTRYPOINT)
        async def record(job: Job) -> None:
            t = json.loads(job.payload or b"{}")["t"]
            fh.write(f"{time.time() - t:.6f}\n")
    else:
        @qm.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            return None

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    print(f"READY {time.time():.6f} pgqueuer", flush=True)
    await qm.run(batch_size=batch_size, max_concurrent_tasks=max_tasks or None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["single", "batch", "worker", "latency"])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-tasks", type=int, default=16)
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
        asyncio.run(worker(a.dsn, a.batch_size, a.max_tasks, a.mode, a.out))


if __name__ == "__main__":
    main()
