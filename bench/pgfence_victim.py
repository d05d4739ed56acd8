"""A pgfence worker that dies holding a lease (for the recovery measurement).

In one transaction: enqueue one job and claim it (so no live worker can take it
first) with --lease; print {"id", "lease_expires_epoch"}; then SIGKILL itself,
leaving the job 'processing' until its lease expires.

--priority must be higher than that of any job an earlier victim left in the
queue: an earlier victim's job that the sweeper already put back to 'queued'
(not yet re-claimed by a worker) would otherwise come first in claim order.
"""
from __future__ import annotations

import argparse
import json
import os
import signal

import psycopg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--lease", default="2 seconds")
    ap.add_argument("--priority", type=int, default=0)
    a = ap.parse_args()
    conn = psycopg.connect(a.dsn)  # not autocommit: one transaction
    mine = conn.execute("SELECT pgfence.enqueue(kind => 'noop', payload => '{}'::jsonb, queue => %s,"
                        " priority => %s)", (a.queue, a.priority)).fetchone()
    row = conn.execute("SELECT id, extract(epoch FROM lease_expires_at)::float8"
                       " FROM pgfence.claim(%s, %s, %s::interval, 1)",
                       (f"victim-{os.getpid()}", [a.queue], a.lease)).fetchone()
    if row is None or mine is None or row[0] != mine[0]:
        conn.rollback()
        raise SystemExit(f"victim: enqueued {mine} but claimed {row}")
    conn.commit()
    print(json.dumps({"id": row[0], "lease_expires_epoch": row[1]}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
