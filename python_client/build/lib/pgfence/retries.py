"""Which errors make the worker try the same call again.

The connection or the server's state (a lost connection, a restart, a cancel, a deadlock,
a server briefly read-only during a switchover) may pass; the data of a call does not.
The claimer, the heartbeats and the reporter all ask here.
"""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from .errors import PgfenceError

#: Errors after which the same call is tried again: the connection or the server's state,
#: never the data. (psycopg files serialization failures and deadlocks, class 40, and
#: cancels, 57014, under OperationalError.)
RETRYABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout,
             psycopg.errors.ReadOnlySqlTransaction)


def is_data_error(exc: BaseException) -> bool:
    """The database (or the encoding on the way) refused the values of a call, not the
    connection: retrying the same call cannot help. Class 54 (program limit exceeded,
    e.g. 54001 for a JSON result nested too deep) comes as an OperationalError."""
    return (isinstance(exc, (psycopg.DataError, UnicodeError))
            or (isinstance(exc, PgfenceError) and exc.sqlstate in ("22023", "22004"))
            or (isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("54")))


def retryable(exc: BaseException) -> bool:
    """Worth the same call again: a RETRYABLE error that is not a data error."""
    return isinstance(exc, RETRYABLE) and not is_data_error(exc)


__all__ = ["RETRYABLE", "is_data_error", "retryable"]
