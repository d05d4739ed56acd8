"""Where the idle latency goes: each step of enqueue -> handler start, timed alone.

    .venv/bin/python bench/latency_budget.py [--dsn DSN] [--rounds 300]

The latency step of `make bench` measures enqueue -> handler start as a whole, and the
latency floor (a bare INSERT + NOTIFY, a bare one-row SKIP LOCKED UPDATE) what is left
without queue logic. This script splits both into their steps, on one idle queue of
its own, in one process, the pgfence call and its floor counterpart taking turns in
every round:

* enqueue: round trip of ``pgfence.enqueue`` against the floor's INSERT + NOTIFY,
  and the server's own time of each (``EXPLAIN (ANALYZE)`` of the prepared statement);
* notify: from the enqueue's reply until the listening connection has the
  notification (the server sends both at commit: this is the extra wait, if any);
* claim: ``Client.claim`` (the worker's call, rows to Job objects included), its own
  SQL run raw on the same connection, and the floor's bare UPDATE, one queued job
  each; the first two each right after a notification, taking turns at going first,
  so that their difference is the client's own work; server time of ``pgfence.claim``
  and of the bare UPDATE;
* hand-off: one ``threading.Event`` wake-up from another thread (the worker has two:
  listener -> claimer, claimer -> handler thread).

Then the same path inside a real ``pgfence.Worker`` (concurrency 8, prefetch 500, as the
latency step's processes; ``--worker-jobs`` jobs, 100 by default, enqueued at 20/s by a
producer process of its own): its listener's wake-up and its client's claim are timed
through wrappers set on that one worker object (the library is not changed), and each
job's handler start is recorded, so the hand-offs are measured where they happen, with
the worker's other threads alive: enqueue sent -> listener wakes the claimer; -> the
claim is sent; the claim's round trip (through the pool, with its request id and the
max_jobs the worker asks for); the claim's reply -> the handler starts.

Medians and p90 in microseconds, and the differences that add up to the gap between
pgfence and its floor. Measured, not asserted; a loaded machine inflates every row.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python_client"))
from pgfence import Client, calls  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from run import default_dsn  # noqa: E402

ENQUEUE = "SELECT pgfence.enqueue(kind => 'noop', payload => %s::jsonb, queue => %s)"
FLOOR_ENQUEUE = ("WITH j AS (INSERT INTO pgfence.jobs (queue, kind, payload) VALUES (%s, 'noop', %s::jsonb)"
                 " RETURNING id) SELECT pg_notify(%s, '') FROM j")
CLAIM = calls._CLAIM  # (the SQL of Client.claim, columns and casts included)
LEASE = timedelta(seconds=30)
FLOOR_CLAIM = ("UPDATE pgfence.jobs j SET status = 'processing', attempts = j.attempts + 1,"
               " attempt_token = gen_random_uuid(), reserved_by = 'budget-floor', reserved_at = now(),"
               " lease_expires_at = now() + interval '30 seconds', updated_at = now()"
               " WHERE j.id = (SELECT q.id FROM pgfence.jobs q WHERE q.status = 'queued' AND q.queue = %s"
               " AND q.available_at <= now() ORDER BY q.priority DESC, q.available_at, q.id"
               " LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING j.id, j.attempt_token")


def server_us(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> float:
    """The server's execution time of one statement, prepared once per connection and
    run through ``EXPLAIN (ANALYZE, TIMING OFF)``: parse and plan excluded, as for the
    worker's prepared statements."""
    name = "budget_" + str(abs(hash(sql)))
    if not conn.execute("SELECT 1 FROM pg_prepared_statements WHERE name = %s", (name,)).fetchone():
        n = iter(range(1, 100))
        conn.execute(f"PREPARE {name} AS " + re.sub("%s", lambda _: f"${next(n)}", sql))
    cur = psycopg.ClientCursor(conn)
    args = ", ".join(["%s"] * len(params))
    [(plan,)] = cur.execute(f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON) EXECUTE {name}({args})",
                            params).fetchall()
    return float(plan[0]["Execution Time"]) * 1000.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1e6, out


def wait_notify(listen: psycopg.Connection[Any], since: float) -> float:
    """Microseconds from ``since`` (perf_counter) until ``listen`` has a notification."""
    gen = listen.notifies(timeout=1.0, stop_after=1)
    for _ in gen:
        return (time.perf_counter() - since) * 1e6
    raise RuntimeError("no notification within 1 s")


