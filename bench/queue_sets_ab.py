"""A claim over many queues named one by one against the same names stored as a set.

    .venv/bin/python bench/queue_sets_ab.py [--queues 10000] [--rounds 9] [--calls 40]      (make db first)

In a scratch database of its own (bench_queue_sets, recreated, dropped after), 100,000
jobs spread evenly over --queues queues; the same claim of 10 three ways: from one
queue (a list of one name), from the explicit list of all the queues (sent as the Python
client sends a long list: an array literal made once), and from the set of those names
stored once with define_queue_set (claim(queue_set => ...)). Each call in a transaction
rolled back (every call sees the same table), client time (one round trip). Every round
runs --calls calls of each case, the order reversed every other round; prints each
case's median of round medians with the rounds' range, and the ratios to one queue
round by round (median and range).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python_client"))

import pgfence_bench as pf  # noqa: E402
from common import connect, dsn_for_db, scratch_database  # noqa: E402
from pgfence.calls import queue_param  # noqa: E402
from run import default_dsn  # noqa: E402

DB = "bench_queue_sets"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    admin = dsn_for_db(default_dsn(), "postgres")
    with scratch_database(admin, DB) as dsn:
        pf._deploy(dsn, None)
        names = [f"q{i:05d}" for i in range(args.queues)]
        with connect(dsn) as c:
            c.execute("INSERT INTO pgfence.jobs (queue, kind) SELECT (%s::text[])[1 + g %% %s], 'k'"
                      " FROM generate_series(0, 99999) g", (names, args.queues))
            c.execute("VACUUM (ANALYZE) pgfence.jobs")
            c.execute("SELECT pgfence.define_queue_set('bench-set', %s::text[])", (queue_param(names),))
        claim = "SELECT count(*) FROM pgfence.claim('bench', %s::text[], '30 seconds', 10"
        cases = {"one queue": (claim + ")", (names[:1],)),
                 f"list of {args.queues:,}": (claim + ")", (queue_param(names),)),
                 f"set of {args.queues:,}": (claim + ", queue_set => 'bench-set')", (None,))}
        rounds: dict[str, list[float]] = {k: [] for k in cases}
        with connect(dsn, autocommit=False) as c:
            for r in range(args.rounds):
                for k in (list(cases) if r % 2 == 0 else list(reversed(cases))):
                    query, params = cases[k]
                    times = []
                    for _ in range(args.calls):
                        t = time.perf_counter()
                        got = c.execute(query, params).fetchone()
                        times.append(time.perf_counter() - t)
                        c.rollback()
                        assert got == (10,), (k, got)
                    rounds[k].append(statistics.median(times) * 1000)
        for k, v in rounds.items():
            print(f"{k:16s} {statistics.median(v):.3f} ms (round medians {min(v):.3f}-{max(v):.3f})")
        for k in list(cases)[1:]:
            ratio = [a / b for a, b in zip(rounds[k], rounds["one queue"])]
            print(f"{k} / one queue: {statistics.median(ratio):.2f} (rounds {min(ratio):.2f}-{max(ratio):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
