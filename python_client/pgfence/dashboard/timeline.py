"""The attempt timeline of one job: each attempt's lease from claim to end, as SVG geometry.

An attempt's bar runs from ``claimed_at`` to ``ended_at`` (the current attempt: to its
lease expiry); past its end, a stale worker that went on working shows up by its refused
calls (``rejections_of``), so the attempt's *span* runs to its last refused call. Where
the spans of two attempts intersect, two workers held (or believed they held) the job at
once: that interval is an overlap, drawn in red on both rows. The geometry is computed
here; the template draws it with SVG presentation attributes (no inline style or script).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

WIDTH = 900.0
LEFT = 150.0
ROW = 34.0


@dataclass
class Bar:
    label: str
    worker: str
    token: str
    outcome: str
    start: datetime
    end: datetime
    lease_end: Optional[datetime]
    span_end: datetime
    x: float = 0
    w: float = 0
    span_w: float = 0
    lease_x: Optional[float] = None
    y: float = 0
    overlaps: list[tuple[float, float]] = field(default_factory=list)
    marks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Timeline:
    bars: list[Bar]
    height: float
    width: float
    start: Optional[datetime]
    end: Optional[datetime]
    overlap_count: int
    orphans: list[dict[str, Any]]


def build(job: dict[str, Any], attempts: list[dict[str, Any]], rejections: list[dict[str, Any]],
          now: datetime) -> Timeline:
    bars: list[Bar] = []
    for a in attempts:
        # (an attempt may lack a claim time, a worker or a token: mark_done's final "attempt" is the
        # operator's decision, a point in time)
        start = a["claimed_at"] or a["ended_at"]
        end = a["ended_at"] or start
        if start is None:
            continue
        bars.append(Bar(label=f"#{a['attempt']}", worker=a["worker"] or "(operator)",
                        token=str(a["attempt_token"] or ""), outcome=a["outcome"] or "", start=start, end=end,
                        lease_end=a["lease_expires_at"], span_end=end))
    if job.get("status") == "processing" and job.get("reserved_at") is not None:
        end = max(now, job["reserved_at"])
        bars.append(Bar(label=f"#{job['attempts']}", worker=job.get("reserved_by") or "",
                        token=str(job.get("attempt_token") or ""), outcome="running", start=job["reserved_at"],
                        end=end, lease_end=job.get("lease_expires_at"), span_end=end))
    by_token = {b.token: b for b in bars if b.token}
    orphans = []
    for r in rejections:
        b = by_token.get(str(r["attempt_token"]))
        if b is None:
            orphans.append(r)
            continue
        b.marks.append({"at": r["rejected_at"], "operation": r["operation"], "caller": r["caller"],
                        "detail": r["detail"]})
        if r["rejected_at"] > b.span_end:
            b.span_end = r["rejected_at"]
    if not bars:
        return Timeline([], 0, WIDTH, None, None, 0, orphans)
    t0 = min(b.start for b in bars)
    # The axis spans what happened (claims, ends, refused calls); a lease expiry far past
    # it (a 30 s lease of an attempt that took 100 ms) is drawn at the right edge.
    t1 = max(b.span_end for b in bars)
    total = max((t1 - t0).total_seconds(), 0.001) * 1.04
    scale = (WIDTH - LEFT - 10) / total

    def x(t: datetime) -> float:
        return LEFT + (t - t0).total_seconds() * scale

    overlap_count = 0
    for i, b in enumerate(bars):
        b.x = x(b.start)
        b.w = max(x(b.end) - b.x, 2)
        b.span_w = max(x(b.span_end) - b.x, 2)
        b.lease_x = min(x(b.lease_end), WIDTH - 4) if b.lease_end is not None else None
        b.y = 20 + i * ROW
        for m in b.marks:
            m["x"] = x(m["at"])
        for j, o in enumerate(bars):
            if i == j:
                continue
            lo, hi = max(b.start, o.start), min(b.span_end, o.span_end)
            if lo < hi:
                b.overlaps.append((x(lo), max(x(hi) - x(lo), 2)))
                if i < j:
                    overlap_count += 1
    return Timeline(bars, 30 + len(bars) * ROW, WIDTH, t0, t1, overlap_count, orphans)


__all__ = ["build", "Timeline", "Bar"]
