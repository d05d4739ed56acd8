"""examples/fastapi_app.py: an order and its job are committed (or rolled back) in the
request's transaction, and the AsyncWorker that the app's lifespan starts runs the job
and stops with the app (starlette's TestClient runs the lifespan)."""
from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fastapi_app.py"


@pytest.fixture
def example(dsn: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("PGFENCE_DSN", dsn)
    monkeypatch.setenv("PGFENCE_EXAMPLE_QUEUE", queue)
    spec = importlib.util.spec_from_file_location("fastapi_app_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # (registered, as an import would: pydantic resolves the models' annotations there)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    yield module


def poll(http: TestClient, path: str, until: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        body = http.get(path).json()
        if until(body):
            return body
        assert time.monotonic() < deadline, f"timed out waiting on {path}: {body}"
        time.sleep(0.05)


def test_an_order_and_its_job_commit_together_and_the_lifespan_worker_runs_it(
        example: ModuleType, dsn: str) -> None:
    with TestClient(example.app) as http:
        made = http.post("/orders", json={"item": "book"})
        assert made.status_code == 200, made.text
        order, job = made.json()["order"], made.json()["job"]
        assert made.json()["committed"] is True
        done = poll(http, f"/jobs/{job}", lambda b: b.get("status") == "done")
        assert (done["kind"], done["attempts"], done["result"]) == ("ship_order", 1, {"shipped": order})
        worker_task = example.app.state.worker_task
        assert not worker_task.done()
    # Leaving the TestClient ran the lifespan's shutdown: the worker stopped without error.
    assert worker_task.done() and worker_task.exception() is None
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT item, shipped_at IS NOT NULL FROM pgfence_example_orders WHERE id = %s",
                           (order,)).fetchone()
    assert row == ("book", True)


def test_a_rolled_back_request_leaves_neither_the_order_nor_its_job(example: ModuleType, dsn: str) -> None:
    with TestClient(example.app) as http:
        made = http.post("/orders", json={"item": "tea", "dry_run": True})
        assert made.status_code == 200, made.text
        order, job = made.json()["order"], made.json()["job"]
        assert made.json()["committed"] is False
        assert http.get(f"/jobs/{job}").status_code == 404
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgfence_example_orders WHERE id = %s", (order,)).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pgfence.jobs WHERE id = %s", (job,)).fetchone() == (0,)
