"""``/metrics``: the rows of ``pgfence.metrics()`` (name, type, help, labels, value) in the
Prometheus text format, written by ``prometheus_client`` (its escaping of label values
and help texts, not ours)."""

from __future__ import annotations

from typing import Any, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_TYPES = {"counter", "gauge", "histogram", "summary", "info", "stateset", "untyped", "unknown"}


class _Rows:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for r in self.rows:
            name = str(r["name"])
            kind = str(r["type"] or "untyped")
            kind = kind if kind in _TYPES else "untyped"
            family = name[:-6] if kind == "counter" and name.endswith("_total") else name
            m = families.get(family)
            if m is None:
                m = families[family] = Metric(family, str(r["help"] or ""), kind)
            sample = family + "_total" if kind == "counter" else name
            labels = {str(k): "" if v is None else str(v) for k, v in (r["labels"] or {}).items()}
            m.add_sample(sample, labels, float(r["value"]) if r["value"] is not None else float("nan"))
        return list(families.values())


def render(rows: list[dict[str, Any]]) -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows(rows))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST
