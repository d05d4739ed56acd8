#!/usr/bin/env python3
"""BENCHMARKS.md from a benchmark run's results.

run.py calls :func:`render` with the results it also writes to
bench/results/latest.json, and :func:`ratios` / :func:`final_line` for the summary;
``python bench/report.py [bench/results/latest.json] [-o BENCHMARKS.md]`` renders the
same Markdown again from a saved JSON (stdout without -o). Everything here reads the
results, the run's configuration included (``results["config"]``), and nothing else.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any, Callable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, fmt_num  # noqa: E402

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
    others = [r for r in rows if not r["system"].startswith("pgfence")]  # (pgfence-node: beside, not a peer)
    out = []
    for name, key, lower in COLUMNS:
        pr, pv = _best(mine, key, lower)
        orow, ov = _best(others, key, lower)
        # Enqueue does not depend on the worker variant: name the system there.
        label = "system" if "enqueue" in name else "variant"
        out.append({"column": name, "pgfence": pv, "pgfence_variant": pr[label] if pr else None,
                    "best_peer": orow[label] if orow else None, "peer_value": ov,
                    "ratio": (pv / ov) if pv is not None and ov else None, "lower_is_better": lower,
                    "turn_ratios": (turn_ratios(TURNS[name](pr), TURNS[name](orow), TURN_KEYS[name])
                                    if name in TURNS and pr and orow else [])})
    return out


#: Where each column's runs are, each with its round (``turn``: the systems took turns,
#: bench/run.py), and the figure of a run.
TURNS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "single enqueue/s": lambda r: (r.get("single") or {}).get("each", []),
    "drain jobs/s": lambda r: r.get("drain_runs", []),
    "latency p50 ms": lambda r: (r.get("latency") or {}).get("each", []),
    "latency p95 ms": lambda r: (r.get("latency") or {}).get("each", []),
}
TURN_KEYS = {"single enqueue/s": "rate", "drain jobs/s": "rate", "latency p50 ms": "p50_ms",
             "latency p95 ms": "p95_ms"}


def turn_ratios(mine: list[dict[str, Any]], peer: list[dict[str, Any]], key: str = "rate") -> list[float]:
    """pgfence's figure over the peer's, round by round (the two ran minutes apart at
    most; a round either lost, or run before rounds were recorded, is left out)."""
    theirs = {r["turn"]: r[key] for r in peer if "turn" in r}
    return [r[key] / theirs[r["turn"]] for r in mine if r.get("turn") in theirs and theirs[r["turn"]]]


def with_spread(result: Optional[dict[str, Any]], key: str, digits: int) -> str:
    """A median with its min-max over the runs, when there was more than one run."""
    if not result:
        return "n/a"
    lo, hi = result.get(f"{key}_spread") or (None, None)
    more = f" ({fmt_num(lo, digits)}-{fmt_num(hi, digits)})" if result.get("runs", 1) > 1 and lo is not None else ""
    return fmt_num(result[key], digits) + more


def main_table(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> str:
    runs = "1 run (quick)" if cfg['drain_runs'] == 1 else f"median of {cfg['drain_runs']}"
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
        tr = x.get("turn_ratios") or []
        paired = (f"; turn by turn: median {fmt_num(median(tr), 2)} ({fmt_num(min(tr), 2)}-{fmt_num(max(tr), 2)},"
                  f" {len(tr)} turns)" if len(tr) > 1 else "")
        lines.append(f"| {x['column']} ({better}) | {fmt_num(x['pgfence'], digits)} ({x['pgfence_variant']}) |"
                     f" {fmt_num(x['peer_value'], digits)} ({x['best_peer']}) |"
                     f" {fmt_num(x['ratio'], 2) if x['ratio'] is not None else 'n/a'}{paired} |")
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


def pgfence_only_table(po: Optional[dict[str, Any]], cfg: dict[str, Any],
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
                     f" ({cfg['procs']} procs x {cfg['concurrency']}, prefetch {d['prefetch']}; median of {len(d['runs'])},"
                     f" database clock) | {fmt_num(d['rate'])} jobs/s (spread {fmt_num(d['spread'][0])}-"
                     f"{fmt_num(d['spread'][1])}; wall clock incl. process start {fmt_num(d['wall_rate'])})"
                     f"{capped} |")
    fl = po.get("latency_floor")
    if fl and "floor" in fl:
        f = fl["floor"]
        # (results before the asyncio worker joined the turns have the threaded worker only)
        workers = [("threaded worker", fl)] + ([("asyncio worker", fl["asyncio"])] if fl.get("asyncio") else [])

        def figures(name: str, w: dict[str, Any]) -> str:
            m = w["pgfence"]
            return (f"{name} p50 {m['p50_ms']:.1f} ms ({m['p50_ms_spread'][0]:.1f}-{m['p50_ms_spread'][1]:.1f}),"
                    f" p95 {m['p95_ms']:.1f} ms, p50 gap by round {', '.join(f'{g:+.2f}' for g in w['p50_gaps_ms'])} ms")
        lines.append(f"| latency against its floor, taking turns ({fl['rounds']} rounds, who goes first rotating,"
                     f" VACUUM (ANALYZE) + CHECKPOINT before each run): the floor is {fl['n']} bare `INSERT INTO"
                     f" pgfence.jobs` + NOTIFY at {fl['rate']:g}/s (the latency step's producer) and {fl['procs']} idle"
                     f" processes LISTENing, each claiming one job per notification with a bare one-row SKIP LOCKED"
                     f" UPDATE (bench/floor_claimer.py: no checks, no reclaim probe, no worker threads); pgfence is"
                     f" the latency step (prefetch {fl['prefetch']}) with {' and with '.join(n for n, _ in workers)} |"
                     f" floor p50 {f['p50_ms']:.1f} ms ({f['p50_ms_spread'][0]:.1f}-{f['p50_ms_spread'][1]:.1f}),"
                     f" p95 {f['p95_ms']:.1f} ms; {'; '.join(figures(n, w) for n, w in workers)} |")
        gaps = ", ".join(f"{n} {w['p50_gap_ms']:+.2f} ms" for n, w in workers)
        best_name, best = min(workers, key=lambda nw: nw[1]["p50_gap_ms"])
        lines.append(f"| latency target: pgfence's p50 within 0.3 ms of the floor's (the median of the rounds' gaps;"
                     f" pgfence's best worker, as in the peers' rows) |"
                     f" {'met by the ' + best_name if best['p50_gap_ms'] <= 0.3 else 'unmet'}: {gaps} |")
    elif fl:  # (results of an older bench/run.py: one floor run, no turns)
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
        lines.append(f"| churn: {ch['seconds']:.0f} s drain ({cfg['procs']} procs x {cfg['concurrency']}, prefetch"
                     f" {max(cfg['pgfence_prefetch'])}) with {ch['depth']:,} jobs kept queued, autovacuum_naptime"
                     f" {ch['naptime']}; claim+complete per {ch['window']:.0f} s window | median"
                     f" {fmt_num(ch['median_rate'])} jobs/s, min {fmt_num(ch['min_rate'])}, last"
                     f" {fmt_num(ch['last_rate'])}; pgfence.jobs: at most {ch['max_dead_rows']:,} dead rows, claim"
                     f" index {ch['claim_idx_mb_end']:.1f} MB at the end (indexes keep their size from earlier"
                     f" runs), {ch['autovacuum_passes']} autovacuum passes |")
    if len(churns) == 2 and churns[0]["median_rate"]:
        lines.append(f"| steady depth ratio: {churns[1]['depth']:,} vs {churns[0]['depth']:,} kept queued (median"
                     f" of the windows) | {churns[1]['median_rate'] / churns[0]['median_rate']:.2f} |")
    lines += soak_rows(po.get("soak"), cfg)
    for e in po.get("errors", []):
        lines.append(f"| error | {e} |")
    return "\n".join(lines)


def _mb(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x / 1e6:.1f}"


def _met(t: dict[str, Any]) -> str:
    return {True: "met", False: "unmet", None: "n/a"}[t["met"]]


def soak_rows(sk: Optional[dict[str, Any]], cfg: dict[str, Any]) -> list[str]:
    """The soak's rows of the pgfence-only table: its figures and its three targets."""
    if not sk:
        return []
    width = (f"history partitions {sk['partition_width']} wide" if sk["partitioned"] else
             "history partition width not set (no pgfence.set_history_partition_width)")
    if sk["history"]:
        per_job = sk["history_bytes_per_job"]
        history = (f"history {_mb(sk['history_bytes_end'])} MB at the end"
                   f" ({sk['history_rows_end']:,} rows, {fmt_num(per_job)} bytes/job),"
                   f" {sk['partitions_dropped']} partitions dropped")
    else:
        history = "no history table (pgfence.finished_jobs): done rows stay in pgfence.jobs until purged"
    tg = sk["targets"]
    a, b, c = tg["rate_held"], tg["hot_bounded"], tg["history_bounded"]
    lines = [
        f"| soak: {sk['seconds']:.0f} s drain ({cfg['procs']} procs x {cfg['concurrency']}, prefetch"
        f" {max(cfg['pgfence_prefetch'])}) with {sk['depth']:,} jobs kept queued, the queue's retention"
        f" {sk['retention']}, {width}; claim+complete per {sk['window']:.0f} s window | median"
        f" {fmt_num(sk['median_rate'])} jobs/s, last {fmt_num(sk['last_rate'])}; pgfence.jobs (heap + indexes"
        f" + TOAST) {_mb(sk['hot_bytes_mark'])} MB at {sk['mark_t']:.0f} s, {_mb(sk['hot_bytes_end'])} MB at the"
        f" end; {history}" + (f" (run again on its own at {sk['rerun']}, after a fix; the rest of this"
                                f" table is from the run above)" if sk.get("rerun") else "") + " |",
        f"| soak target: the last window's rate >= 90% of the median | {_met(a)}: {fmt_num(a['value'])} jobs/s"
        f" (at least {fmt_num(a['limit'])}) |",
        f"| soak target: pgfence.jobs at the end <= 1.2 x its size at {sk['mark_t']:.0f} s | {_met(b)}:"
        f" {_mb(b['value'])} MB (at most {_mb(b['limit'])}) |",
    ]
    if sk["history"]:
        span = (f"the {fmt_num(sk['span_jobs'])} jobs finished in its last {sk['span_seconds']:g} s"
                if sk.get("span_jobs") is not None else
                f"the soak is shorter than retention + one partition width, {sk['span_seconds']:g} s"
                if "span_seconds" in sk else "median rate x (retention + one partition width)")
        median_rate = (f"; with the median rate x {sk['span_seconds']:g} s instead, at most"
                       f" {_mb(sk['history_limit_median_rate'])} MB"
                       if sk.get("history_limit_median_rate") is not None else "")
        lines.append(f"| soak target: history at the end <= the jobs finished in the last retention + one partition"
                     f" width x bytes/job | {_met(c)}: {_mb(c['value'])} MB (at most {_mb(c['limit'])}: {span}"
                     f"{median_rate}) |")
    else:
        lines.append("| soak target: history at the end <= the jobs finished in the last retention + one partition"
                     " width x bytes/job | n/a: no history table |")
    lines += [f"| soak error | {e} |" for e in sk.get("errors", [])]
    return lines


