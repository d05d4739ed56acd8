"""The Node.js package's own tests (clients/node/test, ``node --test``), run against this
session's test database, its TypeScript declarations checked with ``tsc``, its
worker's ``/metrics`` text compared with the Python worker's, and its worker's option
checks with the Python workers'.

Node's output is captured (pytest's summary stays the last line CI reads) and shown in
full when a run fails. Skipped only where node is not installed; with node installed,
missing node_modules (``make setup`` runs ``npm ci``) is a failure, not a skip.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pytest

from pgfence import WorkerOptionError

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


# Both workers' option checks on the same values (Python seconds and timedelta, Node
# milliseconds; Node's names camelCase): each refuses the same option, or takes the value.
# Node's side gets its values as JSON, numbers JSON cannot write as {"n": "NaN"}.
_SAME_OPTIONS: list[tuple[str, Any, Any]] = [
    ("concurrency", True, True), ("concurrency", 2.5, 2.5), ("concurrency", 0, 0), ("concurrency", "8", "8"),
    ("concurrency", 1, 1),
    ("prefetch", -1, -1), ("prefetch", math.nan, {"n": "NaN"}), ("prefetch", 0, 0),
    ("lease", timedelta(0), 0), ("lease", timedelta(days=1, milliseconds=1), 86_400_001),
    ("lease", timedelta(milliseconds=1), 1), ("lease", timedelta(days=1), 86_400_000), ("lease", None, None),
    ("poll_interval", -1, -1000), ("poll_interval", 0, 0), ("poll_interval", math.nan, {"n": "NaN"}),
    ("poll_interval", math.inf, {"n": "Infinity"}), ("poll_interval", 86_401, 86_401_000), ("poll_interval", "1", "1"),
    ("poll_interval", 0.001, 1), ("poll_interval", 86_400, 86_400_000),
    ("shutdown_grace", -1, -1000), ("shutdown_grace", math.nan, {"n": "NaN"}), ("shutdown_grace", 0, 0),
    ("poll_interval", 0.0009, 0.9), ("poll_interval", 1e-9, 1e-6),
    ("sweep_interval", 0, 0), ("sweep_interval", 0.5, 500), ("sweep_interval", 0.009, 9), ("sweep_interval", 0.01, 10),
    ("flush_interval", -0.001, -1), ("flush_interval", 0, 0),
    ("flush_batch", 0, 0), ("flush_batch", 10_001, 10_001), ("flush_batch", 1.5, 1.5), ("flush_batch", 10_000, 10_000),
    ("queues", "abc", "abc"), ("queues", [], []), ("queues", [""], [""]), ("queues", ["ok", 5], ["ok", 5]),
    ("queues", ["a", "b"], ["a", "b"]), ("queues", ["x" * 129], ["x" * 129]), ("queues", ["x" * 128], ["x" * 128]),
    ("queue_set", "", ""), ("queue_set", "x" * 129, "x" * 129), ("queue_set", "s", "s"),
    ("worker_id", "", ""), ("worker_id", "x" * 129, "x" * 129), ("worker_id", 5, 5), ("worker_id", "x" * 128, "x" * 128),
    ("worker_id", "w\ud800", "w\ud800"), ("queue_set", "\udfff", "\udfff"), ("queues", ["ok", "q\udc00"], ["ok", "q\udc00"]),
    ("handlers", {"k\ud83d": "f"}, {"k\ud83d": "f"}),
    ("listen", "yes", "yes"), ("listen", 1, 1), ("listen", None, None), ("listen", False, False),
    ("run_sweeper", 1, 1), ("run_sweeper", "auto", "auto"), ("run_sweeper", None, None), ("run_sweeper", True, True),
    ("handlers", {"k": 5}, {"k": 5}), ("handlers", {"": "f"}, {"": "f"}), ("handlers", ["f"], ["f"]),
    ("handlers", {"k": "f"}, {"k": "f"}), ("handlers", {"x" * 129: "f"}, {"x" * 129: "f"}),
]


def test_node_and_python_workers_refuse_the_same_option_values() -> None:
    from pgfence.worker_options import worker_options

    good: dict[str, Any] = dict(queues=None, queue_set=None, concurrency=8, prefetch=0, lease=timedelta(seconds=30),
                                poll_interval=1.0, shutdown_grace=30.0, run_sweeper=None, sweep_interval=1.0,
                                flush_interval=0.005, flush_batch=500, worker_id=None, listen=True, limits=None)

    def handlers_of(value: Any) -> Any:  # ("f": a function)
        if isinstance(value, dict):
            return {k: (lambda job: None) if v == "f" else v for k, v in value.items()}
        return [(lambda job: None) if v == "f" else v for v in value]

    def python(option: str, value: Any) -> Optional[list[str]]:
        try:
            if option == "handlers":
                worker_options(handlers_of(value), **good)
            else:
                worker_options({"k": lambda job: None}, **{**good, option: value})
        except WorkerOptionError as err:
            return [err.option.replace("'", '"'), err.problem]
        return None

    script = r"""
const { checkWorkerOptions, WorkerOptionError } = require('./lib/worker_options');
const decode = (v) => (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).join() === 'n' ? Number(v.n) : v);
const f = () => null;
const handlersOf = (v) => (Array.isArray(v) ? v.map((x) => (x === 'f' ? f : x))
  : Object.fromEntries(Object.entries(v).map(([k, x]) => [k, x === 'f' ? f : x])));
const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const out = JSON.parse(process.argv[1]).map(([option, value]) => {
  try {
    if (option === 'handlers') checkWorkerOptions(handlersOf(value), {});
    else checkWorkerOptions({ k: f }, { [camel(option)]: decode(value) });
    return null;
  } catch (err) {
    if (!(err instanceof WorkerOptionError)) return `not a WorkerOptionError: ${err}`;
    return [err.option.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), err.problem];
  }
});
process.stdout.write(JSON.stringify(out));
"""
    cases = [[option, node_value] for option, _, node_value in _SAME_OPTIONS]
    proc = subprocess.run(["node", "-e", script, json.dumps(cases)], cwd=NODE_DIR, env=node_env(""),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    node = json.loads(proc.stdout)
    py = [python(option, value) for option, value, _ in _SAME_OPTIONS]
    # The option named must be the same; the problem too where a name is refused (both
    # workers word it alike; elsewhere each says it in its own terms: seconds, mapping, ...).
    names = {"queues", "queue_set", "worker_id", "handlers"}

    def judged(option: str, answer: Any) -> Any:
        if answer is None or isinstance(answer, str):
            return answer
        named, problem = answer
        said = problem.startswith(("is a name of", "is not a name", "holds a lone surrogate"))
        return [named, problem] if option in names and said else named

    py = [judged(option, p) for (option, _, _), p in zip(_SAME_OPTIONS, py)]
    node = [judged(option, n) for (option, _, _), n in zip(_SAME_OPTIONS, node)]
    table = [(option, repr(value)[:20], p, n) for (option, value, _), p, n in zip(_SAME_OPTIONS, py, node)]
    assert py == node, "\n".join(f"{t}" for t in table if t[2] != t[3])
    assert py.count(None) >= 15 and len(py) - py.count(None) >= 35  # (both kinds of case)
