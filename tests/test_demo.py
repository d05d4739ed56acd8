"""`make demo` is the README's first command: its scenarios must hold on every run.

Runs ``examples/demo.py`` (the script ``make demo`` runs) against the test database with
real worker processes, and checks it exits 0 with every invariant OK.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def test_demo_reproduces_crash_recovery_zombie_fencing_and_manual_review(dsn: str) -> None:
    env = dict(os.environ, PGFENCE_DSN=dsn)
    proc = subprocess.run([sys.executable, str(DEMO), "--dsn", dsn], env=env,
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "RESULT: OK" in out, out
    for check in ("jobs done", "duplicates", "final result is D's", "never back in the queue"):
        assert check in out, f"{check!r} missing from the demo's table:\n{out}"
    assert " FAIL" not in out, out
