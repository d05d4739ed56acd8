#!/usr/bin/env python3
"""pgfence benchmark harness: pgfence vs pgqueuer, procrastinate and graphile-worker
on the local throwaway cluster. `make bench` runs `.venv/bin/python bench/run.py [--quick]`
after starting the cluster and deploying pgfence.

Writes BENCHMARKS.md (repo top) and bench/results/latest.json, prints the table to
stdout, and ends stdout with exactly one line
`drain: pgfence N jobs/s, best peer NAME M jobs/s, ratio R`.
Progress goes to stderr; worker/runner logs to bench/results/logs/.
"""
from __future__ import annotations

import argparse
import atexit
import functools
import json
import math
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
from common import (LOG_DIR, REPO, RESULTS_DIR, BenchError, connect, delay_summary,  # noqa: E402
                    fmt_num, kill_all, log, measure_drain, median, run_json, scalar, spawn,
                    settle, stop, wait_lines, wait_ready)


@dataclass
class Config:
    quick: bool
    procs: int = 2
    concurrency: int = 8
    single_n: int = 5000
    single_runs: int = 3   # single enqueue and latency: median of this many runs
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
        return cls(quick=True, single_n=2000, single_runs=1, drain_n=20_000, drain_runs=1, drain_timeout=12.0,
                   depth_queued=200_000, sweep_n=20_000, sweep_idle_max_s=3.0, recovery_samples=5,
                   sweeper_spread=0.27, churn_seconds=0, pgbench_seconds=5, pgbench_prefill=200_000,
                   ceiling_n=150_000, ceiling_seconds=2, claim_calls=30, claim_seconds=1.0)


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


def repeated(row: dict[str, Any], what: str, runs: int, fn: Callable[[int], dict[str, Any]],
             keys: Sequence[str]) -> Optional[dict[str, Any]]:
    """fn(i) for i in range(runs), each guarded, merged by `merge_runs`."""
    return merge_runs([r for i in range(runs)
                       if (r := guarded(row, f"{what} run {i + 1}" if runs > 1 else what, lambda: fn(i))) is not None],
                      keys)


def merge_runs(got: list[dict[str, Any]], keys: Sequence[str]) -> Optional[dict[str, Any]]:
    """One result from several runs: the first run's fields, with each of `keys` the median
    over the runs, `<key>_spread` [min, max], `runs` and the runs themselves (`each`)."""
    if not got:
        return None
    out = {**got[0], "runs": len(got), "each": got}
    for k in keys:
        xs = [r[k] for r in got]
        out[k], out[f"{k}_spread"] = median(xs), [min(xs), max(xs)]
    return out


def summarize(row: dict[str, Any]) -> None:
    rates = [r["rate"] for r in row["drain_runs"]]
    row["drain"] = ({"median": median(rates), "min": min(rates), "max": max(rates), "runs": len(rates),
                     "timed_out_runs": sum(1 for r in row["drain_runs"] if r["timed_out"])} if rates else None)
    brates = [b["rate"] for b in row["batch_runs"]]
    row["batch"] = {"median": median(brates), "runs": len(brates)} if brates else None


