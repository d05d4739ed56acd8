"""``make dashboard``: a few hundred demo jobs in the local cluster, then the dashboard on them.

Makes (once) the login role ``pgfence_dashboard``, a member of ``pgfence_operator``, and
fills demo queues through the SQL API: queued, done (with results, spread over the last
hour), failed (a few distinct errors, one of them with HTML in it), manual_review jobs of
a payments queue, a job whose first worker froze past its lease and whose stale
``complete`` was refused (its timeline shows the overlap), a paused queue and a capped
one. Then it runs ``pgfence dashboard`` as ``pgfence_dashboard`` (the log-in token is
printed, or set ``PGFENCE_DASHBOARD_TOKEN``). ``--fill-only`` stops after the jobs.

DSN: ``--dsn``, else ``$PGFENCE_DSN``, else ``scripts/pg.sh dsn`` (a superuser of the
throwaway cluster, to make the role; the dashboard itself never runs as one).
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

REPO = Path(__file__).resolve().parents[1]
ROLE = "pgfence_dashboard"


def fill(conn: psycopg.Connection, run: str) -> None:
    rnd = random.Random(7)
    q = {n: f"demo-{n}" for n in ("emails", "payments", "images", "reports")}

    def enqueue(queue: str, kind: str, payload: str, policy: str = "auto", attempts: int = 3) -> int:
        row = conn.execute("SELECT pgfence.enqueue(kind => %s, payload => %s::jsonb, queue => %s,"
                           " recovery_policy => %s, max_attempts => %s, idempotency_key => %s)",
                           (kind, payload, queue, policy, attempts, f"{run}-{rnd.random()}")).fetchone()
        assert row is not None
        return int(row[0])

    def claim(queue: str, worker: str, lease: str = "30 seconds", n: int = 1) -> list[tuple[int, str]]:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT id, attempt_token FROM pgfence.claim(worker_id => %s, queues => ARRAY[%s],"
            " lease => %s::interval, max_jobs => %s)", (worker, queue, lease, n)).fetchall()]

    # done: 200 emails and 60 reports with results
    for i in range(200):
        enqueue(q["emails"], "welcome_email", f'{{"user_id": {1000 + i}, "to": "user{i}@example.com"}}')
    for i in range(60):
        enqueue(q["reports"], "monthly_report", f'{{"account": {i}, "month": "2026-11"}}')
    for queue in (q["emails"], q["reports"]):
        while True:
            got = claim(queue, f"worker-{rnd.randint(1, 4)}", n=25)
            if not got:
                break
            conn.execute("SELECT count(*) FROM pgfence.complete_many(%s, %s::uuid[], %s::jsonb[])",
                         ([g[0] for g in got], [g[1] for g in got],
                          [f'{{"message_id": "m-{g[0]}"}}' for g in got]))
            time.sleep(0.05)
    # failed: three groups of errors (one with markup in it: shown as text)
    errors = ["smtp 550: mailbox full", "timeout after 30 s waiting for the renderer",
              "upstream said <script>alert('hi')</script> (HTTP 502)"]
    for i in range(45):
        enqueue(q["images"], "thumbnail", f'{{"image_id": {i}, "size": [320, 240]}}', attempts=1)
    while True:
        got = claim(q["images"], "worker-img", n=15)
        if not got:
            break
        for j, (job_id, token) in enumerate(got):
            conn.execute("SELECT pgfence.fail(job_id => %s, attempt_token => %s::uuid, error => %s)",
                         (job_id, token, errors[(job_id + j) % 3]))
    # manual_review: payments whose worker died mid-charge
    for i in range(6):
        enqueue(q["payments"], "charge_card", f'{{"order": {5000 + i}, "amount_cents": {rnd.randint(500, 90000)},'
                                             f' "note": "<b>gift</b> for {i}"}}', policy="manual")
    claim(q["payments"], "worker-pay-7", lease="50 milliseconds", n=6)
    # a stale worker: claimed, lease expired, reclaimed, taken by another, then refused
    stale_id = enqueue(q["reports"], "quarterly_report", '{"account": 42, "quarter": "2026Q4"}')
    (_, stale_token), = claim(q["reports"], "worker-frozen", lease="50 milliseconds")
    time.sleep(0.2)
    conn.execute("SELECT count(*) FROM pgfence.reclaim_expired(max_jobs => 100)")
    time.sleep(0.1)
    (_, token_b), = claim(q["reports"], "worker-2")
    from pgfence import Client
    from pgfence.errors import LeaseLost
    with Client(conn=conn, check_schema=False) as client:
        try:
            client.complete(stale_id, stale_token, {"late": True})  # type: ignore[arg-type]
        except LeaseLost:
            pass
    time.sleep(0.1)
    conn.execute("SELECT pgfence.complete(job_id => %s, attempt_token => %s::uuid, result => '{}'::jsonb)",
                 (stale_id, token_b))
    # queued backlog, a paused queue and a capped one
    for i in range(80):
        enqueue(q["emails"], "digest_email", f'{{"user_id": {i}}}')
    for i in range(30):
        enqueue(q["images"], "thumbnail", f'{{"image_id": {100 + i}}}')
    conn.execute("SELECT pgfence.pause_queue(queue => %s)", (q["emails"],))
    conn.execute("SELECT pgfence.set_queue_limit(queue => %s, max_running => 4)", (q["images"],))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default=os.environ.get("PGFENCE_DSN"))
    ap.add_argument("--fill-only", action="store_true")
    ap.add_argument("--bind", default="127.0.0.1:8484")
    a = ap.parse_args()
    dsn = a.dsn or subprocess.run([str(REPO / "scripts" / "pg.sh"), "dsn"], capture_output=True, text=True,
                                  check=True).stdout.strip()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN")
            conn.execute(f"GRANT pgfence_operator TO {ROLE}")
        for queue in ("demo-emails", "demo-images"):
            conn.execute("SELECT pgfence.resume_queue(queue => %s), pgfence.set_queue_limit(queue => %s, "
                         "max_running => NULL)", (queue, queue))
        fill(conn, str(int(time.time())))
    print("dashboard demo: jobs in queues demo-emails, demo-payments, demo-images, demo-reports", file=sys.stderr)
    if a.fill_only:
        return 0
    params = conninfo_to_dict(dsn)
    params["user"] = ROLE
    params.pop("password", None)
    os.environ["PGFENCE_DSN"] = make_conninfo("", **params)
    from pgfence.cli import main as cli
    return cli(["dashboard", "--bind", a.bind])


if __name__ == "__main__":
    sys.exit(main())
