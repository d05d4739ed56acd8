"""The machinery of the pgfence chaos suite.

One scenario per session: real worker processes (the ``pgfence worker`` CLI)
and a producer thread run against a dedicated throwaway cluster while faults
are injected; afterwards every invariant is computed from the database and from
the handlers' own record (``chaos_handlers``), and the results are kept in a
:class:`Report` that the tests assert on and the terminal summary prints.

Clocks: the database runs on this machine, so the handlers' ``time.time()`` and
the database's ``clock_timestamp()`` read the same clock; the overlap checks
compare them directly.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import psycopg

from support import processes
from support.clusters import Cluster
from pgfence import Client, PgfenceError

REPO = Path(__file__).resolve().parents[2]

#: Reports of the scenarios run in this session (printed by the terminal summary).
REPORTS: list["Report"] = []

# -- fault kinds ------------------------------------------------------------------
F_KILL = "SIGKILL worker process (respawned)"
F_STOP = "SIGSTOP worker past its lease, then SIGCONT (zombie)"
F_TERM_WORKER = "pg_terminate_backend: worker pool connections"
F_TERM_LISTENER = "pg_terminate_backend: worker LISTEN connection"
F_TERM_SWEEPER = "pg_terminate_backend: pg_cron sweeper (run_sweeper)"
F_TERM_PRODUCER = "pg_terminate_backend: producer connection"
F_CRASH = "PostgreSQL crash-restart (pg_ctl stop -m immediate)"
F_SNAPSHOT = "old snapshot held (REPEATABLE READ on pgfence.jobs)"
F_SIGTERM = "SIGTERM worker mid-job (graceful shutdown, respawned)"
FAULT_KINDS = [F_KILL, F_STOP, F_TERM_WORKER, F_TERM_LISTENER, F_TERM_SWEEPER, F_TERM_PRODUCER,
               F_CRASH, F_SNAPSHOT, F_SIGTERM]

# -- invariants -------------------------------------------------------------------
I_FAULTS = "every fault kind was injected"
I_ACKED = "no acknowledged enqueue is lost"
I_PHANTOM = "no job appears that was never enqueued"
I_IDEMPOTENCY = "idempotency keys: one job per key"
I_TERMINAL = "every job ends in exactly one (expected) terminal state"
I_FROZEN = "terminal states never change"
I_ONE_DONE = "exactly one accepted completion per done job, with its token"
I_HISTORY = "attempt history accounts for every claim"
I_OVERLAP = "attempts overlap only after the earlier lease expired"
I_ZOMBIE = "every zombie call after a takeover was rejected"
I_FINISHED = "a job is completed only by a handler that ran to its end"
I_BACKOFF = "retry delays are honoured"
I_BOUND = "all jobs terminal within the bound after faults stop"
I_NO_40 = "no deadlock (40P01) or serialization failure (40001) reaches a caller"
I_DEAD_TUPLES = "dead tuples recover after the old snapshot is released"
I_LATENCY = "claim latency recovers after the old snapshot is released"
I_HEALTH = "worker processes survive and reconnect"
INVARIANTS = [I_FAULTS, I_ACKED, I_PHANTOM, I_IDEMPOTENCY, I_TERMINAL, I_FROZEN, I_ONE_DONE, I_HISTORY,
              I_OVERLAP, I_ZOMBIE, I_FINISHED, I_BACKOFF, I_BOUND, I_NO_40, I_DEAD_TUPLES, I_LATENCY, I_HEALTH]

TERMINAL = ("done", "failed", "cancelled")
SQLSTATE_PATTERNS = ("40P01", "40001", "deadlock detected", "could not serialize")
#: The suite's own connections never wait forever.
TEST_CONN_OPTIONS = "-c statement_timeout=20000"


# ==================================================================== config ==
@dataclasses.dataclass
class Config:
    """Knobs of one scenario. The short form fits ``make test``'s 90 s budget
    (cluster included); the full form (``--chaos-full``) runs about 3.5 minutes."""

    full: bool
    seed: int
    workers: int = 4
    concurrency: int = 4
    lease: float = 2.0                 # seconds; heartbeats every lease/3
    poll_interval: float = 0.5         # worker claim poll (claim also reclaims expired leases)
    sweep_interval: float = 0.5        # run_sweeper's pass_interval (pg_cron job)
    max_attempts: int = 20             # chaos alone must never dead-letter a job
    produce_rate: float = 12.0         # producer operations per second (about 2 jobs each)
    short_ms: tuple[int, int] = (5, 60)
    long_ms: tuple[int, int] = (2600, 3400)   # longer than the lease: only heartbeats keep them
    long_share: float = 0.05
    fail_share: float = 0.08           # fail the first attempt (half RetryAfter, half plain error)
    perm_share: float = 0.02           # dead-letter with PermanentFailure
    retry_after_ms: int = 300
    churn_seconds: float = 38.0
    snapshot_hold: float = 12.0
    stop_extra: float = 2.5            # SIGSTOP lasts lease + this
    latency_probes: int = 15

    @classmethod
    def make(cls, full: bool, seed: Optional[int] = None) -> "Config":
        seed = int(os.environ.get("PGFENCE_CHAOS_SEED", "0")) or seed or random.randrange(1, 10**9)
        if full:
            return cls(full=True, seed=seed, churn_seconds=185.0, snapshot_hold=20.0)
        return cls(full=False, seed=seed)

    @property
    def stop_seconds(self) -> float:
        return self.lease + self.stop_extra

    def backoff(self, attempt: int) -> float:
        """The SQL backoff, least(1 s * 2^(attempts-1), 5 min), for the expected-delay check."""
        return min(2.0 ** (min(max(attempt, 1) - 1, 20)), 300.0)


# =================================================================== cluster ==
# The chaos cluster itself (its own data directory and port, crash-restarted) is
# tests/support/clusters.py's Cluster; this module only reaps the worker processes a crashed
# earlier session left behind.


def _start_time(pid: int) -> Optional[str]:
    """The kernel start time of a process (field 22 of /proc/PID/stat), to tell it from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pidfile(cluster: Cluster) -> Path:
    key = hashlib.sha1(str(cluster.requested_datadir).encode()).hexdigest()[:12]
    return Path(f"/tmp/pgfence-chaos-{key}.workers")


def reap_orphans(cluster: Cluster) -> list[int]:
    """SIGKILL the worker processes a crashed earlier session left behind (they
    reconnect forever to its port): exactly the pids it recorded, when they are
    still the same processes (start time) running the chaos handlers."""
    path = _pidfile(cluster)
    killed: list[int] = []
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return killed
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        if _start_time(pid) != parts[1]:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"tests.chaos.chaos_handlers" in cmdline:
            try:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    path.unlink(missing_ok=True)
    return killed


def _close_quietly(conn: Optional[psycopg.Connection[Any]]) -> None:
    """Close conn if there is one; a connection a fault broke may raise on close."""
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


class Db:
    """One autocommit connection for the test's own queries; reconnects after a
    fault, retrying for at most ``retry_for`` seconds. Shared by threads (one
    query at a time)."""

    def __init__(self, cluster: Cluster, app: str, retry_for: float = 60.0) -> None:
        self.dsn = cluster.dsn(app)
        self.retry_for = retry_for
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.lock = threading.RLock()

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.lock:
            return self._rows(query, params)

    def _rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                if self.conn is None or self.conn.closed or self.conn.broken:
                    self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                                options=TEST_CONN_OPTIONS)
                cur = self.conn.execute(query, params)
                return cur.fetchall() if cur.description else []
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def value(self, query: str, params: Any = None) -> Any:
        rows = self.rows(query, params)
        return rows[0][0] if rows else None

    def close(self) -> None:
        with self.lock:
            _close_quietly(self.conn)
            self.conn = None


# =================================================================== workers ==
@dataclasses.dataclass
class Proc:
    slot: int
    gen: int
    worker_id: str
    popen: "subprocess.Popen[bytes]"
    log: Path
    spawned_at: float
    killed_at: Optional[float] = None
    exited_at: Optional[float] = None
    intentional: bool = False       # we killed or terminated it
    stopped: bool = False           # SIGSTOPped right now

    @property
    def pid(self) -> int:
        return self.popen.pid


