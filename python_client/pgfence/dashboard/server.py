"""``pgfence dashboard``: check the role, settle the secret, serve the app with uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .._text import escaped_logger, printable
from .security import is_loopback

log = escaped_logger("pgfence.dashboard")

TOKEN_ENV = "PGFENCE_DASHBOARD_TOKEN"


class StartError(Exception):
    """Why the dashboard does not start (reported as a CLI error, exit 1 or 2)."""

    def __init__(self, message: str, hint: Optional[str] = None, code: int = 1) -> None:
        super().__init__(message)
        self.message, self.hint, self.code = message, hint, code


@dataclass
class Options:
    dsn: str
    dsn_from_cli: bool
    bind: str = "127.0.0.1:8484"
    token_file: Optional[str] = None
    no_auth: bool = False
    read_only: bool = False
    allow_superuser: bool = False
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    allowed_hosts: list[str] = field(default_factory=list)
    pool_size: int = 4


def split_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8484`` for IPv6) -> (host, port)."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise StartError(f"--bind must be HOST:PORT, got {bind!r}", code=2)
    host = host.strip("[]")
    try:
        if host not in ("localhost",):
            ipaddress.ip_address(host)
    except ValueError:
        pass  # a name: allowed, and added to the allowed Host headers
    return host, int(port)


def read_token(opts: Options) -> tuple[Optional[str], bool]:
    """(the secret, whether it was generated here). Never from the command line."""
    if opts.no_auth:
        return None, False
    if opts.token_file:
        try:
            token = Path(opts.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise StartError(f"cannot read --token-file: {exc.strerror}") from None
        if len(token) < 16:
            raise StartError("the token in --token-file is shorter than 16 characters")
        return token, False
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        if len(token) < 16:
            raise StartError(f"${TOKEN_ENV} is shorter than 16 characters")
        return token, False
    return secrets.token_urlsafe(24), True


def check_role(pool: ConnectionPool, allow_superuser: bool) -> dict[str, Any]:
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT current_user, r.rolsuper, pg_has_role(current_user, 'pgfence_operator', 'MEMBER'),"
            " to_regrole('pgfence_viewer') IS NOT NULL AND pg_has_role(current_user, 'pgfence_viewer', 'MEMBER')"
            " FROM pg_roles r WHERE r.rolname = current_user").fetchone()
    assert row is not None
    role, superuser, operator, viewer = row
    if superuser and not allow_superuser:
        raise StartError(f"refusing to run as the superuser {printable(role)}",
                         "connect as a login role granted pgfence_operator (or pgfence_viewer for a read-only "
                         "dashboard); --allow-superuser overrides this")
    if not (operator or viewer or superuser):
        raise StartError(f"role {printable(role)} is neither a member of pgfence_operator nor of pgfence_viewer",
                         "GRANT pgfence_operator (or pgfence_viewer) TO the dashboard's login role")
    return {"role": role, "operator": operator or superuser, "viewer": viewer}


def run(opts: Options) -> int:
    import uvicorn

    from .app import Config, create_app

    host, port = split_bind(opts.bind)
    if opts.dsn_from_cli and opts.dsn and "password" in _conninfo(opts.dsn):
        _warn("a password in --dsn is visible to every user of this machine (ps): "
              "use PGPASSWORD, ~/.pgpass or PGFENCE_DSN instead")
    if opts.no_auth and not is_loopback(host):
        raise StartError("--no-auth is allowed on a loopback bind only", code=2)
    if bool(opts.tls_cert) != bool(opts.tls_key):
        raise StartError("--tls-cert and --tls-key go together", code=2)
    if not is_loopback(host) and not opts.tls_cert:
        _warn(f"serving plain HTTP on {printable(host)}: put it behind a TLS-terminating reverse proxy "
              "(docs/dashboard.md) or pass --tls-cert/--tls-key")
    token, generated = read_token(opts)
    pool = ConnectionPool(opts.dsn, min_size=1, max_size=opts.pool_size, kwargs={"autocommit": True},
                          open=True, name="pgfence-dashboard")
    try:
        pool.wait(timeout=30.0)
        who = check_role(pool, opts.allow_superuser)
        hosts = list(opts.allowed_hosts) + ([host] if not _is_ip(host) else [])
        try:
            app = create_app(pool, Config(token=token, bind_host=host, read_only=opts.read_only,
                                          allowed_hosts=hosts, secure_cookie=bool(opts.tls_cert)))
        except RuntimeError as exc:
            raise StartError(str(exc)) from None
        scheme = "https" if opts.tls_cert else "http"
        shown = f"[{host}]" if ":" in host else host
        print(f"pgfence dashboard on {scheme}://{shown}:{port}/ as role {printable(who['role'])}"
              f"{' (read-only)' if app.state.read_only else ''}", file=sys.stderr)
        if generated:
            # Printed once, on the terminal that started it (as Jupyter does); not logged, not in a URL.
            print(f"log in with the token: {token}\n(set ${TOKEN_ENV} or --token-file to choose it)",
                  file=sys.stderr)
        elif token is None:
            print("authentication is OFF (--no-auth, loopback only)", file=sys.stderr)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                    ssl_certfile=opts.tls_cert, ssl_keyfile=opts.tls_key, proxy_headers=False,
                    server_header=False)
    finally:
        pool.close()
    return 0


def _warn(message: str) -> None:
    # (start-up warnings go to the terminal that started it, whatever logging is set to)
    print(f"pgfence dashboard: warning: {message}", file=sys.stderr)


def _conninfo(dsn: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return {}


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host in ("", "0.0.0.0", "::")


__all__ = ["Options", "StartError", "run", "split_bind", "read_token", "check_role", "TOKEN_ENV"]
_ = logging