# ---------------------------------------------------------------- pgfence --
def run_pgfence(cfg: Config, dsn: str, version: str) -> list[dict[str, Any]]:
    rows = []
    for p in cfg.pgfence_prefetch:
        shape = pf.WorkerShape(procs=cfg.procs, concurrency=cfg.concurrency, prefetch=p, poll_interval=0.05)
        desc = (f"pgfence.Worker(Client.connect(dsn), concurrency={cfg.concurrency}, prefetch={p},"
                f" poll_interval=0.05)")
        row = new_row("pgfence", f"pgfence (prefetch {p})", version, f"{desc}; enqueue: pgfence.Client")
        for i in range(cfg.drain_runs):
            log(f"{row['variant']}: batch enqueue {cfg.drain_n:,} + drain, run {i + 1}/{cfg.drain_runs}")
            cap = drain_cap(cfg, row)
            r = guarded(row, f"drain run {i + 1}",
                        lambda: pf.batch_then_drain(dsn, cfg.drain_n, shape, cap, f"p{p}r{i}"))
            if r:
                row["batch_runs"].append(r["batch"])
                row["drain_runs"].append(r["drain"])
                log(f"  batch {r['batch']['rate']:,.0f}/s, drain {r['drain']['rate']:,.0f} jobs/s"
                    f" ({r['drain']['seconds']:.2f} s){' TIMED OUT' if r['drain']['timed_out'] else ''}")
        log(f"{row['variant']}: latency, {cfg.lat_n} jobs at {cfg.lat_rate:g}/s, {cfg.single_runs} run(s)")
        row["latency"] = repeated(row, "latency", cfg.single_runs,
                                  lambda i: pf.latency(dsn, shape, cfg.lat_n, cfg.lat_rate, f"p{p}r{i}"),
                                  ["p50_ms", "p95_ms"])
        summarize(row)
        rows.append(row)
    return rows


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
    log(f"pgfence latency floor: bare INSERT + NOTIFY, {cfg.procs} bare SKIP LOCKED claimers,"
        f" {cfg.lat_n} jobs at {cfg.lat_rate:g}/s")
    out["latency_floor"] = guarded(holder, "latency floor",
                                   lambda: pf.latency_floor(dsn, cfg.procs, cfg.lat_n, cfg.lat_rate))
    if out["latency_floor"]:
        log(f"  p50 {out['latency_floor']['p50_ms']:.2f} ms, p95 {out['latency_floor']['p95_ms']:.2f} ms")
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
    out["churn"] = []
    for d in (cfg.churn_depths if cfg.churn_seconds else ()):
        log(f"pgfence churn: {cfg.churn_seconds:.0f} s drain with {d:,} jobs kept queued (prefetch {best_p})")
        ch = guarded(holder, f"churn {d}", lambda: pf.churn(dsn, cfg.churn_seconds, d, shape))
        if ch:
            out["churn"].append(ch)
            log(f"  median {ch['median_rate']:,.0f} jobs/s, min {ch['min_rate']:,.0f},"
                f" max dead rows {ch['max_dead_rows']:,}")
    return out


# --------------------------------------------------------- single enqueue --
def single_enqueue_turns(cfg: Config, dsn: str, rows: list[dict[str, Any]],
                         peer_list: Sequence[peers_mod.Peer]) -> None:
    """Single enqueue of every system that ran, taking turns (pgfence, then each peer, then
    again, cfg.single_runs rounds): a slow spell of the machine hits every system alike,
    where one block per system put minutes between pgfence's figure and a peer's. Each
    system's median goes to all its rows."""
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
    for i in range(cfg.single_runs):
        for name, measure, reset in systems:
            row0 = next(r for r in rows if r["system"] == name)
            log(f"{name}: {cfg.single_n:,} single enqueues, turn {i + 1}/{cfg.single_runs}")
            r = guarded(row0, f"single enqueue turn {i + 1}", measure)
            if reset is not None:
                guarded(row0, "reset after single enqueue", reset)
            if r:
                got[name].append(r)
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


def run_peer(peer: peers_mod.Peer, cfg: Config, admin_dsn: str) -> list[dict[str, Any]]:
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
        return rows
    pdsn = peer.dsn(admin_dsn)
    peer.reset(pdsn)
    for row, variant in zip(rows, peer.variants):
        for i in range(cfg.drain_runs):
            tag = f"-{peer.variants.index(variant)}r{i}"
            log(f"{variant.name}: batch enqueue {cfg.drain_n:,} + drain, run {i + 1}/{cfg.drain_runs}")

            def one_run() -> tuple[dict[str, Any], dict[str, Any]]:
                peer.reset(pdsn)
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
                return b, asdict(d)
            r = guarded(row, f"drain run {i + 1}", one_run)
            if r:
                row["batch_runs"].append(r[0])
                row["drain_runs"].append(r[1])
                log(f"  batch {r[0]['rate']:,.0f}/s, drain {r[1]['rate']:,.0f} jobs/s ({r[1]['seconds']:.2f} s)"
                    f"{' TIMED OUT: %d/%d finished' % (r[1]['finished'], r[1]['jobs']) if r[1]['timed_out'] else ''}")
        peer.reset(pdsn)
        log(f"{variant.name}: latency, {cfg.lat_n} jobs at {cfg.lat_rate:g}/s, {cfg.single_runs} run(s)")
        row["latency"] = repeated(row, "latency", cfg.single_runs,
                                  lambda i: peer_latency(peer, pdsn, variant, cfg,
                                                         f"-{peer.variants.index(variant)}r{i}"),
                                  ["p50_ms", "p95_ms"])
        summarize(row)
    peer.reset(pdsn)
    return rows