class Workers:
    """The CLI worker processes, one per slot, each in its own process group,
    respawned (a new generation) whenever one exits while the run goes on."""

    def __init__(self, cluster: Cluster, cfg: Config, queue: str, record_dir: Path, log_dir: Path) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.queue = queue
        self.record_dir = record_dir
        self.log_dir = log_dir
        self.lock = threading.RLock()
        self.current: dict[int, Proc] = {}
        self.history: list[Proc] = []
        self.respawn = True
        self.unexpected_exits: list[dict[str, Any]] = []
        self._gen = 0

    @staticmethod
    def app(slot: int) -> str:
        return f"chaos-w{slot}"

    def spawn(self, slot: int) -> Proc:
        with self.lock:
            self._gen += 1
            gen = self._gen
            worker_id = f"chaos-w{slot}-g{gen}"
            log = self.log_dir / f"worker-w{slot}-g{gen}.log"
            cmd = [sys.executable, "-m", "pgfence", "worker", "tests.chaos.chaos_handlers:HANDLERS",
                   "--dsn", self.cluster.dsn(self.app(slot)), "--queue", self.queue,
                   "--concurrency", str(self.cfg.concurrency), "--prefetch", "2" if slot == 1 else "0",
                   "--lease", str(self.cfg.lease), "--poll-interval", str(self.cfg.poll_interval),
                   "--shutdown-grace", "1", "--sweep" if slot == 0 else "--no-sweep", "--worker-id", worker_id]
            env = dict(os.environ, CHAOS_RECORD_DIR=str(self.record_dir), PYTHONUNBUFFERED="1")
            env.pop("PGFENCE_DSN", None)
            popen = processes.spawn(cmd, log_path=log, env=env, cwd=REPO, append=True)
            with open(_pidfile(self.cluster), "a") as pf:
                pf.write(f"{popen.pid} {_start_time(popen.pid)}\n")
            proc = Proc(slot, gen, worker_id, popen, log, time.time())
            self.current[slot] = proc
            self.history.append(proc)
            return proc

    def start_all(self) -> None:
        for slot in range(self.cfg.workers):
            self.spawn(slot)
        if not self.wait_ready(list(self.current.values()), 30.0):
            tails = "\n".join(f"--- {p.worker_id} (exit {p.popen.poll()}):\n{_read(p.log)[-1500:]}"
                              for p in self.current.values())
            raise RuntimeError(f"the chaos workers did not start within 30 s:\n{tails}")

    def wait_ready(self, procs: list[Proc], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        pending = list(procs)
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if p.popen.poll() is None and " started: " not in _read(p.log)]
            if pending:
                time.sleep(0.1)
        return not pending

    def alive(self) -> list[Proc]:
        with self.lock:
            return [p for p in self.current.values() if p.popen.poll() is None]

    def signal(self, proc: Proc, sig: int) -> None:
        processes.signal_group(proc.popen, sig)

    def kill(self, proc: Proc) -> None:
        with self.lock:
            proc.intentional = True
            self.signal(proc, signal.SIGKILL)
            proc.killed_at = time.time()
        try:
            proc.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def supervise(self) -> None:
        """Reap exited workers and respawn their slot (called every 0.2 s)."""
        with self.lock:
            for slot, proc in list(self.current.items()):
                if proc.popen.poll() is None:
                    continue
                if proc.exited_at is None:
                    proc.exited_at = proc.killed_at or time.time()
                    if not proc.intentional:
                        self.unexpected_exits.append({
                            "worker": proc.worker_id, "pid": proc.pid, "rc": proc.popen.returncode,
                            "t": proc.exited_at, "tail": _read(proc.log)[-600:]})
                if self.respawn:
                    self.spawn(slot)

    def shutdown(self) -> None:
        """Stop respawning; SIGCONT + SIGTERM every worker (graceful), SIGKILL what remains."""
        with self.lock:
            self.respawn = False
            for p in self.history:
                if p.popen.poll() is None:
                    p.intentional = True
            history = list(self.history)
        killed = processes.stop([p.popen for p in history], grace=10)
        for p in history:
            if p.popen in killed:
                p.killed_at = p.killed_at or time.time()
            if p.exited_at is None:
                p.exited_at = p.killed_at or time.time()
        if all(p.popen.poll() is not None for p in self.history):
            _pidfile(self.cluster).unlink(missing_ok=True)

    def by_id(self, worker_id: str) -> Optional[Proc]:
        with self.lock:
            for p in self.current.values():
                if p.worker_id == worker_id:
                    return p
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


# ================================================================== producer ==
class Producer(threading.Thread):
    """Enqueues continuously through its own connection and records, per
    sequence number (``payload.seq``), what the database acknowledged.

    States: ``acked`` (committed, id known), ``unknown`` (the connection died
    around the commit: may or may not exist), ``rolled_back`` (rolled back on
    purpose), ``aborted`` (a transaction that failed before COMMIT), ``failed``
    (a statement that raised), ``dup`` (a re-enqueue of a held idempotency key:
    must never create a job). Only ``acked`` and ``unknown`` may exist.
    """

    def __init__(self, cluster: Cluster, cfg: Config, queue: str, run_id: str) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.cluster = cluster
        self.cfg = cfg
        self.queue = queue
        self.run_id = run_id
        self.rng = random.Random(cfg.seed * 7 + 1)
        self.stop_event = threading.Event()
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.client: Optional[Client] = None
        self.seq = 0
        self.state: dict[int, str] = {}
        self.acked_id: dict[int, int] = {}
        self.expected_id: dict[int, int] = {}      # ids returned inside a transaction whose COMMIT was unknown
        self.rolled_back_ids: set[int] = set()
        self.seq_key: dict[int, str] = {}
        self.key_id: dict[str, int] = {}
        self.keys: list[str] = []
        self.unknown_batches: list[list[int]] = []  # keyless seqs committed (or not) together
        self.retry: list[tuple[str, int, dict[str, Any]]] = []
        self.idem_violations: list[str] = []
        self.errors: list[str] = []
        self.ops: Counter[str] = Counter()
        self.connect_failures = 0
        self.crash: Optional[str] = None

    # -- plumbing ---------------------------------------------------------------
    def _ensure(self) -> bool:
        if self.conn is not None and not self.conn.closed and not self.conn.broken:
            return True
        self._drop()
        try:
            self.conn = psycopg.connect(self.cluster.dsn("chaos-producer"), autocommit=True, connect_timeout=3,
                                        options=TEST_CONN_OPTIONS)
            self.client = Client(self.conn, check_schema=False)
            return True
        except psycopg.Error:
            self.connect_failures += 1
            self._drop()
            return False

    def _drop(self) -> None:
        _close_quietly(self.conn)
        self.conn = None
        self.client = None

    def _new_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _payload(self, seq: int, *, allow_perm: bool) -> dict[str, Any]:
        cfg, rng = self.cfg, self.rng
        p: dict[str, Any] = {"seq": seq, "run": self.run_id}
        if rng.random() < cfg.long_share:
            p["ms"] = rng.randint(*cfg.long_ms)
            return p
        p["ms"] = rng.randint(*cfg.short_ms)
        r = rng.random()
        if r < cfg.fail_share:
            p["fail"] = 1
            if rng.random() < 0.5:
                p["mode"] = "retry_after"
                p["delay_ms"] = cfg.retry_after_ms
            else:
                p["mode"] = "raise"
        elif r < cfg.fail_share + cfg.perm_share and allow_perm:
            p["perm"] = True
        return p

    def _error(self, exc: BaseException) -> None:
        sqlstate = getattr(exc, "sqlstate", None)
        self.errors.append(f"{type(exc).__name__} [{sqlstate}]: {str(exc).strip()[:300]}")

    def _acked(self, seq: int, job_id: int, key: Optional[str]) -> None:
        self.state[seq] = "acked"
        self.acked_id[seq] = job_id
        if key is not None:
            self.seq_key[seq] = key
            held = self.key_id.get(key)
            if held is None:
                self.key_id[key] = job_id
                self.keys.append(key)
            elif held != job_id:
                self.idem_violations.append(f"key {key}: enqueue returned job {job_id}, the key was held by {held}")

    def _unknown(self, seqs: list[int], keys: list[Optional[str]], payloads: list[dict[str, Any]]) -> None:
        keyless = []
        for seq, key, payload in zip(seqs, keys, payloads):
            if self.state.get(seq) == "dup":
                continue
            self.state[seq] = "unknown"
            if key is None:
                keyless.append(seq)
            else:
                self.seq_key[seq] = key
                self.retry.append((key, seq, payload))
        if keyless:
            self.unknown_batches.append(keyless)

    # -- the loop ---------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if not self._ensure():
                    self.stop_event.wait(0.2)
                    continue
                r = self.rng.random()
                if self.retry and r < 0.3:
                    self._retry_keyed()
                elif r < 0.35:
                    self._single(keyed=False)
                elif r < 0.50:
                    self._single(keyed=True)
                elif r < 0.70:
                    self._many()
                elif r < 0.80:
                    self._txn(commit=True)
                elif r < 0.90:
                    self._txn(commit=False)
                else:
                    self._dup()
                self.stop_event.wait(self.rng.expovariate(self.cfg.produce_rate))
            # Resolve the keyed enqueues whose outcome was unknown: same key, same payload.
            deadline = time.monotonic() + 15
            while self.retry and time.monotonic() < deadline:
                if self._ensure():
                    self._retry_keyed()
                else:
                    time.sleep(0.2)
        except BaseException:
            self.crash = traceback.format_exc()
        finally:
            self._drop()

    def _single(self, *, keyed: bool) -> None:
        assert self.client is not None
        seq = self._new_seq()
        key = f"{self.run_id}-k{seq}" if keyed else None
        payload = self._payload(seq, allow_perm=not keyed)
        self.ops["enqueue" + (" (key)" if keyed else "")] += 1
        try:
            job_id = self.client.enqueue("chaos", payload, queue=self.queue, max_attempts=self.cfg.max_attempts,
                                         idempotency_key=key)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._unknown([seq], [key], [payload])
            self._drop()
            return
        except (psycopg.Error, PgfenceError) as exc:
            self._error(exc)
            self.state[seq] = "failed"
            return
        self._acked(seq, job_id, key)

    def _many(self) -> None:
        assert self.client is not None
        n = self.rng.randint(2, 8)
        seqs = [self._new_seq() for _ in range(n)]
        keys: list[Optional[str]] = [f"{self.run_id}-k{s}" if self.rng.random() < 0.3 else None for s in seqs]
        first_key = next((k for k in keys if k is not None), None)
        dup_pos = -1
        if first_key is not None and n >= 3 and keys[-1] is None and self.rng.random() < 0.4:
            keys[-1] = first_key      # the same key twice in one batch
            dup_pos = n - 1
            self.state[seqs[-1]] = "dup"
        payloads = [self._payload(s, allow_perm=k is None) for s, k in zip(seqs, keys)]
        self.ops["enqueue_many"] += 1
        try:
            rows = self.client.enqueue_many(["chaos"] * n, payloads, queue=self.queue,
                                            max_attempts=self.cfg.max_attempts,
                                            idempotency_keys=keys if first_key is not None else None)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._unknown(seqs, keys, payloads)
            self._drop()
            return
        except (psycopg.Error, PgfenceError) as exc:
            self._error(exc)
            for s in seqs:
                self.state[s] = "failed"
            return
        if [r.ordinal for r in rows] != list(range(1, n + 1)):
            self.idem_violations.append(f"enqueue_many returned ordinals {[r.ordinal for r in rows]} for {n} inputs")
            return
        first_id: dict[str, int] = {}
        for pos, (seq, key, row) in enumerate(zip(seqs, keys, rows)):
            if pos == dup_pos:
                assert key is not None
                if row.created or row.id != first_id.get(key):
                    self.idem_violations.append(
                        f"key {key} twice in one enqueue_many: second got job {row.id} created={row.created}, "
                        f"first got {first_id.get(key)}")
                continue
            if key is not None:
                first_id[key] = row.id
                if not row.created:
                    self.idem_violations.append(f"fresh key {key} in enqueue_many was not created (job {row.id})")
            self._acked(seq, row.id, key)

    def _txn(self, *, commit: bool) -> None:
        assert self.client is not None and self.conn is not None
        self.ops["transaction " + ("committed" if commit else "rolled back on purpose")] += 1
        seqs: list[int] = []
        keys: list[Optional[str]] = []
        payloads: list[dict[str, Any]] = []
        ids: dict[int, int] = {}
        try:
            self.conn.execute("BEGIN")
            for _ in range(self.rng.randint(1, 3)):
                if self.rng.random() < 0.7:
                    seq = self._new_seq()
                    key = f"{self.run_id}-k{seq}" if self.rng.random() < 0.3 else None
                    payload = self._payload(seq, allow_perm=key is None)
                    seqs.append(seq)
                    keys.append(key)
                    payloads.append(payload)
                    ids[seq] = self.client.enqueue("chaos", payload, queue=self.queue,
                                                   max_attempts=self.cfg.max_attempts, idempotency_key=key)
                else:
                    batch = [self._new_seq() for _ in range(self.rng.randint(2, 4))]
                    bp = [self._payload(s, allow_perm=True) for s in batch]
                    seqs += batch
                    keys += [None] * len(batch)
                    payloads += bp
                    rows = self.client.enqueue_many(["chaos"] * len(batch), bp, queue=self.queue,
                                                    max_attempts=self.cfg.max_attempts)
                    for s, row in zip(batch, rows):
                        ids[s] = row.id
        except (psycopg.OperationalError, psycopg.InterfaceError):
            for s in seqs:
                self.state[s] = "aborted"       # no COMMIT was sent: certainly not committed
            self._drop()
            return
        except (psycopg.Error, PgfenceError) as exc:
            self._error(exc)
            for s in seqs:
                self.state[s] = "aborted"
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:
                self._drop()
            return
        if not commit:
            for s in seqs:
                self.state[s] = "rolled_back"
            self.rolled_back_ids.update(ids.values())
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:
                self._drop()                    # never committed either way
            return
        try:
            self.conn.execute("COMMIT")
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.expected_id.update(ids)
            self._unknown(seqs, keys, payloads)
            self._drop()
            return
        for s, k in zip(seqs, keys):
            self._acked(s, ids[s], k)

    def _dup(self) -> None:
        assert self.client is not None
        if not self.keys:
            self._single(keyed=True)
            return
        key = self.rng.choice(self.keys)
        seq = self._new_seq()
        self.state[seq] = "dup"
        payload = self._payload(seq, allow_perm=False)
        self.ops["re-enqueue of a held key"] += 1
        try:
            job_id = self.client.enqueue("chaos", payload, queue=self.queue, max_attempts=self.cfg.max_attempts,
                                         idempotency_key=key)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._drop()
            return
        except (psycopg.Error, PgfenceError) as exc:
            self._error(exc)
            return
        if job_id != self.key_id[key]:
            self.idem_violations.append(f"re-enqueue of held key {key} returned job {job_id}, "
                                        f"not the holder {self.key_id[key]}")

    def _retry_keyed(self) -> None:
        assert self.client is not None
        key, seq, payload = self.retry.pop(0)
        self.ops["retry of an unknown keyed enqueue"] += 1
        try:
            job_id = self.client.enqueue("chaos", payload, queue=self.queue, max_attempts=self.cfg.max_attempts,
                                         idempotency_key=key)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.retry.append((key, seq, payload))
            self._drop()
            return
        except (psycopg.Error, PgfenceError) as exc:
            self._error(exc)
            return
        self._acked(seq, job_id, key)


