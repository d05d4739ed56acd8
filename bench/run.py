#!/usr/bin/env python3
"""pgfence benchmark harness: pgfence vs pgqueuer, procrastinate and graphile-worker
on the local throwaway cluster. `make bench` runs `.venv/bin/python bench/run.py [--quick]`
after starting the cluster and deploying pgfence.

Writes bench/results/latest.json and BENCHMARKS.md (repo top; report.py renders it),
prints the table to stdout, and ends stdout with exactly one line
`drain: pgfence N jobs/s, best peer NAME M jobs/s, ratio R`.
Progress goes to stderr; worker/runner logs to bench/results/logs/.
"""
from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pgbench_bench  # noqa: E402
import pgfence_bench as pf  # noqa: E402
import peers as peers_mod  # noqa: E402
import report  # noqa: E402
from common import (LOG_DIR, REPO, RESULTS_DIR, connect, delay_summary, dsn_for_db,  # noqa: E402
                    kill_all, log, measure_drain, median, merge_runs, run_json, scalar, spawn,
                    settle, stop, wait_lines, wait_ready)


@dataclass
class Config:
    quick: bool
    procs: int = 2
    concurrency: int = 8
    single_n: int = 5000
    single_runs: int = 3   # latency: median of this many runs
    single_turns: int = 7  # single enqueue: turns of every system (a turn is ~2 s each), median
    drain_n: int = 100_000
    batch: int = 1000
    drain_runs: int = 3
    drain_timeout: float = 60.0
    drain_timeout_after_cap: float = 20.0  # later runs of a variant whose drain hit the cap
    lat_n: int = 100
    lat_rate: float = 20.0
    depth_queued: int = 1_000_000
    depth_measured: int = 20_000
    sweep_n: int = 100_000
    sweep_idle_max_s: float = 30.0
    recovery_samples: int = 20
    sweeper_spread: float = 3.17  # s between the leases' expiries: 20 samples span over a minute
    churn_seconds: float = 45.0
    churn_depths: tuple[int, ...] = (20_000, 1_000_000)
    soak_seconds: float = 300.0  # soak: drain with soak_depth kept queued, sampled every soak_window s
    soak_depth: int = 20_000
    soak_window: float = 10.0
    soak_retention: str = "30 seconds"  # the soak queue's retention (done and failed)
    soak_partition_width: str = "10 seconds"  # history partition width during the soak
    soak_mark: float = 30.0  # the hot table's size at the first window with t >= this is the baseline
    pgbench_seconds: int = 10
    pgbench_prefill: int = 1_000_000
    ceiling_n: int = 600_000  # > 10 s of the ceiling: the queue never runs dry
    ceiling_seconds: int = 5
    pgfence_prefetch: tuple[int, ...] = (8, 72, 500)
    claim_jobs: int = 100_000  # claims over 1..10,000 queues: jobs queued, calls per case, seconds per case
    claim_calls: int = 200
    claim_seconds: float = 4.0

    @classmethod
    def make(cls, quick: bool) -> "Config":
        if not quick:
            return cls(quick=False)
        return cls(quick=True, single_n=2000, single_runs=1, single_turns=1, drain_n=20_000, drain_runs=1,
                   drain_timeout=12.0,
                   depth_queued=200_000, sweep_n=20_000, sweep_idle_max_s=3.0, recovery_samples=5,
                   sweeper_spread=0.27, churn_seconds=0, pgbench_seconds=5, pgbench_prefill=200_000,
                   ceiling_n=150_000, ceiling_seconds=2, claim_calls=30, claim_seconds=1.0,
                   soak_seconds=40.0, soak_window=5.0, soak_retention="10 seconds",
                   soak_partition_width="10 seconds", soak_mark=0.0)


