"""Throwaway PostgreSQL clusters of the test suites (``scripts/pg.sh`` with their own
data directory, port and database), never the one ``make db`` / ``make demo`` use.

* the **test cluster** (``.pgdata-test``, database ``pgfence_test``): ``make test``
  starts it fresh for every session (wiped, started, deployed with sqitch), so the
  tests always run against the SQL in the tree and leave nothing in the developer's
  database; it is stopped when the session ends (``PGFENCE_TEST_KEEP=1`` keeps it
  running and reuses it, for debugging with psql);
* the **chaos cluster** (``.pgdata-chaos``), which the chaos suite crash-restarts.

Each takes the port its ``*_PGPORT`` variable names, else the first free port from a
base (54349 for tests, 54339 for chaos), so that several checkouts on one machine do
not collide; ``scripts/pg.sh`` refuses, naming the variable, when a named port is taken.
When the checkout's directory is not traversable by the ``postgres`` OS user (a clone
under /root or in a 0700 directory), ``scripts/pg.sh`` puts the data directory under
/tmp, one per cluster; :class:`Cluster` follows what it reports.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from .db import PG_SH, REPO, sqitch
SHARED_PORT = 54329  # the developer's cluster (make db): never touched by the tests


def pg_bindir() -> Path:
    """The bin directory of the highest installed PostgreSQL server (as scripts/pg.sh picks it)."""
    env = os.environ.get("PGFENCE_PG_BINDIR")
    if env:
        return Path(env)
    found = [(int(p.name), p / "bin") for p in Path("/usr/lib/postgresql").glob("*")
             if p.name.isdigit() and (p / "bin" / "postgres").exists()]
    if not found:
        raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql/*/bin (run scripts/setup.sh)")
    return max(found)[1]


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port, and we could bind it now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(base: int, tries: int = 100) -> int:
    for port in range(base, base + tries):
        if port != SHARED_PORT and port_free(port):
            return port
    raise RuntimeError(f"no free port in {base}..{base + tries - 1} on 127.0.0.1")


class Cluster:
    """A throwaway cluster driven through ``scripts/pg.sh``.

    ``port`` None: the first free port from ``base_port`` when the cluster is (re)started
    by :meth:`fresh` (a cluster already running keeps the port it runs on)."""

    def __init__(self, datadir: Path, db: str, port: Optional[int] = None, base_port: int = 54349,
                 name: str = "test") -> None:
        self.requested_datadir = datadir.resolve() if datadir.is_absolute() else (REPO / datadir).resolve()
        self.datadir = self.requested_datadir
        self.fixed_port = port
        self.port = port if port is not None else base_port
        self.base_port = base_port
        self.db = db
        self.name = name
        if self.port == SHARED_PORT:
            raise RuntimeError(f"the {name} cluster must not use the shared port {SHARED_PORT}")
        self.started_at = 0.0          # wall time of the last (re)start, for pg_cron timing
        self.lock_fh: Optional[Any] = None

    # -- environment -----------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PGFENCE_PGDATA=str(self.requested_datadir), PGFENCE_PGPORT=str(self.port), PGFENCE_DB=self.db)
        env.pop("SQITCH_TARGET", None)
        env.setdefault("SQITCH_FULLNAME", f"pgfence {self.name}")
        env.setdefault("SQITCH_EMAIL", f"pgfence-{self.name}@localhost")
        return env

    def dsn(self, app: Optional[str] = None, db: Optional[str] = None) -> str:
        base = f"postgresql://postgres@127.0.0.1:{self.port}/{db or self.db}"
        return f"{base}?application_name={app}" if app else base

    def pg_sh(self, *args: str, timeout: float = 180.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([str(PG_SH), *args], env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"scripts/pg.sh {' '.join(args)} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    # -- one user at a time ------------------------------------------------
    def lock(self, wait: float = 150.0) -> None:
        """One session per data directory at a time (the cluster is wiped, maybe crashed)."""
        key = hashlib.sha1(str(self.requested_datadir).encode()).hexdigest()[:12]
        path = f"/tmp/pgfence-{self.name}-{key}.session.lock"
        self.lock_fh = open(path, "w")
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self.lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another {self.name} session of this checkout holds {path}")
                time.sleep(0.5)

    def unlock(self) -> None:
        if self.lock_fh is not None:
            self.lock_fh.close()
            self.lock_fh = None

    # -- lifecycle ---------------------------------------------------------
    def running(self) -> bool:
        return self.pg_sh("status", check=False).returncode == 0

    def running_port(self) -> Optional[int]:
        """The port of the server running on this data directory (postmaster.pid line 4)."""
        try:
            lines = (self.datadir / "postmaster.pid").read_text().splitlines()
            return int(lines[3].strip())
        except (OSError, IndexError, ValueError):
            return None

    def _resolve_datadir(self) -> None:
        # scripts/pg.sh may put the data directory under /tmp (parent not traversable by
        # the postgres OS user): follow it; each cluster has a fallback of its own.
        self.datadir = Path(self.pg_sh("datadir").stdout.strip()).resolve()

    def reuse(self) -> bool:
        """Use the server already running on this data directory; False when none runs."""
        self._resolve_datadir()
        port = self.running_port()
        if port is None:
            return False
        self.port = port
        return self.running()

    def fresh(self) -> None:
        """Wipe, start and deploy: every session tests the SQL as it is in the tree."""
        self._resolve_datadir()
        self.pg_sh("stop", check=False)
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        if self.fixed_port is None:
            self.port = free_port(self.base_port)
        self.start()
        self.deploy()
        # Start again, as a server that has been running starts: pg_cron runs the
        # sweeper's @reboot job then (it was scheduled after this server started), so the
        # sweeper runs from the first test on, not from the next minute boundary.
        self.stop()
        self.start()

    def deploy(self) -> None:
        r = sqitch("deploy", target=f"db:pg://postgres@127.0.0.1:{self.port}/{self.db}", env=self.env())
        if r.returncode != 0:
            raise RuntimeError(f"sqitch deploy to the {self.name} cluster failed:\n{r.stdout}{r.stderr}")

    def start(self) -> None:
        self.pg_sh("start")
        self.started_at = time.time()

    def stop(self) -> None:
        self.pg_sh("stop", check=False, timeout=120)

    @property
    def server_log(self) -> Path:
        return self.datadir / "server.log"

    def crash_restart(self) -> float:
        """``pg_ctl stop -m immediate`` (as the postgres OS user when root), then
        ``scripts/pg.sh start``. Returns the seconds the server was down."""
        pidfile = self.datadir / "postmaster.pid"
        lines = pidfile.read_text().splitlines()
        if len(lines) < 4 or lines[3].strip() != str(self.port):
            raise RuntimeError(f"{pidfile} does not belong to a server on port {self.port}; not crashing it")
        cmd = [str(pg_bindir() / "pg_ctl"), "-D", str(self.datadir), "stop", "-m", "immediate", "-w", "-t", "60"]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        t = time.time()
        r = subprocess.run(cmd, cwd="/", capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl stop -m immediate failed:\n{r.stdout}{r.stderr}")
        self.start()
        return time.time() - t


@contextmanager
def session(cluster: Cluster, before_fresh: Optional[Callable[[Cluster], Any]] = None,
            keep: bool = False) -> Iterator[Cluster]:
    """The cluster for one session: locked for it, made fresh (``before_fresh`` first, if
    given), stopped and unlocked after. keep: reuse the server already running on its data
    directory (fresh when none runs), and leave it running after."""
    cluster.lock()
    try:
        if not (keep and cluster.reuse()):
            if before_fresh is not None:
                before_fresh(cluster)
            cluster.fresh()
        yield cluster
    finally:
        try:
            if not keep:
                cluster.stop()
        finally:
            cluster.unlock()


def test_cluster() -> Cluster:
    """The test suite's own cluster (see the module docstring)."""
    port = os.environ.get("PGFENCE_TEST_PGPORT")
    return Cluster(Path(os.environ.get("PGFENCE_TEST_PGDATA", str(REPO / ".pgdata-test"))), "pgfence_test",
                   port=int(port) if port else None, base_port=54349, name="test")


def chaos_cluster() -> Cluster:
    """The chaos suite's own cluster: crash-restarted, so never the tests' or the developer's."""
    port = os.environ.get("PGFENCE_CHAOS_PGPORT")
    return Cluster(Path(os.environ.get("PGFENCE_CHAOS_PGDATA", str(REPO / ".pgdata-chaos"))), "pgfence",
                   port=int(port) if port else None, base_port=54339, name="chaos")
