"""What each write of a job's life costs the database: time and WAL per job, step by step.

    .venv/bin/python bench/row_costs.py [--jobs 100000] [--to TAG]      (make db first)

In a scratch database of its own (bench_row_costs, recreated, dropped after), with its
sweeper paused: enqueue_many (1,000 per call), claim (500 per call), complete_many (500
per call), then purge_finished (10,000 per call) of the same jobs (their queue's retention is 0; with
the history, whose partitions the purge drops whole, the partitions holding them are
ended first, as the clock would end them); a CHECKPOINT before
each step, so each step's WAL includes the full-page images a real run also writes
after checkpoints. Prints microseconds and WAL bytes per job per step, and the tables'
sizes and dead rows after the completes. --to TAG deploys the plan up to that tag instead of the whole plan
(to compare a version with this one on the same machine). Time is client-observed on one connection
(no worker process); WAL bytes do not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgfence_bench as pf  # noqa: E402
from common import connect, dsn_for_db, scratch_database  # noqa: E402
from run import default_dsn  # noqa: E402

DB = "bench_row_costs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--to", default=None, help="deploy up to this tag (default: the whole plan)")
    args = ap.parse_args()
    n = args.jobs
    admin = dsn_for_db(default_dsn(), "postgres")
    with scratch_database(admin, DB) as dsn:
        pf._deploy(dsn, args.to)
        with connect(dsn) as c:
            c.execute("SELECT pgfence.pause_sweeper()")
            c.execute("SELECT pgfence.set_retention('q', '0 seconds', '0 seconds')")
            history = bool(c.execute("SELECT to_regclass('pgfence.finished_jobs') IS NOT NULL").fetchone()[0])  # type: ignore[index]
            tokens: list[tuple[int, Any]] = []

            def step(name: str, fn: Callable[[], None]) -> None:
                c.execute("CHECKPOINT")
                start = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                t0 = time.perf_counter()
                fn()
                secs = time.perf_counter() - t0
                wal = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)).fetchone()[0]  # type: ignore[index]
                print(f"{name:30s} {secs * 1e6 / n:8.1f} us/job {float(wal) / n:8.1f} WAL bytes/job", flush=True)

            def enqueue() -> None:
                for s in range(0, n, 1000):
                    k = min(1000, n - s)
                    c.execute("SELECT count(*) FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[%s]),"
                              " queue => 'q')", (k,))

            def claim() -> None:
                for _ in range(0, n, 500):
                    tokens.extend(c.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY['q'],"
                                            " '1 hour', 500)").fetchall())

            def complete() -> None:
                for s in range(0, len(tokens), 500):
                    part = tokens[s:s + 500]
                    c.execute("SELECT count(*) FROM pgfence.complete_many(%s::bigint[], %s::uuid[])",
                              ([p[0] for p in part], [p[1] for p in part]))

            def purge() -> None:
                while c.execute("SELECT pgfence.purge_finished(10000)").fetchone()[0] > 0:  # type: ignore[index]
                    pass

            step("enqueue_many (1,000/call)", enqueue)
            step("claim (500/call)", claim)
            step("complete_many (500/call)", complete)
            c.execute("VACUUM ANALYZE pgfence.jobs")
            row = c.execute("SELECT pg_total_relation_size('pgfence.jobs'), pg_total_relation_size('pgfence.attempts'),"
                            " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'pgfence.jobs'::regclass),"
                            " (SELECT avg(pg_column_size(j.*))::int FROM pgfence.jobs j),"
                            " (SELECT avg(pg_column_size(a.*))::int FROM pgfence.attempts a)").fetchone()
            assert row is not None
            print(f"after the completes and a VACUUM: pgfence.jobs {row[0] / 1e6:.1f} MB ({row[2]:,} dead rows),"
                  f" pgfence.attempts {row[1] / 1e6:.1f} MB; row sizes: jobs {row[3]} B, attempts {row[4]} B")
            if history:
                h = c.execute("SELECT (SELECT sum(pg_total_relation_size(t.relid)) FROM"
                              "         pg_partition_tree('pgfence.finished_jobs') t WHERE t.isleaf),"
                              " (SELECT avg(pg_column_size(h.*))::int FROM pgfence.finished_jobs h),"
                              " (SELECT count(*) FROM pgfence.finished_jobs)").fetchone()
                assert h is not None
                print(f"history: pgfence.finished_jobs {float(h[0]) / 1e6:.1f} MB for {h[2]:,} jobs"
                      f" ({float(h[0]) / max(int(h[2]), 1):.0f} B per job with its index), row size {h[1]} B")
                # (their retention is 0: end the partitions they are in, as the clock would)
                c.execute("UPDATE pgfence.history_partitions SET upper_bound = lower_bound + interval '1 microsecond'"
                          " WHERE lower_bound <= clock_timestamp()")
            step("purge_finished (10,000/call)", purge)
    return 0


if __name__ == "__main__":
    sys.exit(main())
