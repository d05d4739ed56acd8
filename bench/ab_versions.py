"""Drain and latency of pgfence versions side by side, taking turns (make db first).

    .venv/bin/python bench/ab_versions.py [--rounds 5] [--steps drain,latency,ceiling,single] NAME=TAG@COMMIT ... [head]

Each NAME=TAG@COMMIT is a version: its SQL deployed `sqitch deploy --to @TAG` into a
database of its own (ab_<NAME>, recreated), its Python client from COMMIT (a git
worktree under a temporary directory, removed after); NAME=@COMMIT (no tag) deploys
the whole plan of COMMIT (from its worktree: changes made after the last tag); `head`
is this checkout's plan and client. Every round runs, per version (the order rotates each round): a drain of
100,000 jobs (2 worker processes x 8, prefetch 500) and the latency step (idle
workers, 100 jobs at 20/s), and with --steps ...,ceiling the database-only ceiling
(pgbench, 2 clients looping over claim 500 + complete_many in SQL, 600,000 queued, 5 s;
no worker process, so no client either), and with --steps ...,single 5,000 single
enqueues, each committed (pf.single_enqueue: this checkout's Client, the version's
SQL), and with --steps ...,enqueue_sql the server's time per single enqueue: 5,000
`pgfence.enqueue` calls in one DO block, each committed, synchronous_commit off (no
round trip, no client, no WAL flush: the steadiest of these numbers), and with
claim_sql the same for 5,000 one-job claims (of 5,000 jobs queued for it), each with a fresh request id as a worker's. Jobs are enqueued with SQL (enqueue_many), the same for
every version; each version's workers run its own client (PYTHONPATH). Prints the
medians with min-max and every ratio to the first version, round by round. Example
(the security and structure issues):

    .venv/bin/python bench/ab_versions.py v030=v0.3.0@cc65a1d v040=v0.4.0@2d8d773 head
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pgfence_bench as pf  # noqa: E402
from common import connect, drop_database, dsn_for_db, log, recreate_database  # noqa: E402
from run import default_dsn  # noqa: E402

REPO = HERE.parent


def sql_batch_enqueue(dsn: str, queue: str, n: int, batch: int = 1000, kind: str = "noop") -> tuple[float, list[int]]:
    """pf.batch_enqueue through SQL: no client, so every version is filled the same way."""
    ids: list[int] = []
    with connect(dsn) as c:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            k = min(batch, n - start)
            ids += [r[0] for r in c.execute(
                "SELECT id FROM pgfence.enqueue_many(%s::text[], %s::jsonb[], %s)",
                ([kind] * k, [json.dumps({"i": start + j}) for j in range(k)], queue))]
        return time.perf_counter() - t0, ids


def _server_us(dsn: str, queue: str, n: int, call: str) -> float:
    """Server time per call, in microseconds: `call` (a PERFORM; `i` counts 1..n) n times
    in a DO block that commits after each (synchronous_commit off); then the queue's jobs
    are deleted."""
    with connect(dsn) as c:
        c.execute("SET synchronous_commit = off")
        t0 = c.execute("SELECT clock_timestamp()").fetchone()
        c.execute(f"DO $$ BEGIN FOR i IN 1..{int(n)} LOOP {call}; COMMIT; END LOOP; END $$")
        t1 = c.execute("SELECT clock_timestamp()").fetchone()
        c.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue,))
    assert t0 is not None and t1 is not None
    return (t1[0] - t0[0]).total_seconds() / n * 1e6


def enqueue_server_us(dsn: str, n: int) -> float:
    """Server time per single enqueue, each in a transaction of its own."""
    queue = f"ab-enqueue-sql-{os.getpid()}"
    return _server_us(dsn, queue, n, f"PERFORM pgfence.enqueue('noop', jsonb_build_object('i', i), '{queue}')")


def claim_server_us(dsn: str, n: int) -> float:
    """Server time per one-job claim, each in a transaction of its own, from a queue of n
    jobs (enqueued and vacuumed first), with a fresh request id as the worker's claims."""
    queue = f"ab-claim-sql-{os.getpid()}"
    sql_batch_enqueue(dsn, queue, n)
    with connect(dsn) as c:
        c.execute("VACUUM (ANALYZE) pgfence.jobs")
    return _server_us(dsn, queue, n, f"PERFORM pgfence.claim('ab', ARRAY['{queue}'], '10 minutes', 1, gen_random_uuid())")


