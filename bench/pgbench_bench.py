"""pgbench baselines in database bench_pgbench: what the server does with no queue
library at all, same cluster and durability settings.

insert: one-row INSERT into a scratch table per transaction.
claim:  one-row `WITH c AS (SELECT id FROM t WHERE status='queued' ORDER BY id LIMIT 1
        FOR UPDATE SKIP LOCKED) UPDATE t SET status='done' FROM c WHERE t.id=c.id`
        on a pre-filled table (partial index on id WHERE status='queued').
Both: pgbench -n -c 8 -j 2 -T <seconds>; tx/s = pgbench's "tps ... (without initial
connection time)".
"""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from common import LOG_DIR, BenchError, connect, dsn_for_db, dsn_host_port, log, recreate_database

DB = "bench_pgbench"
INSERT_SQL = "INSERT INTO ins_t (payload) VALUES ('{}');\n"
CLAIM_SQL = ("WITH c AS (SELECT id FROM t WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
             " UPDATE t SET status = 'done' FROM c WHERE t.id = c.id;\n")


def pgbench_path() -> str:
    p = shutil.which("pgbench")
    if p is None:
        raise BenchError("pgbench not found on PATH (Debian: postgresql-client)")
    return p


def run_script(dsn: str, script: str, name: str, clients: int, threads: int, seconds: int,
         db: str = DB) -> dict[str, Any]:
    """pgbench -n with `script` against database `db`; tx/s and the transactions run."""
    host, port, user = dsn_host_port(dsn)
    path = LOG_DIR / f"pgbench-{name}.sql"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    cmd = [pgbench_path(), "-n", "-c", str(clients), "-j", str(threads), "-T", str(seconds),
           "-f", str(path), "-h", host, "-p", str(port), "-U", user, db]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    (LOG_DIR / f"pgbench-{name}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise BenchError(f"pgbench {name} exit {r.returncode}: {r.stderr.strip()[-500:]}")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", r.stdout)
    if not m:
        raise BenchError(f"pgbench {name}: no tps line in output:\n{r.stdout[-500:]}")
    n = re.search(r"number of transactions actually processed: ([0-9]+)", r.stdout)
    return {"tps": float(m.group(1)), "transactions": int(n.group(1)) if n else None,
            "command": " ".join(cmd[:8]) + f" -f {path.name}"}


def run(admin_dsn: str, seconds: int, prefill: int, clients: int = 8, threads: int = 2) -> dict[str, Any]:
    recreate_database(admin_dsn, DB)
    dsn = dsn_for_db(admin_dsn, DB)
    with connect(dsn) as conn:
        conn.execute("CREATE TABLE ins_t (id bigserial PRIMARY KEY, payload jsonb NOT NULL DEFAULT '{}',"
                     " created_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("CREATE TABLE t (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',"
                     " payload jsonb NOT NULL DEFAULT '{}')")
        conn.execute("INSERT INTO t (payload) SELECT jsonb_build_object('i', g) FROM generate_series(1, %s) g",
                     (prefill,))
        conn.execute("CREATE INDEX t_queued_idx ON t (id) WHERE status = 'queued'")
        conn.execute("VACUUM (ANALYZE) t")
        conn.execute("VACUUM (ANALYZE) ins_t")
    log(f"pgbench insert: -c {clients} -j {threads} -T {seconds}")
    ins = run_script(dsn, INSERT_SQL, "insert", clients, threads, seconds)
    log(f"pgbench claim: -c {clients} -j {threads} -T {seconds} on {prefill:,} pre-filled rows")
    claim = run_script(dsn, CLAIM_SQL, "claim", clients, threads, seconds)
    with connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FROM t").fetchone()
        assert row is not None
        claim["left_queued"] = int(row[0])
        claim["prefilled"] = prefill
    if claim["left_queued"] == 0:
        claim["note"] = "pre-filled table ran empty: tx/s includes no-op transactions"
    return {"insert": ins, "claim": claim, "clients": clients, "threads": threads, "seconds": seconds}
