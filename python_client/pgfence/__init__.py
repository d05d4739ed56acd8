"""pgfence: a fenced job queue that lives in PostgreSQL.

The queue logic is PL/pgSQL in schema ``pgfence``; this package is a thin client
(:class:`Client`), a worker runtime (:class:`Worker`) and a CLI (``pgfence``); their
asyncio twins, ``AsyncClient`` and ``AsyncWorker``, are in :mod:`pgfence.aio`.
"""

from .client import SCHEMA_VERSION, Client, RawJson
from .errors import (InvalidArgument, InvalidTransition, JobNotFound, LeaseLost, PgfenceError,
                     SchemaMismatch, WrongIsolation)
from .limits import Limits
from .models import (ActionPreview, ActionResult, Attempt, AuditEntry, Enqueued, Job, JobRecord, Metric, Outcome,
                     QueueLimit, QueueSet, QueueStats, Reclaimed, Rejection, Schedule)
from .worker import Interrupted, PermanentFailure, RetryAfter, Snooze, Worker
from .worker_options import WorkerOptionError

__version__ = "0.1.0"

__all__ = [
    "Client", "Worker", "Job", "ActionPreview", "ActionResult", "AuditEntry", "Metric", "JobRecord", "Attempt", "Rejection", "Enqueued", "Outcome", "QueueStats", "QueueLimit", "QueueSet", "Reclaimed", "RawJson",
    "Schedule",
    "PgfenceError", "LeaseLost", "JobNotFound", "InvalidTransition", "InvalidArgument", "WrongIsolation",
    "SchemaMismatch", "WorkerOptionError", "Limits", "Interrupted", "PermanentFailure", "RetryAfter", "Snooze", "SCHEMA_VERSION",
]
