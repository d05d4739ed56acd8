"""``pgfence.metrics()`` rows as the Prometheus text exposition format.

The SQL function decides every metric and value; this only writes them out: a ``# HELP``
and ``# TYPE`` line per metric name, then one sample line per row. Label values and help
texts are escaped as the format requires (backslash, double quote, newline), after
:func:`~pgfence._text.printable` has written every control, bidirectional and invisible
character as ``\\uXXXX``: queue names are anyone's who may enqueue, and the text goes to
terminals as well as to scrapers.
"""

from __future__ import annotations

import math
from typing import Iterable

from ._text import printable
from .models import Metric


def _escape_label(value: str) -> str:
    # (newlines become the format's \n; every other unsafe character printable's \uXXXX,
    # whose backslash is then escaped like any other)
    return "\\n".join(printable(part).replace("\\", "\\\\").replace('"', '\\"') for part in value.split("\n"))


def _escape_help(value: str) -> str:
    return "\\n".join(printable(part).replace("\\", "\\\\") for part in value.split("\n"))


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def prometheus_text(metrics: Iterable[Metric]) -> str:
    """The samples in the text exposition format (version 0.0.4), grouped by metric name
    in the order given (``pgfence.metrics()`` orders by name); ends with a newline."""
    lines: list[str] = []
    seen: set[str] = set()
    for m in metrics:
        if m.name not in seen:
            seen.add(m.name)
            lines.append(f"# HELP {m.name} {_escape_help(m.help)}")
            lines.append(f"# TYPE {m.name} {m.type}")
        labels = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in sorted(m.labels.items()))
        lines.append(f"{m.name}{{{labels}}} {_number(m.value)}" if labels else f"{m.name} {_number(m.value)}")
    return "\n".join(lines) + "\n" if lines else ""