def default_dsn() -> str:
    r = subprocess.run([str(REPO / "scripts" / "pg.sh"), "dsn"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        return "postgresql://postgres@127.0.0.1:54329/pgfence"
    return r.stdout.strip()


def check_dsn(dsn: str) -> None:
    try:
        with connect(dsn) as conn:
            conn.execute("SELECT 1")
            row = conn.execute("SELECT to_regclass('pgfence.jobs') IS NOT NULL").fetchone()
    except Exception as exc:
        raise SystemExit(f"bench: cannot connect to {dsn}: {exc}\n(run `make db deploy` or `make bench`)")
    if not row or not row[0]:
        raise SystemExit(f"bench: schema pgfence is not deployed in {dsn} (run `make deploy`)")


# ---------------------------------------------------------------- machine --
def machine_info(dsn: str) -> dict[str, Any]:
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""
    cpu = next((ln.split(":", 1)[1].strip() for ln in read("/proc/cpuinfo").splitlines()
                if ln.startswith("model name")), platform.processor() or "?")
    mem_kb = next((int(ln.split()[1]) for ln in read("/proc/meminfo").splitlines() if ln.startswith("MemTotal")), 0)
    settings: dict[str, str] = {}
    with connect(dsn) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "wal_level",
                     "max_connections"):
            row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
            settings[name] = str(row[0]) if row else "?"
        ver = conn.execute("SELECT version()").fetchone()
        cron = conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'").fetchone()
        others = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                              " AND pid <> pg_backend_pid()").fetchone()
        sweeper = None
        if cron and cron[0]:
            row = conn.execute("SELECT schedule || ' ' || command FROM cron.job WHERE jobname = 'pgfence-reclaim'"
                               ).fetchone()
            sweeper = row[0] if row else None
        jobs = conn.execute("SELECT count(*), count(*) FILTER (WHERE status = 'processing') FROM pgfence.jobs"
                            ).fetchone()
    return {
        "nproc": os.cpu_count(), "mem_gib": round(mem_kb / 1024 / 1024, 1), "cpu": cpu,
        "debian": read("/etc/debian_version").strip() or "?", "kernel": platform.release(),
        "postgres": ver[0] if ver else "?", "pg_settings": settings,
        "pg_cron_sweeper": sweeper, "other_client_sessions_at_start": int(others[0]) if others else 0,
        "pgfence_jobs_rows_at_start": int(jobs[0]) if jobs else 0,
        "pgfence_processing_rows_at_start": int(jobs[1]) if jobs else 0,
        "loadavg_start": os.getloadavg()[0], "python": platform.python_version(), "node": peers_mod._node_version(),
        "pgbench": subprocess.run(["pgbench", "--version"], capture_output=True, text=True).stdout.strip()
        if shutil.which("pgbench") else None,
    }


# ------------------------------------------------------------------- rows --
def new_row(system: str, variant: str, version: str, settings: str) -> dict[str, Any]:
    return {"system": system, "variant": variant, "version": version, "settings": settings,
            "single": None, "batch_runs": [], "drain_runs": [], "latency": None, "errors": []}


