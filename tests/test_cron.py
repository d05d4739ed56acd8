"""Cron expressions evaluated by pgfence itself (functions/cron): pgfence.cron_next.

A table of expressions against the next fire times they must give (month ends, Feb 29
in leap years, day-of-month/day-of-week OR, steps, names, macros, DST in named zones),
random valid expressions against a Python oracle (days walked, as Vixie cron matches
them), and the refusals of bad expressions (22023 naming the field)."""
from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta, timezone
from typing import Any, Optional

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.db import assert_error, one, sql_error

Conn = psycopg.Connection[Any]
UTC = timezone.utc


def _next(conn: Conn, cron: str, after: str, tz: str = "UTC") -> Optional[str]:
    """cron_next as a UTC text 'YYYY-MM-DD HH:MM'."""
    value = one(conn, "SELECT to_char(pgfence.cron_next(%s, %s::timestamptz, %s) AT TIME ZONE 'UTC',"
                      " 'YYYY-MM-DD HH24:MI')", (cron, after, tz))
    return value  # type: ignore[no-any-return]


CASES = [
    # (cron, after (UTC), time zone, expected next (UTC))
    ("* * * * *", "2026-01-01 00:00:00+00", "UTC", "2026-01-01 00:01"),
    ("* * * * *", "2026-01-01 00:00:30+00", "UTC", "2026-01-01 00:01"),
    ("*/15 * * * *", "2026-01-01 00:07+00", "UTC", "2026-01-01 00:15"),
    ("5-20/5 * * * *", "2026-01-01 00:20+00", "UTC", "2026-01-01 01:05"),
    ("0 */6 * * *", "2026-01-01 07:00+00", "UTC", "2026-01-01 12:00"),
    ("0 0 31 * *", "2026-01-31 12:00+00", "UTC", "2026-03-31 00:00"),       # Feb, Apr skipped
    ("0 0 31 * *", "2026-05-31 00:00+00", "UTC", "2026-07-31 00:00"),       # June has 30 days
    ("0 0 30 * *", "2026-01-30 00:00+00", "UTC", "2026-03-30 00:00"),       # no Feb 30
    ("0 0 29 2 *", "2026-01-01 00:00+00", "UTC", "2028-02-29 00:00"),       # leap year
    ("0 0 29 2 *", "2096-03-01 00:00+00", "UTC", "2104-02-29 00:00"),       # 2100 is no leap year
    ("0 0 28-31 2 *", "2027-02-28 00:00+00", "UTC", "2028-02-28 00:00"),
    ("59 23 31 12 *", "2026-06-01 00:00+00", "UTC", "2026-12-31 23:59"),    # year end
    ("0 9 1 * mon", "2026-01-01 10:00+00", "UTC", "2026-01-05 09:00"),      # dom OR dow
    ("0 9 1 * mon", "2026-01-26 10:00+00", "UTC", "2026-02-01 09:00"),
    ("0 9 */2 * mon", "2026-01-01 10:00+00", "UTC", "2026-01-05 09:00"),    # dom starts with *: AND
    ("0 0 * * 7", "2026-01-01 00:00+00", "UTC", "2026-01-04 00:00"),        # 7 is Sunday
    ("0 0 * * sun", "2026-01-01 00:00+00", "UTC", "2026-01-04 00:00"),
    ("0 0 * * 5-7", "2026-01-03 12:00+00", "UTC", "2026-01-04 00:00"),      # fri-sun
    ("0 0 * * MON-FRI", "2026-01-03 00:00+00", "UTC", "2026-01-05 00:00"),
    ("0 0 1 jan,jul *", "2026-02-01 00:00+00", "UTC", "2026-07-01 00:00"),
    ("0 0 * jan-mar sun", "2026-04-01 10:00+00", "UTC", "2027-01-03 00:00"),
    ("30 4 1,15 * *", "2026-01-01 04:30+00", "UTC", "2026-01-15 04:30"),
    ("0 12 * * *", "2026-01-01 00:00+00", "Asia/Kolkata", "2026-01-01 06:30"),
    ("@hourly", "2026-01-01 10:00+00", "UTC", "2026-01-01 11:00"),
    ("@daily", "2026-01-01 10:00+00", "UTC", "2026-01-02 00:00"),
    ("@weekly", "2026-01-01 10:00+00", "UTC", "2026-01-04 00:00"),
    ("@monthly", "2026-01-01 10:00+00", "UTC", "2026-02-01 00:00"),
    ("@yearly", "2026-01-01 10:00+00", "UTC", "2027-01-01 00:00"),
    # DST, Europe/Berlin: spring forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC)
    ("30 2 * * *", "2026-03-28 12:00+00", "Europe/Berlin", "2026-03-29 01:00"),   # gap: at 03:00 CEST
    ("30 2 * * *", "2026-03-29 01:00+00", "Europe/Berlin", "2026-03-30 00:30"),
    ("0 3 * * *", "2026-03-28 12:00+00", "Europe/Berlin", "2026-03-29 01:00"),    # 03:00 CEST
    ("*/20 * * * *", "2026-03-29 00:50+00", "Europe/Berlin", "2026-03-29 01:00"),  # 02:00..02:40 and 03:00: once
    ("*/20 * * * *", "2026-03-29 01:00+00", "Europe/Berlin", "2026-03-29 01:20"),
    # fall back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice, fires once (the first)
    ("30 2 * * *", "2026-10-24 12:00+00", "Europe/Berlin", "2026-10-25 00:30"),
    ("30 2 * * *", "2026-10-25 00:30+00", "Europe/Berlin", "2026-10-26 01:30"),
    ("0 * * * *", "2026-10-25 00:00+00", "Europe/Berlin", "2026-10-25 02:00"),    # 03:00 CET; 02:00 CET skipped
    # America/New_York: spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC)
    ("30 2 * * *", "2026-03-07 12:00+00", "America/New_York", "2026-03-08 07:00"),
    ("30 2 * * *", "2026-03-08 07:00+00", "America/New_York", "2026-03-09 06:30"),
    # fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 fires once, in EDT (05:30 UTC)
    ("30 1 * * *", "2026-10-31 12:00+00", "America/New_York", "2026-11-01 05:30"),
    ("30 1 * * *", "2026-11-01 05:30+00", "America/New_York", "2026-11-02 06:30"),
]


