"""Schedules: pgfence enqueues a job at each slot of a cron expression or every fixed
interval (functions/schedules), each slot exactly once, fired by the sweeper's passes.

schedule / unschedule / pause_schedule / resume_schedule / schedules() are operator
actions; fire_schedules enqueues due slots (the background sweeper calls it every pass).
Tests that need to know who fires pause the background sweeper (sweep_paused) and call
fire_schedules themselves; the end-to-end test leaves it to the pg_cron sweeper."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from support.db import assert_error, connect, one, rows, sql_error

Conn = psycopg.Connection[Any]
UTC = timezone.utc


@pytest.fixture
def name(dsn: str, queue: str) -> Iterator[str]:
    """A schedule name unique to the test (its queue's name); every schedule starting with
    it, and its queue's jobs, are removed after the test."""
    yield queue
    with connect(dsn) as c:
        c.execute("DELETE FROM pgfence.schedules WHERE starts_with(name, %s)", (queue,))
        c.execute("DELETE FROM pgfence.jobs WHERE starts_with(queue, %s)", (queue,))


def _ledger(conn: Conn, name: str) -> list[tuple[datetime, int]]:
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT slot, job_id FROM pgfence.schedule_slots WHERE schedule = %s ORDER BY slot", (name,))]


def _jobs(conn: Conn, queue: str) -> list[dict[str, Any]]:
    return rows(conn, "SELECT id, kind, payload, priority, max_attempts, recovery_policy, enqueued_by, status"
                      " FROM pgfence.jobs WHERE queue = %s ORDER BY id", (queue,))


def _backdate(conn: Conn, name: str, to: str) -> None:
    """Pretend nothing fired since `to` (an SQL expression): next_fire_at moved back."""
    conn.execute(f"UPDATE pgfence.schedules SET next_fire_at = {to} WHERE name = %s", (name,))


# ------------------------------------------------------------------ behaviour --
def test_schedule_stores_the_schedule_and_returns_its_first_slot(conn: Conn, name: str) -> None:
    first = one(conn, "SELECT pgfence.schedule(%s, '*/5 * * * *', 'report', '{\"a\": 1}', queue => %s,"
                      " priority => 3, max_attempts => 5, recovery_policy => 'manual', time_zone => 'Europe/Berlin',"
                      " catch_up => 'all')", (name, name))
    assert first > datetime.now(UTC) - timedelta(seconds=5) and first.minute % 5 == 0 and first.second == 0
    [s] = rows(conn, "SELECT * FROM pgfence.schedules() WHERE name = %s", (name,))
    assert (s["cron"], s["every"], s["kind"], s["payload"], s["queue"], s["priority"], s["max_attempts"],
            s["recovery_policy"], s["time_zone"], s["catch_up"], s["paused_at"], s["created_by"],
            s["next_fire_at"], s["last_fire_at"], s["last_job_id"]) == (
        "*/5 * * * *", None, "report", {"a": 1}, name, 3, 5, "manual", "Europe/Berlin", "all", None, "postgres",
        first, None, None)


def test_schedule_on_an_existing_name_is_refused_unless_replace(conn: Conn, name: str) -> None:
    conn.execute("SELECT pgfence.schedule(%s, '0 * * * *', 'a')", (name,))
    before = rows(conn, "SELECT * FROM pgfence.schedules WHERE name = %s", (name,))
    assert_error(sql_error(conn, "SELECT pgfence.schedule(%s, '0 0 * * *', 'b')", (name,)), "23505", name)
    assert rows(conn, "SELECT * FROM pgfence.schedules WHERE name = %s", (name,)) == before
    conn.execute("SELECT pgfence.schedule(%s, '0 0 1 1 *', 'a', replace => true)", (name,))
    nxt = one(conn, "SELECT pgfence.schedule(%s, kind => 'b', every => '10 seconds', replace => true)", (name,))
    assert conn.execute("SELECT cron, every, kind, next_fire_at FROM pgfence.schedules WHERE name = %s",
                        (name,)).fetchone() == (None, timedelta(seconds=10), "b", nxt)
    assert nxt <= datetime.now(UTC) + timedelta(seconds=11)  # not the yearly slot it replaced


def test_due_slots_are_enqueued_once_with_the_schedule_options_and_its_creator(
        conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'tick', payload => '{\"x\": 2}', queue => %s, priority => 7,"
                 " max_attempts => 2, every => '1 hour', catch_up => 'all')", (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '2 hours'")
    assert one(conn, "SELECT pgfence.fire_schedules()") >= 3
    jobs = _jobs(conn, name)
    assert [(j["kind"], j["payload"], j["priority"], j["max_attempts"], j["recovery_policy"], j["enqueued_by"],
             j["status"]) for j in jobs] == [("tick", {"x": 2}, 7, 2, "auto", "postgres", "queued")] * 3
    ledger = _ledger(conn, name)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    assert ledger == [(hour - timedelta(hours=2), jobs[0]["id"]), (hour - timedelta(hours=1), jobs[1]["id"]),
                      (hour, jobs[2]["id"])]
    s = rows(conn, "SELECT * FROM pgfence.schedules() WHERE name = %s", (name,))[0]
    assert (s["next_fire_at"], s["last_slot"], s["last_job_id"]) == (hour + timedelta(hours=1), hour, jobs[2]["id"])
    assert s["last_fire_at"] is not None
    # nothing due: nothing more
    conn.execute("SELECT pgfence.fire_schedules()")
    assert len(_jobs(conn, name)) == 3


def test_slot_key_puts_each_jobs_slot_into_its_payload_only_when_asked(conn: Conn, name: str,
                                                                       sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'k', payload => '{\"a\": 1}', queue => %s, every => '1 hour',"
                 " catch_up => 'all', slot_key => 'slot')", (name, name))
    conn.execute("SELECT pgfence.schedule(%s, kind => 'k', payload => '{\"a\": 1}', queue => %s, every => '1 hour',"
                 " catch_up => 'all')", (name + "_plain", name))
    for n in (name, name + "_plain"):
        _backdate(conn, n, "date_trunc('hour', clock_timestamp()) - interval '1 hour'")
    conn.execute("SELECT pgfence.fire_schedules()")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    payloads = sorted((j["payload"] for j in _jobs(conn, name)), key=lambda p: p.get("slot", ""))
    assert payloads == [{"a": 1}, {"a": 1}] + [
        {"a": 1, "slot": (hour - timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ")} for h in (1, 0)]
    assert one(conn, "SELECT slot_key FROM pgfence.schedules() WHERE name = %s", (name,)) == "slot"


@pytest.mark.parametrize(("catch_up", "fired"), [("all", 4), ("latest", 1), ("none", 0)])
def test_catch_up_after_downtime(conn: Conn, name: str, sweep_paused: Conn, catch_up: str, fired: int) -> None:
    """Three days of a daily schedule missed: all enqueues each missed slot (3 days ago
    .. today 00:00 UTC), latest only today's, none nothing (today's is hours late)."""
    if datetime.now(UTC).hour == 0 and datetime.now(UTC).minute < 2:
        pytest.skip("today's slot is less than a minute old")
    conn.execute("SELECT pgfence.schedule(%s, kind => 'd', queue => %s, every => '1 day', catch_up => %s)",
                 (name, name, catch_up))
    _backdate(conn, name, "date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
                          " - interval '3 days'")
    conn.execute("SELECT pgfence.fire_schedules()")
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert [slot for slot, _ in _ledger(conn, name)] == [today - timedelta(days=d) for d in range(fired - 1, -1, -1)]
    assert len(_jobs(conn, name)) == fired
    assert one(conn, "SELECT next_fire_at FROM pgfence.schedules WHERE name = %s", (name,)) == today + timedelta(days=1)


def test_catch_up_all_enqueues_at_most_the_newest_100_missed_slots(conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, '* * * * *', 'm', queue => %s, catch_up => 'all')", (name, name))
    _backdate(conn, name, "date_trunc('minute', clock_timestamp()) - interval '3 hours'")
    now = one(conn, "SELECT date_trunc('minute', clock_timestamp())")
    conn.execute("SELECT pgfence.fire_schedules(1000)")
    slots = [slot for slot, _ in _ledger(conn, name)]
    assert len(slots) == 100 and len(_jobs(conn, name)) == 100
    assert slots[-1] >= now and slots == [slots[-1] - timedelta(minutes=99 - i) for i in range(100)]


def test_catch_up_latest_of_a_cron_schedule_fires_only_the_newest_missed_slot(
        conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, '0 0 1 * *', 'monthly', queue => %s)", (name, name))
    _backdate(conn, name, "'2020-01-01 00:00+00'")
    conn.execute("SELECT pgfence.fire_schedules()")
    first_of_month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert [slot for slot, _ in _ledger(conn, name)] == [first_of_month]


def test_max_slots_bounds_a_fire_and_the_rest_fire_at_the_next_call(conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                 (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '9 hours'")
    assert one(conn, "SELECT pgfence.fire_schedules(4)") == 4
    assert len(_ledger(conn, name)) == 4
    conn.execute("SELECT pgfence.fire_schedules(100)")
    slots = [slot for slot, _ in _ledger(conn, name)]
    assert len(slots) == 10 and len(set(slots)) == 10 and len(_jobs(conn, name)) == 10


def test_a_slot_in_the_ledger_never_fires_again_even_when_next_fire_at_goes_back(
        conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                 (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '3 hours'")
    conn.execute("SELECT pgfence.fire_schedules()")
    before = _ledger(conn, name)
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '3 hours'")  # a stale restart
    assert one(conn, "SELECT pgfence.fire_schedules()") == 0
    assert _ledger(conn, name) == before and len(_jobs(conn, name)) == 4


def test_two_concurrent_firers_enqueue_each_slot_exactly_once(dsn: str, conn: Conn, name: str,
                                                              sweep_paused: Conn) -> None:
    names = [f"{name}_{i}" for i in range(10)]
    for n in names:
        conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                     (n, name))
        _backdate(conn, n, "date_trunc('hour', clock_timestamp()) - interval '50 hours'")
    totals: list[int] = []
    errors: list[BaseException] = []

    def firer() -> None:
        try:
            with connect(dsn) as c:
                n = 0
                while True:
                    got = one(c, "SELECT pgfence.fire_schedules(7)")
                    n += got
                    if got == 0 and one(c, "SELECT count(*) FROM pgfence.schedules WHERE starts_with(name, %s)"
                                           " AND next_fire_at <= clock_timestamp()", (name,)) == 0:
                        break
                totals.append(n)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=firer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(totals) == 2
    ledger = conn.execute("SELECT schedule, slot, job_id FROM pgfence.schedule_slots"
                          " WHERE starts_with(schedule, %s)", (name,)).fetchall()
    jobs = [j["id"] for j in _jobs(conn, name)]
    assert sum(totals) == len(ledger) == len(jobs) == 10 * 51
    assert sorted(j for _, _, j in ledger) == sorted(jobs)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for n in names:
        assert sorted(s for sc, s, _ in ledger if sc == n) == [hour - timedelta(hours=h) for h in range(50, -1, -1)]


def test_a_firer_killed_before_its_commit_loses_and_duplicates_no_slot(dsn: str, conn: Conn, name: str,
                                                                       sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                 (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '5 hours'")
    victim = connect(dsn, autocommit=False)
    try:
        pid = one(victim, "SELECT pg_backend_pid()")
        assert one(victim, "SELECT pgfence.fire_schedules()") == 6  # enqueued and ledgered, not committed
        assert one(conn, "SELECT pgfence.fire_schedules()") == 0    # the row is taken: skipped, not waited for
        assert one(conn, "SELECT pg_terminate_backend(%s)", (pid,)) is True
    finally:
        try:
            victim.close()
        except psycopg.Error:
            pass
    deadline = time.monotonic() + 30
    while one(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ledger(conn, name) == [] and _jobs(conn, name) == []  # rolled back with the crash
    assert one(conn, "SELECT pgfence.fire_schedules()") == 6      # the restart fires them, once
    assert one(conn, "SELECT pgfence.fire_schedules()") == 0
    slots = [slot for slot, _ in _ledger(conn, name)]
    assert len(slots) == len(set(slots)) == 6 and len(_jobs(conn, name)) == 6


def test_the_pg_cron_sweeper_enqueues_due_slots_with_no_worker_running(conn: Conn, name: str) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'tick', queue => %s, every => '1 second')", (name, name))
    deadline = time.monotonic() + 90
    while len(_jobs(conn, name)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    jobs = _jobs(conn, name)
    assert len(jobs) >= 3
    ledger = _ledger(conn, name)
    assert len(ledger) == len(jobs) and len({s for s, _ in ledger}) == len(ledger)
    assert all(s.microsecond == 0 for s, _ in ledger)  # slots on whole seconds since the epoch


def test_a_paused_schedule_fires_nothing_and_resumes_from_its_next_slot(conn: Conn, name: str,
                                                                         sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                 (name, name))
    assert one(conn, "SELECT pgfence.pause_schedule(%s)", (name,)) is True
    assert one(conn, "SELECT pgfence.pause_schedule(%s)", (name,)) is False
    assert one(conn, "SELECT paused_by FROM pgfence.schedules() WHERE name = %s", (name,)) == "postgres"
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '3 hours'")
    conn.execute("SELECT pgfence.fire_schedules()")
    assert _ledger(conn, name) == []
    assert one(conn, "SELECT pgfence.resume_schedule(%s)", (name,)) is True
    assert one(conn, "SELECT pgfence.resume_schedule(%s)", (name,)) is False
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    assert one(conn, "SELECT next_fire_at FROM pgfence.schedules WHERE name = %s", (name,)) == hour + timedelta(hours=1)
    conn.execute("SELECT pgfence.fire_schedules()")
    assert _ledger(conn, name) == []


def test_unschedule_removes_the_schedule_and_its_ledger_but_not_its_jobs(conn: Conn, name: str,
                                                                        sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour')", (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp())")
    conn.execute("SELECT pgfence.fire_schedules()")
    assert len(_ledger(conn, name)) == 1
    assert one(conn, "SELECT pgfence.unschedule(%s)", (name,)) is True
    assert one(conn, "SELECT pgfence.unschedule(%s)", (name,)) is False
    assert _ledger(conn, name) == [] and len(_jobs(conn, name)) == 1


def test_the_ledger_keeps_the_newest_1000_slots_per_schedule(conn: Conn, name: str, sweep_paused: Conn) -> None:
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour')", (name, name))
    conn.execute("INSERT INTO pgfence.schedule_slots (schedule, slot, job_id, fired_at)"
                 " SELECT %s, date_trunc('hour', clock_timestamp()) - g * interval '1 hour', 0, now()"
                 " FROM generate_series(1, 1100) g", (name,))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp())")
    assert one(conn, "SELECT pgfence.fire_schedules()") == 1
    ledger = _ledger(conn, name)
    assert len(ledger) == 1000 and ledger[-1][0] == datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def test_a_schedule_that_cannot_fire_keeps_its_error_and_the_others_fire(conn: Conn, name: str,
                                                                         sweep_paused: Conn) -> None:
    """A schedule whose job cannot be enqueued (a kind stored before a rule, written here
    by hand) is rolled back alone: its error is kept on its row, it stays due, and the
    other schedules fire; once fixed it fires and the error is cleared."""
    conn.execute("INSERT INTO pgfence.schedules (name, every, kind, queue, created_at, created_by, next_fire_at)"
                 " VALUES (%s, '1 hour', E'bad\\nkind', %s, now(), 'postgres',"
                 " date_trunc('hour', clock_timestamp()))", (name + "_bad", name))
    conn.execute("SELECT pgfence.schedule(%s, kind => 'good', queue => %s, every => '1 hour')", (name + "_good", name))
    _backdate(conn, name + "_good", "date_trunc('hour', clock_timestamp())")
    assert one(conn, "SELECT pgfence.fire_schedules()") == 1
    assert [j["kind"] for j in _jobs(conn, name)] == ["good"]
    bad = rows(conn, "SELECT * FROM pgfence.schedules() WHERE name = %s", (name + "_bad",))[0]
    assert bad["last_error"].startswith("pgfence: invalid kind") and "22023" in bad["last_error"]
    assert bad["last_error_at"] is not None and bad["last_fire_at"] is None
    assert bad["next_fire_at"] <= datetime.now(UTC)  # still due: tried again
    conn.execute("UPDATE pgfence.schedules SET kind = 'fixed' WHERE name = %s", (name + "_bad",))
    assert one(conn, "SELECT pgfence.fire_schedules()") == 1
    assert one(conn, "SELECT last_error FROM pgfence.schedules() WHERE name = %s", (name + "_bad",)) is None


def test_a_failing_fire_is_logged_by_the_sweeper_and_its_passes_go_on(conn: Conn, name: str) -> None:
    """fire_schedules failing as a whole (here: its table renamed away for a moment) is
    recorded in sweeper_status.last_error, and the sweeper's passes go on."""
    conn.execute("SET lock_timeout = '30s'")
    conn.execute("ALTER TABLE pgfence.schedules RENAME TO schedules_away")
    try:
        deadline = time.monotonic() + 90
        last = None
        while time.monotonic() < deadline:
            last = conn.execute("SELECT last_error, last_error_at, last_pass_at FROM pgfence.sweeper_health()"
                                ).fetchone()
            if last and last[0] and last[0].startswith("fire_schedules failed") \
                    and last[1] > datetime.now(UTC) - timedelta(seconds=30):
                break
            time.sleep(0.2)
    finally:
        conn.execute("ALTER TABLE pgfence.schedules_away RENAME TO schedules")
    assert last and last[0].startswith("fire_schedules failed") and "42P01" in last[0], last
    passed = last[2]
    while one(conn, "SELECT last_pass_at FROM pgfence.sweeper_health()") == passed and time.monotonic() < deadline:
        time.sleep(0.1)
    assert one(conn, "SELECT last_pass_at FROM pgfence.sweeper_health()") > passed


# ------------------------------------------------------------------ bad input --
BAD = [
    ({"name": None}, "22004", "name"),
    ({"name": ""}, "22023", "name"),
    ({"name": "a\nb"}, "22023", "name"),
    ({"cron": None}, "22004", "cron"),
    ({"cron": "61 * * * *"}, "22023", "minute"),
    ({"cron": "* * * * *", "every": "1 minute"}, "22023", "every"),
    ({"cron": None, "every": "0.5 seconds"}, "22023", "every"),
    ({"cron": None, "every": "1.5 seconds"}, "22023", "every"),
    ({"cron": None, "every": "1 mon"}, "22023", "every"),
    ({"cron": None, "every": "400 days"}, "22023", "every"),
    ({"cron": None, "every": "-1 hour"}, "22023", "every"),
    ({"kind": None}, "22004", "kind"),
    ({"kind": " k"}, "22023", "kind"),
    ({"payload": None}, "22004", "payload"),
    ({"payload": "[1]"}, "22023", "payload"),
    ({"queue": None}, "22004", "queue"),
    ({"queue": ""}, "22023", "queue"),
    ({"priority": None}, "22004", "priority"),
    ({"max_attempts": 0}, "22023", "max_attempts"),
    ({"max_attempts": None}, "22004", "max_attempts"),
    ({"recovery_policy": "maybe"}, "22023", "recovery_policy"),
    ({"recovery_policy": None}, "22004", "recovery_policy"),
    ({"time_zone": None}, "22004", "time_zone"),
    ({"time_zone": "Mars/Olympus"}, "22023", "time_zone"),
    ({"catch_up": None}, "22004", "catch_up"),
    ({"catch_up": "some"}, "22023", "catch_up"),
    ({"replace": None}, "22004", "replace"),
    ({"slot_key": ""}, "22023", "slot_key"),
    ({"slot_key": "a\nb"}, "22023", "slot_key"),
]
_TYPES = {"name": "text", "cron": "text", "kind": "text", "payload": "jsonb", "queue": "text", "priority": "integer",
          "max_attempts": "integer", "recovery_policy": "text", "time_zone": "text", "catch_up": "text",
          "every": "interval", "replace": "boolean", "slot_key": "text"}


@pytest.mark.parametrize(("args", "sqlstate", "named"), BAD, ids=[f"{k}={v!r}" for a, _, _ in BAD
                                                                  for k, v in list(a.items())[-1:]])
def test_schedule_refuses_bad_arguments_naming_them_and_changes_nothing(
        conn: Conn, name: str, args: dict[str, Any], sqlstate: str, named: str) -> None:
    call = {"name": name, "cron": "*/5 * * * *", "kind": "k", **args}
    before = one(conn, "SELECT count(*) FROM pgfence.schedules")
    sql = "SELECT pgfence.schedule(" + ", ".join(f"{k} => %({k})s::{_TYPES[k]}" for k in call) + ")"
    err = sql_error(conn, sql, call)
    assert_error(err, sqlstate, named)
    assert one(conn, "SELECT count(*) FROM pgfence.schedules") == before


@pytest.mark.parametrize("fn", ["unschedule", "pause_schedule", "resume_schedule"])
def test_schedule_actions_refuse_null_and_bad_names(conn: Conn, fn: str) -> None:
    assert_error(sql_error(conn, f"SELECT pgfence.{fn}(NULL)"), "22004", "name")
    assert_error(sql_error(conn, f"SELECT pgfence.{fn}('')"), "22023", "name")
    if fn != "unschedule":
        assert_error(sql_error(conn, f"SELECT pgfence.{fn}('t_no_such_schedule')"), "22023", "no such schedule")


def test_fire_schedules_refuses_bad_max_slots_and_repeatable_read(conn: Conn, tx_conn: Conn) -> None:
    assert_error(sql_error(conn, "SELECT pgfence.fire_schedules(NULL)"), "22004", "max_slots")
    assert_error(sql_error(conn, "SELECT pgfence.fire_schedules(0)"), "22023", "max_slots")
    assert_error(sql_error(conn, "SELECT pgfence.fire_schedules(10001)"), "22023", "max_slots")
    tx_conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    assert sql_error(tx_conn, "SELECT pgfence.fire_schedules()").sqlstate == "PF004"


# ------------------------------------------------------------------ roles --
def test_only_operators_schedule_and_their_role_enqueues_the_jobs(dsn: str, conn: Conn, name: str,
                                                                   sweep_paused: Conn) -> None:
    from support.roles import connect_as, login_roles
    with login_roles(dsn, {"t_sc_worker": "pgfence_worker", "t_sc_prod": "pgfence_producer",
                           "t_sc_oper": "pgfence_operator"}):
        for role in ("t_sc_worker", "t_sc_prod"):
            with connect_as(dsn, role) as c:
                for call in ("SELECT pgfence.schedule(%s, '* * * * *', 'k')", "SELECT pgfence.unschedule(%s)",
                             "SELECT pgfence.pause_schedule(%s)", "SELECT pgfence.resume_schedule(%s)",
                             "SELECT count(*) FROM pgfence.schedules() WHERE name = %s",
                             "SELECT pgfence.fire_schedules(1) WHERE %s::text IS NOT NULL",
                             "SELECT count(*) FROM pgfence.schedules WHERE name = %s"):
                    assert_error(sql_error(c, call, (name,)), "42501", hint=False)
        assert one(conn, "SELECT count(*) FROM pgfence.schedules WHERE name = %s", (name,)) == 0
        with connect_as(dsn, "t_sc_oper") as c:
            c.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour')", (name, name))
            _backdate(conn, name, "date_trunc('hour', clock_timestamp())")
            assert one(c, "SELECT pgfence.fire_schedules()") == 1
            assert one(c, "SELECT created_by FROM pgfence.schedules() WHERE name = %s", (name,)) == "t_sc_oper"
        assert [j["enqueued_by"] for j in _jobs(conn, name)] == ["t_sc_oper"]
        # row-level security: a producer does not see the operator's scheduled job
        with connect_as(dsn, "t_sc_prod") as c:
            assert one(c, "SELECT count(*) FROM pgfence.jobs WHERE queue = %s", (name,)) == 0
        conn.execute("DELETE FROM pgfence.jobs WHERE queue = %s", (name,))
        conn.execute("DELETE FROM pgfence.schedules WHERE name = %s", (name,))


# ------------------------------------------------------------------ Python client --
def test_python_client_schedules_lists_pauses_fires_and_unschedules(client: Any, conn: Conn, name: str,
                                                                     sweep_paused: Conn) -> None:
    from pgfence import InvalidArgument, Schedule
    first = client.schedule(name, kind="py", payload={"n": 1}, queue=name, every=timedelta(hours=1),
                            catch_up="all")
    assert first == datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    with pytest.raises(psycopg.errors.UniqueViolation):
        client.schedule(name, "* * * * *", "py")
    client.schedule(name, kind="py", payload={"n": 2}, queue=name, every=timedelta(hours=1), catch_up="all",
                    replace=True)
    [s] = [s for s in client.schedules() if s.name == name]
    assert isinstance(s, Schedule) and (s.every, s.kind, s.payload, s.catch_up, s.paused_at) == (
        timedelta(hours=1), "py", {"n": 2}, "all", None)
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '1 hour'")
    assert client.pause_schedule(name) is True
    client.fire_schedules()
    assert _ledger(conn, name) == []
    assert client.resume_schedule(name) is True
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '1 hour'")
    client.fire_schedules()
    assert len(_ledger(conn, name)) == 2
    [s] = [s for s in client.schedules() if s.name == name]
    assert s.last_job_id == _ledger(conn, name)[-1][1]
    with pytest.raises(InvalidArgument) as info:
        client.schedule(name + "_x", "0 0 * * 9", "py")
    assert "day of week" in str(info.value)
    with pytest.raises(InvalidArgument):
        client.pause_schedule(name + "_none")
    assert client.unschedule(name) is True and client.unschedule(name) is False


# ------------------------------------------------------------------ without pg_cron --
def test_call_sweep_fires_due_schedules_as_the_workers_stand_in_sweeper_does(client: Any, conn: Conn, name: str,
                                                                             sweep_paused: Conn) -> None:
    """What drives schedules without pg_cron: the Python worker's stand-in sweeper runs
    CALL pgfence.sweep() (Client.sweep), which fires due slots after its reclaims."""
    conn.execute("SELECT pgfence.schedule(%s, kind => 'h', queue => %s, every => '1 hour', catch_up => 'all')",
                 (name, name))
    _backdate(conn, name, "date_trunc('hour', clock_timestamp()) - interval '1 hour'")
    client.sweep()
    assert len(_ledger(conn, name)) == 2 and len(_jobs(conn, name)) == 2
    client.sweep()
    assert len(_jobs(conn, name)) == 2


# ------------------------------------------------------------------ CLI --
def test_cli_schedule_add_list_pause_resume_remove(dsn: str, conn: Conn, name: str, sweep_paused: Conn) -> None:
    # (the sweeper paused: an every-10-seconds slot fired by it between the add and the
    # list would make "last never" untrue)
    from support.processes import run_cli
    out = run_cli(dsn, "schedule", "add", name, "report", '{"a": 1}', "--cron", "30 2 * * *",
                  "--time-zone", "Europe/Berlin", "--queue", name, "--catch-up", "all")
    assert out.returncode == 0 and out.stdout.startswith(f"schedule {name}: first slot "), out.stderr
    again = run_cli(dsn, "schedule", "add", name, "report", "--every", "10")
    assert again.returncode == 1 and "exists" in again.stderr and "hint: pass replace" in again.stderr
    assert run_cli(dsn, "schedule", "add", name, "report", "--every", "10", "--replace").returncode == 0
    listed = run_cli(dsn, "schedule", "list").stdout
    [line] = [ln for ln in listed.splitlines() if ln.startswith(name + ":")]
    assert "every 10s" in line and "kind report" in line and "last never" in line
    assert run_cli(dsn, "schedule", "pause", name).stdout == f"schedule {name} paused\n"
    assert "paused since" in [ln for ln in run_cli(dsn, "schedule", "list").stdout.splitlines()
                              if ln.startswith(name + ":")][0]
    assert run_cli(dsn, "schedule", "resume", name).stdout == f"schedule {name} resumed\n"
    bad = run_cli(dsn, "schedule", "add", name + "_x", "k", "--cron", "0 0 * * 9")
    assert bad.returncode == 1 and "day of week" in bad.stderr
    assert run_cli(dsn, "schedule", "remove", name).stdout == f"schedule {name} removed\n"
    assert run_cli(dsn, "schedule", "remove", name).stdout == f"no schedule {name}\n"


def test_cli_schedule_list_escapes_what_it_prints(dsn: str, conn: Conn, name: str) -> None:
    from support.processes import run_cli
    hostile = "x\x1b[31mRED\nforged: line\u202eevil\x07"
    conn.execute("INSERT INTO pgfence.schedules (name, every, kind, queue, created_at, created_by, next_fire_at,"
                 " paused_at, paused_by, last_error, last_error_at) VALUES (%s, '1 hour', %s, %s, now(), 'postgres',"
                 " 'infinity', now(), %s, %s, now())",
                 (name + hostile, "k" + hostile, name, "p" + hostile, "e" + hostile))
    out = run_cli(dsn, "schedule", "list")
    assert out.returncode == 0, out.stderr
    assert not any(c in out.stdout for c in "\x1b\x07\u202e")
    assert not any(ln.startswith("forged") for ln in out.stdout.splitlines())
    assert "failing since" in out.stdout
    assert "\\u001b[31mRED\\u000aforged" in out.stdout


# ------------------------------------------------------------------ upgrade --
def test_sqitch_upgrades_a_database_deployed_at_v0_7_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """`sqitch deploy` from @v0.7.0 adds schedules (and sweeps that fire them) next to live
    jobs; `sqitch revert --to @v0.7.0` drops them and restores the sweep exactly; the jobs
    schedules enqueued stay."""
    from support.db import sqitch, sqitch_target
    target = sqitch_target(scratch_dsn)

    def ok(r: Any, what: str) -> None:
        assert r.returncode == 0, f"{what}: {r.stdout}\n{r.stderr}"

    reworked = ["pgfence.sweep(bigint, integer)", "pgfence.sweeper_step(pgfence.sweeper_state)",
                "pgfence.run_sweeper(interval, timestamptz)"]

    def state(c: Conn) -> dict[str, Any]:
        return {r: c.execute("SELECT proacl::text, proconfig, md5(prosrc) FROM pg_proc WHERE oid = %s::regprocedure",
                             (r,)).fetchone() for r in reworked}

    ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    with connect(scratch_dsn) as c:
        before = state(c)
        live = one(c, "SELECT pgfence.enqueue('k', queue => 'q1')")
    ok(sqitch("deploy", target=target), "deploy (upgrade)")
    ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert state(c) != before
        c.execute("SELECT pgfence.schedule('s1', kind => 'tick', queue => 'q1', every => '1 hour', catch_up => 'all')")
        c.execute("UPDATE pgfence.schedules SET next_fire_at = date_trunc('hour', clock_timestamp())")
        c.execute("CALL pgfence.sweep()")
        assert one(c, "SELECT count(*) FROM pgfence.jobs WHERE queue = 'q1' AND kind = 'tick'") == 1
    ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert state(c) == before
        assert c.execute("SELECT to_regclass('pgfence.schedules'), to_regclass('pgfence.schedule_slots'),"
                         " to_regprocedure('pgfence.fire_schedules(integer)'),"
                         " to_regprocedure('pgfence.cron_next(text, timestamptz, text)')").fetchone() \
            == (None, None, None, None)
        assert one(c, "SELECT count(*) FROM pgfence.routine_grants WHERE routine IN ('schedule', 'fire_schedules',"
                      " 'cron_next')") == 0
        assert one(c, "SELECT count(*) FROM pgfence.jobs WHERE queue = 'q1'") == 2  # live and the scheduled one
        assert one(c, "SELECT status FROM pgfence.jobs WHERE id = %s", (live,)) == "queued"
        c.execute("CALL pgfence.sweep()")
    ok(sqitch("deploy", target=target), "deploy again")


def test_a_schedule_whose_time_zone_is_gone_keeps_its_error_and_the_others_fire(conn: Conn, name: str,
                                                                                 sweep_paused: Conn) -> None:
    """A zone that tzdata no longer has (Debian moved US/Eastern and the other legacy
    links to tzdata-legacy) makes _cron_next raise 22023. Before the review that was
    outside the per-schedule block, so fire_schedules failed as a whole and no schedule
    fired at all while that one was due."""
    conn.execute("SELECT pgfence.schedule(%s, '* * * * *', kind => 'tz', queue => %s, time_zone => 'Europe/Berlin')",
                 (name + "_a_tz", name))
    conn.execute("SELECT pgfence.schedule(%s, kind => 'good', queue => %s, every => '1 hour')", (name + "_good", name))
    # (as a tzdata upgrade would leave it: the zone was valid when the schedule was made)
    conn.execute("UPDATE pgfence.schedules SET time_zone = 'Gone/Nowhere' WHERE name = %s", (name + "_a_tz",))
    _backdate(conn, name + "_a_tz", "date_trunc('minute', clock_timestamp()) - interval '2 minutes'")
    _backdate(conn, name + "_good", "date_trunc('hour', clock_timestamp())")
    assert one(conn, "SELECT pgfence.fire_schedules()") == 1
    assert [j["kind"] for j in _jobs(conn, name)] == ["good"]
    bad = rows(conn, "SELECT * FROM pgfence.schedules() WHERE name = %s", (name + "_a_tz",))[0]
    assert "Gone/Nowhere" in bad["last_error"] and bad["last_fire_at"] is None
    assert bad["next_fire_at"] <= datetime.now(UTC)  # still due: tried again once the zone is back
    conn.execute("UPDATE pgfence.schedules SET time_zone = 'Europe/Berlin' WHERE name = %s", (name + "_a_tz",))
    assert one(conn, "SELECT pgfence.fire_schedules()") == 1
    assert one(conn, "SELECT last_error FROM pgfence.schedules() WHERE name = %s", (name + "_a_tz",)) is None
