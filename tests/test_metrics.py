"""pgfence.metrics(): Prometheus-ready rows, counters that never go backwards when
retention drops history (partition drops, the purge of failed and cancelled jobs), and
the Python side (Client.metrics, the exposition text, `pgfence metrics`)."""

from __future__ import annotations

import math
from typing import Any, Iterator

import psycopg
import pytest

from pgfence import Client, Metric
from pgfence.cli import main
from pgfence.metrics_text import prometheus_text
from support.api import claim_job, complete, enqueue, fail, release
from support.db import (connection, expire_history, narrow_history, one, queues_removed_after, rows, scratch_database,
                        sqitch, sqitch_target)

Conn = psycopg.Connection[Any]

COUNTERS = ("pgfence_attempts_ended_total", "pgfence_reclaims_total", "pgfence_rejections_total",
            "pgfence_jobs_done_total")


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    with queues_removed_after(conn, queue):
        yield queue


def of_queue(conn: Conn, queue: str) -> dict[tuple[str, str], float]:
    """metrics() samples of one queue: (name, labels other than queue as k=v) -> value."""
    return {(r["name"], ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items()) if k != "queue")): r["value"]
            for r in rows(conn, "SELECT * FROM pgfence.metrics() WHERE labels->>'queue' = %s", (queue,))}


def counters(conn: Conn, queue: str) -> dict[tuple[str, str], float]:
    return {k: v for k, v in of_queue(conn, queue).items() if k[0] in COUNTERS}


def finish_some(conn: Conn, q: str) -> list[int]:
    """Done (after a release and a refused stale call), dead-lettered, cancelled while running."""
    jd = enqueue(conn, q)
    stale = claim_job(conn, q, jd, lease="1 hour")
    release(conn, jd, stale)
    complete(conn, jd, claim_job(conn, q, jd, lease="1 hour"))
    conn.execute("SELECT * FROM pgfence.complete_many(%s, %s)", ([jd], [stale]))  # a recorded rejection
    jf, jc = enqueue(conn, q, max_attempts=1), enqueue(conn, q)
    fail(conn, jf, claim_job(conn, q, jf, lease="1 hour"), "boom")
    claim_job(conn, q, jc, lease="1 hour")
    conn.execute("SELECT pgfence.cancel(%s)", (jc,))
    return [jd, jf, jc]


def test_metrics_rows_have_the_documented_shape(conn: Conn, q: str) -> None:
    finish_some(conn, q)
    enqueue(conn, q)
    got = of_queue(conn, q)
    assert got[("pgfence_jobs", "status=queued")] == 1
    assert got[("pgfence_jobs", "status=done")] == 1
    assert got[("pgfence_dead_letter_jobs", "")] == 1
    assert got[("pgfence_manual_review_jobs", "")] == 0
    assert got[("pgfence_attempts_ended_total", "outcome=done")] == 1
    assert got[("pgfence_attempts_ended_total", "outcome=released")] == 1
    assert got[("pgfence_attempts_ended_total", "outcome=failed")] == 1
    assert got[("pgfence_attempts_ended_total", "outcome=cancelled")] == 1
    assert got[("pgfence_rejections_total", "")] == 1
    assert got[("pgfence_jobs_done_total", "")] == 1
    assert got[("pgfence_oldest_runnable_age_seconds", "")] >= 0
    types = dict(conn.execute("SELECT DISTINCT name, type FROM pgfence.metrics()").fetchall())
    assert all(types[n] == "counter" for n in COUNTERS if n in types)
    assert types["pgfence_jobs"] == "gauge" and types["pgfence_sweeper_paused"] == "gauge"
    assert all(n.endswith("_total") == (t == "counter") for n, t in types.items())


def test_counters_do_not_go_backwards_when_retention_drops_history(conn: Conn, q: str, sweep_paused: Any) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (q,))
    ids = finish_some(conn, q)
    before = counters(conn, q)
    assert before[("pgfence_jobs_done_total", "")] == 1 and before[("pgfence_rejections_total", "")] == 1
    # the done job's history partition ends now (as the clock would), the purge drops it and deletes
    # the failed and cancelled jobs with their attempts, then the rejections of the dropped history
    assert expire_history(conn, ids) >= 1
    for _ in range(3):
        one(conn, "SELECT pgfence.purge_finished(10000)")
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = ANY(%s)", (ids,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.all_attempts WHERE job_id = ANY(%s)", (ids,)) == 0
    assert one(conn, "SELECT count(*) FROM pgfence.rejections WHERE job_id = ANY(%s)", (ids,)) == 0
    assert counters(conn, q) == before
    # and they go on counting from there
    jd = enqueue(conn, q)
    complete(conn, jd, claim_job(conn, q, jd))
    after = counters(conn, q)
    assert after[("pgfence_jobs_done_total", "")] == 2
    assert after[("pgfence_attempts_ended_total", "outcome=done")] == 2