@pytest.mark.parametrize(("cron", "after", "tz", "expected"), CASES,
                         ids=[f"{c}|{a}|{z}" for c, a, z, _ in CASES])
def test_cron_next_gives_the_expected_fire_time(conn: Conn, cron: str, after: str, tz: str, expected: str) -> None:
    assert _next(conn, cron, after, tz) == expected


def test_a_daily_schedule_fires_once_a_day_across_both_dst_changes(conn: Conn) -> None:
    """Walking 02:30 Europe/Berlin through 2026: one slot per day, 365 of them, each at
    02:30 local except the spring-forward day's (03:00 local, the end of the gap)."""
    slots = [r[0] for r in conn.execute(
        "WITH RECURSIVE s(n, at) AS (SELECT 1, pgfence.cron_next('30 2 * * *', '2026-01-01 00:00+01', 'Europe/Berlin')"
        " UNION ALL SELECT n + 1, pgfence.cron_next('30 2 * * *', at, 'Europe/Berlin') FROM s WHERE n < 365)"
        " SELECT to_char(at AT TIME ZONE 'Europe/Berlin', 'YYYY-MM-DD HH24:MI') FROM s ORDER BY n")]
    assert len(set(s[:10] for s in slots)) == 365
    assert [s for s in slots if not s.endswith("02:30")] == ["2026-03-29 03:00"]


# -- random expressions against an oracle -------------------------------------------------