def dashboard_table(db: Optional[dict[str, Any]]) -> str:
    """The dashboard's server time per page (bench/dashboard_pages.py): target p95 < 300 ms."""
    if not db or not db.get("pages"):
        return "Dashboard: not run." + (f" ({'; '.join(db['errors'])})" if db and db.get("errors") else "")
    lines = [f"{db['jobs']:,} jobs ({', '.join(f'{v:,} {k}' for k, v in db['plan'].items())}), "
             f"{db['pages'][0]['loads']} loads per page through the ASGI app in-process; target p95 < 300 ms.", "",
             "| page | path | p50 ms | p95 ms | max ms | p95 < 300 ms |", "|---|---|---:|---:|---:|---|"]
    for p in db["pages"]:
        lines.append(f"| {p['page']} | `{p['path']}` | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {p['max_ms']:.1f} |"
                     f" {'yes' if p['under_300ms'] else '**no**'} |")
    return "\n".join(lines)


def soak_table(po: Optional[dict[str, Any]]) -> str:
    """The soak's windows: rate, the hot table's and the history's sizes, partitions, dead rows."""
    sk = (po or {}).get("soak")
    if not sk:
        return "Soak: not run."
    lines = [f"Per {sk['window']:.0f} s window of the soak (t from the first worker's READY; sizes table-wide:"
             " pgfence.jobs heap + indexes + TOAST, and its heap and its indexes apart, the history's leaf"
             " partitions; dead rows of pgfence.jobs and autovacuum's passes over it in the window; rows"
             " routed to the default partition since the start, completions whose partition was not made in time;"
             " checkpoints begun in the window and WAL written per second, cluster-wide).",
             "", "| t s | jobs/s | pgfence.jobs MB | heap MB | indexes MB | history MB | partitions | dead rows"
             " | autovacuums | into default | checkpoints | WAL MB/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in sk["windows"]:
        hist, parts = (_mb(w["history_bytes"]), str(w["partitions"])) if sk["history"] else ("-", "-")
        heap = _mb(w["heap_bytes"]) if "heap_bytes" in w else "-"
        indexes = _mb(w["index_bytes"]) if "index_bytes" in w else "-"
        passes = f"{w['autovacuums']}" if "autovacuums" in w else "-"
        into_default = f"{w['into_default']:,}" if "into_default" in w else "-"
        ckpts = f"{w['checkpoints']}" if "checkpoints" in w else "-"
        wal = f"{w['wal_mb_s']:.1f}" if "wal_mb_s" in w else "-"
        lines.append(f"| {w['t']:.1f} | {fmt_num(w['rate'])} | {_mb(w['hot_bytes'])} | {heap} | {indexes} | {hist} |"
                     f" {parts} | {w['dead_rows']:,} | {passes} | {into_default} | {ckpts} | {wal} |")
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
             " a transaction rolled back (client time: one round trip, the list of queues sent as the Python client"
             " sends it, a long list as an array literal made once per list; median and p95). Extra locked: queued"
             " rows the claim held locks on beyond those it returned, counted from a second session while its"
             " transaction was open. queue_set: claim(queue_set => ...) naming a set of those names defined once"
             " with define_queue_set (nothing sent, parsed or checked per call but the name). Ratio: to the same"
             " claim (queues => NULL) from one queue holding the same jobs, same version.", "",
             "| version | queues | queues => | median ms | p95 ms | returned | extra rows locked | ratio to 1 queue |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for v in versions:
        base = cases.get((v, 1, "NULL"))
        for (vv, n, shape), c in sorted(cases.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if vv != v:
                continue
            ratio = f"{c['median_ms'] / base['median_ms']:.2f}" if base and base["median_ms"] else "-"
            what = {"NULL": "NULL", "set": f"queue_set of all {n:,}"}.get(shape, f"all {n:,} names")
            lines.append(f"| {v} | {n:,} | {what} | {c['median_ms']:.2f} | {c['p95_ms']:.2f} | {c['returned']} |"
                         f" {c['locked_extra']:,} | {ratio} |")
    cq = (po or {}).get("capped")
    if cq and cq.get("rate"):
        lines += ["", f"A capped queue (`set_queue_limit` {cq['cap']}; {cq['connections']} connections each looping"
                      f" over claim {cq['max_jobs']}, a {cq['hold_s'] * 1000:.0f} ms hold and complete_many,"
                      f" {cq['seconds']:.1f} s): {cq['rate']:,.0f} jobs/s against cap / hold ="
                      f" {cq['expected_rate']:,.0f}; at most {cq['max_running']} running in {cq['samples']:,}"
                      f" samples (cap {cq['cap']}); {cq['empty_claims']:,} claims found the cap full; jobs handed"
                      f" out twice: {cq['duplicates']}" + (f"; errors: {len(cq['errors'])}" if cq.get("errors") else "")
                      + "."]
    rq = (po or {}).get("rated")
    if rq and rq.get("rate"):
        lines += ["", f"A rate-limited queue (`set_queue_rate_limit` {rq['max_claims']} per {rq['per_s']:g} s;"
                      f" {rq['connections']} connections each looping over claim {rq['max_jobs']} and complete_many,"
                      f" {rq['seconds']:.1f} s): {rq['rate']:,.1f} claims/s after the first interval against the"
                      f" limit's {rq['limit_rate']:,.0f}/s (ratio {rq['ratio']:.3f}); {rq['first_interval']:,} in the"
                      f" first interval (a full bucket allows up to {2 * rq['max_claims']:,}); {rq['empty_claims']:,}"
                      " claims came back empty" + (f"; errors: {len(rq['errors'])}" if rq.get("errors") else "")
                      + "."]
    c64 = (po or {}).get("claims_64")
    if c64 and c64.get("median_ms") is not None:
        lines += ["", f"From {c64['connections']} worker connections at once (each a loop of claim"
                      f" {c64['max_jobs']} + complete_many on one queue of {c64['jobs']:,}, {c64['seconds']:.1f} s):"
                      f" {c64['rate']:,.0f} jobs/s, claim median {c64['median_ms']:.2f} ms, p95"
                      f" {c64['p95_ms']:.2f} ms over {c64['claims']:,} claims; jobs handed out twice:"
                      f" {c64['duplicates']}" + (f"; errors: {len(c64['errors'])}" if c64.get("errors") else "") + "."]
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    """BENCHMARKS.md for one run's results (what run.py writes to bench/results/latest.json)."""
    cfg = results["config"]
    m = results["machine"]
    rows = results["rows"]
    st = m["pg_settings"]
    peer_versions = results["versions"]
    runs_note = ("QUICK mode: every measurement is ONE run (no median, no spread)." if cfg['quick'] else
                 f"Drain: median of {cfg['drain_runs']} runs, spread = min-max; single enqueue: median of"
                 f" {cfg.get('single_turns', cfg['single_runs'])} turns, latency: median of {cfg['single_runs']} runs,"
                 " (min-max) after each; batch enqueue: median over the drain runs' pre-fills.")
    md = [
        "# pgfence benchmarks",
        "",
        f"Generated by `bench/run.py{' --quick' if cfg['quick'] else ''}` (`make bench{' QUICK=1' if cfg['quick'] else ''}`)"
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
        f"- Worker shape for every system: {cfg['procs']} worker OS processes x concurrency {cfg['concurrency']},"
        " no-op handler. Each peer in its own database (bench_pgqueuer, bench_procrastinate, bench_graphile)"
        " with the schema installed by its own tooling; pgfence in its deployed database, a fresh queue per"
        " run, jobs deleted and VACUUMed after each run; peer tables truncated + VACUUM between runs."
        " \"pgfence (Node worker)\": the same drain by the Node.js worker (clients/node) in the largest prefetch's"
        " shape, reported beside the threaded worker's (drain only; not in the ratios).",
        f"- single enqueue/s: {cfg['single_n']:,} sequential single enqueues from one client connection, after"
        f" the drains, the systems taking turns ({cfg.get('single_turns', cfg['single_runs'])} rounds, who goes first"
        " rotating; median, min-max; the ratio to the best peer also turn by turn)"
        " (pgfence: `Client.enqueue('noop', {'i': i}, queue=...)` on `Client.connect(dsn, max_size=1)`, each"
        " call committed; pgqueuer: `Queries.enqueue` on one asyncpg connection).",
        f"- batch enqueue/s: {cfg['drain_n']:,} jobs in batches of {cfg['batch']:,} through the system's batch API"
        " (pgfence: `pgfence.enqueue_many`), measured as the pre-fill of each drain run.",
        f"- drain jobs/s: {cfg['drain_n']:,} queued no-op jobs; then the same settle step for every system"
        " (VACUUM (ANALYZE) of its tables, CHECKPOINT, wait for running autovacuum workers to finish);"
        f" then {cfg['procs']} worker processes start;"
        " time from the first worker's READY (printed right before the library's run()) until the database"
        f" shows all {cfg['drain_n']:,} finished (count polled every 20-500 ms, adaptive, so the end is caught"
        " within ~20 ms without loading the server). A drain is capped at"
        f" {cfg['drain_timeout']:.0f} s (later runs of a variant that hit the cap:"
        f" {min(cfg['drain_timeout'], cfg['drain_timeout_after_cap']):.0f} s): a capped run reports"
        " finished/elapsed and is marked 'capped'. The systems take turns: round i runs one drain of every row,"
        " who goes first rotating (the ratio to the best peer also round by round).",
        "- pgfence (asyncio worker): the shape of pgfence's largest prefetch, the worker processes running"
        " `pgfence.aio.AsyncWorker` with an `async def` no-op handler instead of `pgfence.Worker` (reported"
        " beside the threaded worker; nothing is asserted about it).",
        f"- latency: idle workers, {cfg['lat_n']} jobs enqueued at {cfg['lat_rate']:g}/s, payload carries"
        " time.time() at enqueue; the handler records now - t. p50/p95 over the jobs of a run, with fresh"
        f" workers; the median of {cfg['single_runs']} runs, the systems taking turns as in the drain.",
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
        "### Soak",
        "",
        soak_table(results.get("pgfence_only")),
        "",
        "### Claims over many queues",
        "",
        claims_table(results.get("pgfence_only")),
        "",
        "### Dashboard pages",
        "",
        dashboard_table(results.get("dashboard")),
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
    others = [r for r in rows if not r["system"].startswith("pgfence")]  # (pgfence-node: beside, not a peer)
    pr, pv = _best(mine, COLUMNS[2][1])
    orow, ov = _best(others, COLUMNS[2][1])
    n = f"{pv:.0f}" if pv is not None else "n/a"
    m = f"{ov:.0f}" if ov is not None else "n/a"
    name = orow["variant"] if orow else "none"
    r = f"{pv / ov:.2f}" if pv is not None and ov else "n/a"
    return f"drain: pgfence {n} jobs/s, best peer {name} {m} jobs/s, ratio {r}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", type=Path, default=RESULTS_DIR / "latest.json",
                    help="a run's results (default: bench/results/latest.json)")
    ap.add_argument("-o", "--out", type=Path, help="write the Markdown here (default: stdout)")
    a = ap.parse_args(argv)
    md = render(json.loads(a.results.read_text()))
    if a.out is None:
        sys.stdout.write(md)
    else:
        a.out.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
