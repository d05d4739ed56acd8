#!/usr/bin/env python3
"""Dashboard page timings: every page's server time over N loads, with 1,000,000 jobs.

Fills a scratch database of its own (``bench_dashboard`` on the bench's server, made
anew and deployed with sqitch) through the SQL API: done jobs (claim + complete_many,
so they are in the history), queued, failed (a few distinct errors) and manual_review
jobs over 20 queues; then loads each page ``loads`` times through the ASGI app
in-process (Starlette's TestClient: no network, no browser), and reports p50/p95/max
of the server time per page. The target is p95 < 300 ms per page with 1,000,000 jobs
(not asserted: a benchmark, `make bench`'s optional step ``dashboard``).

    .venv/bin/python bench/dashboard_pages.py [--jobs 1000000] [--loads 20] [--dsn ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import connect, dsn_for_db, log, recreate_database  # noqa: E402

DB = "bench_dashboard"
QUEUES = 20
ERRORS = ("smtp 550 mailbox full", "timeout after 30 s", "http 503 from upstream", "invalid address")


def fill(dsn: str, jobs: int) -> dict[str, int]:
    """jobs in all: 90% done, 5% queued, 4% failed, 1% manual_review."""
    plan = {"done": jobs * 90 // 100, "failed": jobs * 4 // 100, "manual_review": jobs // 100}
    plan["queued"] = jobs - sum(plan.values())
    with connect(dsn) as c:
        c.execute("SELECT pgfence.pause_sweeper()")  # (our short leases: reclaimed here, not by the sweeper)
        n = 0
        for status, count in plan.items():
            done = 0
            while done < count:
                k = min(10_000, count - done)
                q = f"q{n % QUEUES:02d}"
                n += 1
                policy = "manual" if status == "manual_review" else "auto"
                c.execute("SELECT count(*) FROM pgfence.enqueue_many(kinds => %s, payloads => NULL, queue => %s,"
                          " max_attempts => 1, recovery_policy => %s)",
                          ([f"kind{i % 5}" for i in range(k)], f"{q}-{status}" if status != "queued" else q,
                           policy))
                if status != "queued":
                    left = k
                    while left > 0:
                        lease = "1 millisecond" if status == "manual_review" else "5 minutes"
                        if status == "done":
                            step = ("SELECT count(*) FROM pgfence.complete_many((SELECT array_agg(id) FROM c),"
                                    " (SELECT array_agg(attempt_token) FROM c))")
                        elif status == "failed":
                            step = ("SELECT count(*) FROM pgfence.fail_many((SELECT array_agg(id) FROM c),"
                                    " (SELECT array_agg(attempt_token) FROM c),"
                                    " (SELECT array_agg(%(err)s::text) FROM c))")
                        else:
                            step = "SELECT count(*) FROM c"
                        got = c.execute(
                            "WITH c AS MATERIALIZED (SELECT id, attempt_token FROM pgfence.claim(worker_id => 'bench',"
                            " queues => ARRAY[%(q)s], lease => %(lease)s::interval, max_jobs => 1000)) " + step,
                            {"q": f"{q}-{status}", "lease": lease, "err": ERRORS[n % len(ERRORS)]}).fetchone()
                        if not got or not got[0]:
                            break
                        left -= int(got[0])
                    if status == "manual_review":
                        time.sleep(0.01)
                        while c.execute("SELECT count(*) FROM pgfence.reclaim_expired(max_jobs => 10000)"
                                        ).fetchone()[0]:  # type: ignore[index]
                            pass
                done += k
            log(f"dashboard bench: {count:,} {status}")
        c.execute("SELECT pgfence.resume_sweeper()")
        # The history's counts as the background sweeper's purges keep them (every 10 s,
        # where it runs): purges until they hold every job filled, as they would a
        # minute after the fill.
        last = c.execute("SELECT max(finished_at) FROM pgfence.finished_jobs").fetchone()[0]  # type: ignore[index]
        for _ in range(50):
            c.execute("SELECT pgfence.purge_finished(10000)")
            if c.execute("SELECT counted_to > %s FROM pgfence.history_count_state", (last,)).fetchone()[0]:  # type: ignore[index]
                break
            time.sleep(0.1)
        c.execute("VACUUM ANALYZE")
    return plan


def time_pages(dsn: str, loads: int, only: Optional[set[str]] = None) -> list[dict[str, Any]]:
    from psycopg_pool import ConnectionPool
    from starlette.testclient import TestClient

    from pgfence.dashboard.app import Config, create_app

    with connect(dsn) as c:
        mid = c.execute("SELECT max(id) / 2 FROM pgfence.jobs").fetchone()[0]  # type: ignore[index]
        done_id = c.execute("SELECT id FROM pgfence.finished_jobs LIMIT 1").fetchone()[0]  # type: ignore[index]
        manual_id = c.execute("SELECT id FROM pgfence.jobs WHERE status = 'manual_review' LIMIT 1"
                              ).fetchone()[0]  # type: ignore[index]
    pages = {
        "overview": "/", "overview live": "/overview/live", "inbox": "/inbox", "jobs": "/jobs",
        "jobs queue+state": "/jobs?queue=q03-done&status=done", "jobs page (keyset)": f"/jobs?before={mid}",
        "jobs by key": "/jobs?key=nope", "jobs error text (1 day)": "/jobs?error=timeout",
        "job detail (done)": f"/jobs/{done_id}", "job detail (manual)": f"/jobs/{manual_id}",
        "dead letter": "/dead", "queues": "/queues", "audit": "/audit", "metrics": "/metrics",
    }
    pool = ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    out = []
    try:
        client = TestClient(create_app(pool, Config(token=None)), base_url="http://127.0.0.1")
        for name, path in pages.items():
            if only and name not in only:
                continue
            times = []
            for _ in range(loads):
                t0 = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
            times.sort()
            p95 = times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]
            row = {"page": name, "path": path, "loads": loads, "p50_ms": times[len(times) // 2], "p95_ms": p95,
                   "max_ms": times[-1], "under_300ms": p95 < 300}
            log(f"  {name:26} p50 {row['p50_ms']:7.1f} ms  p95 {p95:7.1f} ms  max {times[-1]:7.1f} ms")
            out.append(row)
    finally:
        pool.close()
    return out


def run(admin_dsn: str, jobs: int = 1_000_000, loads: int = 20) -> dict[str, Any]:
    """The dashboard step of make bench: a fresh bench_dashboard database, filled, timed."""
    from pgfence_bench import _deploy
    recreate_database(admin_dsn, DB)
    dsn = dsn_for_db(admin_dsn, DB)
    _deploy(dsn)
    t0 = time.perf_counter()
    plan = fill(dsn, jobs)
    fill_s = time.perf_counter() - t0
    log(f"dashboard bench: {jobs:,} jobs in {fill_s:.0f} s; {loads} loads per page")
    return {"jobs": jobs, "plan": plan, "fill_seconds": fill_s, "pages": time_pages(dsn, loads)}


def main() -> int:
    from common import REPO
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="the bench server (default: scripts/pg.sh dsn)")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--loads", type=int, default=20)
    ap.add_argument("--time-only", action="store_true",
                    help="time the pages of the bench_dashboard database as it is (no refill)")
    ap.add_argument("--pages", help="comma-separated page names to time (default: all)")
    a = ap.parse_args()
    dsn = a.dsn
    if not dsn:
        import subprocess
        dsn = subprocess.run([str(REPO / "scripts" / "pg.sh"), "dsn"], capture_output=True, text=True,
                             check=True).stdout.strip()
    if a.time_only:
        only = set(a.pages.split(",")) if a.pages else None
        print(json.dumps(time_pages(dsn_for_db(dsn, DB), a.loads, only), indent=2, default=str))
        return 0
    print(json.dumps(run(dsn, a.jobs, a.loads), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