def _expand(spec: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for item in spec.split(","):
        rng, _, step = item.partition("/")
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = int(rng)
            b = hi if step else a
        out.update(range(a, b + 1, int(step) if step else 1))
    return out


def oracle_next(cron: str, after: datetime) -> Optional[datetime]:
    """The first minute strictly after `after` (UTC) the expression matches: days walked,
    Vixie's rule for the two day fields."""
    m, h, dom, mon, dow = cron.split()
    minutes, hours = _expand(m, 0, 59), _expand(h, 0, 23)
    days, months = _expand(dom, 1, 31), _expand(mon, 1, 12)
    weekdays = {d % 7 for d in _expand(dow, 0, 7)}
    either = not dom.startswith("*") and not dow.startswith("*")
    start = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    day = start.date()
    for _ in range(3700):
        wd = (day.weekday() + 1) % 7  # Sunday 0
        if day.month in months and ((day.day in days or wd in weekdays) if either
                                    else (day.day in days and wd in weekdays)):
            times = sorted(hh * 60 + mm for hh in hours for mm in minutes
                           if day > start.date() or hh * 60 + mm >= start.hour * 60 + start.minute)
            if times:
                return datetime(day.year, day.month, day.day, times[0] // 60, times[0] % 60, tzinfo=UTC)
        day += timedelta(days=1)
    return None


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    item = st.one_of(
        value.map(str),
        st.tuples(value, value).map(lambda t: f"{min(t)}-{max(t)}"),
        st.integers(1, hi - lo + 1).map(lambda s: f"*/{s}"),
        st.tuples(value, value, st.integers(1, hi - lo + 1)).map(lambda t: f"{min(t[:2])}-{max(t[:2])}/{t[2]}"),
    )
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


def _possible(cron: str) -> bool:
    _, _, dom, mon, dow = cron.split()
    if dom.startswith("*") or not dow.startswith("*"):
        return True
    days, months = _expand(dom, 1, 31), _expand(mon, 1, 12)
    return any(d <= (29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31) for d in days for m in months)


EXPRESSIONS = st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12), _field(0, 7)).map(" ".join)
INSTANTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31),
                        timezones=st.just(UTC))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cron=EXPRESSIONS, after=INSTANTS)
def test_cron_next_agrees_with_a_day_walking_oracle_in_utc(conn: Conn, cron: str, after: datetime) -> None:
    if not _possible(cron):
        assert_error(sql_error(conn, "SELECT pgfence.cron_next(%s, %s)", (cron, after)), "22023", "day of month")
        return
    got = one(conn, "SELECT pgfence.cron_next(%s, %s, 'UTC')", (cron, after))
    assert got == oracle_next(cron, after), cron


# -- bad expressions ------------------------------------------------------------------------

BAD = [
    ("60 * * * *", "minute"),
    ("* 24 * * *", "hour"),
    ("* * 0 * *", "day of month"),
    ("* * 32 * *", "day of month"),
    ("* * * 13 *", "month"),
    ("* * * foo *", "month"),
    ("* * * * 8", "day of week"),
    ("* * * * funday", "day of week"),
    ("*/0 * * * *", "minute"),
    ("5-1 * * * *", "minute"),
    ("1-2-3 * * * *", "minute"),
    ("1,,2 * * * *", "minute"),
    ("* */25 * * *", "hour"),
    ("0 0 30 2 *", "day of month"),       # never fires
    ("0 0 31 4,6,9,11 *", "day of month"),
    ("* * * *", "5"),
    ("* * * * * *", "5"),
    ("@reboot", "macro"),
    ("", "1..200"),
]


@pytest.mark.parametrize(("cron", "named"), BAD, ids=[c or "empty" for c, _ in BAD])
def test_a_bad_cron_expression_is_refused_naming_its_field(conn: Conn, cron: str, named: str) -> None:
    err = sql_error(conn, "SELECT pgfence.cron_next(%s)", (cron,))
    assert_error(err, "22023", "cron")
    assert named in (err.diag.message_primary or ""), err.diag.message_primary


def test_cron_next_refuses_null_arguments_and_unknown_zones(conn: Conn) -> None:
    assert_error(sql_error(conn, "SELECT pgfence.cron_next(NULL)"), "22004", "cron")
    assert_error(sql_error(conn, "SELECT pgfence.cron_next('* * * * *', NULL)"), "22004", "after")
    assert_error(sql_error(conn, "SELECT pgfence.cron_next('* * * * *', 'infinity')"), "22023", "after")
    assert_error(sql_error(conn, "SELECT pgfence.cron_next('* * * * *', now(), NULL)"), "22004", "time_zone")
    assert_error(sql_error(conn, "SELECT pgfence.cron_next('* * * * *', now(), 'Mars/Olympus')"), "22023",
                 "time_zone")


def test_python_client_cron_next(client: Any) -> None:
    got = client.cron_next("0 0 29 2 *", datetime(2026, 1, 1, tzinfo=UTC))
    assert got == datetime(2028, 2, 29, tzinfo=UTC)
    assert calendar.isleap(got.year) and date(2028, 2, 29) == got.date()