# ----------------------------------------------------------------- report --
def _best(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Optional[float]],
          lower: bool = False) -> tuple[Optional[dict[str, Any]], Optional[float]]:
    cands: list[tuple[float, dict[str, Any]]] = []
    for r in rows:
        v = key(r)
        if v is not None and not math.isnan(v):
            cands.append((v, r))
    if not cands:
        return None, None
    v, r = (min if lower else max)(cands, key=lambda t: t[0])
    return r, v


COLUMNS: list[tuple[str, Callable[[dict[str, Any]], Optional[float]], bool]] = [
    ("single enqueue/s", lambda r: r["single"]["rate"] if r.get("single") else None, False),
    ("batch enqueue/s", lambda r: r["batch"]["median"] if r.get("batch") else None, False),
    ("drain jobs/s", lambda r: r["drain"]["median"] if r.get("drain") else None, False),
    ("latency p50 ms", lambda r: r["latency"]["p50_ms"] if r.get("latency") else None, True),
    ("latency p95 ms", lambda r: r["latency"]["p95_ms"] if r.get("latency") else None, True),
]


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mine = [r for r in rows if r["system"] == "pgfence"]
    others = [r for r in rows if r["system"] != "pgfence"]
    out = []
    for name, key, lower in COLUMNS:
        pr, pv = _best(mine, key, lower)
        orow, ov = _best(others, key, lower)
        # Enqueue does not depend on the worker variant: name the system there.
        label = "system" if "enqueue" in name else "variant"
        out.append({"column": name, "pgfence": pv, "pgfence_variant": pr[label] if pr else None,
                    "best_peer": orow[label] if orow else None, "peer_value": ov,
                    "ratio": (pv / ov) if pv is not None and ov else None, "lower_is_better": lower})
    return out


def with_spread(result: Optional[dict[str, Any]], key: str, digits: int) -> str:
    """A median with its min-max over the runs, when there was more than one run."""
    if not result:
        return "n/a"
    lo, hi = result.get(f"{key}_spread") or (None, None)
    more = f" ({fmt_num(lo, digits)}-{fmt_num(hi, digits)})" if result.get("runs", 1) > 1 and lo is not None else ""
    return fmt_num(result[key], digits) + more


