"""pgfence for asyncio: :class:`AsyncClient` and :class:`AsyncWorker`.

``AsyncClient`` has the methods of :class:`pgfence.Client` (same names, arguments,
return types and exceptions), awaited, on psycopg's ``AsyncConnection`` /
``AsyncConnectionPool``; ``AsyncWorker`` runs ``async def`` handlers (and plain ones
on a thread pool) with the behaviour of :class:`pgfence.Worker`. The handler
exceptions are the same classes, re-exported here.
"""

from .aio_client import AsyncClient
from .aio_worker import AsyncHandler, AsyncWorker
from .handlers import Interrupted, PermanentFailure, RetryAfter, Snooze

__all__ = ["AsyncClient", "AsyncWorker", "AsyncHandler", "Interrupted", "PermanentFailure", "RetryAfter", "Snooze"]
