"""Running one handler: what its return or its raise becomes.

:func:`run_handler` calls the handler of a claimed attempt and always returns its
:class:`~pgfence.ledger.Result` (a handler thread never dies of a handler: a
``SystemExit``, or an exception that cannot even be formatted, fails the attempt).
The exceptions a handler raises to say more than "failed" live here too. Whether a
failure is retried or dead-lettered, and when, is decided by the database.
"""

from __future__ import annotations

import inspect
import json
import re
import traceback
from datetime import timedelta
from typing import Any, Awaitable, Callable, Mapping, Optional, Union

from .client import RawJson
from .ledger import Entry, Result
from .limits import Limits
from .models import Job

Handler = Callable[[Job], Any]

#: Error texts are truncated to this many characters (the end of a traceback is kept),
#: well under the database's own bound (Limits.error_chars, 100,000).
MAX_ERROR_CHARS = 50_000
# A NUL character escaped in JSON text (an odd number of backslashes before u0000):
# jsonb cannot store it.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class PermanentFailure(Exception):
    """Raise from a handler to dead-letter the job now (no retry)."""


class Interrupted(Exception):
    """Raise from a handler that stops early because ``job.should_stop()`` became true
    (shutdown, or a lost lease). The worker gives the job back with a fenced
    ``release`` (by the reclaim rule: an ``auto`` job returns to the queue, a
    ``manual`` one goes to ``manual_review``) instead of completing it.
    Returning normally means the work is done: the return value is the result."""


class RetryAfter(Exception):
    """Raise from a handler to retry after ``delay`` instead of the default backoff
    (the database still dead-letters the job when its attempts are exhausted)."""

    def __init__(self, delay: timedelta, message: str = "") -> None:
        super().__init__(message or f"retry after {delay}")
        self.delay = delay


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay`` (more than 0, at most
    ``Limits.snooze_max_s``, 365 days) without counting the attempt as a failure: the
    worker reports a fenced ``snooze``, the attempt history records it as ``snoozed``.
    A job may be snoozed ``Limits.snoozes_per_job`` (100) times; past that the database
    fails the attempt instead (retried after ``delay`` while attempts remain)."""

    def __init__(self, delay: timedelta, message: str = "") -> None:
        super().__init__(message or f"snooze for {delay}")
        self.delay = delay


def error_text(exc: BaseException) -> str:
    """Type, message and traceback of ``exc``, storable (see :func:`storable_text`)."""
    try:
        text = f"{type(exc).__name__}: {exc}\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as broken:  # an exception whose __str__ raises, say
        text = f"{type(exc).__name__}: (its message could not be formatted: {type(broken).__name__})"
    return storable_text(text)


def storable_text(text: str) -> str:
    """An error text PostgreSQL can store: NUL characters (text cannot hold them) and
    lone surrogates (no UTF-8 for them, e.g. from os.fsdecode) are escaped; truncated
    to MAX_ERROR_CHARS, keeping the end of a traceback."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_ERROR_CHARS:
        text = "...[truncated]\n" + text[-MAX_ERROR_CHARS:]
    return text


def result_json(value: Any) -> str:
    """The JSON text of a handler's result, or ValueError when jsonb could not store it."""
    if isinstance(value, RawJson):
        text = str(value)  # the handler's own JSON text: the database checks it
        text.encode("utf-8")  # (UnicodeEncodeError is a ValueError)
        return text
    text = json.dumps(value, allow_nan=False)  # NaN and Infinity are not JSON
    # The two escapes jsonb refuses, looked for only when their prefix occurs: \u0000,
    # and a lone surrogate (json.dumps writes it as \udXXX; a pair, e.g. an emoji, is
    # one character in Python and encodes).
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ValueError("it contains a NUL character, which jsonb cannot store")
    if "\\ud" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"it contains a lone surrogate, which has no UTF-8 encoding: {exc}") from None
    return text


def refusal(entry: Entry, handlers: Mapping[str, Any], worker_id: str) -> Optional[Result]:
    """The outcome of an attempt no handler may run: a payload that could not be decoded,
    or a kind without a handler (both fail permanently); None when its handler may run."""
    job = entry.job
    if job.payload_error is not None:
        return Result(entry, False, storable_text(
            f"PayloadNotDecodable: the job's payload cannot be decoded in worker {worker_id} "
            f"({job.payload_error}); no handler ran"), permanent=True)
    if handlers.get(job.kind) is None:
        return Result(entry, False, storable_text(f"UnknownKind: no handler for kind {job.kind!r} in worker "
                      f"{worker_id} (known: {sorted(handlers)})"), permanent=True)
    return None