def main_table(rows: list[dict[str, Any]], cfg: Config) -> str:
    runs = "1 run (quick)" if cfg.drain_runs == 1 else f"median of {cfg.drain_runs}"
    hdr = ("| system | single enqueue/s | batch enqueue/s | drain jobs/s (" + runs + ") | drain spread min-max |"
           " latency p50 ms | latency p95 ms |")
    lines = [hdr, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        d = r.get("drain")
        drain = fmt_num(d["median"]) if d else "n/a"
        if d and d["timed_out_runs"]:
            drain += f" (capped {d['timed_out_runs']}/{d['runs']})"
        spread = f"{fmt_num(d['min'])}-{fmt_num(d['max'])}" if d and d["runs"] > 1 else ("1 run" if d else "n/a")
        lat = r.get("latency")
        lines.append(f"| {r['variant']} | {with_spread(r.get('single'), 'rate', 0)} | {fmt_num(COLUMNS[1][1](r))} |"
                     f" {drain} | {spread} | {with_spread(lat, 'p50_ms', 1)} | {with_spread(lat, 'p95_ms', 1)} |")
    return "\n".join(lines)


def ratio_table(rat: list[dict[str, Any]]) -> str:
    lines = ["| column | pgfence (best variant) | best peer | ratio pgfence/peer |", "|---|---:|---:|---:|"]
    for x in rat:
        digits = 1 if "latency" in x["column"] else 0
        better = "lower is better" if x["lower_is_better"] else "higher is better"
        lines.append(f"| {x['column']} ({better}) | {fmt_num(x['pgfence'], digits)} ({x['pgfence_variant']}) |"
                     f" {fmt_num(x['peer_value'], digits)} ({x['best_peer']}) |"
                     f" {fmt_num(x['ratio'], 2) if x['ratio'] is not None else 'n/a'} |")
    return "\n".join(lines)


def pgbench_table(pb: Optional[dict[str, Any]]) -> str:
    if not pb:
        return "pgbench: not run (see errors)."
    c, t, s = pb["clients"], pb["threads"], pb["seconds"]
    claim = pb["claim"]
    note = f" ({claim['note']})" if claim.get("note") else ""
    return "\n".join([
        "| pgbench baseline (bench_pgbench database) | tx/s |", "|---|---:|",
        f"| single-row INSERT, `pgbench -n -c {c} -j {t} -T {s}` | {fmt_num(pb['insert']['tps'])} |",
        f"| one-row SKIP LOCKED claim (UPDATE ... status='done') on {claim['prefilled']:,} pre-filled rows,"
        f" `-c {c} -j {t} -T {s}`{note} | {fmt_num(claim['tps'])} |",
    ])


def pgfence_only_table(po: Optional[dict[str, Any]], cfg: Config,
                       ratio_rows: Sequence[dict[str, Any]] = ()) -> str:
    """ratio_rows: the ratio table's rows (pgfence's and the best peer's drain and latency,
    set beside the ceiling and the latency floor)."""
    if not po:
        return "pgfence-only measurements: not run."
    by_column = {x["column"]: x for x in ratio_rows}
    drain = by_column.get("drain jobs/s")
    lines = ["| pgfence-only measurement | result |", "|---|---|"]
    ce = po.get("ceiling")
    if ce:
        peer = ""
        if drain and drain.get("pgfence"):
            peer += (f"; pgfence's drain ({drain['pgfence_variant']}, {fmt_num(drain['pgfence'])} jobs/s) is"
                     f" {drain['pgfence'] / ce['rate']:.2f} of it")
        if drain and drain.get("peer_value"):
            peer += (f"; it is {ce['rate'] / drain['peer_value']:.2f} x the best peer's drain"
                     f" ({drain['best_peer']}, {fmt_num(drain['peer_value'])} jobs/s)")
        dry = "; the queue ran dry, so this is a lower bound" if ce["left"] == 0 else ""
        lines.append(f"| database-only ceiling: {ce['clients']} pgbench clients (one per worker process), each"
                     f" looping over `claim(max_jobs => {ce['batch']})` and `complete_many` of what it got, in SQL,"
                     f" no worker process; {ce['n']:,} queued, `pgbench -c {ce['clients']} -T {ce['seconds']}` |"
                     f" {fmt_num(ce['rate'])} jobs/s{dry}{peer} |")
    for d in po.get("depth", []):
        capped = " (a run capped)" if d["capped"] else ""
        lines.append(f"| depth: claim+complete of {d['measured']:,} jobs with {d['queued']:,} queued"
                     f" ({cfg.procs} procs x {cfg.concurrency}, prefetch {d['prefetch']}; median of {len(d['runs'])},"
                     f" database clock) | {fmt_num(d['rate'])} jobs/s (spread {fmt_num(d['spread'][0])}-"
                     f"{fmt_num(d['spread'][1])}; wall clock incl. process start {fmt_num(d['wall_rate'])})"
                     f"{capped} |")
    fl = po.get("latency_floor")
    if fl:
        p50, p95 = by_column.get("latency p50 ms"), by_column.get("latency p95 ms")
        mine = (f"; pgfence's latency step: p50 {fmt_num(p50['pgfence'], 1)} ms, p95 {fmt_num(p95['pgfence'], 1)} ms"
                if p50 and p95 and p50.get("pgfence") is not None and p95.get("pgfence") is not None else "")
        lines.append(f"| latency floor, no queue logic: {fl['n']} bare `INSERT INTO pgfence.jobs` + NOTIFY at"
                     f" {fl['rate']:g}/s (the latency step's producer); {fl['procs']} idle processes LISTENing,"
                     f" each claiming one job per notification with a bare one-row SKIP LOCKED UPDATE"
                     f" (bench/floor_claimer.py: no checks, no reclaim probe, no worker threads) |"
                     f" p50 {fl['p50_ms']:.1f} ms, p95 {fl['p95_ms']:.1f} ms{mine} |")
    depth = po.get("depth", [])
    if len(depth) == 2 and depth[0]["rate"]:
        lines.append(f"| depth ratio: {depth[1]['queued']:,} queued vs {depth[0]['queued']:,} queued |"
                     f" {depth[1]['rate'] / depth[0]['rate']:.2f} (wall clock:"
                     f" {depth[1]['wall_rate'] / depth[0]['wall_rate']:.2f}) |")
    sw = po.get("sweep")
    if sw:
        lines.append(f"| sweep: `CALL pgfence.sweep()` reclaiming {sw['expired']:,} expired leases (pg_cron sweeper"
                     f" paused) | {sw['sweep_seconds']:.2f} s, {fmt_num(sw['reclaimed_per_s'])} rows/s"
                     f" ({sw['reclaimed']:,} reclaimed) |")
        if sw["expired"] < sw["expired_target"]:
            lines.append(f"| sweep note | {sw['expired_target'] - sw['expired']:,} of the {sw['expired_target']:,}"
                         " expired leases were reclaimed by another session's claim before the sweep |")
        lines.append(f"| idle sweep cost: `SELECT count(*) FROM pgfence.reclaim_expired(1000)`, nothing expired"
                     f" (after the sweep + VACUUM), {sw['idle_calls']:,} calls ({sw['idle_processing_rows']:,} unexpired processing rows in"
                     f" the table) | {sw['idle_us_per_call']:,.0f} us/call |")
        if sw.get("busy_idle_us_per_call") is not None:
            lines.append(f"| idle sweep cost with {sw['expired']:,} unexpired leases held (same call,"
                         f" {sw['busy_idle_calls']} calls) | {sw['busy_idle_us_per_call']:,.0f} us/call |")
    rc = po.get("recovery")
    if rc:
        lines.append(f"| recovery: killed worker, lease 2 s, workers polling every {rc['poll_interval']} s:"
                     f" lease expiry -> claimed again ({rc['samples']} samples) | p50 {rc['p50_ms']:.0f} ms,"
                     f" p95 {rc['p95_ms']:.0f} ms, max {rc['max_ms']:.0f} ms |")
    sr = po.get("sweeper_recovery")
    if sr and sr.get("skipped"):
        lines.append(f"| recovery, no workers, by the pg_cron sweeper | skipped: {sr['skipped']} |")
    elif sr:
        lines.append(f"| recovery, no workers: the pg_cron sweeper (a pass every 0.5 s) reclaims an expired lease:"
                     f" lease expiry -> reclaimed ({sr['samples']} samples) | p50 {sr['p50_ms']:.0f} ms,"
                     f" p95 {sr['p95_ms']:.0f} ms, max {sr['max_ms']:.0f} ms |")
    churns = po.get("churn") or []
    for ch in churns:
        lines.append(f"| churn: {ch['seconds']:.0f} s drain ({cfg.procs} procs x {cfg.concurrency}, prefetch"
                     f" {max(cfg.pgfence_prefetch)}) with {ch['depth']:,} jobs kept queued, autovacuum_naptime"
                     f" {ch['naptime']}; claim+complete per {ch['window']:.0f} s window | median"
                     f" {fmt_num(ch['median_rate'])} jobs/s, min {fmt_num(ch['min_rate'])}, last"
                     f" {fmt_num(ch['last_rate'])}; pgfence.jobs: at most {ch['max_dead_rows']:,} dead rows, claim"
                     f" index {ch['claim_idx_mb_end']:.1f} MB at the end (indexes keep their size from earlier"
                     f" runs), {ch['autovacuum_passes']} autovacuum passes |")
    if len(churns) == 2 and churns[0]["median_rate"]:
        lines.append(f"| steady depth ratio: {churns[1]['depth']:,} vs {churns[0]['depth']:,} kept queued (median"
                     f" of the windows) | {churns[1]['median_rate'] / churns[0]['median_rate']:.2f} |")
    for e in po.get("errors", []):
        lines.append(f"| error | {e} |")
    return "\n".join(lines)


def claims_table(po: Optional[dict[str, Any]]) -> str:
    """Claims over 1..10,000 queues: time and extra rows locked, before and now, and the
    ratio to the same claim from one queue holding the same jobs."""
    cl = (po or {}).get("claims")
    if not cl:
        return "Claims over many queues: not run."
    cases = {(c["version"], c["queues"], c["shape"]): c for c in cl["cases"]}
    versions = sorted({c["version"] for c in cl["cases"]}, key=lambda v: v != "before")
    lines = [f"A claim of {cl['max_jobs']} from {cl['jobs']:,} queued jobs spread evenly over N queues, each call in"
             " a transaction rolled back (client time: one round trip, the list of queues sent with it; median and"
             " p95). Extra locked: queued rows the claim held locks on beyond those it returned, counted from a"
             " second session while its transaction was open. Ratio: to the same claim (queues => NULL) from one"
             " queue holding the same jobs, same version.", "",
             "| version | queues | queues => | median ms | p95 ms | returned | extra rows locked | ratio to 1 queue |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for v in versions:
        base = cases.get((v, 1, "NULL"))
        for (vv, n, shape), c in sorted(cases.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if vv != v:
                continue
            ratio = f"{c['median_ms'] / base['median_ms']:.2f}" if base and base["median_ms"] else "-"
            what = "NULL" if shape == "NULL" else f"all {n:,} names"
            lines.append(f"| {v} | {n:,} | {what} | {c['median_ms']:.2f} | {c['p95_ms']:.2f} | {c['returned']} |"
                         f" {c['locked_extra']:,} | {ratio} |")
    return "\n".join(lines)


def render(results: dict[str, Any], cfg: Config) -> str:
    m = results["machine"]
    rows = results["rows"]
    st = m["pg_settings"]
    peer_versions = results["versions"]
    runs_note = ("QUICK mode: every measurement is ONE run (no median, no spread)." if cfg.quick else
                 f"Drain: median of {cfg.drain_runs} runs, spread = min-max; single enqueue and latency: median of"
                 f" {cfg.single_runs} runs, (min-max) after it; batch enqueue: median over the drain runs'"
                 " pre-fills.")
    md = [
        "# pgfence benchmarks",
        "",
        f"Generated by `bench/run.py{' --quick' if cfg.quick else ''}` (`make bench{' QUICK=1' if cfg.quick else ''}`)"
        f" on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(results['started']))}, took"
        f" {results['elapsed_s']:.0f} s. Raw numbers: `bench/results/latest.json`. {runs_note}",
        "",
        "## Machine",
        "",
        f"- {m['nproc']} cores ({m['cpu']}), {m['mem_gib']} GiB memory, Debian {m['debian']}, kernel {m['kernel']}",
        f"- {m['postgres']}",
        f"- fsync={st['fsync']}, synchronous_commit={st['synchronous_commit']},"
        f" full_page_writes={st['full_page_writes']}, shared_buffers={st['shared_buffers']},"
        f" wal_level={st['wal_level']}; one local throwaway cluster (scripts/pg.sh), every client on 127.0.0.1",
        f"- pg_cron sweeper: {m['pg_cron_sweeper'] or 'not scheduled'} (left running except during the sweep"
        " measurement; it runs pgfence.sweep() every 0.5 s in database pgfence)",
        f"- at start: {m['other_client_sessions_at_start']} other client sessions on the cluster,"
        f" {m['pgfence_jobs_rows_at_start']:,} rows in pgfence.jobs"
        f" ({m['pgfence_processing_rows_at_start']:,} processing) left by other users of the database",
        f"- load average (1 min) at start {m['loadavg_start']:.2f}, at end {results.get('loadavg_end', 0):.2f};"
        " anything else running on the machine (e.g. a test suite on the same cluster) skews these numbers",
        f"- Python {m['python']}, Node.js {m['node'] or 'absent'}, {m['pgbench'] or 'pgbench absent'}",
        "",
        "## Versions",
        "",
        *[f"- {k}: {v}" for k, v in peer_versions.items()],
        "",
        "## Settings",
        "",
        f"- Worker shape for every system: {cfg.procs} worker OS processes x concurrency {cfg.concurrency},"
        " no-op handler. Each peer in its own database (bench_pgqueuer, bench_procrastinate, bench_graphile)"
        " with the schema installed by its own tooling; pgfence in its deployed database, a fresh queue per"
        " run, jobs deleted and VACUUMed after each run; peer tables truncated + VACUUM between runs.",
        f"- single enqueue/s: {cfg.single_n:,} sequential single enqueues from one client connection, after"
        f" the drains, the systems taking turns ({cfg.single_runs} rounds; median, min-max)"
        " (pgfence: `SELECT pgfence.enqueue(kind => 'noop', payload => %s::jsonb, queue => %s)`).",
        f"- batch enqueue/s: {cfg.drain_n:,} jobs in batches of {cfg.batch:,} through the system's batch API"
        " (pgfence: `pgfence.enqueue_many`), measured as the pre-fill of each drain run.",
        f"- drain jobs/s: {cfg.drain_n:,} queued no-op jobs; then the same settle step for every system"
        " (VACUUM (ANALYZE) of its tables, CHECKPOINT, wait for running autovacuum workers to finish);"
        f" then {cfg.procs} worker processes start;"
        " time from the first worker's READY (printed right before the library's run()) until the database"
        f" shows all {cfg.drain_n:,} finished (count polled every 20-500 ms, adaptive, so the end is caught"
        " within ~20 ms without loading the server). A drain is capped at"
        f" {cfg.drain_timeout:.0f} s (later runs of a variant that hit the cap:"
        f" {min(cfg.drain_timeout, cfg.drain_timeout_after_cap):.0f} s): a capped run reports"
        " finished/elapsed and is marked 'capped'.",
        f"- latency: idle workers, {cfg.lat_n} jobs enqueued at {cfg.lat_rate:g}/s, payload carries"
        " time.time() at enqueue; the handler records now - t. p50/p95 over the jobs of a run, with fresh"
        f" workers; the median of {cfg.single_runs} runs.",
        "",
        "| system | settings |", "|---|---|",
        *[f"| {r['variant']} | {r['settings']} |" for r in rows],
        "",
        "## Results",
        "",
        main_table(rows, cfg),
        "",
        "### pgfence vs the best peer, per column",
        "",
        ratio_table(results["ratios"]),
        "",
        "### pgbench baseline",
        "",
        pgbench_table(results.get("pgbench")),
        "",
        "### pgfence only",
        "",
        pgfence_only_table(results.get("pgfence_only"), cfg, results["ratios"]),
        "",
        "### Claims over many queues",
        "",
        claims_table(results.get("pgfence_only")),
        "",
    ]
    errs = [(r["variant"], e) for r in rows for e in r["errors"]] + [("general", e) for e in results["errors"]]
    notes = results.get("notes", [])
    if errs or notes:
        md += ["## Errors and notes", ""]
        md += [f"- {n}" for n in notes]
        md += [f"- {v}: {e}" for v, e in errs]
        md.append("")
    return "\n".join(md)


def final_line(rows: list[dict[str, Any]]) -> str:
    mine = [r for r in rows if r["system"] == "pgfence"]
    others = [r for r in rows if r["system"] != "pgfence"]
    pr, pv = _best(mine, COLUMNS[2][1])
    orow, ov = _best(others, COLUMNS[2][1])
    n = f"{pv:.0f}" if pv is not None else "n/a"
    m = f"{ov:.0f}" if ov is not None else "n/a"
    name = orow["variant"] if orow else "none"
    r = f"{pv / ov:.2f}" if pv is not None and ov else "n/a"
    return f"drain: pgfence {n} jobs/s, best peer {name} {m} jobs/s, ratio {r}"


# ------------------------------------------------------------------- main --
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: 1 run each, smaller N (< 3 minutes)")
    ap.add_argument("--dsn", default=os.environ.get("PGFENCE_BENCH_DSN") or default_dsn(),
                    help="pgfence database (default: scripts/pg.sh dsn)")
    ap.add_argument("--systems", default="pgfence,pgqueuer,procrastinate,graphile-worker,pgbench,pgfence-only",
                    help="comma-separated subset to run")
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
            **{p.name: p.version for p in peer_list},
            "peer python": "bench/.peers/venv: " + ", ".join(x for x in stamp.get("pip_freeze", [])
                                                             if x.split("==")[0].lower() in
                                                             ("pgqueuer", "procrastinate", "asyncpg", "psycopg",
                                                              "psycopg-pool")),
        }
        rows: list[dict[str, Any]] = []
        if "pgfence" in wanted:
            rows += run_pgfence(cfg, a.dsn, pgfence_version)
        for p in peer_list:
            if p.name in wanted:
                rows += run_peer(p, cfg, a.dsn)
        single_enqueue_turns(cfg, a.dsn, rows, peer_list)
        results["rows"] = rows
        if "pgbench" in wanted:
            try:
                results["pgbench"] = pgbench_bench.run(a.dsn, cfg.pgbench_seconds, cfg.pgbench_prefill)
            except Exception as exc:
                results["errors"].append(f"pgbench: {exc}")
        if "pgfence-only" in wanted:
            results["pgfence_only"] = run_pgfence_only(cfg, a.dsn)
    finally:
        kill_all()
    results["loadavg_end"] = os.getloadavg()[0]
    results["ratios"] = ratios(results["rows"])
    results["elapsed_s"] = time.time() - started
    results["final_line"] = final_line(results["rows"])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "latest.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = render(results, cfg)
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
