"""pgfence side of the benchmark (main venv: stdlib + psycopg).

One function per measurement. Enqueue goes through pgfence.Client, as an application
calls it; drain, latency, depth and recovery run worker OS processes
(bench/pgfence_worker.py: a `pgfence.Worker`). Every run uses a fresh queue name and
deletes its jobs (+ VACUUM) afterwards.
"""
from __future__ import annotations

import bisect
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from common import (BENCH_DIR, LOG_DIR, BenchError, connect, delay_summary, dsn_dbname,
                    log, measure_drain, median, merge_runs, percentile, settle, spawn, stop, wait_lines, wait_ready)

PY = sys.executable
WORKER = BENCH_DIR / "pgfence_worker.py"
#: The Node.js worker (clients/node), same arguments: the "pgfence (Node worker)" drain row.
NODE_WORKER = BENCH_DIR / "pgfence_node_worker.js"
VICTIM = BENCH_DIR / "pgfence_victim.py"
FLOOR_CLAIMER = BENCH_DIR / "floor_claimer.py"

SINGLE_SQL = "SELECT pgfence.enqueue(kind => 'noop', payload => %s::jsonb, queue => %s)"
# The payloads as one JSON array, unpacked in order (what pgfence.Client.enqueue_many sends).
BATCH_SQL = ("SELECT * FROM pgfence.enqueue_many(kinds => %s::text[], payloads => ARRAY(SELECT p.value"
             " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS p(value, ord) ORDER BY p.ord), queue => %s)")


@dataclass
class WorkerShape:
    procs: int = 2
    concurrency: int = 8
    prefetch: int = 8
    poll_interval: float = 0.05
    asyncio: bool = False  # pgfence.aio.AsyncWorker (async def handlers) instead of pgfence.Worker


def client_available() -> bool:
    """`from pgfence import Client, Worker` works in this (the main) venv."""
    r = subprocess.run([PY, "-c", "from pgfence import Client, Worker"], capture_output=True, timeout=60)
    return r.returncode == 0


def new_queue(tag: str) -> str:
    return f"bench-{tag}-{time.strftime('%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 100000}"


# Per-job side tables (attempt history, refused calls) in schema versions that have them.
SIDE_TABLES = ("pgfence.attempts", "pgfence.rejections")


def cleanup(dsn: str, queue: str) -> None:
    """Delete this run's jobs (and their rows in the side tables), then VACUUM."""
    with connect(dsn) as conn:
        side = [t for t in SIDE_TABLES if scalar_in(conn, "SELECT to_regclass(%s) IS NOT NULL", (t,))]
        with conn.transaction():
            for t in side:
                conn.execute(f"DELETE FROM {t} s USING pgfence.jobs j WHERE s.job_id = j.id AND j.queue = %s",
                             (queue,))
            conn.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue,))
        for t in ("pgfence.jobs", *side):
            conn.execute(f"VACUUM (ANALYZE) {t}")


def jobs_of(conn: Any) -> str:
    """Where a job, live or done, is read: pgfence.all_jobs when the schema has the history
    (done jobs leave pgfence.jobs for pgfence.finished_jobs), else pgfence.jobs."""
    return "pgfence.all_jobs" if scalar_in(conn, "SELECT to_regclass('pgfence.all_jobs') IS NOT NULL") \
        else "pgfence.jobs"


def live_sql(has_history: bool) -> str:
    """Count of a queue's live jobs (parameter %(q)s): with the history pgfence.jobs holds
    only live work (and the failed and cancelled); without it, done rows stay there until
    purged, so count the queued and the processing ones (a no-op job reaches no other
    status), each through its partial index, not a scan of the growing table."""
    return ("SELECT count(*) FROM pgfence.jobs WHERE queue = %(q)s" if has_history else
            "SELECT (SELECT count(*) FROM pgfence.jobs WHERE queue = %(q)s AND status = 'queued')"
            "     + (SELECT count(*) FROM pgfence.jobs WHERE queue = %(q)s AND status = 'processing')")


def scalar_in(conn: Any, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


# ------------------------------------------------------------------ enqueue --
def single_enqueue(dsn: str, n: int) -> dict[str, Any]:
    """n sequential enqueues (pgfence.Client.enqueue, one autocommit connection)."""
    from pgfence import Client
    queue = new_queue("single")
    try:
        client = Client.connect(dsn, max_size=1)
        try:
            t0 = time.perf_counter()
            for i in range(n):
                client.enqueue("noop", {"i": i}, queue=queue)
            secs = time.perf_counter() - t0
        finally:
            client.close()
        return {"n": n, "seconds": secs, "rate": n / secs, "via": "client"}
    finally:
        cleanup(dsn, queue)


def batch_enqueue(dsn: str, queue: str, n: int, batch: int = 1000, kind: str = "noop") -> tuple[float, list[int]]:
    """n jobs into `queue`, `batch` per enqueue_many call (pgfence.Client.enqueue_many);
    returns (seconds, ids)."""
    from pgfence import Client
    ids: list[int] = []
    client = Client.connect(dsn, max_size=1)
    try:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            k = min(batch, n - start)
            ids.extend(r.id for r in client.enqueue_many([kind] * k, [{"i": start + j} for j in range(k)],
                                                         queue=queue))
        secs = time.perf_counter() - t0
    finally:
        client.close()
    return secs, ids


# ------------------------------------------------------------------ workers --
def start_workers(dsn: str, queue: str, shape: WorkerShape, tag: str, mode: str = "noop",
                  outs: Optional[list[Path]] = None,
                  worker: str = "python") -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """shape.procs worker processes: pgfence_worker.py, or with worker="node" the Node.js
    worker (pgfence_node_worker.js, mode noop only)."""
    procs, logs = [], []
    program = [PY, str(WORKER)] if worker == "python" else ["node", str(NODE_WORKER)]
    for i in range(shape.procs):
        lp = LOG_DIR / f"pgfence-{tag}-w{i}.log"
        cmd = [*program, "--dsn", dsn, "--queue", queue, "--concurrency", str(shape.concurrency),
               "--prefetch", str(shape.prefetch), "--poll-interval", str(shape.poll_interval),
               "--mode", mode]
        if shape.asyncio:
            cmd.append("--async")
        if outs:
            cmd += ["--out", str(outs[i])]
        procs.append(spawn(cmd, log_path=lp))
        logs.append(lp)
    return procs, logs


def batch_then_drain(dsn: str, n: int, shape: WorkerShape, timeout: float, tag: str,
                     worker: str = "python") -> dict[str, Any]:
    """Timed batch enqueue of n no-op jobs (1,000 per enqueue_many), settle(), then a
    timed drain by shape.procs worker processes x shape.concurrency (``worker``:
    "python", the threaded pgfence.Worker, or "node", the Node.js Worker)."""
    queue = new_queue(f"drain{tag}")
    try:
        secs, ids = batch_enqueue(dsn, queue, n, 1000)
        lo, hi = min(ids), max(ids)
        settle(dsn, ["pgfence.jobs", "pgfence.attempts"])
        poll = connect(dsn)
        table = jobs_of(poll)
        try:
            def finished() -> int:
                row = poll.execute(f"SELECT count(*) FROM {table} WHERE id BETWEEN %s AND %s"
                                   " AND status = 'done'", (lo, hi)).fetchone()
                return int(row[0]) if row else 0

            def start() -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
                return start_workers(dsn, queue, shape, f"drain{tag}", worker=worker)
            dr = measure_drain(start, finished, n, timeout)
        finally:
            poll.close()
        return {"batch": {"n": n, "seconds": secs, "rate": n / secs}, "drain": asdict(dr)}
    finally:
        cleanup(dsn, queue)


def latency(dsn: str, shape: WorkerShape, n: int = 100, rate: float = 20.0, tag: str = "") -> dict[str, Any]:
    """Idle workers; n single enqueues at `rate`/s with payload {"t": time.time()};
    each handler records time.time() - t. Returns p50/p95 in ms."""
    queue = new_queue(f"lat{tag}")
    outs = [LOG_DIR / f"pgfence-lat{tag}-w{i}.delays" for i in range(shape.procs)]
    for o in outs:
        o.unlink(missing_ok=True)
    procs, logs = start_workers(dsn, queue, shape, f"lat{tag}", mode="latency", outs=outs)
    try:
        wait_ready(procs, logs, timeout=60)
        time.sleep(0.5)  # let both workers reach their idle poll/listen state
        with connect(dsn) as conn:
            _paced(n, rate, lambda i: conn.execute(SINGLE_SQL, (json.dumps({"t": time.time(), "i": i}), queue)))
        wait_lines(outs, n)
    finally:
        stop(procs)
        cleanup(dsn, queue)
    return delay_summary(outs, n, "pgfence latency")


def _paced(n: int, rate: float, send: Callable[[int], Any]) -> None:
    """send(i) for i in range(n), the i-th at i / rate s after the first."""
    t0 = time.time()
    for i in range(n):
        d = t0 + i / rate - time.time()
        if d > 0:
            time.sleep(d)
        send(i)


def latency_floor(dsn: str, procs: int, n: int = 100, rate: float = 20.0) -> dict[str, Any]:
    """The latency step with no queue logic: a bare INSERT into pgfence.jobs and a
    NOTIFY in one autocommit statement, `procs` idle processes (bench/floor_claimer.py)
    LISTENing that each claim one job per notification with a bare SKIP LOCKED UPDATE.
    Same rate, payload and delay as `latency`: what the machine leaves for a queue's
    checks, fencing and worker threads."""
    queue = new_queue("floor")
    channel = f"bench_floor_{os.getpid()}"
    outs = [LOG_DIR / f"pgfence-floor-w{i}.delays" for i in range(procs)]
    for o in outs:
        o.unlink(missing_ok=True)
    claimers, logs = [], []
    try:
        for i in range(procs):
            lp = LOG_DIR / f"pgfence-floor-w{i}.log"
            claimers.append(spawn([PY, str(FLOOR_CLAIMER), "--dsn", dsn, "--queue", queue, "--channel", channel,
                                   "--out", str(outs[i])], log_path=lp))
            logs.append(lp)
        wait_ready(claimers, logs, timeout=60)
        time.sleep(0.5)
        with connect(dsn) as conn:
            _paced(n, rate, lambda i: conn.execute(
                "WITH j AS (INSERT INTO pgfence.jobs (queue, kind, payload)"
                " VALUES (%s, 'noop', jsonb_build_object('t', %s::float8, 'i', %s::int)) RETURNING id)"
                " SELECT pg_notify(%s, '') FROM j", (queue, time.time(), i, channel), prepare=True))
        wait_lines(outs, n)
    finally:
        stop(claimers)
        cleanup(dsn, queue)
    return {**delay_summary(outs, n, "pgfence latency floor"), "procs": procs, "rate": rate}


def latency_against_floor(dsn: str, shape: WorkerShape, n: int = 100, rate: float = 20.0,
                          rounds: int = 3) -> dict[str, Any]:
    """pgfence's latency step (`latency`) with the threaded worker (processes of `shape`)
    and with the asyncio worker (the same shape, asyncio=True), and its floor
    (`latency_floor`, as many bare claimers), taking turns, `rounds` of each, who goes
    first rotating, every run after settle() of pgfence.jobs: the figures of "within 0.3
    ms of the floor" measured on the same table in the same state (a floor run right
    after a churn of 600,000 jobs, on a table autovacuum was still working through,
    measured 10.6 ms once). Returns the floor's p50/p95 and, per worker, its p50/p95 (the
    median over the rounds, spread min-max) and its p50 gap to the floor round by round:
    the threaded worker's at the top level ("pgfence", as before), the asyncio worker's
    under "asyncio"."""
    shapes = {"pgfence": shape, "asyncio": replace(shape, asyncio=True)}
    order = ["floor", *shapes]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
    for r in range(rounds):
        for what in order[r % len(order):] + order[:r % len(order)]:
            settle(dsn, ["pgfence.jobs"])
            if what == "floor":
                runs["floor"].append(latency_floor(dsn, shape.procs, n, rate))
            else:
                runs[what].append(latency(dsn, shapes[what], n, rate, f"pair{what[0]}{r}"))

    def against_floor(mine: list[dict[str, Any]]) -> dict[str, Any]:
        gaps = [m["p50_ms"] - f["p50_ms"] for m, f in zip(mine, runs["floor"])]
        return {"pgfence": merge_runs(mine, ("p50_ms", "p95_ms")), "p50_gaps_ms": gaps, "p50_gap_ms": median(gaps)}
    return {"rounds": rounds, "n": n, "rate": rate, "procs": shape.procs, "prefetch": shape.prefetch,
            "floor": merge_runs(runs["floor"], ("p50_ms", "p95_ms")), **against_floor(runs["pgfence"]),
            "asyncio": against_floor(runs["asyncio"])}


# -------------------------------------------------------------------- depth --
def depth(dsn: str, queued: int, measured: int, shape: WorkerShape, timeout: float,
          runs: int = 1) -> dict[str, Any]:
    """claim+complete throughput over `measured` jobs of a queue holding `queued` jobs
    (the rest sit behind them in claim order), `runs` times.

    The queue is filled once; before each run it is topped up back to `queued`
    when `queued == measured` (so every run drains a full queue), then settled
    (settle(): VACUUM (ANALYZE), CHECKPOINT, no autovacuum running). Each run
    starts fresh worker processes and ends when `measured` jobs finished after
    the run began (database clock). Two rates per run:
    `wall` (first READY to the count, like the drains: includes process start) and
    `db`, the claim+complete throughput itself: `measured` / (the measured-th
    finished_at - the earliest reserved_at among those jobs), both from the
    database. `rate` is the median db rate."""
    queue = new_queue(f"depth{queued}")
    try:
        t0 = time.perf_counter()
        batch_enqueue(dsn, queue, queued, 10000)
        fill_s = time.perf_counter() - t0
        poll = connect(dsn)
        table = jobs_of(poll)
        out_runs: list[dict[str, Any]] = []
        try:
            for r in range(runs):
                left = int(scalar_in(poll, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s"
                                           " AND status = 'queued'", (queue,)))
                if queued == measured and left < queued:
                    batch_enqueue(dsn, queue, queued - left, 10000)
                    left = queued
                settle(dsn, ["pgfence.jobs", "pgfence.attempts"])
                began = scalar_in(poll, "SELECT clock_timestamp()")

                def finished() -> int:
                    return int(scalar_in(poll, f"SELECT count(*) FROM {table} WHERE queue = %s"
                                               " AND status = 'done' AND finished_at > %s", (queue, began)))
                dr = measure_drain(lambda: start_workers(dsn, queue, shape, f"depth{queued}-{r}"), finished,
                                   measured, timeout)
                row = poll.execute(
                    "SELECT count(*), extract(epoch FROM max(finished_at) - min(reserved_at))::float8"
                    f"  FROM (SELECT reserved_at, finished_at FROM {table}"
                    "         WHERE queue = %s AND status = 'done' AND finished_at > %s"
                    "         ORDER BY finished_at LIMIT %s) s", (queue, began, measured)).fetchone()
                n_db, secs_db = (int(row[0]), float(row[1] or 0.0)) if row else (0, 0.0)
                out_runs.append({"queued_at_start": left, "wall": asdict(dr), "db_jobs": n_db,
                                 "db_seconds": secs_db, "db_rate": n_db / secs_db if secs_db > 0 else 0.0})
        finally:
            poll.close()
        rates = [x["db_rate"] for x in out_runs]
        return {"queued": queued, "measured": measured, "fill_seconds": fill_s, "runs": out_runs,
                "rate": median(rates), "spread": [min(rates), max(rates)],
                "wall_rate": median([x["wall"]["rate"] for x in out_runs]),
                "capped": any(x["wall"]["timed_out"] for x in out_runs)}
    finally:
        cleanup(dsn, queue)


# -------------------------------------------------------------------- sweep --
def sweep(dsn: str, n: int, idle_calls: int = 1000, idle_max_s: float = 30.0) -> dict[str, Any]:
    """n processing rows with expired leases, reclaimed by one CALL pgfence.sweep().

    Setup: enqueue_many, then claim in batches of 1,000 with a long lease, then
    heartbeat_many (10,000 per call) sets each lease to '1 second' and we wait
    for all to expire. (Claiming straight with lease '1 second' does not work at
    this size: claim's on-claim recovery reclaims the earlier batches' expired
    leases while later batches are still being claimed.) The pg_cron sweeper is
    paused meanwhile (pgfence.pause_sweeper()); nothing else claims from this queue.
    Then: the cost of a sweep batch when nothing is expired, as the mean of
    `idle_calls` x SELECT count(*) FROM pgfence.reclaim_expired(1000) (stopped
    early after idle_max_s; the count of calls made is reported).
    """
    queue = new_queue("sweep")
    lock = connect(dsn)
    try:
        lock.execute("SELECT pgfence.pause_sweeper()")
        batch_enqueue(dsn, queue, n, 10000)
        ids: list[int] = []
        tokens: list[Any] = []
        with connect(dsn) as conn:
            while len(ids) < n:
                rows = conn.execute("SELECT id, attempt_token FROM pgfence.claim('bench-sweep', %s,"
                                    " '1 hour'::interval, 1000)", ([queue],)).fetchall()
                if not rows:
                    break
                ids.extend(r[0] for r in rows)
                tokens.extend(r[1] for r in rows)
            if len(ids) != n:
                raise BenchError(f"sweep setup claimed {len(ids)} of {n} jobs")
            # Idle cost while our n leases are held but none expired (bounded: 100 calls / 5 s).
            busy_calls, busy_s = _time_reclaim(conn, 100, 5.0)
            for s in range(0, n, 10000):
                conn.execute("SELECT count(*) FROM pgfence.heartbeat_many(%s, %s, '1 second'::interval)",
                             (ids[s:s + 10000], tokens[s:s + 10000]))
            conn.execute("VACUUM (ANALYZE) pgfence.jobs")
            # Wait until every lease of ours has expired. Another session's claim (e.g. a
            # test suite on the same database) reclaims expired leases too (on-claim
            # recovery), so some of ours may be gone: `expired` is what is left to sweep.
            deadline = time.time() + 30
            while True:
                row = conn.execute("SELECT count(*) FILTER (WHERE lease_expires_at < clock_timestamp()),"
                                   " count(*) FROM pgfence.jobs WHERE queue = %s AND status = 'processing'",
                                   (queue,)).fetchone()
                assert row is not None
                if row[0] == row[1]:
                    break
                if time.time() > deadline:
                    raise BenchError(f"sweep setup: {row[0]} of {row[1]} processing rows expired after 30 s")
                time.sleep(0.1)
            expired = int(row[0])
            if expired < n:
                log(f"sweep: {n - expired} of our {n} expired leases were reclaimed by another session first")
            t0 = time.perf_counter()
            res = conn.execute("CALL pgfence.sweep()").fetchone()
            sweep_s = time.perf_counter() - t0
            reclaimed = int(res[0]) if res else -1
            # Idle cost: nothing is expired any more (the reclaimed rows are queued now);
            # VACUUM first so the dead index entries the sweep left do not count.
            conn.execute("VACUUM (ANALYZE) pgfence.jobs")
            row = conn.execute("SELECT count(*) FROM pgfence.jobs WHERE status = 'processing'").fetchone()
            idle_processing = int(row[0]) if row else 0
            calls, idle_s = _time_reclaim(conn, idle_calls, idle_max_s)
        return {"expired": expired, "expired_target": n, "reclaimed": reclaimed, "sweep_seconds": sweep_s,
                "reclaimed_per_s": reclaimed / sweep_s if sweep_s > 0 else math.nan,
                "idle_calls": calls, "idle_us_per_call": idle_s / calls * 1e6,
                "idle_processing_rows": idle_processing,
                "busy_idle_calls": busy_calls, "busy_idle_us_per_call": busy_s / busy_calls * 1e6}
    finally:
        try:
            lock.execute("SELECT pgfence.resume_sweeper()")
        finally:
            lock.close()
        cleanup(dsn, queue)


def _time_reclaim(conn: Any, calls: int, max_seconds: float) -> tuple[int, float]:
    """Time up to `calls` x reclaim_expired(1000) (stops early after max_seconds)."""
    conn.execute("SELECT count(*) FROM pgfence.reclaim_expired(1000)")  # warm-up
    t0 = time.perf_counter()
    done = 0
    while done < calls:
        conn.execute("SELECT count(*) FROM pgfence.reclaim_expired(1000)")
        done += 1
        if time.perf_counter() - t0 > max_seconds:
            break
    return done, time.perf_counter() - t0


# ----------------------------------------------------------------- recovery --
def recovery(dsn: str, samples: int, shape: WorkerShape, stagger: float = 0.25) -> dict[str, Any]:
    """Workers poll at shape.poll_interval (0.1 s). Each sample: a victim process
    enqueues and claims one job with a 2 s lease in one transaction (priority
    1000 + i, so it claims its own job and not an earlier victim's job that was
    already put back to 'queued'), then SIGKILLs itself. Delay = the next attempt's reserved_at - the victim's lease_expires_at
    (both from the database clock). The pg_cron sweeper keeps running (0.5 s passes);
    the workers' claims also reclaim expired leases first (on-claim recovery)."""
    queue = new_queue("recovery")
    procs, logs = start_workers(dsn, queue, shape, "recovery")
    victims: list[subprocess.Popen[bytes]] = []
    try:
        wait_ready(procs, logs, timeout=60)
        time.sleep(0.5)
        vlogs = []
        for i in range(samples):
            lp = LOG_DIR / f"pgfence-victim-{i}.log"
            victims.append(spawn([PY, str(VICTIM), "--dsn", dsn, "--queue", queue, "--lease", "2 seconds",
                                  "--priority", str(1000 + i)], log_path=lp))
            vlogs.append(lp)
            time.sleep(stagger)
        claimed: dict[int, float] = {}
        seen: list[str] = []
        for v, lp in zip(victims, vlogs):
            try:
                v.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise BenchError(f"victim did not die ({lp})")
            text = lp.read_text(errors="replace")
            seen.append(text.strip()[-200:])
            for line in text.splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    claimed[int(d["id"])] = float(d["lease_expires_epoch"])
        if len(claimed) != samples:
            raise BenchError(f"recovery: only {len(claimed)}/{samples} victims claimed a job: {seen}")
        with connect(dsn) as conn:
            table = jobs_of(conn)
            deadline = time.time() + 30
            rows: list[Any] = []
            while time.time() < deadline:
                rows = conn.execute("SELECT id, extract(epoch FROM reserved_at)::float8, attempts, reclaim_count"
                                    f" FROM {table} WHERE id = ANY(%s) AND status = 'done'",
                                    (list(claimed),)).fetchall()
                if len(rows) == samples:
                    break
                time.sleep(0.1)
        if len(rows) != samples:
            raise BenchError(f"recovery: only {len(rows)}/{samples} killed jobs were finished after 30 s")
        delays = [(r[1] - claimed[r[0]]) * 1000 for r in rows]
        return {"samples": samples, "lease": "2 seconds", "poll_interval": shape.poll_interval,
                "p50_ms": percentile(delays, 50), "p95_ms": percentile(delays, 95), "max_ms": max(delays),
                "min_ms": min(delays), "median_ms": median(delays)}
    finally:
        stop(victims)
        stop(procs)
        cleanup(dsn, queue)


def sweeper_recovery(dsn: str, samples: int, first: float = 2.0, spread: float = 0.27) -> dict[str, Any]:
    """No worker polls: how soon after expiry the background (pg_cron) sweeper reclaims
    a lease. `samples` jobs are claimed at once (nothing ever completes them), lease i
    being `first` + i * `spread` seconds, so that the expiries fall at every phase of
    the sweeper's 0.5 s passes (`spread` is not a multiple of 0.5 s), and no claim is
    made after the first expiry (a claim would reclaim it first). Delay
    = the reclaimed attempt's ended_at - its lease_expires_at in pgfence.attempts (both
    from the database clock)."""
    queue = new_queue("sweeprec")
    try:
        with connect(dsn) as conn:
            row = conn.execute("SELECT pgfence.sweeper_last_pass() > clock_timestamp() - interval '10 seconds'"
                               ).fetchone()
            if not (row and row[0]):
                return {"skipped": "no background sweeper pass in the last 10 seconds"}
            ids = [int(scalar_in(conn, SINGLE_SQL, ("{}", queue))) for _ in range(samples)]
            for i in range(samples):
                conn.execute("SELECT count(*) FROM pgfence.claim(worker_id => 'bench-dead-worker', queues => %s,"
                             " lease => make_interval(secs => %s), max_jobs => 1)",
                             ([queue], first + i * spread)).fetchone()
            deadline = time.time() + first + samples * spread + 120
            rows: list[Any] = []
            while time.time() < deadline:
                rows = conn.execute(
                    "SELECT extract(epoch FROM ended_at - lease_expires_at)::float8 * 1000 FROM pgfence.attempts"
                    " WHERE job_id = ANY(%s) AND outcome = 'reclaimed'", (ids,)).fetchall()
                if len(rows) >= samples:
                    break
                time.sleep(0.2)
        if len(rows) < samples:
            raise BenchError(f"sweeper recovery: only {len(rows)}/{samples} expired leases reclaimed in time")
        delays = [float(r[0]) for r in rows]
        return {"samples": samples, "p50_ms": percentile(delays, 50), "p95_ms": percentile(delays, 95),
                "max_ms": max(delays), "min_ms": min(delays)}
    finally:
        cleanup(dsn, queue)


# ------------------------------------------------------------------ ceiling --
def sql_ceiling(dsn: str, n: int, clients: int, seconds: int, batch: int = 500) -> dict[str, Any]:
    """What the database alone sustains: pgbench, `clients` connections (one per worker
    process of the drain), each looping over claim(batch) and complete_many of what it
    got, in SQL, with no worker process at all, on a fresh queue of n jobs. The drain
    cannot beat this on the same machine: its workers need CPU of their own."""
    from pgbench_bench import run_script
    queue = new_queue("ceiling")
    try:
        batch_enqueue(dsn, queue, n)
        settle(dsn, ["pgfence.jobs", "pgfence.attempts"])
        script = (f"SELECT count(*) AS n, array_agg(id) AS ids, array_agg(attempt_token) AS tokens"
                  f" FROM pgfence.claim('bench-ceiling', ARRAY['{queue}'], '10 minutes', {batch}) \\gset\n"
                  "\\if :n > 0\n"
                  "SELECT count(*) FROM pgfence.complete_many(':ids'::bigint[], ':tokens'::uuid[]) WHERE accepted;\n"
                  "\\endif\n")
        r = run_script(dsn, script, "ceiling", clients, clients, seconds, db=dsn_dbname(dsn))
        with connect(dsn) as conn:
            left = int(scalar_in(conn, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s AND status <> 'done'",
                                 (queue,)))
            done = n - left  # (no-op jobs: every claimed one is completed, done rows may be in the history)
        tx = r["transactions"] or 0
        rate = done / tx * r["tps"] if tx else math.nan
        return {"n": n, "clients": clients, "seconds": seconds, "batch": batch, "done": done, "left": left,
                "transactions": tx, "tps": r["tps"], "rate": rate, "command": r["command"]}
    finally:
        cleanup(dsn, queue)


# -------------------------------------------------------------------- churn --
class Producer:
    """Keeps `depth` jobs of `queue` queued (enqueue_many, 1,000 per call) from a thread of
    its own, on a connection of its own: churn's and soak's producer. `ids` are the jobs
    enqueued, ascending (claim order is id order here: one priority, batches in order).
    `lock` is held around each enqueue_many call and the ids it returned, so a sampler
    holding it sees len(ids) and the table agree. Errors go to `errors`."""

    def __init__(self, dsn: str, queue: str, depth: int, errors: list[str], name: str) -> None:
        self.queue, self.depth, self.errors = queue, depth, errors
        self.ids: list[int] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.conn = connect(dsn)

    def fill(self, n: int) -> None:
        for start in range(0, n, 1000):
            k = min(1000, n - start)
            args = (["noop"] * k, json.dumps([{"i": j} for j in range(k)]), self.queue)
            with self.lock:
                rows = self.conn.execute(BATCH_SQL, args).fetchall()
                self.ids.extend(r[1] for r in rows)

    def _run(self) -> None:
        # Queued = our ids from the head of the queue on: one index probe, not a count
        # over a million rows (which would load the machine under test).
        try:
            while not self._stop.is_set():
                head = scalar_in(self.conn, "SELECT id FROM pgfence.jobs WHERE queue = %s AND status = 'queued'"
                                            " ORDER BY priority DESC, available_at, id LIMIT 1", (self.queue,))
                queued = 0 if head is None else len(self.ids) - bisect.bisect_left(self.ids, int(head))
                if queued < self.depth:
                    self.fill(min(self.depth - queued, 20_000))
                else:
                    self._stop.wait(0.05)
        except Exception as exc:  # reported with the result
            self.errors.append(f"producer: {exc}")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and close the connection (again: a no-op)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.conn.close()


def churn(dsn: str, seconds: float, depth: int, shape: WorkerShape, window: float = 5.0) -> dict[str, Any]:
    """Sustained churn: a producer keeps `depth` jobs queued (enqueue_many, 1,000 per
    call) while shape.procs worker processes drain for `seconds`. Every `window`
    seconds: this queue's claim+complete rate, and pgfence.jobs' dead rows,
    autovacuum passes and claim-index size (table-wide: run it on a quiet database)."""
    queue = new_queue("churn")
    errors: list[str] = []
    prod = Producer(dsn, queue, depth, errors, "churn-producer")
    mon = connect(dsn)

    live = live_sql(bool(scalar_in(mon, "SELECT to_regclass('pgfence.finished_jobs') IS NOT NULL")))

    def sample() -> tuple[int, int, int, int]:
        with prod.lock:  # no enqueue_many between len(ids) and the count
            finished = len(prod.ids) - int(scalar_in(mon, live, {"q": queue}))
        row = mon.execute(
            "SELECT s.n_dead_tup, s.autovacuum_count, pg_relation_size('pgfence.jobs_claim_idx')"
            "  FROM pg_stat_user_tables s WHERE s.relid = 'pgfence.jobs'::regclass").fetchone()
        assert row is not None
        return finished, int(row[0]), int(row[1]), int(row[2])

    procs: list[subprocess.Popen[bytes]] = []
    try:
        prod.fill(depth)
        mon.execute("VACUUM (ANALYZE) pgfence.jobs")
        naptime = scalar_in(mon, "SELECT current_setting('autovacuum_naptime')")
        prod.start()
        procs, logs = start_workers(dsn, queue, shape, "churn")
        wait_ready(procs, logs, timeout=60)
        t0 = time.time()
        prev, prev_t = sample(), t0
        first_av = prev[2]
        windows: list[dict[str, Any]] = []
        while time.time() - t0 < seconds:
            time.sleep(window)
            cur, now = sample(), time.time()
            windows.append({"t": round(now - t0, 1), "rate": (cur[0] - prev[0]) / (now - prev_t),
                            "dead_rows": cur[1], "claim_idx_bytes": cur[3]})
            prev, prev_t = cur, now
    finally:
        prod.close()
        stop(procs)
        mon.close()
        cleanup(dsn, queue)
    rates = [w["rate"] for w in windows]
    return {"seconds": seconds, "depth": depth, "window": window, "naptime": naptime, "windows": windows,
            "median_rate": median(rates), "min_rate": min(rates), "last_rate": rates[-1],
            "max_dead_rows": max(w["dead_rows"] for w in windows),
            "claim_idx_mb_end": windows[-1]["claim_idx_bytes"] / 1e6,
            "autovacuum_passes": prev[2] - first_av, "errors": errors}


# --------------------------------------------------------------------- soak --
HISTORY = "pgfence.finished_jobs"  # the time-partitioned history of done jobs (storage change)
SET_WIDTH = "pgfence.set_history_partition_width(interval)"


def _target(value: Optional[float], limit: Optional[float], at_least: bool = False) -> dict[str, Any]:
    """A soak target: met when value <= limit (value >= limit with at_least); None when
    either is unknown."""
    met = None if value is None or limit is None else bool(value >= limit if at_least else value <= limit)
    return {"value": value, "limit": limit, "met": met}


def soak_own_database(admin_dsn: str, seconds: float, depth: int, shape: WorkerShape, window: float = 10.0,
                      retention: str = "30 seconds", partition_width: str = "10 seconds", mark: float = 30.0
                      ) -> dict[str, Any]:
    """soak() in a database of its own (bench_soak, recreated with sqitch, dropped after):
    the sizes it reports are then the soak's alone, and its history partitions are made at
    partition_width from the start (a database in use has partitions made at the old width
    that hold rows, which keep it). The sweeper is what pg_cron would start there: `CALL
    pgfence.run_sweeper()` on a connection of its own for the whole run (reclaim passes,
    and every 10 s the purge with the partition maintenance). The database's default
    retention is the soak's too."""
    from common import drop_database, dsn_for_db, recreate_database
    db = "bench_soak"
    recreate_database(admin_dsn, db)
    dsn = dsn_for_db(admin_dsn, db)
    sweeper_errors: list[str] = []
    try:
        _deploy(dsn)
        with connect(dsn) as c:
            # The default retention too: the partitions are made up to the longest
            # retention ahead, and a day of 10 s partitions would be 8,640 tables.
            c.execute("SELECT pgfence.set_retention(NULL, %s::interval, %s::interval)", (retention, retention))
            if scalar_in(c, "SELECT to_regprocedure(%s) IS NOT NULL", (SET_WIDTH,)):
                c.execute("SELECT pgfence.set_history_partition_width(%s::interval)", (partition_width,))
                c.execute("SELECT * FROM pgfence.maintain_history()")

        def sweeper() -> None:
            try:
                with connect(dsn) as sc:
                    sc.execute("CALL pgfence.run_sweeper('0.5 seconds', clock_timestamp() + make_interval(secs => %s))",
                               (seconds + 120,))
            except Exception as exc:  # ended by the DROP DATABASE at the end, or a real error
                sweeper_errors.append(str(exc))

        t = threading.Thread(target=sweeper, name="soak-sweeper", daemon=True)
        t.start()
        out = soak(dsn, seconds, depth, shape, window, retention, partition_width, mark)
        out["database"] = db
        return out
    finally:
        drop_database(admin_dsn, db)


def soak(dsn: str, seconds: float, depth: int, shape: WorkerShape, window: float = 10.0,
         retention: str = "30 seconds", partition_width: str = "10 seconds", mark: float = 30.0
         ) -> dict[str, Any]:
    """Soak: churn's producer keeps `depth` jobs queued while shape.procs worker processes
    drain for `seconds`, with this queue's finished jobs kept for `retention` (both done
    and failed) and, where the schema has the partitioned history (pgfence.finished_jobs,
    RANGE on purge_at, expired partitions dropped by the sweeper), its partitions
    `partition_width` wide (the old width restored at the end). Every `window` seconds,
    cheap samples: this queue's finished jobs (enqueued minus what is still in
    pgfence.jobs: live work only with the history; on the old schema, where done rows stay
    in pgfence.jobs until purged, minus its rows not done) and the window's rate;
    pgfence.jobs' total size (heap, indexes, TOAST), its heap and its indexes apart, its dead
    rows and autovacuum's passes over it in the window; the checkpoints begun
    and the WAL written in the window (cluster-wide); the history's total
    size over its leaf partitions, their number and how many seen earlier are gone; the
    rows routed to the default partition since the start (completions whose partition
    the sweeper had not made in time: 0 when the maintenance keeps up).
    Targets: the last window's rate >= 90% of the median; pgfence.jobs at the end <= 1.2 x
    its size at the `mark` (the first window with t >= mark; the first window when none
    is); the history at the end <= the jobs that finished in the last retention + one
    partition width (from the samples) x its bytes per job (ANALYZE at the end: bytes /
    sum of the leaves' reltuples); the same bound with the median rate x (retention +
    width) in place of that count is reported beside it. Sizes are
    table-wide: run it on a quiet database. History rows of the queue are left to the
    sweeper (they expire `retention` after they finished)."""
    queue = new_queue("soak")
    errors: list[str] = []
    prod = Producer(dsn, queue, depth, errors, "soak-producer")
    mon = connect(dsn)
    try:
        has_history = bool(scalar_in(mon, "SELECT to_regclass(%s) IS NOT NULL", (HISTORY,)))
        partitioned = bool(scalar_in(mon, "SELECT to_regprocedure(%s) IS NOT NULL", (SET_WIDTH,)))
        retention_s = float(scalar_in(mon, "SELECT extract(epoch FROM %s::interval)", (retention,)))
        width_s = float(scalar_in(mon, "SELECT extract(epoch FROM %s::interval)", (partition_width,)))
    except BaseException:
        prod.close()
        mon.close()
        raise
    live_sql_q = live_sql(has_history)
    seen: set[int] = set()  # leaf partitions (oid) seen so far

    def leaves() -> list[tuple[int, int, float]]:
        """(oid, total bytes, reltuples) of each leaf partition of the history."""
        if not has_history:
            return []
        return [(int(r[0]), int(r[1]), float(r[2])) for r in mon.execute(
            "SELECT t.relid::oid, coalesce(pg_total_relation_size(t.relid), 0), greatest(c.reltuples, 0)"
            "  FROM pg_partition_tree(%s::regclass) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
            (HISTORY,)).fetchall()]

    def sample() -> dict[str, int]:
        with prod.lock:  # no enqueue_many between len(ids) and the count
            live = int(scalar_in(mon, live_sql_q, {"q": queue}))
            finished = len(prod.ids) - live
        # (the heap's main fork and the indexes apart too: which of them a step in the total is;
        # autovacuum's passes over the table so far)
        row = mon.execute("SELECT pg_total_relation_size('pgfence.jobs'), s.n_dead_tup,"
                          " pg_relation_size('pgfence.jobs'), pg_indexes_size('pgfence.jobs'), s.autovacuum_count"
                          " FROM pg_stat_user_tables s WHERE s.relid = 'pgfence.jobs'::regclass").fetchone()
        assert row is not None
        # (rows routed to the default partition so far: completions whose partition was not
        # made in time; the statistics lag their transactions by up to a second)
        into_default = scalar_in(mon, "SELECT s.n_tup_ins FROM pg_stat_user_tables s"
                                      " WHERE s.relid = to_regclass('pgfence.finished_jobs_default')") or 0
        # (checkpoints begun and WAL written, cluster-wide: what a dip in a window coincides with)
        ckpt = mon.execute("SELECT b.checkpoints_timed + b.checkpoints_req,"
                           " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_bgwriter b").fetchone()
        assert ckpt is not None
        parts = leaves()
        now = {oid for oid, _, _ in parts}
        seen.update(now)
        return {"finished": finished, "hot_bytes": int(row[0]), "dead_rows": int(row[1]),
                "heap_bytes": int(row[2]), "index_bytes": int(row[3]), "autovacuums": int(row[4]),
                "checkpoints": int(ckpt[0]), "wal_bytes": int(ckpt[1]),
                "history_bytes": sum(b for _, b, _ in parts), "partitions": len(parts),
                "dropped": len(seen - now), "into_default": int(into_default)}

    old_width: Any = None
    width_set = False
    procs: list[subprocess.Popen[bytes]] = []
    windows: list[dict[str, Any]] = []
    try:
        mon.execute("SELECT pgfence.set_retention(%s, retain_done => %s::interval, retain_failed => %s::interval)",
                    (queue, retention, retention))
        if partitioned:
            old_width = scalar_in(mon, "SELECT partition_width FROM pgfence.history_settings")
            mon.execute("SELECT pgfence.set_history_partition_width(%s::interval)", (partition_width,))
            width_set = True
        prod.fill(depth)
        mon.execute("VACUUM (ANALYZE) pgfence.jobs")
        prod.start()
        procs, logs = start_workers(dsn, queue, shape, "soak")
        wait_ready(procs, logs, timeout=60)
        t0 = time.time()
        prev, prev_t = sample(), t0
        default_at_start, finished_at_start = prev["into_default"], prev["finished"]
        while time.time() - t0 < seconds:
            time.sleep(window)
            cur, now = sample(), time.time()
            windows.append({"t": round(now - t0, 1), "rate": (cur["finished"] - prev["finished"]) / (now - prev_t),
                            "finished": cur["finished"] - finished_at_start,
                            "hot_bytes": cur["hot_bytes"], "heap_bytes": cur["heap_bytes"],
                            "index_bytes": cur["index_bytes"], "autovacuums": cur["autovacuums"] - prev["autovacuums"],
                            "history_bytes": cur["history_bytes"],
                            "partitions": cur["partitions"], "dead_rows": cur["dead_rows"],
                            "into_default": cur["into_default"] - default_at_start,
                            "checkpoints": cur["checkpoints"] - prev["checkpoints"],
                            "wal_mb_s": (cur["wal_bytes"] - prev["wal_bytes"]) / 1e6 / (now - prev_t)})
            prev, prev_t = cur, now
        # Bytes per job of the history: nothing moves once the producer and workers stop.
        prod.close()
        stop(procs)
        procs = []
        if has_history:
            mon.execute(f"ANALYZE {HISTORY}")
        end = leaves()
    finally:
        prod.close()
        stop(procs)
        try:
            with connect(dsn) as c:
                if width_set and old_width is not None:
                    c.execute("SELECT pgfence.set_history_partition_width(%s::interval)", (old_width,))
                elif width_set:
                    errors.append(f"pgfence.history_settings had no partition_width: {partition_width} stays")
                c.execute("DELETE FROM pgfence.retention WHERE queue = %s", (queue,))
        except Exception as exc:  # reported with the result; the cleanup still runs
            errors.append(f"restoring the settings: {exc}")
        mon.close()
        cleanup(dsn, queue)
    if not windows:
        raise BenchError(f"soak: no {window:g} s window in {seconds:g} s")
    rates = [w["rate"] for w in windows]
    med, last = median(rates), rates[-1]
    at_mark = next((w for w in windows if w["t"] >= mark), windows[0])
    hot_end, hist_end = windows[-1]["hot_bytes"], windows[-1]["history_bytes"]
    end_rows = round(sum(n for _, _, n in end))
    per_job = sum(b for _, b, _ in end) / end_rows if end_rows else None
    # What the history may hold at the end: the jobs that finished in the last retention +
    # one partition width (a partition is dropped when its range of purge_at = finished_at
    # + retention has passed, so it holds between retention and retention + width of
    # them), counted from the samples (linear between two), x bytes per job. Also the
    # same with the median rate in place of the count (the rate of those last seconds
    # can be well above or below the median; reported beside it, not the target).
    # (A soak shorter than that span has no such count: history from the workers' start-up,
    # before the first sample, would be missing from it. The target is then n/a.)
    span = retention_s + width_s
    span_jobs = (windows[-1]["finished"] - _finished_at(windows, windows[-1]["t"] - span)
                 if windows[-1]["t"] >= span else None)
    hist_limit = span_jobs * per_job if per_job is not None and span_jobs is not None else None
    hist_limit_median = med * span * per_job if per_job is not None else None
    return {"seconds": seconds, "depth": depth, "window": window, "retention": retention,
            "partition_width": partition_width, "partitioned": partitioned, "history": has_history,
            "partition_width_before": None if old_width is None else str(old_width),
            "windows": windows, "median_rate": med, "last_rate": last,
            "hot_bytes_mark": at_mark["hot_bytes"], "mark_t": at_mark["t"], "hot_bytes_end": hot_end,
            "history_bytes_end": hist_end, "history_rows_end": end_rows, "history_bytes_per_job": per_job,
            "span_seconds": span, "span_jobs": span_jobs, "history_limit_median_rate": hist_limit_median,
            "partitions_dropped": prev["dropped"],
            "targets": {
                # (a) jobs/s: the last window's rate >= 90% of the median
                "rate_held": _target(last, 0.9 * med, at_least=True),
                # (b) bytes: pgfence.jobs at the end <= 1.2 x its size at the mark
                "hot_bounded": _target(hot_end, 1.2 * at_mark["hot_bytes"]),
                # (c) bytes: the history at the end <= the jobs finished in the last retention +
                # width x bytes per job
                "history_bounded": _target(hist_end if has_history else None, hist_limit),
            },
            "errors": errors}


def _finished_at(windows: list[dict[str, Any]], t: float) -> float:
    """The soak's finished count at time t (s from the start), linear between two samples
    (0 at t = 0; t before the start counts as the start)."""
    prev_t, prev_n = 0.0, 0.0
    for w in windows:
        if w["t"] >= t:
            if t <= prev_t:
                return prev_n
            return prev_n + (w["finished"] - prev_n) * (t - prev_t) / (w["t"] - prev_t)
        prev_t, prev_n = w["t"], w["finished"]
    return prev_n


# ---------------------------------------------------- claims over many queues --
def sqitch_run(dsn: str, *args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess[str]:
    """sqitch <args> --target <dsn>, from the repository's top (its plan), or from cwd
    (another checkout's plan)."""
    env = dict(os.environ)
    env.setdefault("SQITCH_FULLNAME", "pgfence bench")
    env.setdefault("SQITCH_EMAIL", "pgfence-bench@localhost")
    env.pop("SQITCH_TARGET", None)
    target = "db:" + dsn if dsn.startswith("postgresql://") else dsn
    return subprocess.run(["sqitch", *args, "--target", target], cwd=cwd or BENCH_DIR.parent, env=env,
                          capture_output=True, text=True, timeout=3600)


def _deploy(dsn: str, to: Optional[str] = None, cwd: Optional[Path] = None) -> None:
    """sqitch deploy (up to a tag) into a scratch database of the bench's own, from this
    checkout's plan or from cwd's."""
    r = sqitch_run(dsn, "deploy", *(["--to", to] if to else []), cwd=cwd)
    if r.returncode != 0:
        raise BenchError(f"sqitch deploy{' --to ' + to if to else ''} failed:\n{r.stdout}{r.stderr}")


def claims_concurrent(dsn: str, connections: int = 64, jobs: int = 200_000, max_jobs: int = 10,
                      seconds: float = 5.0) -> dict[str, Any]:
    """`connections` worker connections at once, each looping over claim(max_jobs) of one
    queue and complete_many of what it got (threads of this process, one connection each:
    the waiting is the database's), for `seconds` on a queue of `jobs`: jobs per second,
    the claim's median and p95 client time, and how many jobs two claims handed out twice
    (must be 0). The contention figure beside the claims over many queues."""
    queue = new_queue("claim64")
    batch_enqueue(dsn, queue, jobs, 10000)
    settle(dsn, ["pgfence.jobs"])
    stop = threading.Event()
    lock = threading.Lock()
    times: list[float] = []
    seen: list[int] = []
    errors: list[str] = []
    barrier = threading.Barrier(connections + 1)

    def run() -> None:
        try:
            with connect(dsn) as c:
                mine_t: list[float] = []
                mine_ids: list[int] = []
                barrier.wait(60)
                while not stop.is_set():
                    t = time.perf_counter()
                    got = c.execute("SELECT id, attempt_token FROM pgfence.claim('bench-64', ARRAY[%s],"
                                    " '1 minute', %s)", (queue, max_jobs)).fetchall()
                    mine_t.append(time.perf_counter() - t)
                    if not got:
                        break
                    c.execute("SELECT count(*) FROM pgfence.complete_many(%s::bigint[], %s::uuid[])",
                              ([g[0] for g in got], [g[1] for g in got]))
                    mine_ids.extend(g[0] for g in got)
                with lock:
                    times.extend(mine_t)
                    seen.extend(mine_ids)
        except Exception as exc:  # reported with the result
            errors.append(str(exc))
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=run, daemon=True) for _ in range(connections)]
    try:
        for t in threads:
            t.start()
        barrier.wait(60)
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(60)
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        cleanup(dsn, queue)
    return {"connections": connections, "jobs": jobs, "max_jobs": max_jobs, "seconds": wall,
            "done": len(seen), "rate": len(seen) / wall if wall else 0.0, "duplicates": len(seen) - len(set(seen)),
            "claims": len(times), "median_ms": median(times) * 1000 if times else None,
            "p95_ms": percentile(times, 95) * 1000 if times else None, "errors": errors}


