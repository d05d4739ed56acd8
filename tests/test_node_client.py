"""The Node.js package's own tests (clients/node/test, ``node --test``), run against this
session's test database, and its TypeScript declarations checked with ``tsc``.

Node's output is captured (pytest's summary stays the last line CI reads) and shown in
full when a run fails. Skipped only where node is not installed; with node installed,
missing node_modules (``make setup`` runs ``npm ci``) is a failure, not a skip.
"""
from __future__ import annotations

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
