"""The benchmark report pairs pgfence's runs with the best peer's round by round.

`bench/run.py` has every system take turns (round i runs one drain, one latency run and
one single enqueue step of each row); `bench/report.py` gives the ratio to the best peer
both as the ratio of medians and round by round. These tests feed the report made-up rows:
no database, no workers.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import report  # noqa: E402


def row(system: str, variant: str, drains: list[tuple[int, float]], p50s: list[tuple[int, float]]) -> dict:
    rates = [r for _, r in drains]
    lat = [{"turn": t, "p50_ms": p, "p95_ms": p * 2} for t, p in p50s]
    return {"system": system, "variant": variant, "errors": [], "single": None,
            "drain_runs": [{"turn": t, "rate": r} for t, r in drains],
            "drain": {"median": sorted(rates)[len(rates) // 2]} if rates else None,
            "latency": ({"p50_ms": sorted(x["p50_ms"] for x in lat)[len(lat) // 2],
                         "p95_ms": sorted(x["p95_ms"] for x in lat)[len(lat) // 2], "each": lat} if lat else None)}


def test_turn_ratios_pair_by_round_and_leave_out_a_lost_one() -> None:
    mine = [{"turn": 0, "rate": 100.0}, {"turn": 1, "rate": 90.0}, {"turn": 2, "rate": 80.0}]
    peer = [{"turn": 0, "rate": 50.0}, {"turn": 2, "rate": 40.0}, {"rate": 1.0}]  # round 1 lost; one without a round
    assert report.turn_ratios(mine, peer) == [2.0, 2.0]
    assert report.turn_ratios(mine, []) == []


def test_drain_and_latency_ratios_are_also_given_round_by_round() -> None:
    rows = [row("pgfence", "pgfence (prefetch 500)", [(0, 60.0), (1, 30.0), (2, 45.0)], [(0, 2.0), (1, 3.0)]),
            row("pgfence", "pgfence (prefetch 8)", [(0, 10.0), (1, 10.0), (2, 10.0)], [(0, 9.0), (1, 9.0)]),
            row("graphile-worker", "graphile-worker", [(0, 30.0), (1, 30.0), (2, 30.0)], [(0, 4.0), (1, 1.5)]),
            row("pgqueuer", "pgqueuer", [(0, 20.0), (1, 20.0), (2, 20.0)], [(0, 5.0), (1, 5.0)])]
    by = {x["column"]: x for x in report.ratios(rows)}
    drain = by["drain jobs/s"]
    assert (drain["pgfence_variant"], drain["best_peer"]) == ("pgfence (prefetch 500)", "graphile-worker")
    assert drain["ratio"] == pytest.approx(1.5)
    assert drain["turn_ratios"] == pytest.approx([2.0, 1.0, 1.5])
    p50 = by["latency p50 ms"]
    assert (p50["pgfence_variant"], p50["best_peer"]) == ("pgfence (prefetch 500)", "graphile-worker")
    assert p50["turn_ratios"] == pytest.approx([0.5, 2.0])
    table = report.ratio_table(report.ratios(rows))
    assert "turn by turn: median 1.50 (1.00-2.00, 3 turns)" in table


def test_soak_table_shows_the_heap_and_the_indexes_apart_and_dashes_for_older_results() -> None:
    base = {"t": 10.1, "rate": 34605.4, "hot_bytes": 79_000_000, "history_bytes": 110_600_000, "partitions": 11,
            "dead_rows": 82296, "into_default": 0, "checkpoints": 0, "wal_mb_s": 54.5}
    new = dict(base, t=20.1, heap_bytes=42_200_000, index_bytes=36_700_000, autovacuums=4)
    table = report.soak_table({"soak": {"window": 10.0, "history": True, "windows": [base, new]}})
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("| t s |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| 10.1") or
            line.startswith("| 20.1")]
    assert [len(r) for r in rows] == [len(columns)] * 2
    old_row, new_row = (dict(zip(columns, r)) for r in rows)
    assert (new_row["pgfence.jobs MB"], new_row["heap MB"], new_row["indexes MB"], new_row["autovacuums"]) == \
        ("79.0", "42.2", "36.7", "4")
    assert (old_row["heap MB"], old_row["indexes MB"], old_row["autovacuums"]) == ("-", "-", "-")
    assert (new_row["dead rows"], new_row["history MB"], new_row["WAL MB/s"]) == ("82,296", "110.6", "54.5")


def _floor(p50s: list[float], floor_p50s: list[float]) -> dict:
    gaps = [m - f for m, f in zip(p50s, floor_p50s)]
    return {"pgfence": {"p50_ms": sorted(p50s)[1], "p50_ms_spread": [min(p50s), max(p50s)], "p95_ms": 4.0},
            "p50_gaps_ms": gaps, "p50_gap_ms": sorted(gaps)[1]}


def test_latency_floor_rows_give_each_worker_its_gap_and_the_target_the_better_one() -> None:
    floor_p50s = [2.2, 2.3, 2.1]
    fl = {"rounds": 3, "n": 100, "rate": 20.0, "procs": 2, "prefetch": 500,
          "floor": {"p50_ms": 2.2, "p50_ms_spread": [2.1, 2.3], "p95_ms": 3.0},
          **_floor([3.2, 3.3, 3.0], floor_p50s), "asyncio": _floor([2.4, 2.5, 2.3], floor_p50s)}
    lines = report.pgfence_only_table({"latency_floor": fl}, {}).splitlines()
    row = next(line for line in lines if line.startswith("| latency against its floor"))
    assert "threaded worker p50 3.2 ms (3.0-3.3)" in row and "asyncio worker p50 2.4 ms (2.3-2.5)" in row
    target = next(line for line in lines if line.startswith("| latency target"))
    assert target.endswith("| met by the asyncio worker: threaded worker +1.00 ms, asyncio worker +0.20 ms |")
    # Results from before the asyncio worker took turns: the threaded worker alone, unmet.
    del fl["asyncio"]
    lines = report.pgfence_only_table({"latency_floor": fl}, {}).splitlines()
    target = next(line for line in lines if line.startswith("| latency target"))
    assert target.endswith("| unmet: threaded worker +1.00 ms |")
    assert "asyncio" not in "\n".join(lines)
