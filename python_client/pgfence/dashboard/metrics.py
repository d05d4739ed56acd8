"""``/metrics``: the rows of ``pgfence.metrics()`` in the Prometheus text format, written by
:func:`pgfence.metrics_text.prometheus_text` (the same text as ``pgfence metrics``; the SQL
function decides every metric and value)."""

from __future__ import annotations

from typing import Any

from ..metrics_text import prometheus_text
from ..models import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(rows: list[dict[str, Any]]) -> tuple[bytes, str]:
    metrics = [Metric(name=str(r["name"]), type=str(r["type"]), help=str(r["help"] or ""),
                      labels={str(k): "" if v is None else str(v) for k, v in (r["labels"] or {}).items()},
                      value=float(r["value"]) if r["value"] is not None else float("nan")) for r in rows]
    return prometheus_text(metrics).encode(), CONTENT_TYPE