def capped_queue(dsn: str, cap: int = 8, hold_s: float = 0.02, connections: int = 16, max_jobs: int = 4,
                 seconds: float = 10.0) -> dict[str, Any]:
    """A queue capped at `cap` running jobs (set_queue_limit), drained by `connections`
    threads each looping over claim(max_jobs), a hold of `hold_s` per batch (the handler)
    and complete_many, for `seconds`, while a sampler counts the queue's processing jobs:
    the rate (at the cap it is about cap / hold_s), the most seen running (never above
    the cap), and how many claims came back empty."""
    queue = new_queue("capped")
    batch_enqueue(dsn, queue, max(2000, int(3 * seconds * cap / hold_s)), 10000)
    settle(dsn, ["pgfence.jobs"])
    stop = threading.Event()
    lock = threading.Lock()
    done: list[int] = []
    empty = [0]
    running: list[int] = []
    errors: list[str] = []

    def run(k: int) -> None:
        try:
            with connect(dsn) as c:
                while not stop.is_set():
                    got = c.execute("SELECT id, attempt_token FROM pgfence.claim(%s, ARRAY[%s], '1 minute', %s)",
                                    (f"bench-cap-{k}", queue, max_jobs)).fetchall()
                    if not got:
                        with lock:
                            empty[0] += 1
                        time.sleep(0.001)
                        continue
                    time.sleep(hold_s)
                    c.execute("SELECT count(*) FROM pgfence.complete_many(%s::bigint[], %s::uuid[])",
                              ([g[0] for g in got], [g[1] for g in got]))
                    with lock:
                        done.extend(g[0] for g in got)
        except Exception as exc:  # reported with the result
            errors.append(str(exc))

    def sample() -> None:
        with connect(dsn) as c:
            while not stop.is_set():
                running.append(int(c.execute("SELECT count(*) FROM pgfence.jobs WHERE queue = %s"
                                             " AND status = 'processing'", (queue,)).fetchone()[0]))  # type: ignore[index]
                time.sleep(0.005)

    with connect(dsn) as c:
        c.execute("SELECT pgfence.set_queue_limit(%s, %s)", (queue, cap))
    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(connections)]
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        sampler.start()
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(60)
        wall = time.perf_counter() - t0
        sampler.join(10)
    finally:
        stop.set()
        with connect(dsn) as c:
            c.execute("SELECT pgfence.set_queue_limit(%s, NULL)", (queue,))
        cleanup(dsn, queue)
    return {"cap": cap, "hold_s": hold_s, "connections": connections, "max_jobs": max_jobs, "seconds": wall,
            "done": len(done), "rate": len(done) / wall if wall else 0.0, "expected_rate": cap / hold_s,
            "max_running": max(running) if running else None, "samples": len(running),
            "empty_claims": empty[0], "duplicates": len(done) - len(set(done)), "errors": errors}


def rate_limited_queue(dsn: str, max_claims: int = 200, per_s: float = 1.0, connections: int = 8,
                       max_jobs: int = 10, seconds: float = 10.0) -> dict[str, Any]:
    """A queue rate-limited to `max_claims` per `per_s` seconds (set_queue_rate_limit, a
    token bucket), drained by `connections` threads each looping over claim(max_jobs) and
    complete_many at once (no hold), for `seconds`: the claims per second after the first
    interval (the burst of a full bucket is in the first) against the limit, as a ratio
    (1.0 = exactly the limit; the bucket allows no more, so a ratio above 1 is a bug and
    one well below means claimers could not keep up or kept skipping the locked row),
    the claims of the first interval (at most max_claims + max_claims), and how many
    claims came back empty."""
    queue = new_queue("rated")
    rate = max_claims / per_s
    batch_enqueue(dsn, queue, max(2000, int(2 * seconds * rate)), 10000)
    settle(dsn, ["pgfence.jobs"])
    stop = threading.Event()
    lock = threading.Lock()
    stamps: list[tuple[float, int]] = []
    empty = [0]
    errors: list[str] = []
    start = [0.0]

    def run(k: int) -> None:
        try:
            with connect(dsn) as c:
                while not stop.is_set():
                    got = c.execute("SELECT id, attempt_token FROM pgfence.claim(%s, ARRAY[%s], '1 minute', %s)",
                                    (f"bench-rate-{k}", queue, max_jobs)).fetchall()
                    at = time.perf_counter()
                    if not got:
                        with lock:
                            empty[0] += 1
                        time.sleep(0.001)
                        continue
                    with lock:
                        stamps.append((at, len(got)))
                    c.execute("SELECT count(*) FROM pgfence.complete_many(%s::bigint[], %s::uuid[])",
                              ([g[0] for g in got], [g[1] for g in got]))
        except Exception as exc:  # reported with the result
            errors.append(str(exc))

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(connections)]
    try:
        with connect(dsn) as c:
            c.execute("SELECT pgfence.set_queue_rate_limit(%s, %s, make_interval(secs => %s))",
                      (queue, max_claims, per_s))
        start[0] = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(60)
        wall = time.perf_counter() - start[0]
    finally:
        stop.set()
        with connect(dsn) as c:
            c.execute("SELECT pgfence.set_queue_rate_limit(%s, NULL)", (queue,))
        cleanup(dsn, queue)
    t0 = start[0]
    first = sum(n for at, n in stamps if at < t0 + per_s)
    later = sum(n for at, n in stamps if at >= t0 + per_s)
    span = max(wall - per_s, 1e-9)
    measured = later / span
    return {"max_claims": max_claims, "per_s": per_s, "connections": connections, "max_jobs": max_jobs,
            "seconds": wall, "claimed": first + later, "first_interval": first, "rate": measured,
            "limit_rate": rate, "ratio": measured / rate if rate else None, "empty_claims": empty[0],
            "errors": errors}


