"""Showing the database's strings safely.

Queue and kind names, payloads, results, error texts and worker ids come from whoever
could call the SQL API: they are attacker-controlled wherever they are shown. A newline
in one forged a line of ``pgfence stats``, an ESC sequence recoloured an operator's
terminal. Everything the CLI prints and every argument of pgfence's log messages goes
through :func:`printable`, which writes control, line-separator, bidirectional and
invisible characters as ``\\uXXXX`` (the same set the SQL ``_printable`` escapes).
"""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any

# C0/C1 controls, DEL, soft hyphen, combining grapheme joiner, ALM, Hangul fillers,
# Khmer inherent vowels, zero-width and bidi marks, line/paragraph separators,
# embeddings/overrides, word joiner, invisible operators, isolates, deprecated format
# characters, BOM, interlinear annotation marks, shorthand and musical format controls,
# default-ignorable code points not yet assigned. The same set as pgfence._printable in
# the database (db/deploy/functions/_checks.sql) and text.js in the Node.js client.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\u3164\ufeff\uffa0\ufff0-\ufffb\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0080-\U000e00ff\U000e01f0-\U000e0fff]"
)


def printable(value: Any) -> str:
    """``str(value)`` with every unsafe or invisible character written as ``\\uXXXX``."""
    text = value if isinstance(value, str) else str(value)
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable_lines(value: Any) -> str:
    """:func:`printable` line by line, the newlines kept: a traceback, indented JSON."""
    text = value if isinstance(value, str) else str(value)
    return "\n".join(printable(line) for line in text.split("\n"))


class EscapeArgs(logging.Filter):
    """A logger filter: the string and exception arguments of every record are made
    :func:`printable` (the format strings are pgfence's own; the arguments may come from
    the database), and so is the traceback of a record that carries one (``log.exception``:
    an exception's message may quote the database), line by line, its newlines kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_escaped_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _escaped_arg(v) for k, v in record.args.items()}
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            # (a Formatter writes exc_text when it is set, and formats exc_info only when not)
            record.exc_text = escaped_traceback(record.exc_info[1])
        return True


def escaped_traceback(exc: BaseException) -> str:
    """The traceback ``logging`` writes for `exc` (its causes and contexts first), each
    frame's lines made printable with their newlines kept, and each exception's own
    ``Type: message`` made printable whole: a newline in a message from the database
    is written ``\\u000a``, so it cannot forge a line of the log."""
    out: list[str] = []

    def walk(te: traceback.TracebackException) -> None:
        if te.__cause__ is not None:
            walk(te.__cause__)
            out.append("\nThe above exception was the direct cause of the following exception:\n\n")
        elif te.__context__ is not None and not te.__suppress_context__:
            walk(te.__context__)
            out.append("\nDuring handling of the above exception, another exception occurred:\n\n")
        if te.stack:
            out.append("Traceback (most recent call last):\n")
            out.extend(printable(line) + "\n" for frame in te.stack.format() for line in frame.rstrip("\n").split("\n"))
        out.append(printable("".join(te.format_exception_only()).rstrip("\n")) + "\n")

    walk(traceback.TracebackException(type(exc), exc, exc.__traceback__))
    return "".join(out).rstrip("\n")


def _escaped_arg(value: Any) -> Any:
    return printable(value) if isinstance(value, (str, BaseException)) else value


def escaped_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`EscapeArgs` attached (once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, EscapeArgs) for f in logger.filters):
        logger.addFilter(EscapeArgs())
    return logger
