"""How fast the storage upgrades run, and how long they hold up the queue (make db first).

    .venv/bin/python bench/upgrade_rate.py [--step history|keys] [--jobs 200000]

In a scratch database of its own (bench_upgrade, recreated, dropped after):

- `--step history` (the default): deploy the plan up to @v0.5.0 (done jobs kept in
  pgfence.jobs), write --jobs done jobs with one attempt each (a set-based INSERT as
  the superuser, the rows the old complete wrote), then time `sqitch deploy`
  (data/finished_jobs moves them into pgfence.finished_jobs, 10,000 per committed
  transaction) and `sqitch revert --to @v0.5.0` (moves them back).
- `--step keys`: deploy up to @v0.6.0, write --jobs queued jobs, a tenth of them with
  an ended attempt and a refusal (the rows that get a queue), then time `sqitch deploy`
  (data/job_queue_keys: the fill, NOT NULL, the indexes built CONCURRENTLY and the
  primary keys swapped under ACCESS EXCLUSIVE) and `sqitch revert --to @v0.6.0`.

Meanwhile a second connection enqueues and claims one job after another on another
queue (every 10 ms) and reports its slowest call: how long the queue was held.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgfence_bench as pf  # noqa: E402
from common import connect, dsn_for_db, scratch_database  # noqa: E402
from run import default_dsn  # noqa: E402

DB = "bench_upgrade"


def write_live_jobs(c: Any, n: int) -> None:
    """n queued jobs; every tenth with a failed attempt behind it and a refused call (the
    rows of pgfence.attempts and pgfence.rejections written before they carried queue)."""
    c.execute("""
        WITH j AS (
            INSERT INTO pgfence.jobs (queue, kind, payload, status, attempts, max_attempts)
            SELECT 'held', 'k', jsonb_build_object('i', g), 'queued', (g %% 10 = 0)::int, 5
              FROM generate_series(1, %s) g
            RETURNING id, attempts),
        a AS (
            INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, ended_at, outcome, error)
            SELECT id, 1, gen_random_uuid(), 'w', clock_timestamp() - interval '1 minute', clock_timestamp(),
                   'failed', 'boom'
              FROM j WHERE attempts = 1
            RETURNING job_id, attempt_token)
        INSERT INTO pgfence.rejections (job_id, attempt_token, operation, caller, slot)
        SELECT job_id, attempt_token, 'complete', 'w', 1 FROM a""", (n,))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--step", choices=("history", "keys"), default="history")
    args = ap.parse_args()
    n = args.jobs
    tag = "@v0.5.0" if args.step == "history" else "@v0.6.0"
    admin = dsn_for_db(default_dsn(), "postgres")
    with scratch_database(admin, DB) as dsn:
        pf._deploy(dsn, tag)
        with connect(dsn) as c:
            c.execute("SELECT pgfence.pause_sweeper()")
            if args.step == "keys":
                write_live_jobs(c, n)
            else:
                c.execute("""
                    WITH j AS (
                        INSERT INTO pgfence.jobs (queue, kind, payload, status, attempts, attempt_token, reserved_by,
                                                  reserved_at, finished_at, result)
                        SELECT 'moved', 'k', jsonb_build_object('i', g), 'done', 1, gen_random_uuid(), 'w',
                               clock_timestamp() - interval '1 minute', clock_timestamp(), '{"ok": true}'
                          FROM generate_series(1, %s) g
                        RETURNING id, attempt_token, reserved_at, finished_at)
                    INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, ended_at, outcome)
                    SELECT id, 1, attempt_token, 'w', reserved_at, finished_at, 'done' FROM j""", (n,))
            c.execute("VACUUM ANALYZE pgfence.jobs")
            c.execute("VACUUM ANALYZE pgfence.attempts")
        rows = "done jobs" if args.step == "history" else "queued jobs"
        moved = (("move into the history", "move back") if args.step == "history"
                 else ("queue into the keys", "the keys without queue"))
        steps = ((f"deploy ({moved[0]})", ("deploy",)),
                 (f"revert --to {tag} ({moved[1]})", ("revert", "-y", "--to", tag)))
        for what, sqitch_args in steps:
            slowest = [0.0]
            calls = [0]
            stop = threading.Event()

            def queue_goes_on() -> None:
                with connect(dsn) as q:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        q.execute("SELECT pgfence.enqueue('k', queue => 'live')")
                        q.execute("SELECT count(*) FROM pgfence.claim('w', ARRAY['live'], '1 minute', 1)")
                        slowest[0] = max(slowest[0], time.perf_counter() - t0)
                        calls[0] += 1
                        time.sleep(0.01)

            t = threading.Thread(target=queue_goes_on, daemon=True)
            t.start()
            t0 = time.perf_counter()
            r = pf.sqitch_run(dsn, *sqitch_args)
            secs = time.perf_counter() - t0
            stop.set()
            t.join(30)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                return 1
            print(f"{what}: {secs:.1f} s for {n:,} {rows} ({n / secs:,.0f} jobs/s, the whole sqitch run);"
                  f" meanwhile {calls[0]} enqueue+claim pairs, slowest {slowest[0] * 1000:.0f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