def guarded(row: dict[str, Any], what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        msg = f"{what}: {type(exc).__name__}: {exc}"
        log(f"ERROR {row['variant']} {msg}")
        (LOG_DIR / "errors.log").open("a").write(f"--- {row['variant']} {what}\n{traceback.format_exc()}\n")
        row["errors"].append(msg)
        return None


def drain_cap(cfg: Config, row: dict[str, Any]) -> float:
    """The time cap for the next drain of this row: shorter once a run hit the cap
    (the rate of a capped run is finished/elapsed; waiting longer only costs time)."""
    if any(r["timed_out"] for r in row["drain_runs"]):
        return min(cfg.drain_timeout, cfg.drain_timeout_after_cap)
    return cfg.drain_timeout


def summarize(row: dict[str, Any]) -> None:
    rates = [r["rate"] for r in row["drain_runs"]]
    row["drain"] = ({"median": median(rates), "min": min(rates), "max": max(rates), "runs": len(rates),
                     "timed_out_runs": sum(1 for r in row["drain_runs"] if r["timed_out"])} if rates else None)
    brates = [b["rate"] for b in row["batch_runs"]]
    row["batch"] = {"median": median(brates), "runs": len(brates)} if brates else None


# ------------------------------------------------------------- contenders --
@dataclass
class Contender:
    """One row of the main table and how to measure it: ``drain(i)`` runs its i-th drain
    (batch enqueue, then the drain: ``(batch, drain)`` result dicts), ``latency(i)`` its
    i-th latency run (None: no latency step for this row)."""
    row: dict[str, Any]
    drain: Callable[[int], tuple[dict[str, Any], dict[str, Any]]]
    latency: Optional[Callable[[int], dict[str, Any]]] = None


def take_turns(cfg: Config, contenders: Sequence[Contender]) -> None:
    """The drains, then the latency runs, of every row taking turns: round i runs one
    drain of each (who goes first rotating each round), so that a slow spell of this
    shared machine hits every system alike. One block per system put up to ten minutes
    between pgfence's drains and the best peer's, and the drain ratio of two full runs 40
    minutes apart read 1.21 and 0.99. Each run carries its round (``turn``): the report
    pairs pgfence's with the best peer's round by round."""
    n = len(contenders)
    for i in range(cfg.drain_runs):
        for c in (list(contenders[i % n:]) + list(contenders[:i % n])) if n else []:
            row = c.row
            log(f"{row['variant']}: batch enqueue {cfg.drain_n:,} + drain, round {i + 1}/{cfg.drain_runs}")
            r = guarded(row, f"drain run {i + 1}", lambda: c.drain(i))
            if r:
                row["batch_runs"].append(r[0])
                row["drain_runs"].append({**r[1], "turn": i})
                d = r[1]
                log(f"  batch {r[0]['rate']:,.0f}/s, drain {d['rate']:,.0f} jobs/s ({d['seconds']:.2f} s)"
                    f"{' TIMED OUT: %d/%d finished' % (d['finished'], d['jobs']) if d['timed_out'] else ''}")
    lat = [c for c in contenders if c.latency is not None]
    got: dict[int, list[dict[str, Any]]] = {id(c): [] for c in lat}
    for i in range(cfg.single_runs):
        for c in (lat[i % len(lat):] + lat[:i % len(lat)]) if lat else []:
            log(f"{c.row['variant']}: latency, {cfg.lat_n} jobs at {cfg.lat_rate:g}/s, round {i + 1}/{cfg.single_runs}")
            r = guarded(c.row, f"latency run {i + 1}" if cfg.single_runs > 1 else "latency",
                        lambda: c.latency(i))  # type: ignore[misc]
            if r is not None:
                got[id(c)].append({**r, "turn": i})
                log(f"  p50 {r['p50_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms")
    for c in lat:
        c.row["latency"] = merge_runs(got[id(c)], ["p50_ms", "p95_ms"])
    for c in contenders:
        summarize(c.row)


def pgfence_contenders(cfg: Config, dsn: str, version: str) -> list[Contender]:
    """pgfence's rows: the threaded worker at each prefetch, and the asyncio worker in the
    largest prefetch's shape (reported beside it, not asserted)."""
    out = []
    shapes = [(pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=p, poll_interval=0.05),
               f"pgfence (prefetch {p})",
               f"pgfence.Worker(Client.connect(dsn), concurrency={cfg.concurrency}, prefetch={p}, poll_interval=0.05)",
               f"p{p}") for p in cfg.pgfence_prefetch]
    p = max(cfg.pgfence_prefetch)
    shapes.append((pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=p, poll_interval=0.05,
                                  asyncio=True),
                   "pgfence (asyncio worker)",
                   f"pgfence.aio.AsyncWorker(await AsyncClient.connect(dsn), concurrency={cfg.concurrency},"
                   f" prefetch={p}, poll_interval=0.05), async def handlers", f"a{p}"))
    for shape, variant, desc, tag in shapes:
        row = new_row("pgfence", variant, version, f"{desc}; enqueue: pgfence.Client")

        def drain(i: int, shape: Any = shape, tag: str = tag, row: dict[str, Any] = row
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
            r = pf.batch_then_drain(dsn, cfg.drain_n, shape, drain_cap(cfg, row), f"{tag}r{i}")
            return r["batch"], r["drain"]

        def latency(i: int, shape: Any = shape, tag: str = tag) -> dict[str, Any]:
            return pf.latency(dsn, shape, cfg.lat_n, cfg.lat_rate, f"{tag}r{i}")
        out.append(Contender(row, drain, latency))
    return out


def pgfence_node_contender(cfg: Config, dsn: str, version: str) -> Contender:
    """The Node.js worker's drain, in the threaded worker's shape (the largest prefetch):
    reported beside it, not compared with the peers (system "pgfence-node")."""
    p = max(cfg.pgfence_prefetch)
    shape = pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=p, poll_interval=0.05)
    row = new_row("pgfence-node", f"pgfence (Node worker, prefetch {p})", version,
                  f"clients/node Worker(await Client.connect(dsn), {{concurrency: {cfg.concurrency}, prefetch: {p},"
                  " pollInterval: 50}); enqueue: pgfence.Client (Python)")

    def drain(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        r = pf.batch_then_drain(dsn, cfg.drain_n, shape, drain_cap(cfg, row), f"node-p{p}r{i}", worker="node")
        return r["batch"], r["drain"]
    return Contender(row, drain)


def merge_depth_runs(results: list[dict[str, Any]], prefetch: int) -> dict[str, Any]:
    """One depth figure from single-run pf.depth() results of the same queue size."""
    runs = [run for r in results for run in r["runs"]]
    rates = [run["db_rate"] for run in runs]
    return {"queued": results[0]["queued"], "measured": results[0]["measured"], "prefetch": prefetch,
            "fill_seconds": median([r["fill_seconds"] for r in results]), "runs": runs,
            "rate": median(rates), "spread": [min(rates), max(rates)],
            "wall_rate": median([run["wall"]["rate"] for run in runs]),
            "capped": any(r["capped"] for r in results)}


def run_pgfence_only(cfg: Config, dsn: str) -> dict[str, Any]:
    out: dict[str, Any] = {"errors": []}
    best_p = max(cfg.pgfence_prefetch)
    shape = pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=best_p)
    holder = {"variant": "pgfence-only", "errors": out["errors"]}
    # The small and the deep queue take turns (one run each per round, each on a fresh
    # queue), so a slow spell of the machine hits both figures of the ratio alike.
    per_queued: dict[int, list[dict[str, Any]]] = {cfg.depth_measured: [], cfg.depth_queued: []}
    for i in range(cfg.drain_runs):
        for q in per_queued:
            log(f"pgfence depth: first {cfg.depth_measured:,} jobs with {q:,} queued (prefetch {best_p}),"
                f" run {i + 1}/{cfg.drain_runs}")
            r = guarded(holder, f"depth {q}", lambda: pf.depth(dsn, q, cfg.depth_measured, shape,
                                                                 cfg.drain_timeout * 2, 1))
            if r:
                per_queued[q].append(r)
                log(f"  {r['rate']:,.0f} jobs/s claim+complete, {r['wall_rate']:,.0f} jobs/s wall"
                    f" (fill {r['fill_seconds']:.1f} s)")
    out["depth"] = [merge_depth_runs(rs, best_p) for rs in per_queued.values() if rs]
    log(f"pgfence database-only ceiling: pgbench -c {cfg.procs}, claim 500 + complete_many in SQL,"
        f" {cfg.ceiling_n:,} queued, {cfg.ceiling_seconds} s")
    out["ceiling"] = guarded(holder, "ceiling", lambda: pf.sql_ceiling(dsn, cfg.ceiling_n, cfg.procs,
                                                                       cfg.ceiling_seconds))
    if out["ceiling"]:
        log(f"  {out['ceiling']['rate']:,.0f} jobs/s with no worker process")
    log(f"pgfence latency against its floor: {cfg.single_runs} rounds of pgfence's latency step (prefetch {best_p}),"
        f" threaded and asyncio workers, and the floor (bare INSERT + NOTIFY, {cfg.procs} bare SKIP LOCKED claimers),"
        f" taking turns, {cfg.lat_n} jobs at {cfg.lat_rate:g}/s each")
    out["latency_floor"] = guarded(holder, "latency floor",
                                   lambda: pf.latency_against_floor(dsn, shape, cfg.lat_n, cfg.lat_rate,
                                                                    cfg.single_runs))
    if out["latency_floor"]:
        lf = out["latency_floor"]
        log(f"  floor p50 {lf['floor']['p50_ms']:.2f} ms, p95 {lf['floor']['p95_ms']:.2f} ms")
        for name, w in (("threaded", lf), ("asyncio", lf["asyncio"])):
            log(f"  {name} worker p50 {w['pgfence']['p50_ms']:.2f} ms, p95 {w['pgfence']['p95_ms']:.2f} ms;"
                f" p50 gap by round {', '.join(f'{g:+.2f}' for g in w['p50_gaps_ms'])} ms")
    log(f"pgfence sweep: {cfg.sweep_n:,} expired leases")
    out["sweep"] = guarded(holder, "sweep", lambda: pf.sweep(dsn, cfg.sweep_n, 1000, cfg.sweep_idle_max_s))
    log(f"pgfence recovery: {cfg.recovery_samples} killed workers, 2 s lease, workers polling at 0.1 s")
    rshape = pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=8, poll_interval=0.1)
    out["recovery"] = guarded(holder, "recovery", lambda: pf.recovery(dsn, cfg.recovery_samples, rshape))
    log(f"pgfence recovery by the pg_cron sweeper, no workers: {cfg.recovery_samples} leases expiring"
        f" {cfg.sweeper_spread} s apart")
    out["sweeper_recovery"] = guarded(holder, "sweeper recovery",
                                      lambda: pf.sweeper_recovery(dsn, cfg.recovery_samples,
                                                                  spread=cfg.sweeper_spread))
    log(f"pgfence claims over 1..10,000 queues: {cfg.claim_jobs:,} queued, claim of 10, before (@v0.3.0) and now")
    out["claims"] = guarded(holder, "claims over many queues",
                            lambda: pf.claims_by_queue_count(dsn, jobs=cfg.claim_jobs, calls=cfg.claim_calls,
                                                             seconds=cfg.claim_seconds))
    log("pgfence capped queue: set_queue_limit 8, 16 claimers holding each batch 20 ms")
    out["capped"] = guarded(holder, "capped queue",
                            lambda: pf.capped_queue(dsn, 8, 0.02, 16, 4, 4.0 if cfg.quick else 10.0))
    if out["capped"]:
        cq = out["capped"]
        log(f"  {cq['rate']:,.0f} jobs/s (cap / hold = {cq['expected_rate']:,.0f}), at most {cq['max_running']}"
            f" running in {cq['samples']:,} samples, {cq['duplicates']} handed out twice")
    log("pgfence rate-limited queue: set_queue_rate_limit 200 per second, 8 claimers of 10 completing at once, 60 s")
    out["rated"] = guarded(holder, "rate-limited queue",
                           lambda: pf.rate_limited_queue(dsn, 200, 1.0, 8, 10, 5.0 if cfg.quick else 60.0))
    if out["rated"]:
        rq = out["rated"]
        log(f"  {rq['rate']:,.1f} claims/s after the first second against {rq['limit_rate']:,.0f}/s: ratio"
            f" {rq['ratio']:.3f}; first second {rq['first_interval']} (burst up to {2 * rq['max_claims']})")
    log("pgfence claims from 64 worker connections at once: claim of 10 + complete_many, one queue")
    out["claims_64"] = guarded(holder, "claims from 64 connections",
                               lambda: pf.claims_concurrent(dsn, 64, 200_000 if not cfg.quick else 50_000, 10,
                                                            cfg.claim_seconds + 1))
    if out["claims_64"]:
        c64 = out["claims_64"]
        log(f"  {c64['rate']:,.0f} jobs/s, claim median {c64['median_ms']:.2f} ms, p95 {c64['p95_ms']:.2f} ms,"
            f" {c64['duplicates']} handed out twice")
    out["churn"] = []
    for d in (cfg.churn_depths if cfg.churn_seconds else ()):
        log(f"pgfence churn: {cfg.churn_seconds:.0f} s drain with {d:,} jobs kept queued (prefetch {best_p})")
        ch = guarded(holder, f"churn {d}", lambda: pf.churn(dsn, cfg.churn_seconds, d, shape))
        if ch:
            out["churn"].append(ch)
            log(f"  median {ch['median_rate']:,.0f} jobs/s, min {ch['min_rate']:,.0f},"
                f" max dead rows {ch['max_dead_rows']:,}")
    log(f"pgfence soak: {cfg.soak_seconds:.0f} s drain with {cfg.soak_depth:,} jobs kept queued (prefetch {best_p}),"
        f" retention {cfg.soak_retention}, history partitions {cfg.soak_partition_width} wide")
    out["soak"] = guarded(holder, "soak", lambda: pf.soak_own_database(
        dsn_for_db(dsn, "postgres"), cfg.soak_seconds, cfg.soak_depth, shape, cfg.soak_window, cfg.soak_retention,
        cfg.soak_partition_width, cfg.soak_mark))
    sk = out["soak"]
    if sk:
        met = {k: {True: "met", False: "UNMET", None: "n/a"}[v["met"]] for k, v in sk["targets"].items()}
        log(f"  median {sk['median_rate']:,.0f} jobs/s, last {sk['last_rate']:,.0f} ({met['rate_held']});"
            f" pgfence.jobs {sk['hot_bytes_mark'] / 1e6:.1f} MB at {sk['mark_t']:.0f} s ->"
            f" {sk['hot_bytes_end'] / 1e6:.1f} MB ({met['hot_bounded']}); history"
            f" {sk['history_bytes_end'] / 1e6:.1f} MB ({met['history_bounded']}),"
            f" {sk['partitions_dropped']} partitions dropped{'' if sk['partitioned'] else ' (not partitioned)'}")
    return out