def raised(entry: Entry, exc: BaseException, limits: Limits = Limits()) -> Result:
    """The outcome of a handler that raised ``exc``: ``Interrupted`` gives the job back,
    ``PermanentFailure`` dead-letters it, ``Snooze`` snoozes it (reported with
    ``snooze_many``), ``RetryAfter`` fails it to be retried after its delay; a ``Snooze``
    or ``RetryAfter`` delay outside what ``snooze`` or ``fail`` accepts
    (``limits.max_snooze``, ``limits.max_retry_in``) fails it with the default backoff;
    anything else fails it."""
    if isinstance(exc, Interrupted):
        return Result(entry, False, None, interrupted=True)
    if isinstance(exc, PermanentFailure):
        return Result(entry, False, error_text(exc), permanent=True)
    if isinstance(exc, Snooze):
        snooze = exc.delay
        if isinstance(snooze, timedelta) and timedelta(0) < snooze <= limits.max_snooze:
            return Result(entry, False, None, snooze=snooze)
        return Result(entry, False, storable_text(
            f"Snooze with delay {snooze!r} outside (0, {limits.snooze_max_s // 86400} days], failed with the "
            "default backoff instead\n" + error_text(exc)))
    if isinstance(exc, RetryAfter):
        delay = exc.delay
        if isinstance(delay, timedelta) and timedelta(0) <= delay <= limits.max_retry_in:
            return Result(entry, False, error_text(exc), retry_in=delay)
        return Result(entry, False, storable_text(
            f"RetryAfter with delay {delay!r} outside 0..{limits.retry_in_max_s // 86400} days, failed with the "
            "default backoff instead\n" + error_text(exc)))
    return Result(entry, False, error_text(exc))


def is_async(handler: Any) -> bool:
    """Whether ``handler`` is an ``async def`` function (or an object whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


def returned(entry: Entry, value: Any) -> Result:
    """The outcome of a handler that returned ``value``: completed with it as the result,
    or failed permanently when jsonb could not store it, or when it is an awaitable (the
    threaded worker awaits nothing: its work was not done; a coroutine is closed unrun)."""
    if value is None:
        return Result(entry, True, None)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # (not left to warn "was never awaited" at collection)
        return Result(entry, False, storable_text(
            f"HandlerReturnedAwaitable: handler for {entry.job.kind!r} returned {type(value).__name__}, an "
            "awaitable, not its result; its work was not done (a missing await? pgfence.Worker awaits nothing: "
            "run async handlers with pgfence.aio.AsyncWorker, pgfence worker --asyncio)"), permanent=True)
    try:
        text = result_json(value)
    except Exception as exc:  # TypeError, ValueError, RecursionError; a mapping whose items() raises
        return Result(entry, False, storable_text(
            f"ResultNotJSON: handler for {entry.job.kind!r} returned a value that cannot be stored as JSON: "
            f"{type(exc).__name__}: {exc}"), permanent=True)
    return Result(entry, True, RawJson(text))


class Pending:
    """What :func:`called` gives for a handler that returned an awaitable: it, unawaited."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


def called(entry: Entry, handlers: Mapping[str, Handler], limits: Limits = Limits()) -> Union[Result, Pending]:
    """Call the handler of ``entry``'s job (its kind has one: see :func:`refusal`): the outcome
    of its raise or its return, or :class:`Pending` when it returned an awaitable (the asyncio
    worker awaits it; :func:`run_handler` fails it, see :func:`returned`)."""
    try:
        value = handlers[entry.job.kind](entry.job)
    except BaseException as exc:  # noqa: B036 - SystemExit from a handler too: it ends the attempt
        return raised(entry, exc, limits)
    return Pending(value) if inspect.isawaitable(value) else returned(entry, value)


def run_handler(entry: Entry, handlers: Mapping[str, Handler], worker_id: str,
                limits: Limits = Limits()) -> Result:
    """Run the handler of ``entry``'s job; always returns its outcome (see :func:`refusal`,
    :func:`raised` and :func:`returned`).

    A payload that could not be decoded, an unknown kind, and a result jsonb cannot
    store fail permanently; ``RetryAfter`` with a delay outside what ``fail`` accepts
    (``limits.max_retry_in``) fails with the default backoff instead, and so does
    ``Snooze`` with a delay outside what ``snooze`` accepts (``limits.max_snooze``)."""
    refused = refusal(entry, handlers, worker_id)
    if refused is not None:
        return refused
    outcome = called(entry, handlers, limits)
    return returned(entry, outcome.awaitable) if isinstance(outcome, Pending) else outcome


__all__ = ["Handler", "Interrupted", "PermanentFailure", "RetryAfter", "Snooze", "run_handler", "called", "Pending",
           "refusal", "raised",
           "returned", "is_async", "error_text", "storable_text", "result_json", "MAX_ERROR_CHARS"]
