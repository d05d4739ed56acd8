"""pgfence demo: what happens to a job when its worker dies, freezes or must not be retried.

Run it from a checkout with the pgfence package installed: ``python examples/demo.py``
(``make demo`` starts the local PostgreSQL cluster, deploys the schema, then runs it).
Every worker is an OS process of its own (``examples/demo_worker.py``) that talks to
the database through :class:`pgfence.Client`; the demo kills and freezes them with real
signals, then checks in the database that nothing was lost, done twice or overwritten:

1. a worker dies: 20 jobs; worker A claims 10 with a 3-second lease and is killed
   (SIGKILL) before it finishes any. Worker B polls ``claim`` every 0.1 s. Once A's
   leases have expired, A's jobs are reclaimed and B finishes all 20: every job is
   completed exactly once, and every result is stored by the attempt that owns the job.
2. a frozen worker comes back (a "zombie"): C claims a job (lease 2 s) and is frozen
   (SIGSTOP) past its lease; the job is reclaimed and D completes it. C is then resumed
   (SIGCONT): its ``heartbeat`` and ``complete`` must both be refused with LeaseLost
   (SQLSTATE PF001), and the job's result stays D's.
3. a job marked ``recovery_policy => 'manual'`` (not safe to run twice): E claims it
   and is killed. After the lease the job must wait in ``manual_review`` for a human,
   not go back to the queue: worker F, polling that queue, must not get it.

Who reclaims an expired lease? Two things do: the background sweeper that pg_cron runs
(``pgfence.run_sweeper``, a pass every 0.5 s once pg_cron has started it, within a
minute of the server's start), and every ``claim`` call, which first reclaims a batch
of expired leases in any queue. The demo tells them apart from the database clock: the
polling worker reads ``clock_timestamp()`` before and after each claim call, the
observer thread (a query every 20 ms) sees each sweeper pass in
``pgfence.sweeper_status``, and the reclaim statement's own ``clock_timestamp()`` is
kept in the job's ``available_at`` (``updated_at`` for the manual job).

When the schema keeps history, it is checked too: ``pgfence.attempts`` must show each
ended attempt (A reclaimed -> B done, C reclaimed -> D done, E reclaimed), and
``pgfence.rejections`` C's two refused calls.

The jobs of a run go in three new queues ``demo-<run>-crash|zombie|manual``; they are
deleted when every check passes (``--keep`` keeps them), else kept for inspection
(``--cleanup <run>`` deletes them later). Everything printed that comes from the
database (names, payloads, results, error texts) is escaped: anyone who may call the
SQL API can write those strings.

DSN: ``--dsn``, else ``$PGFENCE_DSN``, else ``scripts/pg.sh dsn`` when run inside the
pgfence repository, else libpq defaults. Exit status 0 when every check passes, 1 when
one fails, 2 when the database is not usable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Optional, Sequence

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfence import Client
from pgfence._text import printable

HERE = Path(__file__).resolve().parent
WORKER = HERE / "demo_worker.py"
RECLAIM_ERROR = "lease expired before completion"
OBSERVE_INTERVAL = 0.02


class DemoError(Exception):
    """A scenario could not go on (a worker died, a wait timed out, ...)."""


# ----------------------------------------------------------------- output --

def say(text: str = "") -> None:
    print(text, flush=True)


def hms(ts: Optional[datetime]) -> str:
    return "-" if ts is None else ts.strftime("%H:%M:%S.%f")[:-3]


def secs(td: timedelta) -> str:
    return f"{td.total_seconds():.3f} s"


def id_ranges(ids: Sequence[int]) -> str:
    out: list[str] = []
    s = sorted(ids)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out) or "none"


@dataclass
class Check:
    scenario: str
    what: str
    observed: str
    ok: Optional[bool]  # None: information, not an invariant

    @property
    def verdict(self) -> str:
        return "INFO" if self.ok is None else ("OK" if self.ok else "FAIL")


# -------------------------------------------------------------------- DSN --

def _find_pg_sh() -> Optional[Path]:
    starts = [Path.cwd(), HERE]
    for start in starts:
        for d in (start, *start.parents):
            cand = d / "scripts" / "pg.sh"
            if cand.is_file() and (d / "sqitch.plan").is_file():
                return cand
    return None


def resolve_dsn(arg: Optional[str]) -> tuple[str, str]:
    """(dsn, where it came from)."""
    if arg:
        return arg, "--dsn"
    env = os.environ.get("PGFENCE_DSN")
    if env:
        return env, "$PGFENCE_DSN"
    pg_sh = _find_pg_sh()
    if pg_sh is not None:
        try:
            r = subprocess.run(["bash", str(pg_sh), "dsn"], capture_output=True, text=True, timeout=15)
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip(), f"{pg_sh} dsn"
        except (OSError, subprocess.SubprocessError):
            pass
    return "", "libpq defaults"


def masked(dsn: str) -> str:
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable dsn>"
    if "password" in params:
        params["password"] = "***"
        return make_conninfo("", **params)
    return dsn or "(libpq defaults)"


# --------------------------------------------------------------- database --

class Db:
    """The demo's own autocommit connection (observation queries only)."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        self.conn.execute("SET statement_timeout = '10s'")
        self._jobs_table: Optional[str] = None

    def one(self, query: str, params: Any = None) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row

    def all(self, query: str, params: Any = None) -> list[Any]:
        return self.conn.execute(query, params).fetchall()

    def now(self) -> datetime:
        return self.one("SELECT clock_timestamp()")[0]  # type: ignore[no-any-return]

    def sweeper(self) -> tuple[Optional[datetime], int, int]:
        row = self.one("SELECT last_pass_at, last_reclaimed, total_reclaimed FROM pgfence.sweeper_status")
        return (None, 0, 0) if row is None else (row[0], int(row[1]), int(row[2]))

    def jobs_table(self) -> str:
        """pgfence.all_jobs (live and done jobs: done ones are in the history) when the
        schema has it, else pgfence.jobs (older schemas kept done jobs there)."""
        if self._jobs_table is None:
            has = self.one("SELECT to_regclass('pgfence.all_jobs') IS NOT NULL")[0]
            self._jobs_table = "pgfence.all_jobs" if has else "pgfence.jobs"
        return self._jobs_table

    def job(self, job_id: int) -> dict[str, Any]:
        cur = self.conn.execute(
            "SELECT id, queue, status, attempts, reclaim_count, reserved_by, reserved_at, available_at,"
            " lease_expires_at, attempt_token::text AS attempt_token, result, last_error, updated_at,"
            f" finished_at, recovery_policy FROM {self.jobs_table()} WHERE id = %s", (job_id,))
        row = cur.fetchone()
        if row is None:
            raise DemoError(f"job {job_id} vanished from {self.jobs_table()}")
        assert cur.description is not None
        return dict(zip([c.name for c in cur.description], row))

    def jobs(self, queue: str) -> list[dict[str, Any]]:
        cur = self.conn.execute(
            "SELECT id, status, attempts, reclaim_count, reserved_by, reserved_at, available_at,"
            " lease_expires_at, attempt_token::text AS attempt_token, result, last_error, updated_at,"
            f" finished_at FROM {self.jobs_table()} WHERE queue = %s ORDER BY id", (queue,))
        assert cur.description is not None
        names = [c.name for c in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def attempts(self, job_ids: Sequence[int]) -> Optional[list[dict[str, Any]]]:
        """Ended attempts from pgfence.all_attempts (those of done jobs are in the history),
        or pgfence.attempts on older schemas (None when the schema has neither)."""
        table = next((t for t in ("pgfence.all_attempts", "pgfence.attempts")
                      if self.one("SELECT to_regclass(%s) IS NOT NULL", (t,))[0]), None)
        if table is None:
            return None
        cur = self.conn.execute(
            "SELECT job_id, attempt, worker, outcome, attempt_token::text AS attempt_token, ended_at"
            f" FROM {table} WHERE job_id = ANY(%s::bigint[]) ORDER BY job_id, attempt, ended_at",
            (list(job_ids),))
        assert cur.description is not None
        names = [c.name for c in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Pass:
    """One sweeper pass as seen in pgfence.sweeper_status."""
    seen_at: datetime
    last_pass_at: datetime
    reclaimed: int
    total: int


State = tuple[str, Optional[str], int, Optional[str]]  # status, reserved_by, reclaim_count, token


class Observer(threading.Thread):
    """Polls the run's jobs and the sweeper status every 20 ms (own connection);
    keeps, per job, each state change with the DB time it was first seen."""

    SQL = """
        SELECT clock_timestamp(), s.last_pass_at, s.last_reclaimed, s.total_reclaimed,
               (SELECT coalesce(json_agg(json_build_array(j.id, j.status, j.reserved_by, j.reclaim_count,
                                                          j.attempt_token) ORDER BY j.id), '[]')
                  FROM {jobs} j WHERE j.id = ANY(%s::bigint[]))
          FROM pgfence.sweeper_status s
    """

    def __init__(self, dsn: str) -> None:
        super().__init__(name="pgfence-demo-observer", daemon=True)
        self.ids: list[int] = []  # watched jobs, looked up by primary key (no scan of the table)
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        self.conn.execute("SET statement_timeout = '5s'")
        self.history: dict[int, list[tuple[datetime, State]]] = {}
        self.passes: list[Pass] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: Optional[BaseException] = None
        self.samples = 0
        # Done jobs are in the history on schemas that have pgfence.all_jobs.
        has_all = self.conn.execute("SELECT to_regclass('pgfence.all_jobs') IS NOT NULL").fetchone()
        self.sql = self.SQL.replace("{jobs}", "pgfence.all_jobs" if has_all and has_all[0] else "pgfence.jobs")

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                with self.lock:
                    ids = list(self.ids)
                row = self.conn.execute(self.sql, (ids,)).fetchone()
                if row is not None:
                    self._record(row)
                self.stopping.wait(OBSERVE_INTERVAL)
        except BaseException as exc:  # surfaced by check_alive()
            self.error = exc
        finally:
            self.conn.close()

    def _record(self, row: Any) -> None:
        now, last_pass_at, last_reclaimed, total, jobs = row
        with self.lock:
            self.samples += 1
            if last_pass_at is not None and (not self.passes or self.passes[-1].last_pass_at != last_pass_at):
                self.passes.append(Pass(now, last_pass_at, int(last_reclaimed), int(total)))
            for job_id, status, reserved_by, reclaim_count, token in jobs:
                state: State = (status, reserved_by, int(reclaim_count), token)
                hist = self.history.setdefault(int(job_id), [])
                if not hist or hist[-1][1] != state:
                    hist.append((now, state))

    def watch(self, ids: Sequence[int]) -> None:
        """Add jobs to observe; returns once a sample including them was taken (bounded)."""
        with self.lock:
            self.ids.extend(ids)
            target = self.samples + 2
        self.wait_until(lambda: self.samples >= target, 2.0)

    def check_alive(self) -> None:
        if self.error is not None:
            raise DemoError(f"observer failed: {type(self.error).__name__}: {self.error}")
        if not self.is_alive():
            raise DemoError("observer thread is not running")

    def job_history(self, job_id: int) -> list[tuple[datetime, State]]:
        with self.lock:
            return list(self.history.get(job_id, []))

    def passes_between(self, t0: datetime, t1: datetime) -> list[Pass]:
        with self.lock:
            return [p for p in self.passes if t0 <= p.last_pass_at <= t1]

    def wait_until(self, pred: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if pred():
                return True
            time.sleep(0.01)
        return pred()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)


# -------------------------------------------------------------- processes --

class Proc:
    """One worker OS process (its own process group); JSON-lines stdout collected by a thread."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.argv = argv
        self.stderr_path = logdir / f"worker-{name}.stderr.log"
        self.stdout_path = logdir / f"worker-{name}.stdout.jsonl"
        self._stderr = open(self.stderr_path, "wb")
        self._stdout_copy = open(self.stdout_path, "w", encoding="utf-8")
        self.popen = subprocess.Popen(
            [sys.executable, str(WORKER), *argv], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self._stderr, env=env, start_new_session=True)
        self.pid = self.popen.pid
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, name=f"pgfence-demo-read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        try:
            for raw in self.popen.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._stdout_copy.write(line + "\n")
                self._stdout_copy.flush()
                try:
                    ev = json.loads(line)
                    if not isinstance(ev, dict):
                        raise ValueError
                except ValueError:
                    ev = {"event": "raw", "text": line}
                with self._cond:
                    self.events.append(ev)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def of(self, event: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("event") == event]

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if e.get("event") == event:
                        return e
                    if e.get("event") == "error":
                        raise DemoError(f"worker {self.name} failed: {printable(e.get('exception'))}:"
                                        f" {printable(e.get('message'))}"
                                        f"{self.tail()}")
                if self._eof:
                    rc = self.popen.wait(timeout=5)
                    raise DemoError(f"worker {self.name} exited (status {rc}) before '{event}'{self.tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DemoError(f"worker {self.name}: no '{event}' within {timeout:.0f} s{self.tail()}")
                self._cond.wait(remaining)

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait_exit(self, timeout: float) -> int:
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DemoError(f"worker {self.name} (pid {self.pid}) still running after {timeout:.0f} s"
                            f"{self.tail()}") from None
        self._reader.join(timeout=2)
        return rc

    def state(self) -> Optional[str]:
        """The kernel's process state letter (T = stopped), None when unknown."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        return stat.rsplit(")", 1)[1].split()[0]

    def tail(self, n: int = 12) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return ""
        return ("\n      stderr of " + self.name + ":\n        " + "\n        ".join(map(printable, lines))
                if lines else "")

    def kill(self) -> None:
        """SIGKILL the process group if still running, reap it (bounded), close files."""
        if self.popen.poll() is None:
            self.signal(signal.SIGKILL)
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                say(f"  WARNING: worker {self.name} (pid {self.pid}) did not die within 5 s of SIGKILL")
        self._reader.join(timeout=2)
        for f in (self._stderr, self._stdout_copy):
            try:
                f.close()
            except OSError:
                pass


# ---------------------------------------------------------------- the run --

@dataclass
class Ctx:
    dsn: str
    db: Db
    client: Client
    observer: Observer
    run: str
    rundir: Path
    queues: dict[str, str]
    env: dict[str, str]
    checks: list[Check] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)

    def check(self, scenario: str, what: str, observed: str, ok: Optional[bool]) -> bool:
        self.checks.append(Check(scenario, what, observed, ok))
        return bool(ok) if ok is not None else True

    def worker_id(self, name: str) -> str:
        return f"demo-{self.run}-{name}"

    def spawn(self, name: str, mode: str, queue: str, lease: float, **opts: Any) -> Proc:
        argv = [mode, "--queue", queue, "--worker-id", self.worker_id(name), "--lease", str(lease)]
        for key, value in opts.items():
            argv += ["--" + key.replace("_", "-"), str(value)]
        p = Proc(name, argv, self.env, self.rundir)
        self.procs.append(p)
        return p


def child_env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PGFENCE_DSN"] = dsn
    env["PYTHONUNBUFFERED"] = "1"
    # PGOPTIONS (statement_timeout) is inherited from main().
    return env


def reclaim_attribution(ctx: Ctx, t_r: datetime, n_jobs: int, claimers: Sequence[Proc],
                        seen_queued: bool) -> tuple[str, str]:
    """(short, detail): who ran the reclaim statement stamped t_r (n_jobs reclaimed together)."""
    windows = [(p.name, e) for p in claimers for e in p.of("poll")
               if datetime.fromisoformat(e["t_before"]) <= t_r <= datetime.fromisoformat(e["t_after"])]
    in_claim = [(name, e) for name, e in windows if not seen_queued]
    passes = [p for p in ctx.observer.passes_between(t_r, t_r + timedelta(seconds=0.2)) if p.reclaimed >= n_jobs]
    if in_claim and not passes:
        name, e = in_claim[0]
        t0, t1 = datetime.fromisoformat(e["t_before"]), datetime.fromisoformat(e["t_after"])
        return (f"{name}'s claim()",
                f"a claim first reclaims expired leases (in any queue); this reclaim ran inside {name}'s claim"
                f" call #{e['n']} [{hms(t0)} .. {hms(t1)}], and no sweeper pass reported reclaiming {n_jobs}"
                " job(s) then")
    if passes and not in_claim:
        p = passes[0]
        return ("pg_cron sweeper",
                f"a sweeper pass ending {hms(p.last_pass_at)} (+{(p.last_pass_at - t_r).total_seconds() * 1000:.0f} ms)"
                f" reported {p.reclaimed} reclaimed; no claim call of the demo's workers was running then"
                + ("; the job was visible as queued before being claimed again" if seen_queued else ""))
    if passes and in_claim:
        return ("ambiguous", f"inside {in_claim[0][0]}'s claim call and a sweeper pass reclaimed "
                f"{passes[0].reclaimed} at the same moment")
    return ("another session", "neither the demo's claimers nor a sweeper pass account for it: another "
            "client's claim() (a claim reclaims expired leases in every queue first) or a manual sweep")


def first_change(ctx: Ctx, job_id: int, start: State) -> Optional[tuple[datetime, State]]:
    """The first observed state after the observer saw `start`."""
    seen = False
    for at, st in ctx.observer.job_history(job_id):
        if st == start:
            seen = True
        elif seen:
            return at, st
    return None


def sweeper_after(ctx: Ctx, t: datetime, timeout: float = 1.5) -> Optional[Pass]:
    """Wait (bounded) for a sweeper pass that ended after t; None if none came."""
    found: list[Pass] = []

    def pred() -> bool:
        found[:] = ctx.observer.passes_between(t + timedelta(milliseconds=1), t + timedelta(days=1))
        return bool(found)
    ctx.observer.wait_until(pred, timeout)
    return found[0] if found else None


def check_history(ctx: Ctx, scenario: str, expect: dict[int, list[tuple[str, str]]],
                  first_tokens: dict[int, str], reclaim_at: dict[int, datetime]) -> None:
    """When the schema keeps attempt history (pgfence.attempts): each job's ended attempts
    must be exactly `expect` [(worker name, outcome), ...]; the first attempt carries the
    token its worker was given, and a reclaimed attempt ended at the reclaim time."""
    rows = ctx.db.attempts(list(expect))
    if rows is None:
        return
    prefix = ctx.worker_id("")
    got: dict[int, list[tuple[str, str]]] = {j: [] for j in expect}
    bad: list[str] = []
    for r in rows:
        name = r["worker"][len(prefix):] if r["worker"].startswith(prefix) else r["worker"]
        got[r["job_id"]].append((name, r["outcome"]))
        if r["attempt"] == 1 and r["attempt_token"] != first_tokens.get(r["job_id"]):
            bad.append(f"job {r['job_id']}: attempt 1 token differs")
        if r["outcome"] == "reclaimed" and r["ended_at"] != reclaim_at.get(r["job_id"]):
            bad.append(f"job {r['job_id']}: reclaimed attempt ended_at {hms(r['ended_at'])}"
                       f" != reclaim time {hms(reclaim_at.get(r['job_id']))}")
    seqs: dict[str, int] = {}
    for j in expect:
        key = " -> ".join(f"{printable(w)} {printable(o)}" for w, o in got[j]) or "none"
        seqs[key] = seqs.get(key, 0) + 1
    summary = "; ".join(f"{n}x {k}" for k, n in seqs.items())
    ok = got == expect and not bad
    if not ok:
        say("  pgfence.attempts disagrees: expected " + "; ".join(
            f"job {j}: {' -> '.join(f'{w} {o}' for w, o in e)}" for j, e in list(expect.items())[:3])
            + (f"; problems: {'; '.join(bad[:3])}" if bad else ""))
    ctx.check(scenario, "pgfence.attempts history", summary + (f" ({bad[0]})" if bad else ""), ok)


# ------------------------------------------------------------- scenario 1 --

def scenario_crash(ctx: Ctx) -> None:
    S = "1 crash"
    lease = 3.0
    q = ctx.queues["crash"]
    wa, wb = ctx.worker_id("A"), ctx.worker_id("B")
    say(f"\n[1] A worker dies mid-job. 20 jobs in queue {q}; worker A claims 10 of them with a {lease:g} s"
        f" lease and is killed (SIGKILL) before finishing any; worker B asks for work every 0.1 s.")
    say("    Expected: A's jobs come back when their lease runs out, B finishes all 20, none twice.")
    ids = [e.id for e in ctx.client.enqueue_many(["demo.crash"] * 20, [{"n": i + 1} for i in range(20)],
                                                  queue=q)]
    ctx.observer.watch(ids)
    A = ctx.spawn("A", "hold", q, lease, max_jobs=10, max_seconds=60)
    claimed = A.wait_event("claimed", 30)
    A.signal(signal.SIGKILL)
    rc_a = A.wait_exit(5)
    a_ids = [int(j["id"]) for j in claimed["jobs"]]
    rows_a = {r["id"]: r for r in ctx.db.jobs(q) if r["id"] in a_ids}
    claim_at = min(r["reserved_at"] for r in rows_a.values()) if rows_a else None
    lease_exp = max(r["lease_expires_at"] for r in rows_a.values()) if rows_a else None
    reported_ok = all(datetime.fromisoformat(j["reserved_at"]) == rows_a[int(j["id"])]["reserved_at"]
                      for j in claimed["jobs"] if int(j["id"]) in rows_a)
    say(f"  A pid {A.pid}: one claim(max_jobs=10) got jobs {id_ranges(a_ids)}; reserved_at {hms(claim_at)}"
        f" (A read it back from the database), lease until {hms(lease_exp)}; SIGKILL -> exit status {rc_a}")
    ctx.check(S, f"A claimed 10 of 20 in one claim, lease {lease:g} s",
              f"{len(a_ids)} claimed ({id_ranges(a_ids)}), {len(rows_a)} processing by A in the DB",
              len(a_ids) == 10 and len(rows_a) == 10 and set(a_ids) == set(ids[:10]))
    ctx.check(S, "A killed by SIGKILL, nothing completed", f"exit status {rc_a}", rc_a == -signal.SIGKILL)
    ctx.check(S, "claim time A reported == DB reserved_at", "equal" if reported_ok else "differs", reported_ok)
    if claim_at is None or lease_exp is None:
        raise DemoError("A holds no jobs: cannot go on")
    tokens_a = {r["id"]: r["attempt_token"] for r in rows_a.values()}
    sweep_before = ctx.db.sweeper()

    completions = ctx.rundir / "completions-B.jsonl"
    B = ctx.spawn("B", "poll", q, lease, max_jobs=10, poll=0.1, until=20, max_seconds=lease + 12,
                  completions=completions, result_by="B")
    rc_b = B.wait_exit(lease + 20)
    b_exit = B.of("exit")
    rows = ctx.db.jobs(q)
    by_id = {r["id"]: r for r in rows}

    # When was each of A's jobs reclaimed? available_at = the reclaim statement's clock_timestamp().
    reclaimed = {i: by_id[i] for i in a_ids if by_id[i]["reclaim_count"] >= 1 and by_id[i]["last_error"] == RECLAIM_ERROR}
    t_rs = {i: r["available_at"] for i, r in reclaimed.items()}
    delays = sorted((t - claim_at) for t in t_rs.values())
    observed: dict[int, tuple[datetime, State]] = {}
    for i in a_ids:
        ch = first_change(ctx, i, ("processing", wa, 0, tokens_a[i]))
        if ch is not None:
            observed[i] = ch
    seen_queued = {i for i in a_ids if any(st[0] == "queued" and st[2] >= 1 for _, st in ctx.observer.job_history(i))}

    if delays:
        span = secs(delays[0]) if delays[0] == delays[-1] else f"{secs(delays[0])} .. {secs(delays[-1])}"
        say(f"  A's jobs reclaimed {span} after A's claim (reclaim statement's clock_timestamp(),"
            f" kept in pgfence.jobs.available_at); lease expired {secs(lease_exp - claim_at)} after the claim")
    if observed:
        od = sorted(at - claim_at for at, _ in observed.values())
        how = sorted({("queued" if st[0] == "queued" else f"{printable(st[0])} by {printable(st[1])}")
                      for _, st in observed.values()})
        say(f"  20 ms observer first saw them reclaimed {secs(od[0])} .. {secs(od[-1])} after the claim, as: "
            + ", ".join(how))
    after = sweeper_after(ctx, max(t_rs.values())) if t_rs else None
    sweep_delta = (after.total - sweep_before[2]) if after else None
    groups: dict[datetime, list[int]] = {}
    for i, t in t_rs.items():
        groups.setdefault(t, []).append(i)
    attributions = []
    for t, group in sorted(groups.items()):
        short, detail = reclaim_attribution(ctx, t, len(group), [B], bool(seen_queued & set(group)))
        if sweep_delta == 0 and short == "pg_cron sweeper":
            short, detail = "another session", "sweeper total_reclaimed did not move"
        attributions.append(f"jobs {id_ranges(group)}: {short}")
        say(f"  reclaim of jobs {id_ranges(group)} at {hms(t)}: {short}: {detail}")
    n_passes = len(ctx.observer.passes_between(claim_at, max(t_rs.values()) if t_rs else ctx.db.now()))
    say(f"  sweeper: {n_passes} pass(es) between A's claim and the reclaim; total_reclaimed "
        f"{sweep_before[2]} -> {after.total if after else '?'}"
        + (f" (+{sweep_delta}, all queues)" if sweep_delta is not None else
           " (no sweeper pass in the 1.5 s after the reclaim: pg_cron has not started the sweeper yet, or it"
           " is paused; the workers' claim() calls reclaim expired leases meanwhile)"))

    # Completions as B recorded them, one JSON line per accepted complete().
    lines = [json.loads(x) for x in completions.read_text().splitlines() if x.strip()] if completions.exists() else []
    per_job: dict[int, int] = {}
    for ln in lines:
        per_job[int(ln["job_id"])] = per_job.get(int(ln["job_id"]), 0) + 1
    done = [r for r in rows if r["status"] == "done"]
    dup = len(lines) - len(per_job)
    token_match = all(by_id.get(int(ln["job_id"]), {}).get("attempt_token") == ln["token"] for ln in lines)
    a_token_done = [r["id"] for r in done if r["attempt_token"] in set(tokens_a.values())]
    say(f"  B pid {B.pid}: exit status {rc_b}, {b_exit[0]['polls'] if b_exit else '?'} claim polls, "
        f"{len(lines)} completions recorded in {completions.name}")

    if delays:
        d0, d1 = delays[0], delays[-1]
        ctx.check(S, f"A's jobs reclaimed at most {lease + 1.5:g} s after A's claim",
                  secs(d0) if d0 == d1 else f"{secs(d0)} .. {secs(d1)}",
                  d1 <= timedelta(seconds=lease + 1.5))
    else:
        ctx.check(S, f"A's jobs reclaimed at most {lease + 1.5:g} s after A's claim",
                  "A's jobs were not reclaimed", False)
    ctx.check(S, "reclaimed only after the lease expired",
              f"all {len(t_rs)} reclaims after lease_expires_at {hms(lease_exp)}",
              len(t_rs) == 10 and all(t > lease_exp for t in t_rs.values()))
    ctx.check(S, "who reclaimed the lease", "; ".join(attributions) or "-", None)
    ctx.check(S, "jobs done", f"{len(done)}/20", len(done) == 20 and len(rows) == 20)
    ctx.check(S, "completion events / distinct jobs", f"{len(lines)} / {len(per_job)}",
              len(lines) == 20 and len(per_job) == 20)
    ctx.check(S, "completions per job (max 1)", f"max {max(per_job.values(), default=0)}",
              max(per_job.values(), default=0) == 1)
    ctx.check(S, "duplicates", str(dup), dup == 0)
    ctx.check(S, "each result stored by the completing token",
              "B's tokens are the jobs' final tokens" if token_match else "MISMATCH", token_match and bool(lines))
    ctx.check(S, "nothing finished with A's tokens", f"{len(a_token_done)} jobs", not a_token_done)
    a_ok = all(by_id[i]["attempts"] == 2 and by_id[i]["reclaim_count"] == 1 and by_id[i]["reserved_by"] == wb
               and by_id[i]["result"] == {"by": "B"} for i in a_ids)
    b_ok = all(r["attempts"] == 1 and r["reclaim_count"] == 0 and r["reserved_by"] == wb
               for r in rows if r["id"] not in a_ids)
    ctx.check(S, "A's jobs: attempts 2, reclaim_count 1, done by B", "yes" if a_ok else "no", a_ok)
    ctx.check(S, "other 10: attempts 1, reclaim_count 0, done by B", "yes" if b_ok else "no", b_ok)
    b_first = {int(j["id"]): j["token"] for e in B.of("poll") for j in e["jobs"]}
    check_history(ctx, S, {i: ([("A", "reclaimed"), ("B", "done")] if i in a_ids else [("B", "done")]) for i in ids},
                  {i: tokens_a.get(i) or b_first.get(i, "") for i in ids}, t_rs)
    if rc_b != 0:
        raise DemoError(f"worker B exited with status {rc_b}{B.tail()}")


# ------------------------------------------------------------- scenario 2 --

def scenario_zombie(ctx: Ctx) -> None:
    S = "2 zombie"
    lease = 2.0
    q = ctx.queues["zombie"]
    wd = ctx.worker_id("D")
    say(f"\n[2] A frozen worker comes back (a zombie). Worker C claims a job (lease {lease:g} s) and is frozen"
        f" (SIGSTOP) past its lease; worker D takes the job over and completes it; then C is resumed (SIGCONT).")
    say("    Expected: C's late heartbeat and complete are refused with LeaseLost, and the result stays D's.")
    jid = ctx.client.enqueue("demo.zombie", {"scenario": "zombie"}, queue=q)
    ctx.observer.watch([jid])
    go = ctx.rundir / "C.go"
    C = ctx.spawn("C", "zombie", q, lease, go_file=go, max_seconds=60, result_by="C")
    claimed = C.wait_event("claimed", 30)
    C.signal(signal.SIGSTOP)
    ctx.observer.wait_until(lambda: C.state() in ("T", None), 2.0)
    st_stop = C.state()
    stopped_at = ctx.db.now()
    row_c = ctx.db.job(jid)
    token_c = row_c["attempt_token"]
    claim_at, lease_exp = row_c["reserved_at"], row_c["lease_expires_at"]
    cj = claimed["jobs"][0] if claimed["jobs"] else {}
    say(f"  C pid {C.pid}: claimed job {cj.get('id')} token {str(cj.get('token'))[:8]}.. at {hms(claim_at)},"
        f" lease until {hms(lease_exp)}; SIGSTOP at {hms(stopped_at)} (process state {st_stop})")
    ctx.check(S, "C claimed the job, then frozen (SIGSTOP) inside its lease",
              f"job {cj.get('id')}, state {st_stop} at +{secs(stopped_at - claim_at)}",
              cj.get("id") == jid and cj.get("token") == token_c and st_stop in ("T", None)
              and stopped_at < lease_exp)

    completions = ctx.rundir / "completions-D.jsonl"
    D = ctx.spawn("D", "poll", q, lease, max_jobs=1, poll=0.1, until=1, max_seconds=lease + 12,
                  completions=completions, result_by="D")
    rc_d = D.wait_exit(lease + 20)
    row_d = ctx.db.job(jid)
    st_cont = C.state()
    cont_at = ctx.db.now()
    C.signal(signal.SIGCONT)
    go.touch()
    rc_c = C.wait_exit(15)
    outcomes = {e["op"]: e for e in C.of("outcome")}
    final = ctx.db.job(jid)
    d_done = D.of("completed")

    t_r = final["available_at"] if final["reclaim_count"] >= 1 else None
    say(f"  D pid {D.pid}: exit status {rc_d}; completed {[e['job_id'] for e in d_done]} with {{\"by\": \"D\"}}"
        f" at {hms(row_d['finished_at'])}")
    if t_r is not None:
        seen_q = any(st[0] == "queued" and st[2] >= 1 for _, st in ctx.observer.job_history(jid))
        short, detail = reclaim_attribution(ctx, t_r, 1, [D], seen_q)
        say(f"  C's lease reclaimed at {hms(t_r)}, {secs(t_r - claim_at)} after C's claim: {short}: {detail}")
        ctx.check(S, "reclaim time after C's claim (lease 2 s)", secs(t_r - claim_at),
                  lease_exp < t_r <= lease_exp + timedelta(seconds=1.5))
        ctx.check(S, "who reclaimed the lease", short, None)
    else:
        ctx.check(S, "C's lease reclaimed", "never reclaimed", False)
    say(f"  C resumed with SIGCONT at {hms(cont_at)} (state before: {st_cont}); exit status {rc_c}")
    for op in ("heartbeat", "complete"):
        o = outcomes.get(op)
        if o is None:
            ctx.check(S, f"C's late {op} rejected with LeaseLost", "no outcome reported", False)
            continue
        desc = ("ACCEPTED (the stale worker got through the fence)" if o["accepted"] else
                f"{printable(o['exception'])} {printable(o['sqlstate'])}: {printable(o['detail'])}")
        say(f"  C {op}: {desc}")
        ctx.check(S, f"C's late {op} rejected with LeaseLost", desc,
                  not o["accepted"] and o["exception"] == "LeaseLost" and o["sqlstate"] == "PF001")
    ctx.check(S, "C stayed frozen until D had completed",
              f"state {st_cont} at SIGCONT, {secs(cont_at - row_d['finished_at'])} after D's complete"
              if row_d["finished_at"] else f"state {st_cont}; D did not complete",
              st_cont in ("T", None) and row_d["finished_at"] is not None and cont_at > row_d["finished_at"])
    d_token = d_done[0]["token"] if d_done else None
    ctx.check(S, "D completed the job", f"{len(d_done)} completion(s), exit status {rc_d}",
              len(d_done) == 1 and rc_d == 0 and d_done[0]["job_id"] == jid)
    ctx.check(S, "final result is D's", f"{printable(final['status'])} {printable(json.dumps(final['result']))} by "
              f"{'D' if final['reserved_by'] == wd else printable(final['reserved_by'])}",
              final["status"] == "done" and final["result"] == {"by": "D"} and final["reserved_by"] == wd
              and final["attempt_token"] == d_token and final["attempts"] == 2 and final["reclaim_count"] == 1)
    check_history(ctx, S, {jid: [("C", "reclaimed"), ("D", "done")]}, {jid: token_c},
                  {jid: t_r} if t_r is not None else {})
    # Schemas with pgfence.rejections document (COMMENT in report_rejection.sql) that a refused
    # single call rolls back, so "the Python client does so [reports it] for every LeaseLost".
    if ctx.db.one("SELECT to_regclass('pgfence.rejections') IS NOT NULL"
                  " AND to_regprocedure('pgfence.report_rejection(bigint, uuid, text)') IS NOT NULL")[0]:
        rej = ctx.db.all("SELECT operation FROM pgfence.rejections WHERE job_id = %s AND attempt_token = %s::uuid"
                         " ORDER BY rejected_at", (jid, token_c))
        ops = [printable(r[0]) for r in rej]
        ok = sorted(ops) == ["complete", "heartbeat"]
        if not ok:
            say(f"  BUG? pgfence.rejections holds {ops or 'nothing'} for C's refused heartbeat and complete: the"
                " report_rejection COMMENT says the Python client reports every LeaseLost, but Client.heartbeat"
                " and Client.complete only raise it")
        ctx.check(S, "C's refused calls visible in pgfence.rejections", ", ".join(ops) or "none recorded", ok)


# ------------------------------------------------------------- scenario 3 --

def scenario_manual(ctx: Ctx) -> None:
    S = "3 manual"
    lease = 2.0
    q = ctx.queues["manual"]
    we = ctx.worker_id("E")
    say(f"\n[3] A job that must not run twice (recovery_policy => 'manual'). Worker E claims it (lease {lease:g} s)"
        f" and is killed; worker F asks that queue for work every 0.1 s.")
    say("    Expected: after the lease the job waits in manual_review for a human; F never gets it.")
    jid = ctx.client.enqueue("demo.manual", {"scenario": "manual"}, queue=q, recovery_policy="manual")
    ctx.observer.watch([jid])
    E = ctx.spawn("E", "hold", q, lease, max_jobs=1, max_seconds=60)
    claimed = E.wait_event("claimed", 30)
    E.signal(signal.SIGKILL)
    rc_e = E.wait_exit(5)
    row = ctx.db.job(jid)
    claim_at, lease_exp = row["reserved_at"], row["lease_expires_at"]
    say(f"  E pid {E.pid}: claimed job {[j['id'] for j in claimed['jobs']]} at {hms(claim_at)}, lease until "
        f"{hms(lease_exp)}; SIGKILL -> exit status {rc_e}")
    ctx.check(S, "E claimed the manual job and was SIGKILLed",
              f"{[j['id'] for j in claimed['jobs']]}, exit status {rc_e}",
              [j["id"] for j in claimed["jobs"]] == [jid] and row["status"] == "processing"
              and row["reserved_by"] == we and rc_e == -signal.SIGKILL)
    remaining = max((lease_exp - ctx.db.now()).total_seconds(), 0.0)
    F = ctx.spawn("F", "poll", q, lease, max_jobs=1, poll=0.1, until=0, max_seconds=round(remaining + 2.0, 3),
                  completions=ctx.rundir / "completions-F.jsonl", result_by="F")

    def in_review() -> bool:
        h = ctx.observer.job_history(jid)
        return bool(h) and h[-1][1][0] == "manual_review"
    ctx.observer.wait_until(in_review, remaining + 4.0)
    rc_f = F.wait_exit(remaining + 15)
    final = ctx.db.job(jid)
    polls = F.of("poll")
    got = [j for e in polls for j in e["jobs"]]
    t_r: Optional[datetime] = final["updated_at"] if final["status"] == "manual_review" else None
    states = [st for _, st in ctx.observer.job_history(jid)]
    after_claim = states[next((k for k, st in enumerate(states) if st[0] == "processing"), len(states)):]
    requeued = [st for st in after_claim if st[0] == "queued" or (st[0] == "processing" and st[1] != we)]
    if t_r is not None:
        short, detail = reclaim_attribution(ctx, t_r, 1, [F], False)
        say(f"  lease expired -> manual_review at {hms(t_r)}, {secs(t_r - claim_at)} after E's claim"
            f" (updated_at of the reclaim): {short}: {detail}")
        ctx.check(S, "after the lease: manual_review (time after claim)",
                  f"{final['status']} after {secs(t_r - claim_at)}, reclaim_count {final['reclaim_count']}",
                  final["reclaim_count"] == 1 and final["last_error"] == RECLAIM_ERROR
                  and lease_exp < t_r <= lease_exp + timedelta(seconds=1.5))
        ctx.check(S, "who reclaimed the lease", short, None)
    else:
        ctx.check(S, "after the lease: manual_review", f"status {final['status']}", False)
    check_history(ctx, S, {jid: [("E", "reclaimed")]}, {jid: str(claimed["jobs"][0]["token"]) if claimed["jobs"] else ""},
                  {jid: t_r} if t_r is not None else {})
    seq = " -> ".join(printable(st[0]) + (f"({'E' if st[1] == we else printable(st[1])})" if st[1] else "")
                      for st in after_claim)
    ctx.check(S, "never back in the queue, never re-claimed", seq or "-",
              not requeued and final["attempts"] == 1 and final["status"] == "manual_review")
    late = [e for e in polls if t_r is not None and datetime.fromisoformat(e["t_before"]) > t_r]
    span = (datetime.fromisoformat(late[-1]["t_after"]) - t_r).total_seconds() if late and t_r else 0.0
    say(f"  F pid {F.pid}: exit status {rc_f}; {len(polls)} claim polls, {len(late)} of them over {span:.2f} s"
        f" after the job entered manual_review; claimed {len(got)}")
    ctx.check(S, "worker F polling the queue claims nothing",
              f"{len(got)} claimed in {len(polls)} polls ({len(late)} after manual_review)",
              not got and rc_f == 0 and len(late) >= 5)


# ------------------------------------------------------------------ main --

def print_table(checks: list[Check]) -> None:
    head = ("scenario", "check", "observed", "result")
    # Every cell is one line: escaping it (again) costs nothing and keeps a database string
    # that slipped through from forging a row or recolouring the terminal.
    rows = [(printable(c.scenario), printable(c.what), printable(c.observed), c.verdict) for c in checks]
    w = [max(len(head[k]), *(len(r[k]) for r in rows)) if rows else len(head[k]) for k in range(3)]
    w[2] = min(w[2], 70)

    def line(r: tuple[str, str, str, str]) -> str:
        obs = r[2] if len(r[2]) <= w[2] else r[2][: w[2] - 3] + "..."
        return f"  {r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {obs:<{w[2]}}  {r[3]}"
    say(line(head))
    say("  " + "-" * (sum(w) + 6 + 6))
    for r in rows:
        say(line(r))
    legend = "  OK: the guarantee held.  INFO: what was seen, not a check."
    say(legend + ("  FAIL: the guarantee did not hold." if any(c.ok is False for c in checks) else ""))


def delete_run_jobs(db: Db, queues: list[str]) -> int:
    """Delete the jobs of these queues, with their rows in pgfence.attempts/rejections when the
    schema has them (one transaction). Returns the number of jobs deleted."""
    with db.conn.transaction():
        ids = [r[0] for r in db.all("SELECT id FROM pgfence.jobs WHERE queue = ANY(%s) FOR UPDATE", (queues,))]
        for table in ("pgfence.attempts", "pgfence.rejections"):
            if db.one("SELECT to_regclass(%s) IS NOT NULL", (table,))[0]:
                db.conn.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s::bigint[])", (ids,))
        db.conn.execute("DELETE FROM pgfence.jobs WHERE id = ANY(%s::bigint[])", (ids,))
    return len(ids)