def test_a_truncated_partition_is_counted_once(conn: Conn, q: str, sweep_paused: Any, dsn: str) -> None:
    """A partition the maintenance could not drop (a reader holds the parent) is
    truncated and counted; its later drop adds nothing."""
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (q,))
    jd = enqueue(conn, q)
    complete(conn, jd, claim_job(conn, q, jd))
    before = counters(conn, q)
    assert expire_history(conn, [jd]) >= 1
    with psycopg.connect(dsn, autocommit=False) as reader:
        reader.execute("SELECT count(*) FROM pgfence.finished_jobs WHERE id = 0")  # holds every partition
        # (the partition of jd: the truncate needs only it, the drop the parent)
        got = rows(conn, "SELECT * FROM pgfence.maintain_history()")
        reader.rollback()
    # the reader held the partitions ACCESS SHARE: neither DROP nor TRUNCATE got its lock
    assert got[0]["dropped"] == 0
    assert counters(conn, q) == before
    one(conn, "SELECT count(*) FROM pgfence.maintain_history()")
    assert one(conn, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (jd,)) == 0
    assert counters(conn, q) == before


def test_the_default_partitions_deleted_rows_are_counted(conn: Conn, q: str, sweep_paused: Any) -> None:
    conn.execute("SELECT pgfence.set_retention(%s, '0 seconds', '0 seconds')", (q,))
    jd = enqueue(conn, q)
    complete(conn, jd, claim_job(conn, q, jd))
    # as if no partition had been made for it: moved to the default partition, past purge_at
    conn.execute("""WITH m AS (DELETE FROM pgfence.finished_jobs WHERE id = %s RETURNING *)
                    INSERT INTO pgfence.finished_jobs_default
                    SELECT (jsonb_populate_record(NULL::pgfence.finished_jobs,
                            to_jsonb(m) || jsonb_build_object('purge_at', now() - interval '10 years'))).*
                      FROM m""", (jd,))
    before = counters(conn, q)
    one(conn, "SELECT count(*) FROM pgfence.maintain_history()")
    assert one(conn, "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (jd,)) == 0
    assert counters(conn, q) == before


def test_after_a_drop_a_second_expired_partition_waits_for_the_next_pass(dsn: str) -> None:
    """Once a DROP holds the history's parent (until commit), no other partition with rows
    is counted in that call (completions would wait for the scan): it goes on the next
    pass, and both are counted once. In a database of its own (it ends partitions that
    other tests' jobs are in)."""
    with scratch_database(dsn, "pgfence_metrics") as scratch:
        r = sqitch("deploy", target=sqitch_target(scratch), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        with connection(scratch) as c:
            # 10-second partitions, nothing kept: two jobs 10 s apart are in two partitions
            c.execute("SELECT pgfence.set_retention(NULL, '0 seconds', '0 seconds')")
            narrow_history(c)
            for qn in ("m", "m2"):  # (each at the start of a 10-second slot: its partition was made ahead)
                c.execute("SELECT pg_sleep(10.2 - extract(epoch FROM clock_timestamp())::numeric % 10)")
                jd = enqueue(c, qn)
                complete(c, jd, claim_job(c, qn, jd))
            assert one(c, "SELECT count(DISTINCT tableoid) FROM pgfence.finished_jobs") == 2
            assert one(c, "SELECT count(*) FROM pgfence.finished_jobs_default") == 0
            before = {qn: counters(c, qn) for qn in ("m", "m2")}
            c.execute("SELECT pg_sleep(10.2 - extract(epoch FROM clock_timestamp())::numeric % 10)")  # both passed
            left = [2]  # done jobs left after each pass: at most one partition with rows goes per pass
            for _ in range(5):
                c.execute("SELECT count(*) FROM pgfence.maintain_history()")
                left.append(one(c, "SELECT count(*) FROM pgfence.finished_jobs"))
                if left[-1] == 0:
                    break
            assert left[-1] == 0 and all(a - b <= 1 for a, b in zip(left, left[1:])), left
            assert {qn: counters(c, qn) for qn in ("m", "m2")} == before
            assert before["m"][("pgfence_jobs_done_total", "")] == before["m2"][("pgfence_jobs_done_total", "")] == 1


# ------------------------------------------------------------------ Python --
def test_client_metrics_and_the_exposition_text(dsn: str, conn: Conn, q: str) -> None:
    finish_some(conn, q)
    with Client.connect(dsn) as client:
        ms = client.metrics()
    mine = [m for m in ms if m.labels.get("queue") == q]
    assert any(m.name == "pgfence_jobs_done_total" and m.value == 1 for m in mine)
    text = prometheus_text(ms)
    assert f'pgfence_jobs_done_total{{queue="{q}"}} 1\n' in text
    assert text.count("# TYPE pgfence_jobs_done_total counter\n") == 1


def test_exposition_text_escapes_label_values_and_help() -> None:
    text = prometheus_text([
        Metric("m_total", "counter", 'a "help"\nline \\', {"queue": 'q"1\\\n\x1b[31m'}, 3.0),
        Metric("m_total", "counter", "x", {"queue": "b"}, 0.5),
        Metric("g", "gauge", "h", {}, math.nan)])
    assert text == ('# HELP m_total a "help"\\nline \\\\\n'
                    "# TYPE m_total counter\n"
                    'm_total{queue="q\\"1\\\\\\n\\\\u001b[31m"} 3\n'
                    'm_total{queue="b"} 0.5\n'
                    "# HELP g h\n# TYPE g gauge\ng NaN\n")
    assert "\x1b" not in text


def test_cli_metrics_prints_the_exposition_text(dsn: str, conn: Conn, q: str, capsys: pytest.CaptureFixture[str]) -> None:
    finish_some(conn, q)
    assert main(["metrics", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert f'pgfence_attempts_ended_total{{outcome="released",queue="{q}"}} 1\n' in out
    assert "# TYPE pgfence_sweeper_paused gauge\n" in out
