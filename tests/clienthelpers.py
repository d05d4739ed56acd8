"""Helpers for the Python client, worker and CLI tests (tests/test_client.py,
tests/test_worker.py, tests/test_cli.py).

Waits poll with a deadline (never a bare sleep that decides the outcome);
worker threads and worker processes are always stopped, even when a test fails.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import psycopg
from psycopg.conninfo import make_conninfo

from pgfence import Worker

TESTS = Path(__file__).resolve().parent
T = TypeVar("T")

#: An id the identity column will never reach.
UNKNOWN_ID = 9_223_372_036_854_775_000
RELEASED = "released by worker before completion"
LEASE_EXPIRED = "lease expired before completion"


def wait_for(predicate: Callable[[], Optional[T]], timeout: float, what: str,
             interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def app_dsn(dsn: str, application_name: str) -> str:
    """``dsn`` with ``application_name`` set (works for URIs and key=value strings),
    so that a test can find, and terminate, exactly its own backends."""
    return make_conninfo(dsn, application_name=application_name)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def backends(conn: psycopg.Connection[Any], application_name: str) -> list[tuple[int, str]]:
    """(pid, query) of this database's client backends with that application_name."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND pid <> pg_backend_pid()", (application_name,)).fetchall()]


def terminate_backends(conn: psycopg.Connection[Any], application_name: str) -> int:
    """pg_terminate_backend every backend with that application_name; returns how many."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
        (application_name,)).fetchone()
    assert row is not None
    return int(row[0])


class WorkerThread:
    """Runs ``worker.run()`` on a thread; ``stop()`` asks for a graceful shutdown and joins."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> "WorkerThread":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"worker did not stop within {timeout}s"
        if self.error is not None:
            raise AssertionError(f"worker.run() raised {self.error!r}") from self.error


@contextmanager
def running(worker: Worker) -> Iterator[WorkerThread]:
    """Run ``worker`` on a thread for the ``with`` block; stop it (gracefully) afterwards."""
    wt = WorkerThread(worker).start()
    try:
        yield wt
    finally:
        if wt.thread.is_alive():
            wt.stop()


# -------------------------------------------------------------- the CLI ----
def cli_env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PGFENCE_DSN"] = dsn
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(dsn: str, *args: str, timeout: float = 60.0, input: Optional[str] = None,
            env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """``python -m pgfence ARGS`` with PGFENCE_DSN=dsn, from the tests directory."""
    return subprocess.run([sys.executable, "-m", "pgfence", *args], cwd=TESTS,
                          env=env if env is not None else cli_env(dsn), capture_output=True,
                          text=True, timeout=timeout, input=input)


class WorkerProcess:
    """``python -m pgfence worker workers_for_tests:HANDLERS ...`` as a child process,
    stderr (its log) captured in a file."""

    def __init__(self, dsn: str, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgfence", "worker", "workers_for_tests:HANDLERS", *args],
            cwd=TESTS, env=cli_env(dsn), stdout=subprocess.DEVNULL, stderr=self._log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker process did not exit within {timeout}s; log:\n{self.log()}") from None

    def kill(self) -> None:
        """Make sure the process is gone (continued first, in case it is stopped)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._log.close()


@contextmanager
def worker_process(dsn: str, log_path: Path, *args: str) -> Iterator[WorkerProcess]:
    wp = WorkerProcess(dsn, log_path, *args)
    try:
        yield wp
    finally:
        wp.kill()
