"""Where an idle claim's and a single enqueue's server time goes, statement by statement.

    .venv/bin/python bench/statement_profile.py [--calls 1500]      (make db first)

In a scratch database of its own (bench_statement_profile, recreated, dropped after;
sweeper paused), plpgsql_check's profiler times every statement of pgfence.enqueue and
pgfence.claim while a loop runs `--calls` times: enqueue one job, claim it (one queue,
max_jobs 8, a fresh request id, as an idle worker's claim after a wake-up), complete
it. Twice: each call committed on its own (autocommit, as a producer's enqueue and a
worker's claim are), then the same loop in one transaction. Prints, per statement
that ran, microseconds per execution in both runs (a statement's time includes the
statements nested in it: an IF holds its branch). What the two runs differ by is what a
statement costs once per transaction: PL/pgSQL initializes a simple expression again
in every transaction, so a large one (an argument check into which the *_ok predicates
are inlined) costs more in autocommit. Measured with the profiler's own overhead on
every statement: compare the rows, not the totals with other tools. Needs the
plpgsql_check extension (`make setup` installs it; the script says so without it).
"""
from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgfence_bench as pf  # noqa: E402
from common import connect, dsn_for_db, scratch_database  # noqa: E402
from run import default_dsn  # noqa: E402

DB = "bench_statement_profile"
FUNCTIONS = {
    "enqueue": "pgfence.enqueue(text,jsonb,text,integer,timestamptz,integer,text,text,interval,interval)",
    "claim": "pgfence.claim(text,text[],interval,integer,uuid,text)",
}
CLAIM = ("SELECT id, attempt_token FROM pgfence.claim(worker_id => 'profile', queues => ARRAY['profile'],"
         " lease => interval '30 seconds', max_jobs => 8, request_id => %s)")


def run_loop(c: Any, calls: int) -> None:
    for _ in range(calls):
        c.execute("SELECT pgfence.enqueue(kind => 'noop', payload => '{}'::jsonb, queue => 'profile')", prepare=True)
        for job_id, token in c.execute(CLAIM, (uuid.uuid4(),), prepare=True).fetchall():
            c.execute("SELECT pgfence.complete(%s, %s)", (job_id, token), prepare=True)


def profile(c: Any) -> dict[str, dict[int, tuple[float, str]]]:
    out: dict[str, dict[int, tuple[float, str]]] = {}
    for name, sig in FUNCTIONS.items():
        rows = c.execute("SELECT lineno, total_time / exec_stmts * 1000, source FROM plpgsql_profiler_function_tb(%s)"
                         " WHERE exec_stmts > 0 ORDER BY lineno", (sig,)).fetchall()
        out[name] = {line: (us, src) for line, us, src in rows}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1500)
    args = ap.parse_args()
    admin = dsn_for_db(default_dsn(), "postgres")
    with scratch_database(admin, DB) as dsn:
        pf._deploy(dsn, None)
        with connect(dsn) as c:
            if c.execute("SELECT NOT EXISTS (SELECT FROM pg_available_extensions"
                         " WHERE name = 'plpgsql_check')").fetchone()[0]:  # type: ignore[index]
                raise SystemExit("statement_profile: the plpgsql_check extension is not installed (make setup)")
            c.execute("SELECT pgfence.pause_sweeper()")
            c.execute("CREATE EXTENSION plpgsql_check")
            c.execute("LOAD 'plpgsql_check'")
            c.execute("SET plpgsql_check.profiler = on")
            run_loop(c, 50)  # (warm-up: plans cached, not kept)
            runs = {}
            for label in ("autocommit", "one transaction"):
                c.execute("SELECT plpgsql_profiler_reset_all()")
                if label == "autocommit":
                    run_loop(c, args.calls)
                else:
                    with c.transaction():
                        run_loop(c, args.calls)
                runs[label] = profile(c)
        print(f"server time per statement execution, us ({args.calls} enqueue + claim + complete;"
              " a statement's time includes what is nested in it)")
        for name in FUNCTIONS:
            auto, one = runs["autocommit"][name], runs["one transaction"][name]
            print(f"\n{name}\n{'line':>5s} {'autocommit':>11s} {'one tx':>8s} {'diff':>7s}  statement")
            for line in sorted(auto):
                a_us, src = auto[line]
                o_us = one.get(line, (float("nan"), ""))[0]
                text = " ".join(src.split())[:80]
                print(f"{line:5d} {a_us:11.1f} {o_us:8.1f} {a_us - o_us:+7.1f}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
