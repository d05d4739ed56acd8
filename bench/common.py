"""Shared helpers for the pgfence benchmark harness (main venv: stdlib + psycopg only).

Process handling: every subprocess the harness starts goes through `spawn`, which
puts it in its own process group (tests/support/processes.py, the harness the test
suites use too) and registers it, so `kill_all` (called from run.py's try/finally,
atexit and signal handlers) can end each group: SIGTERM, then SIGKILL after a grace
period. Nothing is ever killed by name.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql as pgsql

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
LOG_DIR = RESULTS_DIR / "logs"

sys.path.insert(0, str(REPO / "tests"))
from support import processes  # noqa: E402  (standard library only)


class BenchError(RuntimeError):
    """A measurement could not be made; the message says why."""


def log(msg: str) -> None:
    """Progress goes to stderr, so stdout carries only the result table."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ DSN / DB --
def dsn_for_db(dsn: str, dbname: str) -> str:
    """The same server, another database."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def dsn_dbname(dsn: str) -> str:
    """The database a DSN names."""
    return urlsplit(dsn).path.lstrip("/") or "postgres"


def dsn_host_port(dsn: str) -> tuple[str, int, str]:
    parts = urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432, parts.username or "postgres"


def connect(dsn: str, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10)


def scalar(dsn: str, sql: str, params: Sequence[Any] | None = None) -> Any:
    with connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]


def recreate_database(admin_dsn: str, dbname: str) -> None:
    """DROP (WITH FORCE) and CREATE a scratch database for one peer."""
    drop_database(admin_dsn, dbname)
    with connect(dsn_for_db(admin_dsn, "postgres")) as conn:
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(dbname)))


def drop_database(admin_dsn: str, dbname: str) -> None:
    """DROP (WITH FORCE) a scratch database, if it is there."""
    with connect(dsn_for_db(admin_dsn, "postgres")) as conn:
        conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(dbname)))


@contextmanager
def scratch_database(admin_dsn: str, dbname: str) -> Iterator[str]:
    """A database of a bench script's own: recreated, its DSN yielded, dropped after
    (also when the script fails)."""
    recreate_database(admin_dsn, dbname)
    try:
        yield dsn_for_db(admin_dsn, dbname)
    finally:
        drop_database(admin_dsn, dbname)


def settle(dsn: str, tables: Sequence[str] = (), timeout: float = 30.0) -> None:
    """Before a timed drain, the same for every system: VACUUM (ANALYZE) the tables
    under test (so autovacuum has nothing to start on them mid-run: a 100,000-job
    enqueue crosses its insert threshold), CHECKPOINT (so no checkpoint writes the
    enqueue's pages during the run), and wait up to `timeout` s for autovacuum
    workers still busy elsewhere in the cluster (e.g. on a test suite's leftovers)."""
    vacuum(dsn, tables)
    with connect(dsn) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.Error as exc:  # needs superuser or pg_checkpoint
            log(f"settle: no CHECKPOINT ({str(exc).strip()})")
        deadline = time.time() + timeout
        while time.time() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity"
                               " WHERE backend_type = 'autovacuum worker'").fetchone()
            if not row or not row[0]:
                return
            time.sleep(0.2)
        log(f"settle: autovacuum still running after {timeout:.0f} s; starting anyway")


def vacuum(dsn: str, tables: Sequence[str] = ()) -> None:
    with connect(dsn) as conn:
        if tables:
            for t in tables:
                conn.execute(f"VACUUM (ANALYZE) {t}")
        else:
            conn.execute("VACUUM (ANALYZE)")


# ---------------------------------------------------------------- processes --
_PROCS: list[subprocess.Popen[bytes]] = []


def spawn(cmd: Sequence[str], *, log_path: Path, env: Optional[dict[str, str]] = None,
          cwd: Optional[Path] = None) -> subprocess.Popen[bytes]:
    """Start cmd in a new session (own process group), stdout+stderr to log_path; registered
    for kill_all."""
    p = processes.spawn(cmd, log_path=log_path, env=env, cwd=cwd or REPO)
    _PROCS.append(p)
    return p


def stop(procs: Sequence[subprocess.Popen[bytes]], grace: float = 3.0) -> None:
    """SIGTERM each process group, SIGKILL what is left after `grace` seconds."""
    processes.stop(procs, grace)
    for p in procs:
        if p in _PROCS:
            _PROCS.remove(p)


def kill_all() -> None:
    stop(list(_PROCS), grace=2.0)


def run_json(cmd: Sequence[str], *, log_path: Path, timeout: float,
             env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Run a runner subcommand to completion; its last stdout line is a JSON object."""
    p = spawn(cmd, log_path=log_path, env=env)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop([p])
        raise BenchError(f"timed out after {timeout:.0f}s: {' '.join(cmd)} (log {log_path})")
    finally:
        if p in _PROCS and p.poll() is not None:
            _PROCS.remove(p)
    text = log_path.read_text(errors="replace")
    if rc != 0:
        raise BenchError(f"exit {rc}: {' '.join(cmd)}\n{tail(text)}")
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    raise BenchError(f"no JSON result from {' '.join(cmd)}\n{tail(text)}")


def tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def wait_ready(procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path], timeout: float) -> float:
    """Wait until every worker printed `READY <epoch>`; return the earliest epoch.

    A worker prints READY right before it calls its library's run/work entry
    point, after imports and connection setup, so interpreter start-up is not
    part of a drain measurement.
    """
    deadline = time.monotonic() + timeout
    stamps: dict[int, float] = {}
    while len(stamps) < len(procs):
        for i, (p, lp) in enumerate(zip(procs, logs)):
            if i in stamps:
                continue
            if lp.exists():
                for line in lp.read_text(errors="replace").splitlines():
                    if line.startswith("READY "):
                        stamps[i] = float(line.split()[1])
                        break
            if i not in stamps and p.poll() is not None:
                raise BenchError(f"worker exited with {p.returncode} before READY:\n"
                                 f"{tail(lp.read_text(errors='replace'))}")
        if len(stamps) < len(procs):
            if time.monotonic() > deadline:
                raise BenchError(f"workers not READY after {timeout:.0f}s (logs {', '.join(map(str, logs))})")
            time.sleep(0.02)
    return min(stamps.values())


@dataclass
class DrainResult:
    jobs: int
    seconds: float
    finished: int
    timed_out: bool
    rate: float = field(init=False)

    def __post_init__(self) -> None:
        # (a depth run can finish a few jobs past `jobs` before the count sees it)
        self.rate = min(self.finished, self.jobs) / self.seconds if self.seconds > 0 else 0.0


MIN_POLL = 0.02
MAX_POLL = 0.5


def measure_drain(start_workers: Callable[[], tuple[list[subprocess.Popen[bytes]], list[Path]]],
                  count_finished: Callable[[], int], n: int, timeout: float) -> DrainResult:
    """Start the workers on a pre-filled queue; time from the first READY until
    count_finished() >= n, bounded by `timeout` (then finished/elapsed is reported).

    The count query scans the jobs, so it is not run at a fixed high rate (that
    would load the 2-core machine under test): the next poll comes after a tenth
    of the estimated remaining time, clamped to 20..500 ms, so the end is still
    caught within ~20 ms while a 100,000-job drain costs a few dozen counts.
    """
    procs, logs = start_workers()
    try:
        t0 = wait_ready(procs, logs, timeout=60)
        deadline = t0 + timeout
        done = 0
        while True:
            done = count_finished()
            now = time.time()
            if done >= n:
                return DrainResult(n, now - t0, done, False)
            if now > deadline:
                log(f"drain timed out after {timeout:.0f}s: {done}/{n} finished")
                return DrainResult(n, now - t0, done, True)
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise BenchError(f"worker exited with {dead[0].returncode} during drain "
                                 f"({done}/{n} done):\n{tail(logs[procs.index(dead[0])].read_text(errors='replace'))}")
            rate = done / (now - t0) if done > 0 and now > t0 else 0.0
            wait = (n - done) / rate / 10 if rate > 0 else 0.1
            time.sleep(min(MAX_POLL, max(MIN_POLL, wait), max(0.0, deadline - now) + MIN_POLL))
    finally:
        stop(procs)


def read_floats(paths: Sequence[Path]) -> list[float]:
    vals: list[float] = []
    for p in paths:
        if p.exists():
            for line in p.read_text().split():
                try:
                    vals.append(float(line))
                except ValueError:
                    pass
    return vals


def count_lines(paths: Sequence[Path]) -> int:
    n = 0
    for p in paths:
        if p.exists():
            n += sum(1 for line in p.read_text().splitlines() if line.strip())
    return n


def wait_lines(paths: Sequence[Path], n: int, timeout: float = 30.0) -> None:
    """Wait until the files hold n lines in all (each handler's delay), or timeout s."""
    deadline = time.time() + timeout
    while count_lines(paths) < n and time.time() < deadline:
        time.sleep(0.05)


def delay_summary(paths: Sequence[Path], n: int, what: str) -> dict[str, Any]:
    """The delays (seconds, one per line) the handlers wrote, in ms: n, p50, p95, max;
    logs when fewer than n jobs recorded one."""
    delays = [d * 1000 for d in read_floats(paths)]
    if len(delays) < n:
        log(f"{what}: only {len(delays)}/{n} jobs recorded a delay")
    return {"n": len(delays), "p50_ms": percentile(delays, 50), "p95_ms": percentile(delays, 95),
            "max_ms": max(delays) if delays else math.nan}


# ---------------------------------------------------------------- statistics --
def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def merge_runs(got: list[dict[str, Any]], keys: Sequence[str]) -> Optional[dict[str, Any]]:
    """One result from several runs: the first run's fields, with each of `keys` the median
    over the runs, `<key>_spread` [min, max], `runs` and the runs themselves (`each`)."""
    if not got:
        return None
    out = {**got[0], "runs": len(got), "each": got}
    for k in keys:
        xs = [r[k] for r in got]
        out[k], out[f"{k}_spread"] = median(xs), [min(xs), max(xs)]
    return out


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in 0..100."""
    s = sorted(xs)
    if not s:
        return math.nan
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def fmt_num(x: Optional[float], digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"
