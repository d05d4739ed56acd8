"""The dashboard's web security: authentication, sessions, CSRF, Host/Origin checks, headers.

* Authentication is on by default, loopback included: one secret (a token) read from
  ``PGFENCE_DASHBOARD_TOKEN`` or a file, or generated at start and printed on stderr
  (as Jupyter does). It is typed into the login form (never in a URL) and exchanged
  for a random session id in an ``HttpOnly; SameSite=Strict`` cookie; ``/metrics``
  also takes it as ``Authorization: Bearer``.
* Every POST carries the session's CSRF token (a hidden field), compared in constant
  time; its Origin (or Referer) must be one of the allowed origins.
* The Host header must be one of the allowed hosts (DNS rebinding: a page of another
  site resolving its name to 127.0.0.1 arrives with its own name as Host).
* Every response has a Content-Security-Policy (``script-src 'self'``: no inline
  script runs, even one that escaping missed), ``X-Frame-Options: DENY``,
  ``nosniff`` and ``no-referrer``.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import urlsplit

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # (no-referrer would make Chromium send "Origin: null" on our own POSTs)
    "cache-control": "no-store",
}

#: The largest request body taken, by its Content-Length (a body without one is refused): the
#: largest form the dashboard takes is a mark-done result of at most 1 MiB (Starlette's cap
#: per field), a note and 1,000 fields (Starlette's cap); Starlette reads a form whole before
#: it counts, and /login reads one before any log-in.
MAX_BODY = 4 << 20

SESSION_COOKIE = "pgfence_session"
SESSION_SECONDS = 12 * 3600


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Session:
    csrf: str
    expires: float
    actor: str = "dashboard"   # the name typed at login: the audit's informational actor


@dataclass
class Auth:
    """The secret and the live sessions (kept in memory: a restart logs everyone out)."""

    token: Optional[str]                      # None: authentication off (loopback only)
    sessions: dict[str, Session] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def check_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), expires=time.time() + SESSION_SECONDS)
        self.sessions[sid] = session
        self._expire()
        return sid, session

    def session(self, sid: Optional[str]) -> Optional[Session]:
        if not sid:
            return None
        s = self.sessions.get(sid)
        if s is None or s.expires < time.time():
            self.sessions.pop(sid, None)
            return None
        return s

    def end(self, sid: Optional[str]) -> None:
        if sid:
            self.sessions.pop(sid, None)

    def _expire(self) -> None:
        now = time.time()
        for sid in [k for k, v in self.sessions.items() if v.expires < now]:
            del self.sessions[sid]


def csrf_ok(session: Session, given: Optional[str]) -> bool:
    return bool(given) and hmac.compare_digest(session.csrf.encode(), str(given).encode())


def host_of(header: str) -> str:
    """The host part of a Host header (``[::1]:8484`` -> ``::1``)."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def origin_host(value: str) -> Optional[str]:
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.hostname.lower()
