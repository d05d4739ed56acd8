"""The Node.js package's own tests (clients/node/test, ``node --test``), run against this
session's test database, its TypeScript declarations checked with ``tsc``, and its
worker's ``/metrics`` text compared with the Python worker's.

Node's output is captured (pytest's summary stays the last line CI reads) and shown in
full when a run fails. Skipped only where node is not installed; with node installed,
missing node_modules (``make setup`` runs ``npm ci``) is a failure, not a skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert (NODE_DIR / "node_modules" / "pg").is_dir(), "clients/node/node_modules is missing: run `make setup` (npm ci)"


def node_env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PGFENCE_TEST_DSN"] = dsn
    env.pop("NODE_OPTIONS", None)
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    proc = subprocess.run(cmd, cwd=NODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stdout[-60000:]}"


def test_node_package_tests_pass(dsn: str) -> None:
    files = sorted(str(p.relative_to(NODE_DIR)) for p in (NODE_DIR / "test").glob("*.test.js"))
    assert files, "no clients/node/test/*.test.js"
    run(["node", "--test", "--test-concurrency=1", *files], node_env(dsn), timeout=600)


def test_node_type_declarations_check_with_tsc(dsn: str) -> None:
    run(["node", "node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], node_env(dsn), timeout=300)


def test_node_worker_metrics_write_the_python_workers_text() -> None:
    """The same kinds and outcomes give the Node worker's /metrics (lib/metrics.js) the
    Python worker's text (pgfence.worker_metrics, through prometheus_client), line for line:
    names, HELP, TYPE, buckets, label values written with printable() and escaped, unknown
    kinds under kind="". prometheus_client's ``_created`` series are its own and left out."""
    from prometheus_client import generate_latest

    from pgfence.ledger import Ledger
    from pgfence.worker_metrics import WorkerMetrics

    kinds = ["ok", 'we"ird\\<script>alert(1)</script>', "line\nbreak", "\x1b[31mred", "a\u202eb", "", "dup\n",
             "dup\\u000a", "__proto__",
             "in\ufff0vis\U0001d173ib\U000e0080le\U0001f600"]  # (astral: five hex digits; an emoji stays)
    events = [["ok", "done"], ["ok", "done"], ["nobody", "failed"], [kinds[1], "rejected"], ["line\nbreak", "released"],
              ["dup\\u000a", "snoozed"], ["constructor", "unreported"], ["ok", "retried"]]
    metrics = WorkerMetrics(Ledger(), kinds, port=0, bind="127.0.0.1")
    for kind, outcome in events:
        metrics.ended(kind, outcome)
    python = generate_latest(metrics.registry).decode()
    script = ("const { WorkerMetrics } = require('./lib/metrics');\n"
              "const { Ledger } = require('./lib/ledger');\n"
              "const [kinds, events] = JSON.parse(process.argv[1]);\n"
              "const m = new WorkerMetrics(new Ledger(), kinds, { port: 0 });\n"
              "for (const [kind, outcome] of events) m.ended({ job: { kind } }, outcome);\n"
              "process.stdout.write(m.text());\n")
    proc = subprocess.run(["node", "-e", script, json.dumps([kinds, events])], cwd=NODE_DIR, env=node_env(""),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr

    def without_created(text: str) -> list[str]:
        return [line for line in text.splitlines() if "_created" not in line]

    node = without_created(proc.stdout)
    assert node == without_created(python)
    assert 'pgfence_worker_jobs_total{kind="",outcome="failed"} 1.0' in node  # (nobody)
    assert 'pgfence_worker_jobs_total{kind="",outcome="unreported"} 1.0' in node  # (constructor)
    assert 'pgfence_worker_jobs_total{kind="dup\\\\u000a",outcome="snoozed"} 1.0' in node
