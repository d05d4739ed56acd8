"""Helpers for the role and history tests (tests/test_security.py, test_history.py,
test_misuse.py): throwaway LOGIN roles, SET ROLE blocks, expected failures, and
removing a test's jobs afterwards.

Roles are cluster-wide, so each module creates its own (distinct names) and drops
them at teardown with DROP OWNED / DROP ROLE; a role left over by an interrupted
run is dropped before it is created again.
"""
from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import connect

Conn = psycopg.Connection[Any]

# An all-zero token: never issued by claim (gen_random_uuid() is version 4).
ZERO_TOKEN = "00000000-0000-0000-0000-000000000000"


def drop_role(conn: Conn, name: str) -> None:
    """DROP OWNED BY + DROP ROLE, after ending the role's sessions; no-op when absent."""
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is None:
        return
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                 " WHERE usename = %s AND pid <> pg_backend_pid()", (name,))
    ident = sql.Identifier(name)
    conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
    conn.execute(sql.SQL("DROP ROLE {}").format(ident))


@contextmanager
def login_roles(dsn: str, roles: dict[str, str | None]) -> Iterator[None]:
    """Create LOGIN roles {name: pgfence role it is a member of (or None)}; drop them after."""
    with connect(dsn) as c:
        for name, member_of in roles.items():
            drop_role(c, name)
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
            if member_of is not None:
                c.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(member_of), sql.Identifier(name)))
    try:
        yield
    finally:
        with connect(dsn) as c:
            for name in roles:
                drop_role(c, name)


def connect_as(dsn: str, role: str, **kw: Any) -> Conn:
    """A LOGIN connection as role (the test cluster trusts 127.0.0.1)."""
    return connect(dsn, user=role, **kw)


@contextmanager
def grantless_login(dsn: str, prefix: str = "t_nobody") -> Iterator[Conn]:
    """A LOGIN connection of a role made for the block, with no pgfence grant at all (an
    outsider on the same database); the role is dropped after."""
    name = f"{prefix}_{secrets.token_hex(3)}"
    with login_roles(dsn, {name: None}):
        c = connect_as(dsn, name)
        try:
            yield c
        finally:
            c.close()


@contextmanager
def set_role(conn: Conn, role: str) -> Iterator[Conn]:
    """SET ROLE role on conn (autocommit) for the block, RESET ROLE after."""
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        yield conn
    finally:
        conn.execute("RESET ROLE")


def sqlstate_of(conn: Conn, query: str, params: Any = None) -> str | None:
    """Run query; None when it succeeds, else its SQLSTATE (a transactional connection
    is rolled back so it stays usable)."""
    try:
        cur = conn.execute(query, params)
        if cur.description is not None:
            cur.fetchall()
        return None
    except psycopg.Error as e:
        if not conn.autocommit:
            conn.rollback()
        return e.sqlstate


def must_fail(conn: Conn, query: str, params: Any = None) -> psycopg.Error:
    """Run query, which must raise; return the error."""
    with pytest.raises(psycopg.Error) as info:
        conn.execute(query, params)
    if not conn.autocommit:
        conn.rollback()
    return info.value


def id_floor(conn: Conn) -> int:
    """An id below every job enqueued from now on (the identity sequence's last value):
    with it, a test finds its own jobs by primary key instead of scanning the shared table."""
    row = conn.execute("SELECT last_value FROM pgfence.jobs_id_seq").fetchone()
    assert row is not None
    return int(row[0])


def delete_queues(conn: Conn, queues: list[str], floor: int = 0) -> None:
    """Remove the jobs of these queues (ids above floor) with their history and their
    retention rows (as the superuser), so that no job of ours is left for a claim over
    all queues in another test."""
    conn.execute("""
        WITH gone AS (DELETE FROM pgfence.jobs WHERE id > %(floor)s AND queue = ANY(%(q)s) RETURNING id),
             a AS (DELETE FROM pgfence.attempts USING gone WHERE job_id = gone.id),
             r AS (DELETE FROM pgfence.rejections USING gone WHERE job_id = gone.id)
        SELECT count(*) FROM gone""", {"q": queues, "floor": floor})
    conn.execute("DELETE FROM pgfence.retention WHERE queue = ANY(%s)", (queues,))


def sqlstate_rolled_back(conn: Conn, query: str, params: Any = None) -> str | None:
    """Like sqlstate_of, inside a transaction that is always rolled back: a write that
    should have been refused cannot damage the shared database even if it is not."""
    try:
        with conn.transaction(force_rollback=True):
            cur = conn.execute(query, params)
            if cur.description is not None:
                cur.fetchall()
        return None
    except psycopg.Error as e:
        return e.sqlstate
