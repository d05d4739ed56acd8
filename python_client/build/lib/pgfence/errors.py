"""Exceptions, mapped from SQLSTATEs in one place.

The database raises ``PF001`` (lease lost), ``PF002`` (job not found), ``PF003``
(refused transition), ``PF004`` (wrong isolation level), ``22023``/``22004``
(bad argument). :func:`translate` turns a psycopg error into the matching
:class:`PgfenceError` subclass, keeping the server's message, detail and hint.
"""

from __future__ import annotations

from typing import Optional

import psycopg


class PgfenceError(Exception):
    """Base class of every pgfence error.

    Attributes: ``sqlstate``, ``message``, ``detail`` and ``hint`` as the server
    sent them (``None`` when absent).
    """

    def __init__(
        self,
        message: str,
        *,
        sqlstate: Optional[str] = None,
        detail: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        parts = [self.message]
        if self.detail:
            parts.append(f"DETAIL: {self.detail}")
        if self.hint:
            parts.append(f"HINT: {self.hint}")
        return "\n".join(parts)


class LeaseLost(PgfenceError):
    """PF001: the attempt token is no longer current; ``detail`` says why
    (reclaimed, cancelled, finished by another attempt). Stop working on the job."""


class JobNotFound(PgfenceError):
    """PF002: no job has that id."""


class InvalidTransition(PgfenceError):
    """PF003: the job's status does not allow this operation."""


class WrongIsolation(PgfenceError):
    """PF004: claim, reclaim_expired and the fenced calls need READ COMMITTED (run them in their own transaction)."""


class InvalidArgument(PgfenceError, ValueError):
    """22023 / 22004: a bad or NULL argument; ``message`` names it, ``hint`` says what to pass."""


class SchemaMismatch(PgfenceError):
    """The database has no pgfence schema, or a version this client does not speak."""


_BY_SQLSTATE: dict[str, type[PgfenceError]] = {
    "PF001": LeaseLost,
    "PF002": JobNotFound,
    "PF003": InvalidTransition,
    "PF004": WrongIsolation,
    "22023": InvalidArgument,
    "22004": InvalidArgument,
}


def translate(exc: psycopg.Error) -> Optional[PgfenceError]:
    """The :class:`PgfenceError` for a psycopg error, or ``None`` if it is not a pgfence condition."""
    cls = _BY_SQLSTATE.get(exc.sqlstate or "")
    if cls is None:
        return None
    diag = exc.diag
    return cls(
        diag.message_primary or str(exc),
        sqlstate=exc.sqlstate,
        detail=diag.message_detail,
        hint=diag.message_hint,
    )