def run_dashboard(cfg: Config, dsn: str) -> Optional[dict[str, Any]]:
    """The dashboard's page timings (bench/dashboard_pages.py): 1,000,000 jobs (100,000 with
    --quick) in the database bench_dashboard, 20 loads per page through the ASGI app."""
    holder: dict[str, Any] = {"variant": "dashboard", "errors": []}
    jobs = 100_000 if cfg.quick else 1_000_000
    log(f"dashboard: page server times, {jobs:,} jobs, 20 loads per page")
    try:
        import dashboard_pages
    except ImportError as exc:  # the dashboard extra is not installed
        log(f"dashboard: skipped ({exc})")
        return None
    out = guarded(holder, "dashboard pages", lambda: dashboard_pages.run(dsn_for_db(dsn, "postgres"), jobs, 20))
    if out is not None:
        out["errors"] = holder["errors"]
    return out if out is not None else {"errors": holder["errors"]}


# --------------------------------------------------------- single enqueue --
def single_enqueue_turns(cfg: Config, dsn: str, rows: list[dict[str, Any]],
                         peer_list: Sequence[peers_mod.Peer]) -> None:
    """Single enqueue of every system that ran, taking turns (pgfence, then each peer, then
    again, cfg.single_turns rounds, who goes first rotating): a slow spell of the machine
    hits every system alike, where one block per system put minutes between pgfence's
    figure and a peer's, and none always runs right after the drains. Each system's
    median goes to all its rows, its turns in `each` (the report pairs them turn by
    turn)."""
    systems: list[tuple[str, Callable[[], dict[str, Any]], Optional[Callable[[], None]]]] = []
    if any(r["system"] == "pgfence" for r in rows):
        systems.append(("pgfence", lambda: pf.single_enqueue(dsn, cfg.single_n), None))
    for peer in peer_list:
        prow = [r for r in rows if r["system"] == peer.name]
        if prow and prow[0]["drain_runs"]:  # (set up, and it ran)
            pdsn = peer.dsn(dsn)
            systems.append((peer.name, functools.partial(peer.single, pdsn, cfg.single_n, timeout=300),
                            functools.partial(peer.reset, pdsn)))
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in systems}
    for i in range(cfg.single_turns):
        k = i % len(systems) if systems else 0  # (who goes first rotates)
        for name, measure, reset in systems[k:] + systems[:k]:
            row0 = next(r for r in rows if r["system"] == name)
            log(f"{name}: {cfg.single_n:,} single enqueues, turn {i + 1}/{cfg.single_turns}")
            r = guarded(row0, f"single enqueue turn {i + 1}", measure)
            if reset is not None:
                guarded(row0, "reset after single enqueue", reset)
            if r:
                got[name].append({**r, "turn": i})
                log(f"  {r['rate']:,.0f}/s")
    for name, runs in got.items():
        single = merge_runs(runs, ["rate"])
        for r in rows:
            if r["system"] == name:
                r["single"] = single