def handoff_us(rounds: int) -> list[float]:
    """One-way wake-up of a thread waiting on a threading.Event."""
    go, back = threading.Event(), threading.Event()
    stamps: list[float] = []
    woke: list[float] = []

    def waiter() -> None:
        for _ in range(rounds):
            go.wait()
            woke.append(time.perf_counter())
            go.clear()
            back.set()
    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    for _ in range(rounds):
        time.sleep(0.002)  # the waiter is asleep, as an idle worker's threads are
        stamps.append(time.perf_counter())
        go.set()
        back.wait()
        back.clear()
    t.join()
    return [(w - s) * 1e6 for s, w in zip(stamps, woke)]


def summary(xs: list[float]) -> str:
    if not xs:
        return f"{'n/a':>8} {'n/a':>8}"
    xs = sorted(xs)
    return f"{statistics.median(xs):8.0f} {xs[int(0.9 * (len(xs) - 1))]:8.0f}"


PRODUCER = """
import json, sys, time
import psycopg
dsn, queue, n, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with psycopg.connect(dsn, autocommit=True) as conn:
    t0 = time.time()
    for i in range(n):
        d = t0 + i / rate - time.time()
        if d > 0:
            time.sleep(d)
        conn.execute(sys.argv[5], (json.dumps({"t": time.time(), "i": i}), queue), prepare=True)
"""


