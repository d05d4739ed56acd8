"""Throwaway LOGIN roles and SET ROLE blocks (the privilege, history and misuse tests).

Roles are cluster-wide, so each module creates its own (distinct names) and drops them
at teardown with DROP OWNED / DROP ROLE; a role left over by an interrupted run is
dropped before it is created again.
"""
from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional

from psycopg import sql

from .db import Conn, connect, connection


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
def login_roles(dsn: str, roles: Mapping[str, Optional[str]]) -> Iterator[None]:
    """Create LOGIN roles {name: pgfence role it is a member of (or None)}; drop them after."""
    with connection(dsn) as c:
        for name, member_of in roles.items():
            drop_role(c, name)
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
            if member_of is not None:
                c.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(member_of), sql.Identifier(name)))
    try:
        yield
    finally:
        with connection(dsn) as c:
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
    with login_roles(dsn, {name: None}), connection(dsn, user=name) as c:
        yield c


@contextmanager
def set_role(conn: Conn, role: str) -> Iterator[Conn]:
    """SET ROLE role on conn (autocommit) for the block, RESET ROLE after."""
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        yield conn
    finally:
        conn.execute("RESET ROLE")
