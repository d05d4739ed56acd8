"""The peer queue systems, driven from the main venv through small runner scripts
(bench/peers/*) that run in the peers' own isolated environments:

  bench/.peers/venv   python venv with pgqueuer, procrastinate (+ asyncpg, psycopg)
  bench/.peers/node   npm prefix with graphile-worker

Each peer gets its own database on the same cluster (bench_pgqueuer,
bench_procrastinate, bench_graphile), recreated at every harness run, its schema
installed with the peer's own tooling (pgq install / procrastinate schema --apply /
graphile-worker --schema-only).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from common import (BENCH_DIR, LOG_DIR, BenchError, connect, dsn_for_db, log, recreate_database, run_json,
                    vacuum)

PEERS_DIR = BENCH_DIR / ".peers"
PEER_VENV = PEERS_DIR / "venv"
PEER_NODE = PEERS_DIR / "node"
RUNNERS = BENCH_DIR / "peers"
STAMP = PEERS_DIR / "stamp.json"

# Exact versions pinned after checking they work with the runner scripts.
# pgqueuer: the brief allows 0.* or latest; latest (1.x) works, 0.26.3 is the last 0.x.
# graphile-worker: latest 0.17.x per the brief (0.18.0 exists on npm; not used).
PY_PINS = {"pgqueuer": "1.6.0", "procrastinate": "3.10.0", "asyncpg": "0.32.0", "psycopg[binary]": "3.3.9",
           "psycopg-pool": "3.3.3"}
NPM_PINS = {"graphile-worker": "0.17.3"}


# --------------------------------------------------------------- install --
def _want_stamp(with_node: bool) -> dict[str, Any]:
    return {"python": PY_PINS, "npm": NPM_PINS if with_node else {}}


def ensure_installed(force: bool = False) -> dict[str, Any]:
    """Create bench/.peers (venv + npm prefix) unless its stamp says it is current.

    Returns the stamp: pins, resolved versions (pip freeze, npm ls) and notes."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    with_node = node is not None and npm is not None
    want = _want_stamp(with_node)
    if STAMP.exists() and not force:
        stamp = json.loads(STAMP.read_text())
        if stamp.get("want") == want and (PEER_VENV / "bin" / "python").exists():
            log(f"peers: cached install in {PEERS_DIR} (delete {STAMP.name} to reinstall)")
            return dict(stamp)
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    log(f"peers: creating {PEER_VENV}")
    if not (PEER_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True, timeout=300)
    pip = [str(PEER_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pins = [f"{k}=={v}" for k, v in PY_PINS.items()]
    log(f"peers: pip install {' '.join(pins)}")
    r = subprocess.run(pip + pins, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise BenchError(f"pip install of the peers failed:\n{r.stderr[-2000:]}")
    freeze = subprocess.run([str(PEER_VENV / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True,
                            text=True, timeout=120).stdout.split()
    npm_versions: dict[str, str] = {}
    if with_node:
        assert npm is not None
        PEER_NODE.mkdir(parents=True, exist_ok=True)
        pkg = PEER_NODE / "package.json"
        if not pkg.exists():
            pkg.write_text(json.dumps({"name": "pgfence-bench-peers", "private": True}) + "\n")
        specs = [f"{k}@{v}" for k, v in NPM_PINS.items()]
        log(f"peers: npm install {' '.join(specs)} (prefix {PEER_NODE})")
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--save-exact", *specs],
                           cwd=PEER_NODE, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise BenchError(f"npm install of the peers failed:\n{r.stderr[-2000:]}")
        for name in NPM_PINS:
            pj = PEER_NODE / "node_modules" / name / "package.json"
            npm_versions[name] = json.loads(pj.read_text())["version"]
    else:
        notes.append("node/npm not found: graphile-worker skipped")
    stamp = {"want": want, "pip_freeze": freeze, "npm": npm_versions, "notes": notes,
             "node": _node_version()}
    STAMP.write_text(json.dumps(stamp, indent=2) + "\n")
    return stamp


def _node_version() -> Optional[str]:
    node = shutil.which("node")
    if node is None:
        return None
    return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()


def node_available() -> bool:
    return shutil.which("node") is not None and (PEER_NODE / "node_modules" / "graphile-worker").exists()


# ------------------------------------------------------------------ peers --
@dataclass
class Variant:
    name: str                 # row label in the table
    worker_args: list[str]    # extra args for the runner's `worker` subcommand
    settings: str             # human description for BENCHMARKS.md


@dataclass
class Peer:
    name: str
    db: str
    runner: list[str]                            # command prefix to run the runner script
    env: dict[str, str]
    install: Callable[["Peer", str], None]       # (peer, dsn)
    reset_sql: list[str]
    finished_sql: str                            # one count(*)
    finished_is_remaining: bool                  # finished = n - count
    variants: list[Variant] = field(default_factory=list)
    version: str = "?"

    def dsn(self, admin_dsn: str) -> str:
        return dsn_for_db(admin_dsn, self.db)

    def setup(self, admin_dsn: str) -> None:
        recreate_database(admin_dsn, self.db)
        self.install(self, self.dsn(admin_dsn))

    def reset(self, dsn: str) -> None:
        with connect(dsn) as conn:
            for s in self.reset_sql:
                conn.execute(s)
        vacuum(dsn)

    def timed(self, sub: str, dsn: str, tag: str, timeout: float, *extra: str) -> dict[str, Any]:
        cmd = [*self.runner, sub, "--dsn", dsn, *extra]
        return run_json(cmd, log_path=LOG_DIR / f"{self.name}-{sub}{tag}.log", timeout=timeout, env=self.env)

    def single(self, dsn: str, n: int, timeout: float) -> dict[str, Any]:
        r = self.timed("single", dsn, "", timeout, "--n", str(n))
        return {"n": n, "seconds": r["seconds"], "rate": n / r["seconds"]}

    def batch(self, dsn: str, n: int, batch: int, timeout: float, tag: str) -> dict[str, Any]:
        r = self.timed("batch", dsn, tag, timeout, "--n", str(n), "--batch", str(batch))
        return {"n": n, "seconds": r["seconds"], "rate": n / r["seconds"]}

    def worker_cmd(self, dsn: str, variant: Variant, mode: str, out: Optional[Path]) -> list[str]:
        cmd = [*self.runner, "worker", "--dsn", dsn, "--mode", mode, *variant.worker_args]
        if out is not None:
            cmd += ["--out", str(out)]
        return cmd

    def latency_cmd(self, dsn: str, n: int, rate: float) -> list[str]:
        return [*self.runner, "latency", "--dsn", dsn, "--n", str(n), "--rate", str(rate)]

    def finished(self, conn: Any, n: int) -> int:
        row = conn.execute(self.finished_sql).fetchone()
        c = int(row[0]) if row else 0
        return n - c if self.finished_is_remaining else c


def _peer_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "NODE_PATH", "PGQUEUER_PREFIX", "PGQUEUER_SCHEMA"):
        env.pop(k, None)
    env.update(extra)
    return env


def _check(cmd: list[str], env: dict[str, str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=str(RUNNERS))
    (LOG_DIR / f"install-{what}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise BenchError(f"{what} schema install failed ({' '.join(cmd)}):\n{(r.stdout + r.stderr)[-1500:]}")


def _install_pgqueuer(peer: Peer, dsn: str) -> None:
    _check([str(PEER_VENV / "bin" / "pgq"), "--pg-dsn", dsn, "install"], peer.env, "pgqueuer")


def _install_procrastinate(peer: Peer, dsn: str) -> None:
    env = dict(peer.env, BENCH_DSN=dsn)
    _check([str(PEER_VENV / "bin" / "procrastinate"), "--app=procrastinate_app.app", "schema", "--apply"],
           env, "procrastinate")


def _install_graphile(peer: Peer, dsn: str) -> None:
    _check(["node", str(PEER_NODE / "node_modules" / "graphile-worker" / "dist" / "cli.js"),
            "--connection", dsn, "--schema-only"], peer.env, "graphile")


def build_peers(stamp: dict[str, Any], concurrency: int) -> tuple[list[Peer], list[str]]:
    """The peers to run, and notes about the ones that cannot be."""
    notes: list[str] = list(stamp.get("notes", []))
    freeze = {line.split("==")[0].lower(): line.split("==")[1] for line in stamp.get("pip_freeze", []) if "==" in line}
    py = str(PEER_VENV / "bin" / "python")
    c = str(concurrency)
    peers = [
        Peer(
            name="pgqueuer", db="bench_pgqueuer", runner=[py, str(RUNNERS / "pgqueuer_runner.py")],
            env=_peer_env({}), install=_install_pgqueuer,
            reset_sql=["TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics"],
            finished_sql="SELECT count(*) FROM pgqueuer", finished_is_remaining=True,
            version=freeze.get("pgqueuer", "?"),
            variants=[
                Variant("pgqueuer (batch 8)", ["--batch-size", "8", "--max-tasks", str(2 * 8)],
                        "QueueManager over one asyncpg connection; run(batch_size=8, max_concurrent_tasks=16)"
                        " (16 = the API's minimum of 2 x batch_size), async no-op entrypoint"),
                Variant("pgqueuer (batch 40)", ["--batch-size", "40", "--max-tasks", "80"],
                        "as above with run(batch_size=40, max_concurrent_tasks=80)"),
            ]),
        Peer(
            name="procrastinate", db="bench_procrastinate",
            runner=[py, str(RUNNERS / "procrastinate_runner.py")],
            env=_peer_env({"PYTHONPATH": str(RUNNERS)}), install=_install_procrastinate,
            reset_sql=["TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers,"
                       " procrastinate_workers CASCADE"],
            finished_sql="SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
            finished_is_remaining=False, version=freeze.get("procrastinate", "?"),
            variants=[Variant("procrastinate", ["--concurrency", c],
                              f"App(PsycopgConnector, pool max {concurrency + 2}); run_worker_async(concurrency="
                              f"{concurrency}), defaults otherwise (LISTEN/NOTIFY, jobs kept as succeeded)")]),
    ]
    if node_available():
        gv = stamp.get("npm", {}).get("graphile-worker", "?")
        peers.append(Peer(
            name="graphile-worker", db="bench_graphile", runner=["node", str(RUNNERS / "graphile_runner.js")],
            env=_peer_env({"NODE_PATH": str(PEER_NODE / "node_modules")}), install=_install_graphile,
            reset_sql=["TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues CASCADE"],
            finished_sql="SELECT count(*) FROM graphile_worker._private_jobs", finished_is_remaining=True,
            version=gv,
            variants=[
                Variant("graphile-worker", ["--concurrency", c, "--variant", "default"],
                        f"run({{concurrency: {concurrency}}}), defaults otherwise (pool 10, LISTEN/NOTIFY)"),
                Variant("graphile-worker (localQueue 80, batched)",
                        ["--concurrency", c, "--variant", "batched", "--local-queue", "80", "--complete-delay", "50"],
                        "as above + preset.worker {localQueue: {size: 80}, completeJobBatchDelay: 50,"
                        " failJobBatchDelay: 50} (ms; a one-off 50,000-job check gave ~20k/s at 0 ms, ~23k/s at"
                        " 50 ms, ~15k/s at 250 ms)"),
            ]))
    elif shutil.which("node") is None:
        notes.append("graphile-worker skipped: node not found")
    else:
        notes.append(f"graphile-worker skipped: not installed under {PEER_NODE}")
    return peers, notes