# =================================================================== monitor ==
class Monitor(threading.Thread):
    """Snapshots (id, status, finished_at, attempt_token) of the run's terminal
    jobs every ``interval`` and records any change to a job once seen terminal."""

    def __init__(self, cluster: Cluster, queue: str, interval: float = 0.5) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.db = Db(cluster, "chaos-monitor", retry_for=1.0)
        self.queue = queue
        self.interval = interval
        self.stop_event = threading.Event()
        self.first: dict[int, tuple[Any, ...]] = {}
        self.violations: dict[int, str] = {}
        self.snapshots = 0
        self.failed_snapshots = 0
        self.lock = threading.Lock()
        self.crash: Optional[str] = None

    def snapshot(self) -> None:
        rows = self.db.rows(
            "SELECT id, status, finished_at, attempt_token FROM pgfence.all_jobs "
            "WHERE queue = %s AND status IN ('done', 'failed', 'cancelled')", (self.queue,))
        with self.lock:
            now = {r[0]: tuple(r[1:]) for r in rows}
            for job_id, first in self.first.items():
                cur = now.get(job_id)
                if cur != first and job_id not in self.violations:
                    self.violations[job_id] = f"job {job_id}: was {_fmt_state(first)}, later {_fmt_state(cur)}"
            for job_id, cur in now.items():
                self.first.setdefault(job_id, cur)
            self.snapshots += 1

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.interval):
                try:
                    self.snapshot()
                except psycopg.Error:
                    self.failed_snapshots += 1
        except BaseException:
            self.crash = traceback.format_exc()
        finally:
            self.db.close()


def _fmt_state(state: Optional[tuple[Any, ...]]) -> str:
    if state is None:
        return "not terminal (or gone)"
    status, finished, token = state
    return f"{status} finished_at={finished.isoformat() if finished else None} token={token}"


# ==================================================================== report ==
@dataclasses.dataclass
class Invariant:
    name: str
    ok: bool
    detail: str
    offenders: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Report:
    form: str
    seed: int
    queue: str
    workdir: Path
    faults: list[tuple[float, str, str]] = dataclasses.field(default_factory=list)
    invariants: dict[str, Invariant] = dataclasses.field(default_factory=dict)
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: Optional[str] = None
    seconds: float = 0.0

    def add(self, name: str, ok: bool, detail: str, offenders: Optional[list[str]] = None) -> None:
        self.invariants[name] = Invariant(name, ok, detail, list(offenders or []))

    def fault_counts(self) -> Counter[str]:
        return Counter(kind for _, kind, _ in self.faults)

    def assert_ok(self, name: str) -> None:
        if self.error is not None:
            raise AssertionError(f"the chaos scenario itself failed:\n{self.error}")
        inv = self.invariants.get(name)
        if inv is None:
            raise AssertionError(f"invariant {name!r} was not evaluated")
        if not inv.ok:
            shown = inv.offenders[:40]
            more = f"\n  ... and {len(inv.offenders) - len(shown)} more" if len(inv.offenders) > len(shown) else ""
            raise AssertionError(
                f"CHAOS INVARIANT VIOLATED: {name}\n{inv.detail}\noffenders ({len(inv.offenders)}):\n  "
                + "\n  ".join(shown) + more + f"\n(seed {self.seed}, queue {self.queue}, artifacts {self.workdir})")

    def render(self, timeline_limit: bool = True) -> str:
        """The tables; the fault timeline too when short (always with timeline_limit=False)."""
        out = [f"pgfence chaos, {self.form} form: seed {self.seed} (PGFENCE_CHAOS_SEED to replay), queue "
               f"{self.queue}, {self.seconds:.1f} s; artifacts in {self.workdir}"]
        if self.error:
            out.append("SCENARIO ERROR: " + self.error.strip().splitlines()[-1])
        counts = self.fault_counts()
        out.append("")
        out.append(f"{'fault injected':<56} count")
        out.append("-" * 62)
        for kind in FAULT_KINDS:
            out.append(f"{kind:<56} {counts.get(kind, 0):>5}")
        out.append("")
        width = max(len(n) for n in INVARIANTS)
        out.append(f"{'invariant':<{width}}  result  detail")
        out.append("-" * (width + 40))
        for name in INVARIANTS:
            inv = self.invariants.get(name)
            if inv is None:
                out.append(f"{name:<{width}}  ----    not evaluated")
                continue
            lines = inv.detail.splitlines() or [""]
            out.append(f"{name:<{width}}  {'OK' if inv.ok else 'FAIL':<6}  {lines[0]}")
            for extra in lines[1:]:
                out.append(f"{'':<{width}}          {extra}")
            if not inv.ok and inv.offenders:
                out.append(f"{'':<{width}}          offenders: " + "; ".join(inv.offenders[:8])
                           + (" ..." if len(inv.offenders) > 8 else ""))
        if self.faults and (len(self.faults) <= 20 or not timeline_limit):
            out.append("")
            out.append("fault timeline (seconds from the start of the churn)")
            out.append("-" * 62)
            out.extend(f"  {t:6.1f}  {kind}: {detail}" for t, kind, detail in self.faults)
        if self.stats:
            out.append("")
            out.append("run statistics")
            out.append("-" * 62)
            for k, v in self.stats.items():
                out.append(f"  {k}: {v}")
        return "\n".join(out)


