"""The latency floor's claimer: no queue library, no worker threads (main venv, psycopg).

    python bench/floor_claimer.py --dsn DSN --queue Q --channel C --out FILE

LISTENs on C; for every notification claims one queued job of queue Q with a bare
one-row `FOR UPDATE SKIP LOCKED` UPDATE of pgfence.jobs (what pgfence.claim does
at its core, without its checks, its reclaim probe or its token), and appends
`time.time() - payload.t` (seconds) to FILE. Prints `READY <epoch>` once
listening; SIGTERM ends it.
"""
from __future__ import annotations

import argparse
import signal
import time

import psycopg

CLAIM = ("UPDATE pgfence.jobs j SET status = 'processing', attempts = j.attempts + 1,"
         " attempt_token = gen_random_uuid(), reserved_by = 'bench-floor', reserved_at = now(),"
         " lease_expires_at = now() + interval '10 minutes', updated_at = now()"
         " WHERE j.id = (SELECT q.id FROM pgfence.jobs q WHERE q.status = 'queued' AND q.queue = %s"
         " AND q.available_at <= now() ORDER BY q.priority DESC, q.available_at, q.id"
         " LIMIT 1 FOR UPDATE SKIP LOCKED)"
         " RETURNING (j.payload->>'t')::float8")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--channel", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with psycopg.connect(a.dsn, autocommit=True) as listen, psycopg.connect(a.dsn, autocommit=True) as conn, \
            open(a.out, "a", buffering=1) as out:
        listen.execute(f"LISTEN {psycopg.sql.Identifier(a.channel).as_string(listen)}")
        conn.execute(CLAIM, (a.queue,), prepare=True).fetchall()  # (prepared before the first job)
        print(f"READY {time.time()}", flush=True)
        while not stopping:
            for _ in listen.notifies(timeout=0.2):
                for (t,) in conn.execute(CLAIM, (a.queue,), prepare=True).fetchall():
                    out.write(f"{time.time() - t:.6f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