# ------------------------------------------------------------------ peers --
def peer_latency(peer: peers_mod.Peer, pdsn: str, variant: peers_mod.Variant, cfg: Config,
                 tag: str) -> dict[str, Any]:
    outs = [LOG_DIR / f"{peer.name}-lat{tag}-w{i}.delays" for i in range(cfg.procs)]
    for o in outs:
        o.unlink(missing_ok=True)
    procs, logs = [], []
    try:
        for i in range(cfg.procs):
            lp = LOG_DIR / f"{peer.name}-lat{tag}-w{i}.log"
            procs.append(spawn(peer.worker_cmd(pdsn, variant, "latency", outs[i]), log_path=lp, env=peer.env))
            logs.append(lp)
        wait_ready(procs, logs, timeout=60)
        time.sleep(0.5)  # let both workers reach their idle poll/listen state
        run_json(peer.latency_cmd(pdsn, cfg.lat_n, cfg.lat_rate), log_path=LOG_DIR / f"{peer.name}-latency{tag}.log",
                 timeout=cfg.lat_n / cfg.lat_rate + 60, env=peer.env)
        wait_lines(outs, cfg.lat_n)
    finally:
        stop(procs)
    return delay_summary(outs, cfg.lat_n, f"{variant.name} latency")


def peer_contenders(peer: peers_mod.Peer, cfg: Config, admin_dsn: str) -> tuple[list[Contender], list[dict[str, Any]]]:
    """A peer's rows, its schema installed in its own database: the contenders, and the
    rows whose setup failed (reported with the error, not measured)."""
    rows = [new_row(peer.name, v.name, peer.version, v.settings) for v in peer.variants]
    log(f"{peer.name} {peer.version}: database {peer.db}, schema install")

    def setup() -> bool:
        peer.setup(admin_dsn)
        return True
    if guarded(rows[0], "setup", setup) is None:
        for r in rows[1:]:
            r["errors"] = list(rows[0]["errors"])
        for r in rows:
            summarize(r)
        return [], rows
    pdsn = peer.dsn(admin_dsn)
    peer.reset(pdsn)
    out = []
    for k, (row, variant) in enumerate(zip(rows, peer.variants)):
        def drain(i: int, row: dict[str, Any] = row, variant: peers_mod.Variant = variant, k: int = k
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
            tag = f"-{k}r{i}"
            peer.reset(pdsn)
            try:
                b = peer.batch(pdsn, cfg.drain_n, cfg.batch, timeout=600, tag=tag)
                settle(pdsn)
                poll = connect(pdsn)
                try:
                    def start() -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
                        procs, logs = [], []
                        for w in range(cfg.procs):
                            lp = LOG_DIR / f"{peer.name}-drain{tag}-w{w}.log"
                            procs.append(spawn(peer.worker_cmd(pdsn, variant, "noop", None), log_path=lp,
                                               env=peer.env))
                            logs.append(lp)
                        return procs, logs
                    d = measure_drain(start, lambda: peer.finished(poll, cfg.drain_n), cfg.drain_n,
                                      drain_cap(cfg, row))
                finally:
                    poll.close()
            finally:
                peer.reset(pdsn)  # (its rows gone before another system's turn)
            return b, asdict(d)

        def latency(i: int, variant: peers_mod.Variant = variant, k: int = k) -> dict[str, Any]:
            peer.reset(pdsn)
            try:
                return peer_latency(peer, pdsn, variant, cfg, f"-{k}r{i}")
            finally:
                peer.reset(pdsn)
        out.append(Contender(row, drain, latency))
    return out, []


# ------------------------------------------------------------------- main --
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: 1 run each, smaller N (< 3 minutes)")
    ap.add_argument("--dsn", default=os.environ.get("PGFENCE_BENCH_DSN") or default_dsn(),
                    help="pgfence database (default: scripts/pg.sh dsn)")
    ap.add_argument("--systems",
                    default="pgfence,pgfence-node,pgqueuer,procrastinate,graphile-worker,pgbench,pgfence-only,dashboard",
                    help="comma-separated subset to run (dashboard: the web dashboard's page timings with "
                         "1,000,000 jobs in a database of its own, bench/dashboard_pages.py)")
    ap.add_argument("--reinstall-peers", action="store_true", help="ignore bench/.peers/stamp.json")
    a = ap.parse_args()
    cfg = Config.make(a.quick)
    wanted = set(a.systems.split(","))

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    atexit.register(kill_all)

    started = time.time()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    for old in LOG_DIR.iterdir():
        old.unlink()
    check_dsn(a.dsn)
    if not pf.client_available():
        raise SystemExit("bench: `from pgfence import Client, Worker` fails in this venv; run `make setup`")
    results: dict[str, Any] = {"started": started, "quick": cfg.quick, "config": asdict(cfg), "dsn": a.dsn,
                               "errors": [], "notes": []}
    try:
        stamp = peers_mod.ensure_installed(force=a.reinstall_peers)
        peer_list, notes = peers_mod.build_peers(stamp, cfg.concurrency)
        results["notes"] += notes
        results["machine"] = machine_info(a.dsn)
        busy = results["machine"]["pgfence_processing_rows_at_start"]
        if busy > 1000:
            results["notes"].append(
                f"{busy:,} rows of other queues were 'processing' in pgfence.jobs at start (another user of the"
                " database, e.g. the test suite's leftovers): they share the table and its indexes with the"
                " measured queues (claim's reclaim probe visits only expired leases), so run on a clean"
                " database for the cleanest numbers")
        pgfence_version = str(scalar(a.dsn, "SELECT pgfence.schema_version()")) \
            if scalar(a.dsn, "SELECT to_regproc('pgfence.schema_version') IS NOT NULL") else "?"
        results["versions"] = {
            "pgfence": f"schema_version {pgfence_version}, worker: python_client pgfence.Worker",
            "pgfence-node": f"clients/node pgfence.Worker, node {peers_mod._node_version()}",
            **{p.name: p.version for p in peer_list},
            "peer python": "bench/.peers/venv: " + ", ".join(x for x in stamp.get("pip_freeze", [])
                                                             if x.split("==")[0].lower() in
                                                             ("pgqueuer", "procrastinate", "asyncpg", "psycopg",
                                                              "psycopg-pool")),
        }
        contenders: list[Contender] = []
        not_run: list[dict[str, Any]] = []
        if "pgfence" in wanted:
            contenders += pgfence_contenders(cfg, a.dsn, pgfence_version)
        if "pgfence-node" in wanted:
            if shutil.which("node") and (REPO / "clients" / "node" / "node_modules" / "pg").is_dir():
                contenders.append(pgfence_node_contender(cfg, a.dsn, pgfence_version))
            else:
                results["notes"].append("pgfence (Node worker): skipped, node or clients/node/node_modules missing"
                                        " (make setup)")
        for p in peer_list:
            if p.name in wanted:
                got, failed = peer_contenders(p, cfg, a.dsn)
                contenders += got
                not_run += failed
        take_turns(cfg, contenders)
        rows = [c.row for c in contenders] + not_run
        single_enqueue_turns(cfg, a.dsn, rows, peer_list)
        results["rows"] = rows
        if "pgbench" in wanted:
            try:
                results["pgbench"] = pgbench_bench.run(a.dsn, cfg.pgbench_seconds, cfg.pgbench_prefill)
            except Exception as exc:
                results["errors"].append(f"pgbench: {exc}")
        if "pgfence-only" in wanted:
            results["pgfence_only"] = run_pgfence_only(cfg, a.dsn)
        if "dashboard" in wanted:
            results["dashboard"] = run_dashboard(cfg, a.dsn)
    finally:
        kill_all()
    results["loadavg_end"] = os.getloadavg()[0]
    results["ratios"] = report.ratios(results["rows"])
    results["elapsed_s"] = time.time() - started
    results["final_line"] = report.final_line(results["rows"])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "latest.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = report.render(results)
    (REPO / "BENCHMARKS.md").write_text(md)
    print(md.split("## Results", 1)[1].strip() if "## Results" in md else md)
    print()
    print(results["final_line"])
    log(f"done in {results['elapsed_s']:.0f} s: BENCHMARKS.md, bench/results/latest.json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        kill_all()
        print(f"bench: interrupted ({exc or 'SIGINT'}); workers stopped, no results written", file=sys.stderr)
        sys.exit(130)
