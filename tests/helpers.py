"""Shared helpers for the pgfence test-suite (importable from tests and bench)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

REPO = Path(__file__).resolve().parent.parent
PG_SH = REPO / "scripts" / "pg.sh"
SQITCH_PLAN = REPO / "sqitch.plan"


def connect(dsn: str, **kw: Any) -> psycopg.Connection[Any]:
    """A new psycopg 3 connection, autocommit=True unless overridden."""
    kw.setdefault("autocommit", True)
    return psycopg.connect(dsn, **kw)


def plan_has_changes(plan: Path = SQITCH_PLAN) -> bool:
    """True when sqitch.plan exists and lists at least one change."""
    if not plan.is_file() or not (REPO / "db").is_dir():
        return False
    for line in plan.read_text().splitlines():
        s = line.strip()
        if s and not s.startswith(("%", "#")):
            return True
    return False


def sqitch_target(dsn: str) -> str:
    """Sqitch target URI (db:postgresql://...) for a libpq URI or key=value DSN."""
    if re.match(r"^postgres(ql)?://", dsn):
        return "db:" + dsn
    p = conninfo_to_dict(dsn)
    user = quote(str(p.get("user", "")), safe="")
    pw = p.get("password")
    auth = f"{user}:{quote(str(pw), safe='')}@" if pw else (f"{user}@" if user else "")
    host = str(p.get("host", ""))
    port = f":{p['port']}" if p.get("port") else ""
    return f"db:postgresql://{auth}{host}{port}/{quote(str(p.get('dbname', '')), safe='')}"


def sqitch_deploy(dsn: str) -> str | None:
    """`sqitch deploy` against dsn (idempotent). Returns None when there is no plan yet,
    else sqitch's output; raises RuntimeError on failure."""
    if not plan_has_changes():
        return None
    sqitch = shutil.which("sqitch")
    if sqitch is None:
        raise RuntimeError("sqitch not found on PATH (run scripts/setup.sh)")
    env = dict(os.environ)
    env.setdefault("SQITCH_FULLNAME", "pgfence tests")
    env.setdefault("SQITCH_EMAIL", "pgfence-tests@localhost")
    env.pop("SQITCH_TARGET", None)
    r = subprocess.run(
        [sqitch, "deploy", "--target", sqitch_target(dsn)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"sqitch deploy failed (exit {r.returncode}):\n{out}")
    return out