# ================================================================= scenario ==
class Scenario:
    """One chaos run: start everything, inject faults on a schedule, drain,
    then evaluate every invariant into ``self.report``."""

    def __init__(self, cluster: Cluster, cfg: Config, workdir: Path) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.workdir = workdir
        self.run_id = secrets.token_hex(3)
        self.queue = f"chaos_{self.run_id}"
        self.probe_queue = f"chaos_{self.run_id}_probe"
        self.rng = random.Random(cfg.seed)
        self.record_dir = workdir / "handlers"
        self.log_dir = workdir / "logs"
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.report = Report("full" if cfg.full else "short", cfg.seed, self.queue, workdir)
        self.workers = Workers(cluster, cfg, self.queue, self.record_dir, self.log_dir)
        self.producer = Producer(cluster, cfg, self.queue, self.run_id)
        self.monitor = Monitor(cluster, self.queue)
        self.admin = Db(cluster, "chaos-admin")
        self.t0 = time.time()
        self.stop_supervisor = threading.Event()
        self.supervisor: Optional[threading.Thread] = None
        self.crash_windows: list[tuple[float, float]] = []
        self.zombies: list[dict[str, Any]] = []
        self.graceful: list[dict[str, Any]] = []
        self.snapshot_results: list[dict[str, Any]] = []
        self.health_problems: list[str] = []
        self.sweeper_pending = False
        self.sweeper_checked = 0.0
        self.sweeper_misses = 0
        self.snapshot_thread: Optional[threading.Thread] = None
        self.stop_thread: Optional[threading.Thread] = None
        self.stopped_slot: Optional[int] = None
        self.server_log_offset = 0
        self.drain: dict[str, Any] = {}
        self.fault_lock = threading.Lock()

    # -- helpers ------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.t0

    def fault(self, kind: str, detail: str) -> None:
        with self.fault_lock:
            self.report.faults.append((self.now(), kind, detail))

    def _supervise_loop(self) -> None:
        while not self.stop_supervisor.wait(0.2):
            try:
                self.workers.supervise()
            except Exception:
                self.health_problems.append("supervisor: " + traceback.format_exc().strip().splitlines()[-1])

    def at(self, offset: float) -> None:
        """Sleep until t0 + offset, meanwhile trying the pending pg_cron sweeper fault."""
        while True:
            self.tick()
            remaining = self.t0 + offset - time.time()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.25))

    def tick(self) -> None:
        if self.sweeper_pending and time.time() - self.sweeper_checked >= 0.5:
            self.sweeper_checked = time.time()
            if self.term_sweeper():
                self.sweeper_pending = False

    def pick_slot(self, *, exclude_stopped: bool = True) -> Optional[Proc]:
        alive = [p for p in self.workers.alive() if not (exclude_stopped and p.stopped)]
        return self.rng.choice(alive) if alive else None

    def processing_by_worker(self) -> dict[str, list[int]]:
        rows = self.admin.rows("SELECT reserved_by, array_agg(id ORDER BY id) FROM pgfence.jobs "
                               "WHERE queue = %s AND status = 'processing' GROUP BY 1", (self.queue,))
        return {r[0]: list(r[1]) for r in rows}

    # -- faults -------------------------------------------------------------------
    def kill_worker(self) -> None:
        """SIGKILL a random worker, preferring one that holds jobs (so leases are orphaned)."""
        by_worker = self.processing_by_worker()
        holders = [p for p in self.workers.alive() if not p.stopped and by_worker.get(p.worker_id)]
        proc = self.rng.choice(holders) if holders and self.rng.random() < 0.8 else self.pick_slot()
        if proc is None:
            return
        held = by_worker.get(proc.worker_id, [])
        self.workers.kill(proc)
        self.fault(F_KILL, f"{proc.worker_id} (pid {proc.pid}) holding {len(held)} jobs")

    def mid_long_job(self, wait: float) -> Optional[tuple[Proc, list[int]]]:
        """A live, running worker in the middle of a long job (claimed 0.3-1.5 s ago,
        so its handler has started and has well over a second of work left), with
        the long jobs it holds; waits up to ``wait`` seconds for one."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            rows = self.admin.rows(
                "SELECT reserved_by, array_agg(id ORDER BY id) FROM pgfence.jobs WHERE queue = %s "
                "AND status = 'processing' AND (payload->>'ms')::int >= %s "
                "AND reserved_at BETWEEN clock_timestamp() - interval '1.5 seconds' "
                "AND clock_timestamp() - interval '0.3 seconds' GROUP BY 1",
                (self.queue, self.cfg.long_ms[0]))
            for wid, ids in rows:
                proc = self.workers.by_id(wid)
                if proc is not None and not proc.stopped and proc.popen.poll() is None:
                    return proc, list(ids)
            time.sleep(0.1)
        return None

    def sigterm_worker(self) -> None:
        """SIGTERM (a rolling deploy) a worker while one of its handlers is in the
        middle of a long job; the handler honours job.should_stop() like the README's
        example. The job must not end up done with the result of unfinished work."""
        target = self.mid_long_job(8.0)
        if target is None:
            self.health_problems.append("SIGTERM fault: no worker in the middle of a long job within 8 s")
            return
        proc, ids = target
        with self.workers.lock:
            proc.intentional = True
            self.workers.signal(proc, signal.SIGTERM)
        t = time.time()
        self.graceful.append({"worker": proc.worker_id, "pid": proc.pid, "t": t, "long_jobs": ids})
        try:
            proc.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.health_problems.append(f"{proc.worker_id}: still running 15 s after SIGTERM")
        self.fault(F_SIGTERM, f"{proc.worker_id} in the middle of long job(s) {ids}; exited after "
                              f"{time.time() - t:.1f}s")

    def stop_worker(self) -> None:
        """SIGSTOP a worker in the middle of a long job for lease + stop_extra, check
        another worker took its jobs over, then SIGCONT: a zombie comes back."""
        # A worker in the middle of a long job: its handler is still running when
        # the lease is taken over, so it really comes back as a zombie.
        target = self.mid_long_job(6.0)
        proc: Optional[Proc]
        if target is not None:
            proc = target[0]
        else:
            proc = self.pick_slot()
            if proc is None:
                return
        held = self.processing_by_worker().get(proc.worker_id, [])
        with self.workers.lock:
            proc.stopped = True
            self.stopped_slot = proc.slot
            self.workers.signal(proc, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            end = stopped_at + self.cfg.stop_seconds
            while time.time() < end:
                self.tick()
                time.sleep(0.1)
            taken = self.admin.rows(
                "SELECT a.job_id FROM pgfence.all_attempts a WHERE a.worker = %s AND a.outcome = 'reclaimed' "
                "AND a.ended_at >= to_timestamp(%s)", (proc.worker_id, stopped_at))
        finally:
            with self.workers.lock:
                self.workers.signal(proc, signal.SIGCONT)
                proc.stopped = False
                self.stopped_slot = None
        resumed_at = time.time()
        taken_ids = sorted(r[0] for r in taken)
        self.zombies.append({"worker": proc.worker_id, "stopped_at": stopped_at, "resumed_at": resumed_at,
                             "held": held, "taken": taken_ids})
        self.fault(F_STOP, f"{proc.worker_id} stopped {resumed_at - stopped_at:.1f}s holding {len(held)} jobs; "
                           f"{len(taken_ids)} reclaimed meanwhile")

    def term_worker_conns(self) -> None:
        for _ in range(3):
            proc = self.pick_slot()
            if proc is None:
                return
            n = self.admin.value(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND coalesce(query, '') NOT LIKE 'LISTEN%%' "
                "AND pid <> pg_backend_pid()", (self.workers.app(proc.slot),))
            if n:
                self.fault(F_TERM_WORKER, f"{proc.worker_id}: {n} connections")
                return

    def term_listener(self) -> None:
        for _ in range(3):
            proc = self.pick_slot()
            if proc is None:
                return
            app = self.workers.app(proc.slot)
            n = self.admin.value(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND query LIKE 'LISTEN%%'", (app,))
            if not n:
                continue
            t = time.time()
            back = None
            while time.time() - t < 6.0:
                if proc.popen.poll() is not None or proc.stopped:
                    back = -1.0
                    break
                if self.admin.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                                    "AND query LIKE 'LISTEN%%' AND backend_start > to_timestamp(%s)", (app, t)):
                    back = time.time() - t
                    break
                time.sleep(0.1)
            if back is None:
                self.health_problems.append(f"{proc.worker_id}: listener not back 6 s after pg_terminate_backend")
            self.fault(F_TERM_LISTENER, f"{proc.worker_id}: listener back after "
                                        + ("(worker gone)" if back == -1.0 else
                                           "NEVER" if back is None else f"{back:.1f}s"))
            return

    def term_producer(self) -> None:
        n = self.admin.value("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                             "WHERE application_name = 'chaos-producer'")
        if n:
            self.fault(F_TERM_PRODUCER, f"{n} connection")

    def term_sweeper(self) -> bool:
        rows = self.admin.rows(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE backend_type = 'pg_cron' AND query LIKE '%%run_sweeper%%' AND state = 'active'")
        if rows and any(r[1] for r in rows):
            self.fault(F_TERM_SWEEPER, f"pg_cron job backend pid {rows[0][0]}")
            return True
        self.sweeper_misses += 1
        return False

    def crash(self) -> None:
        t = time.time()
        try:
            down = self.cluster.crash_restart()
        finally:
            self.crash_windows.append((t, time.time()))
        self.fault(F_CRASH, f"down {down:.1f}s")

    def snapshot_phase(self) -> None:
        """Hold a REPEATABLE READ snapshot that read pgfence.jobs for cfg.snapshot_hold
        seconds while the churn goes on; measure n_dead_tup (after VACUUM) and the
        latency of a claim on an empty queue before, at the end of, and after it."""
        result: dict[str, Any] = {}
        meas = psycopg.connect(self.cluster.dsn("chaos-measure"), autocommit=True, options=TEST_CONN_OPTIONS)
        snap: Optional[psycopg.Connection[Any]] = None
        try:
            notices: list[str] = []
            meas.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            result["before"] = self._measure(meas, notices)
            snap = psycopg.connect(self.cluster.dsn("chaos-snapshot"), autocommit=True)
            snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            snap.execute("SELECT count(*) FROM pgfence.jobs")
            opened = time.time()
            self.fault(F_SNAPSHOT, f"held {self.cfg.snapshot_hold:.0f}s from t={self.now():.0f}s")
            while time.time() < opened + self.cfg.snapshot_hold:
                time.sleep(0.2)
            result["during"] = self._measure(meas, notices)
            snap.execute("ROLLBACK")
            result["held_seconds"] = time.time() - opened
            snap.close()
            snap = None
            result["after"] = self._measure(meas, notices)
        except Exception:
            result["error"] = traceback.format_exc()
        finally:
            if snap is not None:
                snap.close()
            meas.close()
            self.snapshot_results.append(result)

    def _measure(self, conn: psycopg.Connection[Any], notices: list[str]) -> dict[str, Any]:
        notices.clear()
        conn.execute("VACUUM (VERBOSE) pgfence.jobs")
        not_removable = None
        for n in notices:
            if 'vacuuming "' in n and '.pgfence.jobs"' in n:
                m = re.search(r"(\d+) are dead but not yet removable", n)
                if m:
                    not_removable = int(m.group(1))
        time.sleep(1.5)             # let busy backends flush their pending counts
        conn.execute("SELECT pg_stat_force_next_flush()")
        dead = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables "
                            "WHERE relid = 'pgfence.jobs'::regclass").fetchone()
        # A claim on an empty queue still runs the on-claim reclaim over the reclaim
        # index: its server-side time and the buffers it touches grow with the dead
        # entries an old snapshot keeps alive. Medians of latency_probes claims.
        times, buffers = [], []
        for _ in range(self.cfg.latency_probes):
            row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pgfence.claim("
                               "worker_id => 'chaos-probe', queues => %s, lease => '2 seconds', max_jobs => 1)",
                               ([self.probe_queue],)).fetchone()
            assert row is not None
            plan = row[0][0]
            times.append(float(plan["Execution Time"]))
            buffers.append(int(plan["Plan"]["Shared Hit Blocks"]) + int(plan["Plan"]["Shared Read Blocks"]))
        return {"n_dead_tup": dead[0] if dead else None, "not_removable": not_removable,
                "claim_ms": statistics.median(times), "claim_ms_max": max(times),
                "claim_buffers": statistics.median(buffers)}

    def start_snapshot_phase(self) -> None:
        self.snapshot_thread = threading.Thread(target=self.snapshot_phase, name="chaos-snapshot", daemon=True)
        self.snapshot_thread.start()

    def snapshot_active(self) -> bool:
        return self.snapshot_thread is not None and self.snapshot_thread.is_alive()

    def join_snapshot(self) -> None:
        if self.snapshot_thread is not None:
            while self.snapshot_thread.is_alive():
                self.tick()
                self.snapshot_thread.join(0.25)

    # -- schedules ------------------------------------------------------------------
    def short_schedule(self) -> None:
        """Every fault kind at least once, in about 40 s."""
        steps: list[tuple[float, Callable[[], None]]] = [
            (1.5, self.kill_worker), (3.0, self.term_worker_conns), (4.0, self.term_listener),
            (5.0, self.term_producer), (6.0, self.stop_worker), (11.0, self.start_snapshot_phase),
            (14.0, self.kill_worker), (16.0, self.sigterm_worker), (22.0, self.term_worker_conns),
        ]
        for offset, action in steps:
            if offset >= 7.0:
                self.sweeper_pending = self.sweeper_pending or not self.report.fault_counts()[F_TERM_SWEEPER]
            self.at(offset)
            action()
        self.join_snapshot()
        self.crash_clear_of_cron()
        self.at(self.now() + 1.5)
        self.kill_worker()
        self.at(self.now() + 1.0)
        self.term_worker_conns()
        self.at(self.cfg.churn_seconds)
        self._await_sweeper()

    def crash_clear_of_cron(self) -> None:
        """Crash-restart, but while the pg_cron sweeper fault still waits for a
        sweeper, not just before a minute boundary: pg_cron (which starts the
        sweeper on the minute) must be back up in time for it."""
        if self.sweeper_pending:
            boundary = math.floor(time.time() / 60.0) * 60.0 + 60.0
            if boundary - time.time() < 5.5:
                while self.sweeper_pending and time.time() < boundary + 3.0:
                    self.tick()
                    time.sleep(0.1)
        self.crash()

    def full_schedule(self) -> None:
        """Random faults every 1-2.5 s for churn_seconds; crash-restarts and old
        snapshots at fixed times; zombies in a thread (other faults continue); every
        pg_cron sweeper run (one per minute) terminated 3-15 s after it appears."""
        crash_at = [50.0, 105.0, 160.0]
        snapshot_at = [15.0, 115.0]
        weights = [(self.kill_worker, 5), (self.term_worker_conns, 3), (self.term_listener, 2),
                   (self.term_producer, 2), (self._start_stop_thread, 2), (self.sigterm_worker, 1)]
        next_fault = 1.0
        sweeper_seen: Optional[float] = None
        end = self.cfg.churn_seconds
        while self.now() < end:
            now = self.now()
            if sweeper_seen is None:
                if self.admin.value("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_cron' "
                                    "AND query LIKE '%%run_sweeper%%' AND state = 'active'"):
                    sweeper_seen = now + self.rng.uniform(3.0, 15.0)
            elif now >= sweeper_seen:
                self.term_sweeper()
                sweeper_seen = None
            if snapshot_at and now >= snapshot_at[0] and not self.snapshot_active():
                snapshot_at.pop(0)
                self.start_snapshot_phase()
            elif crash_at and now >= crash_at[0] and not self.snapshot_active():
                crash_at.pop(0)
                self.crash()
            elif now >= next_fault:
                action = self.rng.choices([a for a, _ in weights], [w for _, w in weights])[0]
                action()
                next_fault = self.now() + self.rng.uniform(1.0, 2.5)
            time.sleep(0.1)
        if self.stop_thread is not None:
            self.stop_thread.join(30)
        self.join_snapshot()
        self._await_sweeper()

    def _start_stop_thread(self) -> None:
        if self.stop_thread is not None and self.stop_thread.is_alive():
            self.kill_worker()
            return
        self.stop_thread = threading.Thread(target=self.stop_worker, name="chaos-sigstop", daemon=True)
        self.stop_thread.start()

    def _await_sweeper(self) -> None:
        """The pg_cron sweeper only runs from the first minute boundary after a
        (re)start: wait (bounded) for one to terminate if none was terminated yet."""
        if self.report.fault_counts()[F_TERM_SWEEPER]:
            self.sweeper_pending = False
            return
        self.sweeper_pending = True
        restart = max(self.cluster.started_at, self.t0)
        cap = math.floor(restart / 60.0) * 60.0 + 60.0 + 5.0
        while self.sweeper_pending and time.time() < cap:
            self.tick()
            time.sleep(0.1)
        self.sweeper_pending = False

    # -- the run --------------------------------------------------------------------
    def run(self) -> Report:
        started = time.time()
        try:
            self._run()
        except BaseException:
            self.report.error = traceback.format_exc()
            raise
        finally:
            self._cleanup()
            self.report.seconds = time.time() - started
            try:
                (self.workdir / "report.txt").write_text(self.report.render(timeline_limit=False) + "\n")
            except OSError:
                pass
        return self.report

    def _run(self) -> None:
        cfg = self.cfg
        try:
            self.server_log_offset = self.cluster.server_log.stat().st_size
        except FileNotFoundError:
            self.server_log_offset = 0
        self.workers.start_all()
        self.supervisor = threading.Thread(target=self._supervise_loop, name="chaos-supervisor", daemon=True)
        self.supervisor.start()
        self.t0 = time.time()
        self.monitor.start()
        self.producer.start()
        if cfg.full:
            self.full_schedule()
        else:
            self.short_schedule()

        # Faults stop here: producer stopped, every worker alive and ready.
        self.producer.stop_event.set()
        self.producer.join(30)
        fault_stop = time.time()
        self.workers.wait_ready(self.workers.alive(), 15.0)
        t_stop = fault_stop         # the bound counts from here, respawns and reconnects included
        queued = self.admin.value("SELECT count(*) FROM pgfence.jobs WHERE queue = %s AND status = 'queued'",
                                  (self.queue,))
        bound = self._bound(queued)
        deadline = t_stop + bound["total"] + 20.0
        remaining = None
        while time.time() < deadline:
            remaining = self.admin.value("SELECT count(*) FROM pgfence.jobs WHERE queue = %s "
                                         "AND status NOT IN ('done', 'failed', 'cancelled')", (self.queue,))
            if remaining == 0:
                break
            time.sleep(0.2)
        drained = time.time() - t_stop
        stragglers = self.admin.rows(
            "SELECT id, status, attempts, reserved_by, lease_expires_at, available_at, last_error "
            "FROM pgfence.jobs WHERE queue = %s AND status NOT IN ('done', 'failed', 'cancelled') ORDER BY id",
            (self.queue,))
        self.drain = {"bound": bound, "seconds": drained, "queued_at_stop": queued, "stragglers": stragglers,
                      "respawn_wait": t_stop - fault_stop}

        # Stop the workers (graceful), then a last look at the terminal states.
        self.stop_supervisor.set()
        if self.supervisor is not None:
            self.supervisor.join(5)
        self.workers.shutdown()
        self.monitor.stop_event.set()
        self.monitor.join(10)
        try:
            self.monitor.snapshot()
        except psycopg.Error as exc:
            self.health_problems.append(f"final monitor snapshot failed: {exc}")
        self.evaluate()

    def _bound(self, queued: int) -> dict[str, float]:
        cfg = self.cfg
        mean_ms = ((1 - cfg.long_share) * sum(cfg.short_ms) / 2 + cfg.long_share * sum(cfg.long_ms) / 2)
        parts = {
            "lease": cfg.lease,
            "sweep interval": cfg.sweep_interval,
            "claim poll": cfg.poll_interval,
            "capped backoff": max(cfg.backoff(1), cfg.retry_after_ms / 1000.0),
            "longest handler": cfg.long_ms[1] / 1000.0,
            "failed attempt run": cfg.short_ms[1] / 1000.0,
            "backlog": 2.0 * queued * mean_ms / 1000.0 / (cfg.workers * cfg.concurrency),
            "slack (scheduling, flush, reconnect)": 3.0,
        }
        parts["total"] = sum(parts.values())
        return parts

    def _cleanup(self) -> None:
        self.producer.stop_event.set()
        self.monitor.stop_event.set()
        self.stop_supervisor.set()
        try:
            self.workers.shutdown()
        except Exception:
            pass
        for t in (self.producer, self.monitor, self.supervisor, self.snapshot_thread, self.stop_thread):
            if t is not None and t.is_alive():
                t.join(5)
        self.admin.close()

    # =============================================================== evaluation ==
    def evaluate(self) -> None:
        rep = self.report
        db = self.admin
        jobs: dict[int, dict[str, Any]] = {}
        for r in db.rows("SELECT id, status, attempts, attempt_token, finished_at, idempotency_key, payload, "
                         "reclaim_count, last_error, result FROM pgfence.all_jobs WHERE queue = %s", (self.queue,)):
            jobs[r[0]] = {"status": r[1], "attempts": r[2], "token": r[3], "finished_at": r[4], "key": r[5],
                          "payload": r[6], "reclaims": r[7], "last_error": r[8], "result": r[9]}
        attempts: dict[int, list[dict[str, Any]]] = defaultdict(list)
        by_token: dict[str, dict[str, Any]] = {}
        for r in db.rows("SELECT a.job_id, a.attempt, a.attempt_token, a.worker, a.claimed_at, a.lease_expires_at, "
                         "a.ended_at, a.outcome, a.error FROM pgfence.all_attempts a JOIN pgfence.all_jobs j "
                         "ON j.id = a.job_id WHERE j.queue = %s ORDER BY a.job_id, a.attempt, a.ended_at",
                         (self.queue,)):
            row = {"job": r[0], "attempt": r[1], "token": str(r[2]), "worker": r[3], "claimed_at": _ts(r[4]),
                   "lease_expires_at": _ts(r[5]), "ended_at": _ts(r[6]), "outcome": r[7], "error": r[8]}
            attempts[r[0]].append(row)
            by_token[row["token"]] = row
        rejections = db.rows("SELECT r.job_id, r.attempt_token, r.operation, r.detail FROM pgfence.rejections r "
                             "JOIN pgfence.all_jobs j ON j.id = r.job_id WHERE j.queue = %s", (self.queue,))
        rolled_back_present = [r[0] for r in db.rows("SELECT id FROM pgfence.all_jobs WHERE id = ANY(%s)",
                                                     (sorted(self.producer.rolled_back_ids),))]
        execs, dup_execs = self._executions()

        self._check_faults()
        self._check_enqueues(jobs, rolled_back_present)
        self._check_terminal(jobs)
        self._check_frozen()
        self._check_done(jobs, attempts)
        self._check_history(jobs, attempts)
        self._check_overlap(jobs, attempts, execs, by_token)
        self._check_zombies(jobs, attempts, execs, dup_execs, by_token, rejections)
        self._check_finished(jobs, execs, by_token)
        self._check_backoff(jobs, attempts)
        self._check_bound()
        self._check_no_40()
        self._check_snapshot()
        self._check_health()

        outcomes = Counter(a["outcome"] for rows in attempts.values() for a in rows)
        statuses = Counter(j["status"] for j in jobs.values())
        log_text = self._worker_logs()
        rep.stats.update({
            "producer operations": dict(self.producer.ops),
            "enqueue outcomes (by seq)": dict(Counter(self.producer.state.values())),
            "jobs by status": dict(statuses),
            "ended attempts by outcome": dict(outcomes),
            "rejections by operation": dict(Counter(r[2] for r in rejections)),
            "handler executions": len(execs),
            "worker log lines: claimed / completed / lease lost": (
                f"{log_text.count(' claimed job ')} / {log_text.count(' completed job ')} / "
                f"{log_text.count('lease lost')}"),
            "worker generations": len(self.workers.history),
            "terminal-state snapshots taken": self.monitor.snapshots,
            "drain after faults stopped": f"{self.drain['seconds']:.1f}s (bound {self.drain['bound']['total']:.1f}s)",
        })

    # -- data -----------------------------------------------------------------------
    def _executions(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Handler executions by token, from the handlers' own records. An
        execution without an end record ended when its process died."""
        execs: dict[str, dict[str, Any]] = {}
        dups: list[str] = []
        proc_end = {p.pid: p.exited_at or p.killed_at for p in self.workers.history}
        for path in sorted(self.record_dir.glob("handler-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue            # a line cut by SIGKILL
                tok = ev["token"]
                if ev["ev"] == "start":
                    if tok in execs:
                        dups.append(f"job {ev['job']} token {tok}: handler started twice "
                                    f"(pids {execs[tok]['pid']} and {ev['pid']})")
                        continue
                    execs[tok] = {"job": ev["job"], "attempt": ev["attempt"], "token": tok, "pid": ev["pid"],
                                  "start": ev["t"], "end": None, "outcome": None}
                elif tok in execs:
                    execs[tok]["end"] = ev["t"]
                    execs[tok]["outcome"] = ev["outcome"]
        for e in execs.values():
            if e["end"] is None:
                e["died"] = True
                e["end"] = proc_end.get(e["pid"]) or time.time()
        return execs, dups

    def _worker_logs(self) -> str:
        return "".join(_read(p.log) for p in self.workers.history)

    # -- checks ---------------------------------------------------------------------
    def _check_faults(self) -> None:
        counts = self.report.fault_counts()
        missing = [k for k in FAULT_KINDS if not counts.get(k)]
        detail = f"{sum(counts.values())} faults, {len(FAULT_KINDS) - len(missing)}/{len(FAULT_KINDS)} kinds"
        if missing and F_TERM_SWEEPER in missing:
            detail += f" (no active pg_cron sweeper found in {self.sweeper_misses} looks)"
        self.report.add(I_FAULTS, not missing, detail, [f"never injected: {k}" for k in missing])

    def _check_enqueues(self, jobs: dict[int, dict[str, Any]], rolled_back_present: list[int]) -> None:
        p = self.producer
        by_seq: dict[int, list[int]] = defaultdict(list)
        for job_id, j in jobs.items():
            seq = j["payload"].get("seq") if isinstance(j["payload"], dict) else None
            by_seq[seq if isinstance(seq, int) else -1].append(job_id)

        lost = []
        for seq, state in p.state.items():
            if state != "acked":
                continue
            job_id = p.acked_id[seq]
            acked_job = jobs.get(job_id)
            if acked_job is None:
                lost.append(f"seq {seq}: acknowledged job {job_id} does not exist")
            elif acked_job["payload"].get("seq") != seq:
                lost.append(f"seq {seq}: acknowledged id {job_id} holds seq {acked_job['payload'].get('seq')}")
        acked = sum(1 for s in p.state.values() if s == "acked")
        if p.crash:
            lost.append("producer thread crashed: " + p.crash.strip().splitlines()[-1])
        # An enqueue may fail only by losing its connection; any other error refused work.
        lost += [f"producer: enqueue raised {e}" for e in p.errors]
        self.report.add(I_ACKED, not lost, _say(not lost, f"{acked} acknowledged enqueues, "
                        f"{len(p.errors)} enqueues refused by an error other than a lost connection",
                        f"; all present after {self.report.fault_counts()[F_CRASH]} crash-restart(s)"), lost)

        phantoms: list[str] = []
        for seq, ids in by_seq.items():
            seq_state = p.state.get(seq)
            if seq == -1 or seq_state is None:
                phantoms.extend(f"job {i}: seq {seq} was never enqueued" for i in ids)
            elif seq_state not in ("acked", "unknown"):
                phantoms.extend(f"job {i}: seq {seq} was {seq_state}, must not exist" for i in ids)
            elif len(ids) > 1:
                phantoms.append(f"seq {seq} exists {len(ids)} times: jobs {ids}")
            elif seq_state == "unknown" and seq in p.expected_id and ids[0] != p.expected_id[seq]:
                phantoms.append(f"job {ids[0]}: seq {seq} had id {p.expected_id[seq]} before its unknown COMMIT")
        phantoms += [f"job {i}: enqueued in a transaction rolled back on purpose" for i in rolled_back_present]
        for batch in p.unknown_batches:
            present = [s for s in batch if s in by_seq]
            if present and len(present) != len(batch):
                phantoms.append(f"unknown-outcome batch {batch}: only {present} exist (not atomic)")
        unknown = [s for s, st in p.state.items() if st == "unknown"]
        rolled = Counter(p.state.values())
        self.report.add(
            I_PHANTOM, not phantoms, _say(not phantoms,
            f"{len(jobs)} jobs in the queue; {len(unknown)} unknown-outcome enqueues "
            f"({sum(1 for s in unknown if s in by_seq)} exist); {rolled['rolled_back']} rolled back, "
            f"{rolled['aborted']} aborted, {rolled['dup']} held-key re-enqueues", ": none of these exist"), phantoms)

        idem = list(p.idem_violations)
        keyed: dict[str, list[int]] = defaultdict(list)
        for job_id, j in jobs.items():
            if j["key"] is not None and j["status"] in ("queued", "processing", "manual_review", "done"):
                keyed[j["key"]].append(job_id)
        idem += [f"key {k}: jobs {sorted(v)} hold it together" for k, v in keyed.items() if len(v) > 1]
        for key, job_id in p.key_id.items():
            holder = jobs.get(job_id)
            if holder is not None and holder["key"] != key:
                idem.append(f"key {key}: returned job {job_id} has key {holder['key']}")
        self.report.add(I_IDEMPOTENCY, not idem, _say(not idem,
                        f"{len(p.key_id)} keys; {p.ops['re-enqueue of a held key']} re-enqueues of a held key "
                        f"and {p.ops['retry of an unknown keyed enqueue']} retries", ", all returned the holder"), idem)

    def _check_terminal(self, jobs: dict[int, dict[str, Any]]) -> None:
        bad = []
        for job_id, j in sorted(jobs.items()):
            expected = "failed" if j["payload"].get("perm") else "done"
            if j["status"] != expected:
                bad.append(f"job {job_id}: {j['status']} (expected {expected}; attempts {j['attempts']}, "
                           f"last_error {str(j['last_error'])[:80]!r})")
        st = Counter(j["status"] for j in jobs.values())
        self.report.add(I_TERMINAL, not bad, f"{st['done']} done, {st['failed']} failed (dead-lettered on "
                        f"purpose), {len(jobs) - st['done'] - st['failed']} other", bad)

    def _check_frozen(self) -> None:
        m = self.monitor
        bad = list(m.violations.values())
        if m.crash:
            bad.append("monitor thread crashed: " + m.crash.strip().splitlines()[-1])
        ok = not bad and m.snapshots > 3
        if m.snapshots <= 3:
            bad.append(f"only {m.snapshots} snapshots taken")
        self.report.add(I_FROZEN, ok, _say(ok, f"{len(m.first)} terminal jobs watched over {m.snapshots} snapshots "
                        f"({m.failed_snapshots} missed during faults)", "; none changed"), bad)

    def _check_done(self, jobs: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]]) -> None:
        bad = []
        for job_id, j in sorted(jobs.items()):
            done = [a for a in attempts.get(job_id, []) if a["outcome"] == "done"]
            if j["status"] == "done":
                if len(done) != 1:
                    bad.append(f"job {job_id}: {len(done)} accepted completions")
                elif done[0]["token"] != str(j["token"]):
                    bad.append(f"job {job_id}: completion by token {done[0]['token']}, job token {j['token']}")
            elif done:
                bad.append(f"job {job_id}: {j['status']} but has {len(done)} 'done' attempts")
        n = sum(1 for j in jobs.values() if j["status"] == "done")
        self.report.add(I_ONE_DONE, not bad, _say(not bad, f"{n} done jobs",
                        ", each with one 'done' attempt carrying its token"), bad)

    def _check_history(self, jobs: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]]) -> None:
        bad = []
        for job_id, j in sorted(jobs.items()):
            rows = attempts.get(job_id, [])
            numbers = sorted(a["attempt"] for a in rows)
            if numbers != list(range(1, j["attempts"] + 1)):
                bad.append(f"job {job_id}: attempts={j['attempts']} but history has attempt numbers {numbers}")
                continue
            if len({a["token"] for a in rows}) != len(rows):
                bad.append(f"job {job_id}: a token appears twice in its history")
            last = max(rows, key=lambda a: a["attempt"]) if rows else None
            if j["status"] in ("done", "failed") and (last is None or last["outcome"] != j["status"]
                                                     or last["token"] != str(j["token"])):
                bad.append(f"job {job_id}: {j['status']} but its last attempt is "
                           f"{None if last is None else (last['attempt'], last['outcome'], last['token'])}")
            for a in rows:
                if a is not last and a["outcome"] in ("done",):
                    bad.append(f"job {job_id}: attempt {a['attempt']} done but not the last")
        total = sum(len(v) for v in attempts.values())
        self.report.add(I_HISTORY, not bad, _say(not bad, f"{total} ended attempts",
                        ": numbers 1..attempts, one row each, the last one the terminal one"), bad)

    def _check_overlap(self, jobs: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]],
                       execs: dict[str, dict[str, Any]], by_token: dict[str, dict[str, Any]]) -> None:
        bad = []
        pairs = 0
        for job_id, rows in sorted(attempts.items()):
            rows = sorted(rows, key=lambda a: a["attempt"])
            for prev, nxt in zip(rows, rows[1:]):
                pairs += 1
                if nxt["claimed_at"] < prev["ended_at"]:
                    bad.append(f"job {job_id}: attempt {nxt['attempt']} claimed at {nxt['claimed_at']:.6f} before "
                               f"attempt {prev['attempt']} ended ({prev['ended_at']:.6f}, {prev['outcome']})")
            for a in rows:
                if a["outcome"] == "reclaimed" and (a["lease_expires_at"] is None
                                                    or a["ended_at"] < a["lease_expires_at"]):
                    bad.append(f"job {job_id}: attempt {a['attempt']} reclaimed at {a['ended_at']:.6f} but its lease "
                               f"ran to {a['lease_expires_at']}")
        # Handler executions (wall clock = database clock on this machine).
        per_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for e in execs.values():
            per_job[e["job"]].append(e)
        overlaps = 0
        for job_id, es in sorted(per_job.items()):
            es.sort(key=lambda e: e["start"])
            for i, a in enumerate(es):
                for b in es[i + 1:]:
                    if a["end"] <= b["start"]:
                        continue
                    overlaps += 1
                    row = by_token.get(a["token"])
                    if row is None or row["outcome"] != "reclaimed" or row["ended_at"] > b["start"]:
                        bad.append(f"job {job_id}: handler of attempt {a['attempt']} (pid {a['pid']}, "
                                   f"{a['start']:.3f}-{a['end']:.3f}) overlaps attempt {b['attempt']} (pid {b['pid']}, "
                                   f"from {b['start']:.3f}) but attempt {a['attempt']} "
                                   + ("has no history" if row is None else
                                      f"ended {row['outcome']} at {row['ended_at']:.3f}"))
        self.report.add(I_OVERLAP, not bad, _say(not bad, f"{pairs} consecutive attempt pairs, {overlaps} "
                        "overlapping handler executions", "; next claim never before the previous attempt ended, "
                        "overlaps only after the earlier lease expired and was reclaimed"), bad)

    def _check_zombies(self, jobs: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]],
                       execs: dict[str, dict[str, Any]], dup_execs: list[str], by_token: dict[str, dict[str, Any]],
                       rejections: list[tuple[Any, ...]]) -> None:
        bad = list(dup_execs)
        zombie_runs = 0
        for tok, e in sorted(execs.items(), key=lambda kv: kv[1]["job"]):
            j = jobs.get(e["job"])
            row = by_token.get(tok)
            if j is None:
                bad.append(f"job {e['job']}: a handler ran it, but it is not in the queue")
                continue
            if row is None:
                bad.append(f"job {e['job']}: handler ran with token {tok} (attempt {e['attempt']}) that its "
                           "history does not know")
                continue
            if row["outcome"] == "done":
                if tok != str(j["token"]):
                    bad.append(f"job {e['job']}: 'done' attempt token {tok} is not the job's token {j['token']}")
                # The stored result must be the one this execution returned, not a stale attempt's.
                want = {"pid": e["pid"], "attempt": e["attempt"]}
                got = {k: v for k, v in (j["result"] or {}).items() if k in ("pid", "attempt")}
                if got != want:
                    bad.append(f"job {e['job']}: result {j['result']} is not the result {want} of the execution "
                               f"holding the completing token (attempt {row['attempt']})")
            elif row["outcome"] == "reclaimed" and e["end"] > row["ended_at"]:
                zombie_runs += 1        # the handler was still running when its lease was taken away
        rejected_tokens = {str(r[1]) for r in rejections}
        # complete is idempotent for the completing token: it can never have been refused.
        for job_id, tok, op, detail in rejections:
            row = by_token.get(str(tok))
            if op == "complete" and row is not None and row["outcome"] == "done":
                bad.append(f"job {job_id}: a complete with token {tok} was refused ({detail}), yet that token's "
                           "attempt is the one recorded as done")
        taken = sum(len(z["taken"]) for z in self.zombies)
        if self.zombies and taken == 0:
            bad.append(f"{len(self.zombies)} SIGSTOP fault(s), but no job was taken over from a stopped worker: "
                       "the zombie path was not exercised")
        zombie_rejected = 0
        for z in self.zombies:
            for job_id in z["taken"]:
                toks = {a["token"] for a in attempts.get(job_id, []) if a["worker"] == z["worker"]}
                if toks & rejected_tokens:
                    zombie_rejected += 1
        if taken and not rejections:
            bad.append(f"{taken} jobs were taken over from stopped workers, but pgfence.rejections recorded nothing")
        self.report.add(I_ZOMBIE, not bad,
                        f"{zombie_runs} handler runs outlived their reclaimed lease; {taken} takeovers from stopped "
                        f"workers, {zombie_rejected} with the zombie's call in pgfence.rejections; "
                        f"{len(rejections)} rejections; "
                        + ("no stale token completed a job" if not bad else "VIOLATIONS below"), bad)

    def _check_finished(self, jobs: dict[int, dict[str, Any]], execs: dict[str, dict[str, Any]],
                        by_token: dict[str, dict[str, Any]]) -> None:
        """The handler of the completing attempt must have run to its end ("ok"),
        not stopped early on job.should_stop() (lease lost or worker shutting down)
        nor died with its process."""
        bad = []
        completed = 0
        sigterm = {g["pid"]: g for g in self.graceful}
        for tok, e in sorted(execs.items(), key=lambda kv: kv[1]["job"]):
            row = by_token.get(tok)
            if row is None or row["outcome"] != "done":
                continue
            completed += 1
            if e["outcome"] == "ok":
                continue
            why = e["outcome"] or "by process death"
            g = sigterm.get(e["pid"])
            if g is not None and e["outcome"] == "stopped":
                why += (f": its worker {g['worker']} got SIGTERM {e['end'] - g['t']:+.2f}s before the handler "
                        "returned; the graceful shutdown recorded the early-stopped handler's return value "
                        f"{jobs.get(e['job'], {}).get('result')} as the job's result")
            bad.append(f"job {e['job']}: done by attempt {e['attempt']} whose handler ended {why}")
        stopped_jobs = sorted({j for g in self.graceful for j in g["long_jobs"]})
        self.report.add(I_FINISHED, not bad, _say(not bad,
                        f"{completed} completions; {len(self.graceful)} graceful shutdown(s) mid-job "
                        f"(jobs {stopped_jobs[:6]})", "; each completion by a handler that ran to its end"), bad)

    def _check_backoff(self, jobs: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]]) -> None:
        bad = []
        checked = 0
        for job_id, rows in sorted(attempts.items()):
            rows = sorted(rows, key=lambda a: a["attempt"])
            payload = jobs[job_id]["payload"] if job_id in jobs else {}
            for prev, nxt in zip(rows, rows[1:]):
                if prev["outcome"] != "failed":
                    continue
                if not payload.get("fail") or prev["attempt"] > int(payload.get("fail", 0)):
                    bad.append(f"job {job_id}: attempt {prev['attempt']} failed unplanned: "
                               f"{str(prev['error']).splitlines()[0][:120] if prev['error'] else None}")
                    continue
                expected = (payload["delay_ms"] / 1000.0 if payload.get("mode") == "retry_after"
                            else self.cfg.backoff(prev["attempt"]))
                checked += 1
                if nxt["claimed_at"] - prev["ended_at"] < expected - 1e-6:
                    bad.append(f"job {job_id}: retried {nxt['claimed_at'] - prev['ended_at']:.3f}s after attempt "
                               f"{prev['attempt']} failed; the delay was {expected:.3f}s")
            for a in rows:
                if a["outcome"] == "failed" and a is rows[-1] and not payload.get("perm"):
                    bad.append(f"job {job_id}: dead-lettered: {str(a['error']).splitlines()[0][:120]}")
        self.report.add(I_BACKOFF, not bad, _say(not bad, f"{checked} planned retries",
                        f", each claimed no earlier than its delay (RetryAfter {self.cfg.retry_after_ms} ms or the "
                        "SQL backoff); no unplanned failure"), bad)

    def _check_bound(self) -> None:
        d = self.drain
        parts = d["bound"]
        bad = [f"job {r[0]}: {r[1]} attempts={r[2]} reserved_by={r[3]} lease_expires_at={r[4]} "
               f"available_at={r[5]} last_error={str(r[6])[:60]!r}" for r in d["stragglers"]]
        ok = not bad and d["seconds"] <= parts["total"]
        if not bad and not ok:
            bad.append(f"drained in {d['seconds']:.1f}s > bound {parts['total']:.1f}s")
        comp = " + ".join(f"{k} {v:.1f}" for k, v in parts.items() if k != "total")
        self.report.add(I_BOUND, ok, f"all terminal {d['seconds']:.1f}s after faults stopped "
                        f"({d['queued_at_stop']} queued then); bound {parts['total']:.1f}s =\n{comp}", bad)

    def _check_no_40(self) -> None:
        hits = []
        for p in self.workers.history:
            for line in _read(p.log).splitlines():
                if any(s in line for s in SQLSTATE_PATTERNS):
                    hits.append(f"{p.worker_id}: {line.strip()[:200]}")
        for e in self.producer.errors:
            if any(s in e for s in SQLSTATE_PATTERNS):
                hits.append(f"producer: {e}")
        try:
            with open(self.cluster.server_log, "rb") as fh:
                fh.seek(self.server_log_offset)
                server = fh.read().decode(errors="replace")
        except FileNotFoundError:
            server = ""
        for line in server.splitlines():
            if "deadlock detected" in line or "could not serialize" in line:
                hits.append(f"server.log: {line.strip()[:200]}")
        self.report.add(I_NO_40, not hits, _say(not hits, f"worker logs ({len(self.workers.history)} processes), "
                        f"{len(self.producer.errors)} producer errors and the server log", " are free of them"), hits)

    def _check_snapshot(self) -> None:
        dead_bad, lat_bad = [], []
        dead_lines, lat_lines = [], []
        if not self.snapshot_results:
            dead_bad.append("no old-snapshot phase ran")
            lat_bad.append("no old-snapshot phase ran")
        for i, r in enumerate(self.snapshot_results, 1):
            if "error" in r or "after" not in r:
                msg = f"phase {i} failed: {str(r.get('error', 'incomplete')).strip().splitlines()[-1]}"
                dead_bad.append(msg)
                lat_bad.append(msg)
                continue
            b, d, a = r["before"], r["during"], r["after"]
            dead_lines.append(f"phase {i}: n_dead_tup {b['n_dead_tup']} -> {d['n_dead_tup']} (held "
                              f"{r['held_seconds']:.0f}s; VACUUM left {d['not_removable']} not removable) -> "
                              f"{a['n_dead_tup']} after release+VACUUM")
            lat_lines.append(f"phase {i}: empty-queue claim (server time, median) {b['claim_ms']:.2f} -> "
                             f"{d['claim_ms']:.2f} -> {a['claim_ms']:.2f} ms; buffers touched "
                             f"{b['claim_buffers']:.0f} -> {d['claim_buffers']:.0f} -> {a['claim_buffers']:.0f}")
            # The snapshot must really have held dead tuples back (else the check proves nothing) ...
            if not (d["not_removable"] or 0) >= 50:
                dead_bad.append(f"phase {i}: VACUUM during the old snapshot left only {d['not_removable']} dead "
                                "tuples unremovable: the snapshot did not hold the horizon back (or no churn)")
            # ... and after its release a VACUUM must bring them back near the before value.
            limit = max(3 * b["n_dead_tup"], b["n_dead_tup"] + 300)
            if a["n_dead_tup"] > limit or (a["not_removable"] or 0) > max(3 * (b["not_removable"] or 0), 100):
                dead_bad.append(f"phase {i}: after release+VACUUM n_dead_tup {a['n_dead_tup']} (limit {limit}), "
                                f"{a['not_removable']} not removable (before {b['not_removable']})")
            lat_limit = max(3 * b["claim_ms"], b["claim_ms"] + 20.0)
            if a["claim_ms"] > lat_limit:
                lat_bad.append(f"phase {i}: claim median {a['claim_ms']:.2f} ms after release > {lat_limit:.2f} ms")
            buf_limit = max(3 * b["claim_buffers"], b["claim_buffers"] + 50)
            if a["claim_buffers"] > buf_limit:
                lat_bad.append(f"phase {i}: a claim touches {a['claim_buffers']:.0f} buffers after release "
                               f"> {buf_limit:.0f}")
        self.report.add(I_DEAD_TUPLES, not dead_bad, "\n".join(dead_lines) or "-", dead_bad)
        self.report.add(I_LATENCY, not lat_bad, "\n".join(lat_lines) or "-", lat_bad)

    def _check_health(self) -> None:
        bad = list(self.health_problems)
        for ex in self.workers.unexpected_exits:
            in_crash = any(s - 1.0 <= ex["t"] <= e + 15.0 for s, e in self.crash_windows)
            if not in_crash:
                bad.append(f"{ex['worker']} (pid {ex['pid']}) exited on its own with {ex['rc']} outside a crash "
                           f"window: {ex['tail'].strip().splitlines()[-1:] if ex['tail'].strip() else ''}")
        for p in self.workers.history:
            text = _read(p.log)
            if "Traceback" in text or "Exception in thread" in text:
                i = text.find("Traceback") if "Traceback" in text else text.find("Exception in thread")
                bad.append(f"{p.worker_id}: traceback in its log: {text[i:i + 400]!r}")
        if self.producer.crash:
            bad.append("producer crashed: " + self.producer.crash.strip().splitlines()[-1])
        expected_exits = len(self.workers.unexpected_exits)
        self.report.add(I_HEALTH, not bad, _say(not bad, f"{len(self.workers.history)} worker processes "
                        f"({self.report.fault_counts()[F_KILL]} killed, {len(self.graceful)} stopped gracefully, "
                        f"{expected_exits} exited on their own)", "; no tracebacks; listeners came back"), bad)


def _say(ok: bool, facts: str, claim: str) -> str:
    """An invariant's detail: the facts, plus the claim only when it held."""
    return f"{facts}{claim}" if ok else f"{facts} -- VIOLATED, see offenders"


def _ts(value: Optional[datetime]) -> Optional[float]:
    return None if value is None else value.timestamp()


def run(cluster: Cluster, full: bool, workdir: Path) -> Report:
    cfg = Config.make(full)
    scenario = Scenario(cluster, cfg, workdir)
    report = scenario.report
    REPORTS.append(report)
    scenario.run()
    return report


def iter_reports() -> Iterator[Report]:
    yield from REPORTS