def _raise_interrupt(signum: int, frame: Optional[FrameType]) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cleanup_run(dsn_arg: Optional[str], run: str) -> int:
    if not run or any(ch in run for ch in "%_\\/ "):
        say(f"not a run id: {run!r}")
        return 2
    dsn, _ = resolve_dsn(dsn_arg)
    db = Db(dsn)
    try:
        queues = [f"demo-{run}-{k}" for k in ("crash", "zombie", "manual")]
        n = delete_run_jobs(db, queues)
    finally:
        db.close()
    logs = list(Path(tempfile.gettempdir()).glob(f"pgfence-demo-{run}-*"))
    for d in logs:
        shutil.rmtree(d, ignore_errors=True)
    say(f"deleted {n} jobs of run {run} (queues {', '.join(queues)}) and {len(logs)} log dir(s)")
    return 0


def sweeper_state(db: Db) -> tuple[str, Optional[str]]:
    """(a line on the background sweeper for the header, a note for the table or None when
    it runs). The sweeper is not needed for the scenarios: claim() reclaims expired leases too."""
    cron: Optional[bool] = None
    if db.one("SELECT to_regclass('cron.job') IS NOT NULL")[0]:
        r = db.one("SELECT bool_or(active) FROM cron.job WHERE jobname = 'pgfence-reclaim'")
        cron = None if r is None else r[0]
    last_pass, _, _ = db.sweeper()
    paused = db.one("SELECT paused_at IS NOT NULL FROM pgfence.sweeper_status")
    age = (db.now() - last_pass).total_seconds() if last_pass else None
    meanwhile = "until then, the workers' claim() calls reclaim expired leases (the demo works either way)"
    if cron is None:
        return ("pg_cron or its job pgfence-reclaim is missing here, so no background sweeper runs; expired"
                " leases are reclaimed by claim() calls (the demo works without it)",
                "no pg_cron job: claim() reclaims")
    if cron is False:
        return ("the pg_cron job pgfence-reclaim is inactive; expired leases are reclaimed by claim() calls"
                " (the demo works without it)", "pg_cron job inactive: claim() reclaims")
    if paused is not None and paused[0]:
        return ("paused (pgfence.pause_sweeper()); SELECT pgfence.resume_sweeper() resumes it; " + meanwhile,
                "paused: claim() reclaims")
    if age is None:
        return ("the pg_cron sweeper has not run yet (pg_cron starts it within a minute of the server's start); "
                + meanwhile, "not started yet: claim() reclaims")
    if age > 2.0:
        return (f"the pg_cron sweeper's last pass was {age:.0f} s ago (pg_cron starts it again within a"
                f" minute); {meanwhile}", f"last pass {age:.0f} s ago: claim() reclaims")
    return f"the pg_cron sweeper runs (last pass {age:.2f} s ago)", None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python examples/demo.py", description=__doc__.split("\n\n")[0],
                                 epilog="Exit status: 0 all checks OK, 1 a check failed, 2 database unusable.")
    ap.add_argument("--dsn", help="libpq DSN (default: $PGFENCE_DSN, else scripts/pg.sh dsn, else libpq defaults)")
    ap.add_argument("--keep", action="store_true",
                    help="keep this run's jobs and worker logs even when every check passes")
    ap.add_argument("--cleanup", metavar="RUN",
                    help="only delete the jobs (and worker logs) a kept run RUN left behind, then exit")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if args.cleanup is not None:
        return cleanup_run(args.dsn, args.cleanup)

    dsn, source = resolve_dsn(args.dsn)
    # Bound every statement of this process too (libpq applies PGOPTIONS unless the DSN sets options).
    os.environ["PGOPTIONS"] = (os.environ.get("PGOPTIONS", "") + " -c statement_timeout=10000").strip()
    say("pgfence demo: three ways a worker can fail, each played with real worker processes and real signals")
    try:
        db = Db(dsn)
        db.one("SELECT 1")
    except psycopg.Error as exc:
        say(f"  cannot connect to {printable(masked(dsn))} (from {source}): {printable(str(exc).strip())}")
        say("  start the local cluster and deploy the schema with `make deploy`, or pass --dsn")
        return 2
    others = db.one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")[0]
    try:
        client = Client.connect(dsn, min_size=1, max_size=2)
    except Exception as exc:
        say(f"  {type(exc).__name__}: {printable(exc)}")
        db.close()
        return 2

    version = db.one("SHOW server_version")[0]
    sweeper_line, sweeper_note = sweeper_state(db)
    run = time.strftime("%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()
    queues = {k: f"demo-{run}-{k}" for k in ("crash", "zombie", "manual")}
    rundir = Path(tempfile.mkdtemp(prefix=f"pgfence-demo-{run}-"))
    say(f"  database  {printable(masked(dsn))} (from {source}); PostgreSQL {printable(version)},"
        f" pgfence schema {printable(client.check_schema())}")
    say(f"  sweeper   {sweeper_line}")
    say(f"  others    {others} other client connection(s) to this database right now (a claim() of theirs"
        " may also reclaim the demo's expired leases: claim reclaims in every queue)")
    say(f"  run       {run}: queues {', '.join(queues.values())}")
    say(f"  logs      {rundir}")

    # Fresh queues: drop anything under this run's queue names (there should be nothing).
    delete_run_jobs(db, list(queues.values()))

    observer = Observer(dsn)
    observer.start()
    ctx = Ctx(dsn=dsn, db=db, client=client, observer=observer, run=run, rundir=rundir, queues=queues,
              env=child_env(dsn))
    if sweeper_note is not None:
        ctx.check("0 setup", "background sweeper (pg_cron)", sweeper_note, None)
    t0 = time.monotonic()
    interrupted = False
    try:
        for name, scenario in (("1 crash", scenario_crash), ("2 zombie", scenario_zombie),
                               ("3 manual", scenario_manual)):
            try:
                scenario(ctx)
            except DemoError as exc:
                say(f"  ERROR: {exc}")
                ctx.check(name, "scenario ran to the end", str(exc).splitlines()[0], False)
            except (psycopg.Error, OSError, ValueError, KeyError, TypeError) as exc:
                trace = rundir / "demo-traceback.txt"
                with open(trace, "a", encoding="utf-8") as fh:
                    fh.write(traceback.format_exc())
                say(f"  ERROR: {type(exc).__name__}: {printable(exc)} (traceback in {trace})")
                ctx.check(name, "scenario ran to the end", f"{type(exc).__name__}: {printable(exc)}", False)
            finally:
                for p in ctx.procs:
                    p.kill()
    except KeyboardInterrupt:
        interrupted = True
        say("\n  interrupted")
    finally:
        for p in ctx.procs:
            p.kill()
        observer.stop()
    elapsed = time.monotonic() - t0

    say("")
    print_table(ctx.checks)
    failed = [c for c in ctx.checks if c.ok is False]
    say(f"\n  scenarios took {elapsed:.1f} s; {len(ctx.procs)} worker processes, all gone "
        f"({', '.join(f'{p.name}:{p.popen.returncode}' for p in ctx.procs)}); observer took {observer.samples} samples")
    ok = not failed and not interrupted
    if ok and not args.keep:
        n = delete_run_jobs(db, list(queues.values()))
        shutil.rmtree(rundir, ignore_errors=True)
        say(f"  cleaned up: deleted this run's {n} jobs (and their attempt history) and the worker logs")
    else:
        say(f"  kept for inspection: jobs in queues {', '.join(queues.values())}; worker logs in {rundir}")
        say(f"    remove with: python examples/demo.py --cleanup {run}")
    say("RESULT: " + ("OK" if ok else "INTERRUPTED" if interrupted and not failed
                      else f"FAIL: {len(failed)} check(s) failed" + (" (interrupted)" if interrupted else "")))
    client.close()
    db.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
