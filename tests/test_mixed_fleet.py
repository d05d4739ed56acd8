"""A mixed fleet: workers in different languages drain one queue and fence each other.

One Python threaded worker process (``python -m pgfence worker``), one Python asyncio
worker process (``python -m pgfence worker --asyncio``) and one Node.js worker process
(clients/node/test/fixtures/worker.js) share a queue: every job ends with exactly one
accepted completion, and a frozen worker of each kind, whose job another kind took
over, is fenced when it resumes.

The fleet is the list FLEET: a new kind of worker is one more entry, a function that
starts it as a child process with the same handler kinds (tests/support/handlers.py) on
the given queues.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from pgfence import Client
from support.processes import REPO, WorkerProcess, kill, signal_group, spawn
from support.workers import wait_for, wait_status

NODE_WORKER = REPO / "clients" / "node" / "test" / "fixtures" / "worker.js"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


class Proc:
    """A worker child process of any kind: its pid, log, signals and exit."""

    def __init__(self, proc: "subprocess.Popen[bytes]", log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        signal_group(self.proc, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker did not exit within {timeout}s; log:\n{self.log()}") from None

    def kill(self) -> None:
        kill(self.proc)


def python_worker(dsn: str, log: Path, queues: list[str], worker_id: str, lease: float,
                  *extra: str) -> Proc:
    args = [a for q in queues for a in ("--queue", q)]
    wp = WorkerProcess(dsn, log, *args, "--lease", str(lease), "--worker-id", worker_id, "--poll-interval", "0.1",
                       "--concurrency", "4", "--no-sweep", *extra)
    return Proc(wp.proc, log)


def asyncio_worker(dsn: str, log: Path, queues: list[str], worker_id: str, lease: float) -> Proc:
    """The asyncio worker (pgfence.aio.AsyncWorker): the suite's plain handlers run on its
    handler threads, its heartbeats, reporting and fencing are its own."""
    return python_worker(dsn, log, queues, worker_id, lease, "--asyncio")


def node_worker(dsn: str, log: Path, queues: list[str], worker_id: str, lease: float) -> Proc:
    proc = spawn(["node", str(NODE_WORKER), "--dsn", dsn, "--queue", ",".join(queues), "--lease",
                  str(int(lease * 1000)), "--worker-id", worker_id, "--poll-interval", "100", "--concurrency", "4"],
                 log_path=log)
    return Proc(proc, log)


#: Every kind of worker in the fleet.
FLEET: dict[str, Callable[[str, Path, list[str], str, float], Proc]] = {
    "python": python_worker,
    "asyncio": asyncio_worker,
    "node": node_worker,
}


def ready(kind: str, p: Proc) -> bool:
    """Whether a worker of ``kind`` logged that it runs (the Python CLI's "started", the
    Node fixture's READY)."""
    return ("READY" if kind == "node" else "started") in p.log()


def done_count(client: Client, queue: str) -> int:
    with client.pool.connection() as conn:  # type: ignore[union-attr]
        row = conn.execute("SELECT count(*) FROM pgfence.all_jobs WHERE queue = %s AND status = 'done'",
                           (queue,)).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def started(make: Callable[[str, Path, list[str], str, float], Proc], dsn: str, log: Path, queues: list[str],
            worker_id: str, lease: float = 30.0) -> Iterator[Proc]:
    p = make(dsn, log, queues, worker_id, lease)
    try:
        yield p
    finally:
        p.signal(signal.SIGCONT)
        p.kill()


def test_a_mixed_fleet_drains_one_queue_with_one_accepted_completion_per_job(
        dsn: str, client: Client, queue: str, tmp_path: Path) -> None:
    n = 120
    with ExitStack() as stack:
        procs = {f"fleet-{kind}": stack.enter_context(started(make, dsn, tmp_path / f"{kind}.log", [queue],
                                                              f"fleet-{kind}"))
                 for kind, make in FLEET.items()}
        wait_for(lambda: all(ready(w[len("fleet-"):], p) for w, p in procs.items()), 30, "every worker to start")
        client.enqueue_many(["nap"] * n, [{"ms": 20}] * n, queue=queue)
        wait_for(lambda: done_count(client, queue) == n, 60, "every job done")
        for p in procs.values():
            p.signal(signal.SIGTERM)
        for name, p in procs.items():
            assert p.wait(30) == 0, f"{name}:\n{p.log()}"
    with client.pool.connection() as conn:  # type: ignore[union-attr]
        rows = conn.execute(
            "SELECT j.id, j.status, j.reserved_by,"
            " (SELECT count(*) FROM pgfence.all_attempts a WHERE a.job_id = j.id AND a.outcome = 'done')"
            " FROM pgfence.all_jobs j WHERE j.queue = %s", (queue,)).fetchall()
    assert len(rows) == n
    assert [r for r in rows if r[1] != "done" or r[3] != 1] == []
    by_worker = {w: sum(1 for r in rows if r[2] == w) for w in procs}
    assert all(count > 0 for count in by_worker.values()), by_worker


@pytest.mark.parametrize("zombie_kind", sorted(FLEET))
def test_a_frozen_worker_of_each_kind_is_fenced_after_another_kind_took_over(
        dsn: str, client: Client, queue: str, tmp_path: Path, zombie_kind: str) -> None:
    kinds = sorted(FLEET)
    taker_kind = kinds[(kinds.index(zombie_kind) + 1) % len(kinds)]  # (each kind takes over once too)
    marker, started_file = tmp_path / "hold", tmp_path / "started"
    marker.touch()
    job_id = client.enqueue("hold", {"marker": str(marker), "started": str(started_file)}, queue=queue)
    with started(FLEET[zombie_kind], dsn, tmp_path / "zombie.log", [queue], "zombie", lease=1.0) as z:
        wait_for(lambda: started_file.exists() and started_file.read_text().split() == [str(z.pid)], 20,
                 "the zombie's handler to start")
        z.signal(signal.SIGSTOP)
        try:
            reclaimed = wait_status(client, job_id, "queued", "done", "failed", timeout=20)
            assert (reclaimed.status, reclaimed.reclaim_count) == ("queued", 1)
            marker.unlink()
            with started(FLEET[taker_kind], dsn, tmp_path / "taker.log", [queue], "taker") as t:
                done = wait_status(client, job_id, "done", "failed", timeout=20)
                assert (done.status, done.result, done.reserved_by) == ("done", {"pid": t.pid, "attempt": 2}, "taker")
                t.signal(signal.SIGTERM)
                assert t.wait(20) == 0, t.log()
        finally:
            z.signal(signal.SIGCONT)
        zombie_token = next(a.attempt_token for a in client.attempts(job_id) if a.worker == "zombie")
        # The zombie resumes: its heartbeat or its complete reaches the database and is refused.
        wait_for(lambda: any(r.attempt_token == zombie_token for r in client.rejections(job_id)), 20,
                 f"the {zombie_kind} zombie's refused call to be recorded")
        wait_for(lambda: "lease lost" in z.log(), 20, "the zombie to log the lost lease")
        z.signal(signal.SIGTERM)
        assert z.wait(20) == 0, z.log()
    final = client.get_job(job_id)
    assert (final.status, final.result, final.attempts, final.reserved_by) == \
        ("done", {"pid": t.pid, "attempt": 2}, 2, "taker")
    outcomes = [a.outcome for a in client.attempts(job_id)]
    assert outcomes == ["reclaimed", "done"]
