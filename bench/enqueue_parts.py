"""Where a single enqueue's server time goes: pgfence.enqueue beside copies of it with one
part taken out, each call in a transaction of its own (as a committed enqueue is).

    .venv/bin/python bench/enqueue_parts.py [--calls 300] [--rounds 10]      (make db first)

In a scratch database of its own (bench_enqueue_parts, recreated, dropped after; sweeper
paused) the deployed pgfence.enqueue is copied (pg_get_functiondef) into schema
enqueue_parts as variants: `as_is` (the copy itself), `no_checks` (without the
expression that checks every argument), `no_tag` (NOTIFY with a fixed payload instead of
the queue's wake-up tag, which reads pgfence.secret_key), `no_timeout` (without the look-up
of the queue's default timeout), `no_notify`; beside them `insert_only`, a PL/pgSQL
function doing only the INSERT into pgfence.jobs, and `insert_no_check`, the same into a
copy of pgfence.jobs without its row-rules CHECK. Every round runs `--calls` calls of each
(order reversed every other round) as `EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON)` in
autocommit, and keeps the server's execution time of each call: no round trip, no
client, no commit. Prints each variant's median, quartiles, and difference to `as_is`.
A copy may run faster than the deployed function (it is not behind the privilege rule's
SECURITY DEFINER wrapper in the same way, nor compiled first): compare the variants with
`as_is`, not with pgfence.enqueue.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgfence_bench as pf  # noqa: E402
from common import connect, dsn_for_db, scratch_database  # noqa: E402
from run import default_dsn  # noqa: E402

DB = "bench_enqueue_parts"
CHECKS = "    v_bad := NOT coalesce(pgfence._name_ok(kind)"
TIMEOUT = "    -- The run timeout"
TAG = "pg_notify('pgfence_enqueue', pgfence._wakeup_tag(enqueue.queue))"
LOOKUP = "SELECT t.timeout INTO v_timeout FROM pgfence.queue_timeouts t WHERE t.queue = enqueue.queue;"
NOTIFY_FAST = "PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(enqueue.queue));\n        RETURN v_id;"


def variants(src: str) -> dict[str, str]:
    """The copies of enqueue's definition, each with one part out (named *.enqueue.* still)."""
    for needle in (CHECKS, TIMEOUT, TAG, LOOKUP, NOTIFY_FAST):
        if needle not in src:
            raise SystemExit(f"enqueue_parts: pgfence.enqueue no longer has {needle!r}: update the variants")
    out = {"as_is": src,
           "no_checks": src[:src.index(CHECKS)] + src[src.index(TIMEOUT):],
           "no_tag": src.replace(TAG, "pg_notify('pgfence_enqueue', '0123456789abcdef')"),
           "no_timeout": src.replace(LOOKUP, "v_timeout := NULL;"),
           "no_notify": src.replace(NOTIFY_FAST, "RETURN v_id;")}
    # (each a function of its own name, whose parameters are still referred to as enqueue.x)
    return {name: body.replace("FUNCTION pgfence.enqueue(", f"FUNCTION enqueue_parts.{name}(")
                      .replace("enqueue.", f"{name}.")
            for name, body in out.items()}


INSERT_ONLY = """
CREATE FUNCTION enqueue_parts.{name}(kind text, payload jsonb, queue text) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_id bigint;
BEGIN
    INSERT INTO {table} (queue, kind, payload) VALUES ({name}.queue, {name}.kind, {name}.payload)
    RETURNING id INTO v_id;
    RETURN v_id;
END $$"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    admin = dsn_for_db(default_dsn(), "postgres")
    with scratch_database(admin, DB) as dsn:
        pf._deploy(dsn, None)
        with connect(dsn) as c:
            c.prepare_threshold = None  # (EXPLAIN text sent as is; planning is not in the execution time)
            c.execute("SELECT pgfence.pause_sweeper()")
            c.execute("CREATE SCHEMA enqueue_parts")
            src = c.execute("SELECT pg_get_functiondef('pgfence.enqueue'::regproc)").fetchone()[0]  # type: ignore[index]
            for body in variants(src).values():
                c.execute(body)
            c.execute("CREATE TABLE enqueue_parts.jobs (LIKE pgfence.jobs INCLUDING DEFAULTS INCLUDING INDEXES"
                      " INCLUDING IDENTITY)")  # (the domains stay; the row-rules CHECK does not come along)
            c.execute(INSERT_ONLY.format(name="insert_only", table="pgfence.jobs"))
            c.execute(INSERT_ONLY.format(name="insert_no_check", table="enqueue_parts.jobs"))
            names = [*variants(src), "insert_only", "insert_no_check"]
            times: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds + 1):  # (round 0 warms every variant up, and is not kept)
                for name in (names if r % 2 else names[::-1]):
                    for i in range(args.calls):
                        plan = c.execute(f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON)"
                                         f" SELECT enqueue_parts.{name}(kind => 'k', payload => %s::jsonb,"
                                         f" queue => 'parts')", (json.dumps({"i": i}),)).fetchone()[0]  # type: ignore[index]
                        if r:
                            times[name].append(plan[0]["Execution Time"] * 1000)
                c.execute("TRUNCATE pgfence.jobs, enqueue_parts.jobs")
        base = statistics.median(times["as_is"])
        print(f"{'variant':16s} {'median us':>10s} {'p25':>7s} {'p75':>7s} {'- as_is':>8s}"
              f"   ({args.rounds} rounds x {args.calls} calls, each in its own transaction)")
        for name in names:
            q = statistics.quantiles(times[name], n=4)
            med = statistics.median(times[name])
            print(f"{name:16s} {med:10.1f} {q[0]:7.1f} {q[2]:7.1f} {med - base:+8.1f}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
