"""The database's numeric limits, as the worker and client use them.

The SQL functions check these bounds (``claim`` takes 1..1000 jobs, every ``*_many``
call 1..10000 elements, ...); a caller that splits its work to fit needs the same
numbers. They are gathered here, once, so that no part of the worker carries its own
copy. :meth:`Limits.from_rows` reads the rows of ``pgfence.limits()`` (``name text,
value bigint, description text``: the database's own statement of them, which
``Client.limits()`` returns and a ``Worker`` reads when it starts); the defaults are
today's values, for a database whose ``limits()`` lacks a name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class Limits:
    """The database's limits (defaults: those of schema version 3).

    * ``max_jobs`` [1000]: jobs one ``claim`` may take.
    * ``batch`` [10000]: elements one batch call (``heartbeat_many``, ``complete_many``,
      ``fail_many``, ``release_many``, ``enqueue_many``) accepts.
    * ``queues`` [10000]: queue names one ``claim`` may list.
    * ``payload_bytes``, ``result_bytes`` [1048576]: a payload or result, as jsonb.
    * ``json_depth`` [64]: levels of objects and arrays nested in a payload or result.
    * ``error_chars`` [100000]: characters of one error text (``fail``).
    * ``lease_min_ms``, ``lease_max_ms`` [1, 86400000]: a lease (1 ms .. 1 day).
    * ``retry_in_max_s`` [31536000]: a ``retry_in`` given to ``fail``, in seconds (0 .. 365 days).
    """

    max_jobs: int = 1000
    batch: int = 10_000
    queues: int = 10_000
    payload_bytes: int = 1_048_576
    result_bytes: int = 1_048_576
    json_depth: int = 64
    error_chars: int = 100_000
    lease_min_ms: int = 1
    lease_max_ms: int = 86_400_000
    retry_in_max_s: int = 31_536_000

    @property
    def max_retry_in(self) -> timedelta:
        """``retry_in_max_s`` as a timedelta."""
        return timedelta(seconds=self.retry_in_max_s)

    @classmethod
    def from_rows(cls, rows: Iterable[Any]) -> Limits:
        """The limits a database reports: rows of ``(name, value, description)`` (tuples,
        or mappings with those keys). Names this class knows set their field; any other
        name, and a NULL value, is ignored, and every field no row names keeps its
        default (so an older or newer database is read as far as both agree)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, int] = {}
        for row in rows:
            if isinstance(row, Mapping):
                name, value = row.get("name"), row.get("value")
            else:
                name, value = row[0], row[1]
            if name in known and value is not None:
                values[name] = int(value)
        return cls(**values)


__all__ = ["Limits"]