def in_worker(dsn: str, jobs: int) -> dict[str, list[float]]:
    """The idle latency's steps inside a real Worker (see the module's docstring), in us."""
    import bisect
    import subprocess
    import pgfence.worker as worker_module
    from pgfence import Worker

    queue = f"budget-worker-{os.getpid()}"
    wakes: list[float] = []
    claims: list[tuple[float, float, list[int]]] = []
    starts: dict[int, tuple[float, float]] = {}
    client = Client.connect(dsn)
    claim = client.claim

    def timed_claim(*args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        got = claim(*args, **kwargs)
        if got:
            claims.append((t0, time.time(), [j.payload["i"] for j in got]))
        return got
    client.claim = timed_claim  # type: ignore[method-assign]

    def handler(job: Any) -> None:
        starts[job.payload["i"]] = (time.time(), job.payload["t"])

    plain_listener = worker_module.Listener

    class TimedListener(worker_module.Listener):
        def __init__(self, *args: Any, wake: Callable[[], None], **kwargs: Any) -> None:
            def timed_wake() -> None:
                wakes.append(time.time())
                wake()
            super().__init__(*args, wake=timed_wake, **kwargs)
    worker = Worker(client, handlers={"noop": handler}, queues=[queue], concurrency=8, prefetch=500,
                    poll_interval=0.05)
    runner = threading.Thread(target=worker.run, daemon=True)
    worker_module.Listener = TimedListener  # type: ignore[misc]  (for this worker's run(): restored below)
    try:
        runner.start()
        time.sleep(1.0)
        subprocess.run([sys.executable, "-c", PRODUCER, dsn, queue, str(jobs), "20", ENQUEUE], check=True)
        deadline = time.time() + 10
        while len(starts) < jobs and time.time() < deadline:
            time.sleep(0.05)
    finally:
        worker_module.Listener = plain_listener  # type: ignore[misc]
        worker.stop()
        runner.join(15)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue,))
        client.close()
    wakes.sort()
    out: dict[str, list[float]] = {k: [] for k in ("enqueue sent -> wake", "wake -> claim sent", "claim round trip",
                                                    "claim reply -> handler", "enqueue sent -> handler")}
    for sent, got, ids in claims:
        if len(ids) != 1 or ids[0] not in starts:
            continue  # (two jobs in one claim: no single wake-up to pair it with)
        began, t = starts[ids[0]]
        k = bisect.bisect_left(wakes, t)
        if k == len(wakes) or wakes[k] > sent:
            continue  # claimed by a poll, not after a wake-up
        for name, us in (("enqueue sent -> wake", wakes[k] - t), ("wake -> claim sent", sent - wakes[k]),
                         ("claim round trip", got - sent), ("claim reply -> handler", began - got),
                         ("enqueue sent -> handler", began - t)):
            out[name].append(us * 1e6)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default=os.environ.get("PGFENCE_DSN") or default_dsn(),
                    help="default: $PGFENCE_DSN, else the cluster `make db` started")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--worker-jobs", type=int, default=100)
    a = ap.parse_args()
    queue, channel = f"budget-{os.getpid()}", f"budget_{os.getpid()}"
    m: dict[str, list[float]] = {k: [] for k in (
        "enqueue", "enqueue server", "floor enqueue", "floor enqueue server", "notify", "floor notify",
        "Client.claim", "claim (raw SQL)", "claim server", "floor claim", "floor claim server")}
    with psycopg.connect(a.dsn, autocommit=True) as prod, psycopg.connect(a.dsn, autocommit=True) as listen, \
            psycopg.connect(a.dsn, autocommit=True) as work:
        tags = Client(work).wakeup_tags([queue])
        listen.execute("LISTEN pgfence_enqueue")
        listen.execute(f"LISTEN {channel}")
        client = Client(work)

        def drain_notifies() -> None:
            while select.select([listen.fileno()], [], [], 0)[0]:
                list(listen.notifies(timeout=0, stop_after=100))

        def claim_params() -> tuple[Any, ...]:
            """CLAIM's parameters: Client.claim's call below, a fresh request id each."""
            return ("budget", [queue], LEASE, 8, uuid.uuid4())

        def finish(rows: object) -> None:
            work.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue,))

        for i in range(a.rounds):
            payload = json.dumps({"t": time.time(), "i": i})
            # pgfence: enqueue, notification, claim, twice: the claim once through
            # Client.claim (the worker's call) and once as the same SQL on the same
            # connection, each right after its notification, in turn first
            for how in (("client", "raw") if i % 2 == 0 else ("raw", "client")):
                drain_notifies()
                us, _ = timed(lambda: prod.execute(ENQUEUE, (payload, queue), prepare=True).fetchone())
                m["enqueue"].append(us)
                m["notify"].append(wait_notify(listen, time.perf_counter()))
                if how == "client":
                    us, rows = timed(lambda: client.claim("budget", [queue], lease=LEASE, max_jobs=8,
                                                          request_id=uuid.uuid4()))
                    m["Client.claim"].append(us)
                else:
                    us, rows = timed(lambda: work.execute(CLAIM, claim_params(), prepare=True).fetchall())
                    m["claim (raw SQL)"].append(us)
                assert len(rows) == 1, rows
                finish(rows)
            # the server's time of enqueue and claim
            m["enqueue server"].append(server_us(prod, ENQUEUE, (payload, queue)))
            m["claim server"].append(server_us(work, CLAIM, claim_params()))
            finish([])
            # the floor: INSERT + NOTIFY, notification, bare UPDATE
            drain_notifies()
            us, _ = timed(lambda: prod.execute(FLOOR_ENQUEUE, (queue, payload, channel), prepare=True).fetchone())
            m["floor enqueue"].append(us)
            m["floor notify"].append(wait_notify(listen, time.perf_counter()))
            us, rows = timed(lambda: work.execute(FLOOR_CLAIM, (queue,), prepare=True).fetchall())
            assert len(rows) == 1
            m["floor claim"].append(us)
            finish(rows)
            m["floor enqueue server"].append(server_us(prod, FLOOR_ENQUEUE, (queue, payload, channel)))
            m["floor claim server"].append(server_us(work, FLOOR_CLAIM, (queue,)))
            finish([])
        drain_notifies()
        del tags
    hand = handoff_us(a.rounds)
    load = os.getloadavg()[0]
    print(f"latency budget: {a.rounds} rounds, load average (1 min) at end {load:.2f}; microseconds")
    print(f"{'step':<24} {'median':>8} {'p90':>8}")
    for k, xs in m.items():
        print(f"{k:<24} {summary(xs)}")
    print(f"{'thread hand-off':<24} {summary(hand)}")
    med = {k: statistics.median(xs) for k, xs in m.items()}
    h = statistics.median(hand)
    ours = med["enqueue"] + med["notify"] + h + med["Client.claim"] + h
    floor = med["floor enqueue"] + med["floor notify"] + med["floor claim"]
    print(f"\nsum of steps, pgfence (enqueue + notify + 2 hand-offs + Client.claim): {ours:.0f} us")
    print(f"sum of steps, floor (INSERT+NOTIFY + notify + bare UPDATE):           {floor:.0f} us")
    print(f"gap {ours - floor:.0f} us, of which: enqueue {med['enqueue'] - med['floor enqueue']:+.0f}"
          f" (server {med['enqueue server'] - med['floor enqueue server']:+.0f}),"
          f" claim SQL {med['claim (raw SQL)'] - med['floor claim']:+.0f}"
          f" (server {med['claim server'] - med['floor claim server']:+.0f}),"
          f" client-side claim {med['Client.claim'] - med['claim (raw SQL)']:+.0f},"
          f" hand-offs {2 * h:+.0f}, notify {med['notify'] - med['floor notify']:+.0f}")
    if a.worker_jobs > 0:
        w = in_worker(a.dsn, a.worker_jobs)
        print(f"\nin a Worker (concurrency 8, prefetch 500), {a.worker_jobs} jobs at 20/s, {len(w['claim round trip'])}"
              f" claimed after a wake-up, one job each; microseconds")
        print(f"{'step':<24} {'median':>8} {'p90':>8}")
        for k, xs in w.items():
            print(f"{k:<24} {summary(xs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
