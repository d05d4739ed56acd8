"""Static checks of every deployed routine: plpgsql_check on the PL/pgSQL ones, and no
backslash in a plain string literal of any body.

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

import re
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


# A routine's body is parsed in the session that calls it, with that session's
# standard_conforming_strings: with it off, a backslash in a plain '...' literal is an
# escape ('\x9f' a raw byte: every enqueue and claim once failed so, 22021), with it
# on it is a backslash, and U&'...' is refused outright. A literal that needs a
# backslash is an E'...' string, which reads the same under either setting.
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def _ident_char(c: str) -> bool:
    return c.isalnum() or c in "_$"


def setting_dependent_literals(body: str) -> list[str]:
    """The string literals of SQL or PL/pgSQL text that read otherwise, or not at all,
    with standard_conforming_strings off: plain ('...', not E'...') ones holding a
    backslash, and every U&'...'. Comments (nested /* */ too) and quoted identifiers
    are skipped; a dollar-quoted string is scanned on its own (its text may be SQL run
    later: EXECUTE, a nested body), so a stray quote in it cannot hide what follows."""
    found: list[str] = []
    i, n = 0, len(body)
    while i < n:
        if body.startswith("--", i):
            j = body.find("\n", i)
            i = n if j < 0 else j
        elif body.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if body.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif body.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif body[i] == '"':
            j = body.find('"', i + 1)
            i = n if j < 0 else j + 1
        elif body[i] == "$" and (m := _DOLLAR.match(body, i)) and not (i and _ident_char(body[i - 1])):
            end = body.find(m.group(0), m.end())
            end = n if end < 0 else end
            found += setting_dependent_literals(body[m.end():end])
            i = end + len(m.group(0))
        elif body[i] == "'":
            escaped = i > 0 and body[i - 1] in "Ee" and (i < 2 or not _ident_char(body[i - 2]))
            unicode = i > 1 and body[i - 2:i] in ("U&", "u&") and (i < 3 or not _ident_char(body[i - 3]))
            j, text = i + 1, []
            while j < n:
                if escaped and body[j] == "\\":
                    text.append(body[j:j + 2])
                    j += 2
                elif body[j] == "'" and body.startswith("''", j):
                    text.append("''")
                    j += 2
                elif body[j] == "'":
                    break
                else:
                    text.append(body[j])
                    j += 1
            if unicode or (not escaped and "\\" in "".join(text)):
                found.append(body[max(0, i - 1):j + 1])
            i = j + 1
        else:
            i += 1
    return found


def test_the_literal_scanner_tells_plain_from_escape_strings() -> None:
    body = ("SELECT E'\\x01', e'it''s \\'', '-- not a comment', x ~ '[\\x01]' -- it's '\\x02'\n"
            "/* '\\x03' /* nested */ '\\x07' */ \"a'b\" $q$ '\\x04' $q$ || U&'\\0041' || name'\\x05'"
            " || 'it''s \\x06' || U&'d!0061t' UESCAPE '!' || a$e'\\x08' || $m$can't$m$ || '\\x09'")
    assert setting_dependent_literals(body) == [
        " '[\\x01]'", " '\\x04'", "&'\\0041'", "e'\\x05'", " 'it''s \\x06'", "&'d!0061t'", "e'\\x08'",
        " '\\x09'"]


def routines_with_setting_dependent_literals(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    return {sig: lits for sig, body in conn.execute(
                """SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p
                    WHERE p.pronamespace = 'pgfence'::regnamespace
                      AND (strpos(p.prosrc, chr(92)) > 0 OR strpos(upper(p.prosrc), 'U&' || chr(39)) > 0)
                    ORDER BY 1""").fetchall()
            if (lits := setting_dependent_literals(body))}


def test_no_routine_body_has_a_literal_that_depends_on_standard_conforming_strings(dsn: str) -> None:
    c: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=False)
    try:
        assert routines_with_setting_dependent_literals(c) == {}, (
            "write these as E'' strings (backslashes doubled): with standard_conforming_strings off they read"
            " otherwise")
        # (negative controls: a planted backslash literal and a U&'' literal are found)
        c.execute("CREATE FUNCTION pgfence._planted_literal() RETURNS text LANGUAGE sql AS $$ SELECT '[\\x01]' $$")
        c.execute("CREATE FUNCTION pgfence._planted_unicode() RETURNS text LANGUAGE plpgsql AS $$"
                  " BEGIN RETURN U&'d!0061t' UESCAPE '!'; END $$")
        assert routines_with_setting_dependent_literals(c) == {"pgfence._planted_literal()": [" '[\\x01]'"],
                                                               "pgfence._planted_unicode()": ["&'d!0061t'"]}
    finally:
        c.rollback()
        c.close()
