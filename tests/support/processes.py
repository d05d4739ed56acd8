"""Child processes of the tests, the chaos suite and the benchmark: one harness.

Every child goes through :func:`spawn`: a session (process group) of its own, stdin
from /dev/null, stdout and stderr in a log file. So a signal meant for it reaches
whatever it started too, a Ctrl-C at the terminal reaches only the parent (which then
ends its children), and :func:`stop` / :func:`kill` end the whole group. Nothing is
ever killed by name.

On top of it, for the tests: :class:`WorkerProcess` (``python -m pgfence worker``
with :mod:`support.handlers`) and :func:`run_cli` (one ``python -m pgfence`` command).
Only the standard library is imported here (bench/run.py uses this module too).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
#: The handlers of the tests' worker processes (importable with cwd = tests/).
HANDLERS = "support.handlers:HANDLERS"


# -------------------------------------------------------- process groups ----
def spawn(cmd: Sequence[str], *, log_path: Path, env: Optional[dict[str, str]] = None,
          cwd: Optional[Path] = None, append: bool = False) -> "subprocess.Popen[bytes]":
    """Start cmd in a new session (its own process group), stdout and stderr to log_path
    (appended to with append=True), in cwd (default: the repository)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out = open(log_path, "ab" if append else "wb")
    try:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(cwd or REPO), start_new_session=True)
    finally:
        out.close()  # the child has its own copy


def signal_group(p: "subprocess.Popen[bytes]", sig: int) -> None:
    """Send sig to p's process group (pgid == pid: spawn starts a new session); no-op when gone."""
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill(p: "subprocess.Popen[bytes]", timeout: float = 10.0) -> None:
    """SIGKILL p's process group while p runs (stopped or not), then reap p, bounded."""
    if p.poll() is None:
        signal_group(p, signal.SIGKILL)
    _reap(p, timeout)


def _reap(p: "subprocess.Popen[bytes]", timeout: float) -> None:
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


def stop(procs: Sequence["subprocess.Popen[bytes]"], grace: float = 3.0) -> list["subprocess.Popen[bytes]"]:
    """SIGTERM each process group (after a SIGCONT, so a stopped one sees it), SIGKILL what
    is left after `grace` seconds; returns the processes that needed the SIGKILL."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        signal_group(p, signal.SIGCONT)
        signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in live:
        _reap(p, max(0.0, deadline - time.monotonic()))
    killed = [p for p in live if p.poll() is None]
    for p in procs:
        # The leader may be gone while children of its group are not: always KILL the group.
        signal_group(p, signal.SIGKILL)
        _reap(p, 5)
    return killed


# ---------------------------------------------------------------- the CLI ----
def cli_env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PGFENCE_DSN"] = dsn
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(dsn: str, *args: str, timeout: float = 60.0, input: Optional[str] = None,
            env: Optional[dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """``python -m pgfence ARGS`` with PGFENCE_DSN=dsn, from the tests directory."""
    return subprocess.run([sys.executable, "-m", "pgfence", *args], cwd=TESTS,
                          env=env if env is not None else cli_env(dsn), capture_output=True,
                          text=True, timeout=timeout, input=input)


class WorkerProcess:
    """``python -m pgfence worker support.handlers:HANDLERS ARGS`` as a child process
    (see :func:`spawn`), from the tests directory; its output (the log) in log_path."""

    def __init__(self, dsn: str, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self.proc = spawn([sys.executable, "-m", "pgfence", "worker", HANDLERS, *args],
                          log_path=log_path, env=cli_env(dsn), cwd=TESTS)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        signal_group(self.proc, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker process did not exit within {timeout}s; log:\n{self.log()}") from None

    def kill(self) -> None:
        """Make sure the process is gone (stopped or not)."""
        kill(self.proc)


@contextmanager
def worker_process(dsn: str, log_path: Path, *args: str) -> Iterator[WorkerProcess]:
    wp = WorkerProcess(dsn, log_path, *args)
    try:
        yield wp
    finally:
        wp.kill()
