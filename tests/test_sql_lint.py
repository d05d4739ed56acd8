"""Static check of every deployed PL/pgSQL function with plpgsql_check.

PL/pgSQL is checked only when a statement first runs, so a column renamed in a
table change, a misspelt variable or a wrong-typed assignment in a branch no test
reaches would deploy cleanly and fail in production. plpgsql_check compiles every
statement of every function against the deployed schema. The extension is created
inside a transaction that is rolled back, so the test database keeps nothing of it.

Errors and plain warnings fail the test. The ``warning extra`` and ``performance``
levels are not failures: they flag, for example, the deliberate endless retry loop
of ``enqueue`` (every exit is a RETURN) and WITH ORDINALITY's bigint ordinals read
into integer variables.
"""
from __future__ import annotations

from typing import Any

import psycopg
import pytest

from support.db import connect

FAILING_LEVELS = ("error", "warning")


def test_every_plpgsql_function_passes_plpgsql_check(dsn: str) -> None:
    with connect(dsn) as probe:
        available = probe.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'plpgsql_check'").fetchone()
    if available is None:
        pytest.skip("plpgsql_check is not installed on this server (scripts/setup.sh installs "
                    "postgresql-<major>-plpgsql-check where the package exists)")
    c: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=False)
    try:
        c.execute("CREATE EXTENSION IF NOT EXISTS plpgsql_check")
        checked = c.execute(
            """SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                WHERE p.pronamespace = 'pgfence'::regnamespace AND l.lanname = 'plpgsql'""").fetchone()
        rows = c.execute(
            """SELECT p.oid::regprocedure::text, r.lineno, r.level, r.message, r.detail, r.query
                 FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang,
                      LATERAL plpgsql_check_function_tb(p.oid, fatal_errors => false,
                          extra_warnings => true, performance_warnings => true,
                          security_warnings => true) r
                WHERE p.pronamespace = 'pgfence'::regnamespace AND l.lanname = 'plpgsql'
                  AND r.level = ANY(%s)
                ORDER BY 1, 2""", (list(FAILING_LEVELS),)).fetchall()
    finally:
        c.rollback()
        c.close()
    assert checked is not None and checked[0] >= 30, f"expected pgfence's PL/pgSQL functions, found {checked}"
    assert rows == [], "plpgsql_check found:\n" + "\n".join(
        f"{fn} line {line} [{level}] {msg} ({detail or ''}) {query or ''}"
        for fn, line, level, msg, detail, query in rows)