# The steps that measure one number per round: (step, result key, measure(dsn), how it is said).
ONE_NUMBER_STEPS: tuple[tuple[str, str, Callable[[str], float], str], ...] = (
    ("single", "single", lambda dsn: pf.single_enqueue(dsn, 5000)["rate"], "single enqueue {:,.0f}/s"),
    ("enqueue_sql", "enqueue_us", lambda dsn: enqueue_server_us(dsn, 5000), "enqueue {:.1f} us in the server"),
    ("claim_sql", "claim_us", lambda dsn: claim_server_us(dsn, 5000), "claim {:.1f} us in the server"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--steps", default="drain,latency",
                    help="comma-separated: drain, latency, ceiling, single, enqueue_sql, claim_sql")
    ap.add_argument("versions", nargs="+", help="NAME=TAG@COMMIT, or head")
    a = ap.parse_args()
    steps = set(a.steps.split(","))
    if not steps or steps - {"drain", "latency", "ceiling", *(s for s, _, _, _ in ONE_NUMBER_STEPS)}:
        ap.error(f"--steps {a.steps!r}: expected drain, latency, ceiling, single, enqueue_sql and/or claim_sql")
    pf.batch_enqueue = sql_batch_enqueue  # type: ignore[assignment]
    admin = dsn_for_db(default_dsn(), "postgres")
    tmp = Path(tempfile.mkdtemp(prefix="pgfence-ab-"))
    variants: dict[str, tuple[Optional[str], Path]] = {}
    plans: dict[str, Path] = {}  # a version deployed from its own worktree (NAME=@COMMIT)
    worktrees: list[Path] = []
    try:
        for spec in a.versions:
            if spec == "head":
                variants["head"] = (None, REPO / "python_client")
                continue
            name, _, rest = spec.partition("=")
            tag, _, commit = rest.partition("@")
            if not (name and commit):
                ap.error(f"{spec!r}: expected NAME=TAG@COMMIT, NAME=@COMMIT or head")
            wt = tmp / name
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(wt), commit], check=True)
            worktrees.append(wt)
            variants[name] = (f"@{tag}" if tag else None, wt / "python_client")
            if not tag:
                plans[name] = wt
        dsns = {}
        for name, (to, _) in variants.items():
            recreate_database(admin, f"ab_{name}")
            dsns[name] = dsn_for_db(admin, f"ab_{name}")
            pf._deploy(dsns[name], to, cwd=plans.get(name))
        names = list(variants)
        keys = [k for k, step in (("drain", "drain"), ("p50", "latency"), ("p95", "latency"),
                                  ("ceiling", "ceiling"),
                                  *((k, s) for s, k, _, _ in ONE_NUMBER_STEPS)) if step in steps]
        res: dict[str, dict[str, list[float]]] = {n: {k: [] for k in keys} for n in names}
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                os.environ["PYTHONPATH"] = str(variants[name][1])
                said = []
                if "drain" in steps:
                    shape = pf.WorkerShape(procs=2, concurrency=8, prefetch=500)
                    d: dict[str, Any] = pf.batch_then_drain(dsns[name], a.jobs, shape, 60, f"ab{name}{r}")
                    rate = d["drain"].get("rate") or d["drain"]["finished"] / d["drain"]["seconds"]
                    res[name]["drain"].append(rate)
                    said.append(f"drain {rate:,.0f} jobs/s")
                if "latency" in steps:
                    lat = pf.latency(dsns[name], pf.WorkerShape(procs=2, concurrency=8, prefetch=72), 100, 20.0,
                                     tag=f"ab{name}{r}")
                    res[name]["p50"].append(lat["p50_ms"])
                    res[name]["p95"].append(lat["p95_ms"])
                    said.append(f"latency p50 {lat['p50_ms']:.2f} p95 {lat['p95_ms']:.2f} ms")
                if "ceiling" in steps:
                    ce = pf.sql_ceiling(dsns[name], 600_000, 2, 5)
                    res[name]["ceiling"].append(ce["rate"])
                    said.append(f"ceiling {ce['rate']:,.0f} jobs/s")
                for step, key, measure, say in ONE_NUMBER_STEPS:
                    if step in steps:
                        value = measure(dsns[name])
                        res[name][key].append(value)
                        said.append(say.format(value))
                log(f"round {r} {name}: " + ", ".join(said))
        for name in names:
            for k, v in res[name].items():
                print(f"{name} {k}: median {statistics.median(v):.2f} (min {min(v):.2f}, max {max(v):.2f})")
        base = names[0]
        for name in names[1:]:
            for k in keys:
                ratio = statistics.median(res[name][k]) / statistics.median(res[base][k])
                print(f"{k} {name}/{base}: median ratio {ratio:.3f}, per round",
                      [round(x / y, 3) for x, y in zip(res[name][k], res[base][k])])
        for name in names:
            drop_database(admin, f"ab_{name}")
    finally:
        os.environ.pop("PYTHONPATH", None)
        for wt in worktrees:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(wt)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
