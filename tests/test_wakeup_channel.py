"""NOTIFY pgfence_enqueue: what an outsider learns from it, and what a flood of it costs.

Any role may LISTEN and NOTIFY on any channel. Before the rework after @v0.3.0 the
channel carried queue names, and a flood on it took an idle worker and its backends
from 0.6% to 68-96% of a core. Now it carries a keyed tag per queue (a worker asks
pgfence.wakeup_tags for its queues' tags), the worker claims at most once per
CLAIM_HOLDOFF after a claim that found nothing, and stops listening for a while when
more than NOTIFY_FLOOD notifications arrive within a second.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgfence.claimer as claimer_module
import pgfence.listener as listener_module
from support.db import connect
from support.roles import connect_as, grantless_login, login_roles
from support.workers import running, wait_for
from pgfence import Client, Job, Worker

Conn = psycopg.Connection[Any]


@pytest.fixture
def outsider(dsn: str) -> Iterator[Conn]:
    with grantless_login(dsn, "t_outsider") as c:
        yield c


def test_the_channel_carries_a_tag_not_the_queue_name(outsider: Conn, conn: Conn, queue: str) -> None:
    outsider.execute("LISTEN pgfence_enqueue")
    conn.execute("SELECT pgfence.enqueue('k', queue => %s)", (queue,))
    notes = [n.payload for n in outsider.notifies(timeout=2.0, stop_after=1)]
    assert len(notes) == 1
    [tag] = notes
    assert queue not in tag and len(tag) == 16
    assert conn.execute("SELECT tag FROM pgfence.wakeup_tags(ARRAY[%s])", (queue,)).fetchone() == (tag,)
    # the tags are the database's to tell, and only to workers
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        outsider.execute("SELECT * FROM pgfence.wakeup_tags(ARRAY[%s])", (queue,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        outsider.execute("SELECT key FROM pgfence.secret_key")
    # one tag per queue, the same for every enqueue
    other = conn.execute("SELECT tag FROM pgfence.wakeup_tags(ARRAY[%s, %s]) ORDER BY queue",
                         (queue, queue + "x")).fetchall()
    assert other[0] == (tag,) and other[1] != (tag,)


def key_bytes(key: str) -> str:
    """How a plan dump (debug_print_plan) shows the first 16 characters of a text
    constant, its whitespace removed (it shows each byte in decimal)."""
    return "".join(str(b) for b in key.encode()[:16])


def plan_dumps(conn: Conn, statements: list[tuple[str, Any]]) -> str:
    """Everything debug_print_plan sends to the client while statements run on conn,
    without whitespace."""
    dumps: list[str] = []
    conn.add_notice_handler(lambda d: dumps.append(f"{d.message_primary}\n{d.message_detail}"))
    conn.execute("SET debug_print_plan = on")
    conn.execute("SET client_min_messages = log")
    for statement, params in statements:
        conn.execute(statement, params)
    conn.execute("RESET client_min_messages")
    conn.execute("RESET debug_print_plan")
    return re.sub(r"\s+", "", "".join(dumps))  # (the dump wraps long lines anywhere)


def test_no_role_can_read_the_secret_key_from_a_plan(dsn: str, conn: Conn, queue: str) -> None:
    """Any role may print the plans of the statements it runs, those inside SECURITY
    DEFINER functions included (debug_print_plan). The key was an IMMUTABLE function
    the planner folded into enqueue's plan as a constant: a producer decoded it from the
    dump and could test guessed queue names against the channel's tags. Now every use
    reads it from the table when it runs."""
    key = conn.execute("SELECT key FROM pgfence.secret_key").fetchone()[0]  # type: ignore[index]
    roles = {f"t_plan_{r}": f"pgfence_{r}" for r in ("producer", "worker", "operator")}
    with login_roles(dsn, roles):
        with connect_as(dsn, "t_plan_producer") as p:
            out = plan_dumps(p, [("SELECT pgfence.enqueue('k', '{}', %s)", (queue,)),
                                 ("SELECT count(*) FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %s)", (queue,))])
        with connect_as(dsn, "t_plan_worker") as w:
            out += plan_dumps(w, [("SELECT count(*) FROM pgfence.wakeup_tags(ARRAY[%s])", (queue,)),
                                  ("SELECT count(*) FROM pgfence.claim('w', ARRAY[%s], '1 minute', 1,"
                                   " gen_random_uuid())", (queue,)),
                                  ("SELECT count(*) FROM pgfence.claimed('w', ARRAY[gen_random_uuid()])", None)])
        job_id = conn.execute("SELECT pgfence.enqueue('k', '{}', %s, recovery_policy => 'manual')",
                              (queue,)).fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT pgfence.claim('w', ARRAY[%s], '1 millisecond', 10)", (queue,))
        conn.execute("SELECT pg_sleep(0.01)")
        conn.execute("CALL pgfence.sweep()")
        with connect_as(dsn, "t_plan_operator") as o:
            out += plan_dumps(o, [("SELECT pgfence.requeue(%s)", (job_id,))])
    assert out.count("{PLANNEDSTMT:") >= 10  # (the plans of the functions' statements were dumped)
    assert key not in out and key_bytes(key) not in out
    # the control: a constant of a plan does show up this way
    with connect(dsn) as c:
        control = plan_dumps(c, [(sql.SQL("SELECT md5(g.x::text || {}) FROM generate_series(1, 2) AS g(x)")
                                  .format(sql.Literal(key)).as_string(c), None)])
    assert key_bytes(key) in control


def echo(job: Job) -> Any:
    return None


def counting_client(dsn: str) -> tuple[Client, list[float]]:
    """A client whose claim() records the time of each call (in the list returned)."""
    client = Client.connect(dsn, max_size=4)
    claims: list[float] = []
    real_claim = client.claim

    def counting_claim(*args: Any, **kwargs: Any) -> list[Job]:
        claims.append(time.monotonic())
        return real_claim(*args, **kwargs)

    client.claim = counting_claim  # type: ignore[method-assign]
    return client, claims


def test_a_notify_flood_costs_the_worker_a_bounded_number_of_claims(
        dsn: str, conn: Conn, outsider: Conn, queue: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="pgfence.worker")
    client, claims = counting_client(dsn)
    try:
        worker = Worker(client, {"k": echo}, queues=[queue], concurrency=2, poll_interval=5.0,
                        lease=timedelta(seconds=30), run_sweeper=False)
        with running(worker):
            [tag] = client.wakeup_tags([queue]).values()
            time.sleep(0.5)
            # a single real enqueue wakes it at once
            job_id = conn.execute("SELECT pgfence.enqueue('k', queue => %s)", (queue,)).fetchone()[0]  # type: ignore[index]
            wait_for(lambda: conn.execute("SELECT status = 'done' FROM pgfence.all_jobs WHERE id = %s",
                                          (job_id,)).fetchone() == (True,), 3, "the job to be done (woken by NOTIFY)")
            before = len(claims)
            flood_started = time.monotonic()
            for i in range(6000):
                outsider.execute(f"NOTIFY pgfence_enqueue, '{tag}'")
            flood_took = time.monotonic() - flood_started
            time.sleep(0.3)
            during = len(claims) - before
            # one claim per CLAIM_HOLDOFF at most (plus polls and the flood's first second)
            bound = flood_took / claimer_module.CLAIM_HOLDOFF + 20
            assert during <= bound, f"{during} claims during a {flood_took:.2f}s flood (bound {bound:.0f})"
            if 6000 / flood_took > listener_module.NOTIFY_FLOOD:
                assert "not listening for" in caplog.text
            # and real work still gets done
            job_id = conn.execute("SELECT pgfence.enqueue('k', queue => %s)", (queue,)).fetchone()[0]  # type: ignore[index]
            wait_for(lambda: conn.execute("SELECT status = 'done' FROM pgfence.all_jobs WHERE id = %s",
                                          (job_id,)).fetchone() == (True,), 12, "the job after the flood to be done")
    finally:
        client.close()


def test_a_flood_of_a_sets_tag_costs_a_read_a_second_and_the_flood_pause(
        dsn: str, conn: Conn, outsider: Conn, queue: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone who heard a set's tag (define_queue_set sends it) may send it again: the
    worker's listener reads the set at most once per SET_REREAD, counts the tag toward
    the flood pause like any notification, and the set's jobs still run after."""
    caplog.set_level("WARNING", logger="pgfence.worker")
    reads: list[float] = []
    real = listener_module.Listener.wakeup_tags

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(time.monotonic())
        return real(self, *args, **kwargs)
    monkeypatch.setattr(listener_module.Listener, "wakeup_tags", counting)
    name = f"{queue}-set"
    conn.execute("SELECT pgfence.define_queue_set(%s, ARRAY[%s])", (name, queue))
    client = Client.connect(dsn, max_size=4)
    try:
        worker = Worker(client, {"k": echo}, queue_set=name, poll_interval=5.0, run_sweeper=False)
        with running(worker):
            [tag] = client.wakeup_tags([listener_module.set_change_name(name)]).values()
            time.sleep(0.5)
            before = len(reads)
            started = time.monotonic()
            # (one notification per transaction: the same payload twice in one is sent once)
            outsider.execute(sql.SQL("DO $$ BEGIN FOR i IN 1..6000 LOOP PERFORM pg_notify('pgfence_enqueue', {});"
                                     " COMMIT; END LOOP; END $$").format(sql.Literal(tag)))
            took = time.monotonic() - started
            time.sleep(1.5)
            during = len(reads) - before
            bound = (time.monotonic() - started) / listener_module.SET_REREAD + 3
            assert 1 <= during <= bound, f"{during} reads of the set in {time.monotonic() - started:.1f}s"
            if 6000 / took > listener_module.NOTIFY_FLOOD:
                assert "not listening for" in caplog.text
            job_id = conn.execute("SELECT pgfence.enqueue('k', queue => %s)", (queue,)).fetchone()[0]  # type: ignore[index]
            wait_for(lambda: conn.execute("SELECT status = 'done' FROM pgfence.all_jobs WHERE id = %s",
                                          (job_id,)).fetchone() == (True,), 12, "the set's job after the flood")
    finally:
        client.close()
        conn.execute("SELECT pgfence.drop_queue_set(%s)", (name,))


def test_a_worker_ignores_other_queues_tags(dsn: str, conn: Conn, queue: str) -> None:
    client, claims = counting_client(dsn)
    try:
        worker = Worker(client, {"k": echo}, queues=[queue], poll_interval=5.0, run_sweeper=False)
        with running(worker):
            time.sleep(0.5)
            before = len(claims)
            for _ in range(20):
                conn.execute("SELECT pgfence.enqueue('k', queue => %s)", (queue + "_other",))
                time.sleep(0.02)
            time.sleep(0.3)
            assert len(claims) - before <= 1  # (a poll may fall in the window)
    finally:
        client.close()
        conn.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (queue + "_other",))