def claims_by_queue_count(admin_dsn: str, counts: tuple[int, ...] = (1, 100, 1000, 10000), jobs: int = 100_000,
                          max_jobs: int = 10, calls: int = 200, seconds: float = 4.0,
                          versions: tuple[tuple[str, Optional[str]], ...] = (("before", "@v0.3.0"), ("now", None),
                                                                             ("controlled", None))
                          ) -> dict[str, Any]:
    """A claim of max_jobs from `jobs` queued jobs spread over N queues, for each N of
    counts: with queues => NULL, with the explicit list of all N queues, and with the set of
    those names stored on the server (queue_set; not before: it is newer). Each call runs
    in a transaction that is rolled back (the jobs stay, every call sees the same
    table); its time is the client's (one round trip, the list sent with it), median and
    p95 over `calls` calls (at most `seconds` per case). Rows locked: while one claim's
    transaction is open, a second session counts the queued rows it can lock (SKIP
    LOCKED); the rest are the claim's. Each version (a plan tag, or the tree) in a
    database of its own, all in this session, alternating case by case. The list is sent
    as the Python client sends it (pgfence.calls.queue_param: a long list as an array
    literal made once per list; its look-up is in the time). "controlled" is
    the tree with one other queue paused: claims then take the flow-control path
    (_claim_controlled), which must keep the same bound."""
    from common import dsn_for_db, recreate_database
    from pgfence.calls import queue_param
    dbs = {}
    for name, to in versions:
        db = f"bench_claims_{name}"
        recreate_database(admin_dsn, db)
        dbs[name] = dsn_for_db(admin_dsn, db)
        _deploy(dbs[name], to)
        if name == "controlled":
            with connect(dbs[name]) as c:
                c.execute("SELECT pgfence.pause_queue('bench-paused')")
    out: dict[str, Any] = {"jobs": jobs, "max_jobs": max_jobs, "cases": []}
    for n in counts:
        names = [f"q{i:05d}" for i in range(n)]
        for version, dsn in dbs.items():
            with connect(dsn) as c:
                c.execute("TRUNCATE pgfence.jobs")
                c.execute("INSERT INTO pgfence.jobs (queue, kind) SELECT (%s::text[])[1 + g %% %s], 'k'"
                          " FROM generate_series(0, %s - 1) g", (names, n, jobs))
                c.execute("VACUUM (ANALYZE) pgfence.jobs")
                if version != "before":
                    c.execute("SELECT pgfence.define_queue_set('bench-set', %s::text[])", (queue_param(names),))
        for shape in ("NULL", "list", "set"):
            queues = None if shape == "NULL" else names
            for name, dsn in dbs.items():
                if shape == "set" and name == "before":
                    continue  # (no queue_set before)
                query, params = (("SELECT count(*) FROM pgfence.claim('bench', NULL, '30 seconds', %s,"
                                  " queue_set => 'bench-set')", (max_jobs,)) if shape == "set" else
                                 ("SELECT count(*) FROM pgfence.claim('bench', %s::text[], '30 seconds', %s)",
                                  (queue_param(queues), max_jobs)))
                with connect(dsn, autocommit=False) as c, connect(dsn) as observer:
                    times: list[float] = []
                    deadline = time.monotonic() + seconds
                    while len(times) < calls and (len(times) < 5 or time.monotonic() < deadline):
                        t = time.perf_counter()
                        got = c.execute(query, params).fetchone()
                        times.append(time.perf_counter() - t)
                        if len(times) == 1:
                            returned = int(got[0]) if got else 0
                            with observer.transaction(force_rollback=True):
                                free = observer.execute("SELECT count(*) FROM (SELECT id FROM pgfence.jobs WHERE"
                                                        " status = 'queued' FOR UPDATE SKIP LOCKED) x").fetchone()
                            locked = jobs - returned - (int(free[0]) if free else 0)
                        c.rollback()
                out["cases"].append({"version": name, "queues": n, "shape": shape, "returned": returned,
                                     "locked_extra": locked, "calls": len(times),
                                     "median_ms": median(times) * 1000, "p95_ms": percentile(times, 95) * 1000})
                log(f"  {name}: {n:,} queues, queues => {shape}: median {median(times) * 1000:.2f} ms,"
                    f" {returned} returned, {locked:,} more locked")
    return out
