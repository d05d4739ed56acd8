"""The newest deploy script of every change states the whole change.

Three databases: one where only the newest script of each change runs, once, in plan
order (the "flattened" schema a reader of db/deploy sees), one where ``sqitch deploy``
replays the whole plan (every tag and rework), and one upgraded from the oldest tag.
Their pgfence schemas (``pg_dump --schema-only``: definitions, owners, grants,
comments, proconfig) and the privilege rule's rows must be identical. The negative
controls run the same comparison on a copy of db/ whose newest scripts forget a grant
or a rule row, and must see it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from support.clusters import pg_bindir
from support.db import REPO, connect, scratch_database, sqitch, sqitch_target


def plan_changes(plan: Path) -> tuple[list[str], dict[str, set[str]], list[str]]:
    """(change names in order of first appearance, each change's requirements over all
    its versions, the plan's tags in order)."""
    first: list[str] = []
    reqs: dict[str, set[str]] = {}
    tags: list[str] = []
    for line in plan.read_text().splitlines():
        line = line.strip()
        if line.startswith("@"):
            tags.append(line.split()[0])
        if not line or line[0] in "%#@":
            continue
        name = line.split()[0]
        m = re.match(r"\S+\s+\[([^\]]*)\]", line)
        deps = {d.split("@")[0] for d in (m.group(1).split() if m else [])}
        reqs.setdefault(name, set()).update(deps - {name})
        if name not in first:
            first.append(name)
    return first, reqs, tags


def flattened_order(plan: Path) -> list[str]:
    """Each change once, in plan order, after every change any of its versions requires."""
    first, reqs, _ = plan_changes(plan)
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in order:
            for dep in sorted(reqs[name], key=first.index):
                visit(dep)
            order.append(name)

    for name in first:
        visit(name)
    return order


def psql_file(dsn: str, path: Path, options: str = "") -> None:
    """psql -f path (ON_ERROR_STOP); options: server settings for the session (PGOPTIONS)."""
    p = conninfo_to_dict(dsn)
    r = subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                        "-h", str(p["host"]), "-p", str(p["port"]), "-U", str(p["user"]), "-d", str(p["dbname"]),
                        "-f", str(path)], capture_output=True, text=True, timeout=120, cwd=path.parent,
                       env=dict(os.environ, PGOPTIONS=options))
    assert r.returncode == 0, f"psql -f {path} failed:\n{r.stderr}"


def deploy_flattened(top: Path, dsn: str) -> None:
    for change in flattened_order(top / "sqitch.plan"):
        psql_file(dsn, top / "db" / "deploy" / f"{change}.sql")


def sqitch_in(top: Path, dsn: str, *args: str) -> None:
    r = sqitch(*args, target=sqitch_target(dsn), cwd=top, timeout=600)
    assert r.returncode == 0, f"sqitch {' '.join(args)} failed:\n{r.stdout}{r.stderr}"


def schema_of(dsn: str) -> list[str]:
    """The pgfence schema as pg_dump writes it (comments, SET lines and psql
    meta-commands dropped), then the privilege rule's rows. The history's dated
    partitions (pgfence.finished_jobs_<date>) are left out: they are named after the
    time the deploy ran, and made by maintain_history, not by a script."""
    p = conninfo_to_dict(dsn)
    r = subprocess.run([str(pg_bindir() / "pg_dump"), "--schema-only", "-n", "pgfence",
                        "-T", "pgfence.finished_jobs_2*",
                        "-h", str(p["host"]), "-p", str(p["port"]), "-U", str(p["user"]), str(p["dbname"])],
                       capture_output=True, text=True, timeout=120, check=True)
    lines = [ln for ln in r.stdout.splitlines()
             if ln.strip() and not ln.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\"))]
    with connect(dsn) as c:
        lines += [f"rule: {name} {roles}" for name, roles in
                  c.execute("SELECT routine, roles FROM pgfence.routine_grants ORDER BY routine")]
    return lines


def differences(a: list[str], b: list[str]) -> list[str]:
    import difflib
    return [ln for ln in difflib.unified_diff(a, b, "flattened", "replayed", n=0, lineterm="")
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


@pytest.fixture
def databases(dsn: str) -> Iterator[Any]:
    """make(n): n new empty databases on the test server, dropped after the test."""
    with ExitStack() as stack:
        yield lambda n: [stack.enter_context(scratch_database(dsn, "pgfence_flat")) for _ in range(n)]


def test_flattened_order_puts_every_change_after_what_it_requires() -> None:
    first, reqs, _ = plan_changes(REPO / "sqitch.plan")
    order = flattened_order(REPO / "sqitch.plan")
    assert sorted(order) == sorted(first)
    for name in order:
        assert all(order.index(dep) < order.index(name) for dep in reqs[name]), name
    for name in order:
        assert (REPO / "db" / "deploy" / f"{name}.sql").is_file(), name


def test_the_newest_scripts_alone_build_the_schema_the_plan_builds(databases: Any) -> None:
    flat, replay, upgraded = databases(3)
    deploy_flattened(REPO, flat)
    sqitch_in(REPO, replay, "deploy")
    oldest = plan_changes(REPO / "sqitch.plan")[2][0]
    sqitch_in(REPO, upgraded, "deploy", "--to", oldest)
    sqitch_in(REPO, upgraded, "deploy")
    want = schema_of(flat)
    assert any("FUNCTION pgfence.claim(" in ln for ln in want) and any(ln.startswith("GRANT ") for ln in want)
    assert differences(want, schema_of(replay)) == []
    assert differences(want, schema_of(upgraded)) == []


def test_the_newest_routine_scripts_run_again_and_change_nothing(databases: Any) -> None:
    """Every change that defines routines (not the tables: CREATE TABLE is not
    re-run, and sqitch never re-runs a deployed change) can be run again, as a
    revert that includes it would."""
    [db] = databases(1)
    sqitch_in(REPO, db, "deploy")
    before = schema_of(db)
    for change in flattened_order(REPO / "sqitch.plan"):
        if not change.startswith("tables/"):
            psql_file(db, REPO / "db" / "deploy" / f"{change}.sql")
    assert differences(before, schema_of(db)) == []


def test_the_privileges_script_runs_again_beside_open_transactions_on_the_jobs(databases: Any,
                                                                                tmp_path: Path) -> None:
    """Re-run on a live queue (a redeploy, a revert that includes it), the privileges
    script takes no lock that waits for a transaction writing jobs (ALTER TABLE and
    CREATE/DROP POLICY take ACCESS EXCLUSIVE, and every claim would queue behind them):
    with lock_timeout 2 s it completes beside an open enqueue; an ALTER TABLE does not."""
    [db] = databases(1)
    sqitch_in(REPO, db, "deploy")
    with connect(db, autocommit=False) as held:
        held.execute("SELECT pgfence.enqueue('k', queue => 'held')")  # ROW EXCLUSIVE on jobs, open
        psql_file(db, REPO / "db" / "deploy" / "privileges.sql", "-c lock_timeout=2s")
        locking = tmp_path / "locking.sql"
        locking.write_text("ALTER TABLE pgfence.jobs OWNER TO pgfence_owner;\n")
        with pytest.raises(AssertionError, match="lock timeout"):
            psql_file(db, locking, "-c lock_timeout=2s")
        held.rollback()


@pytest.fixture
def db_copy(tmp_path: Path) -> Path:
    """A copy of the sqitch project (plan, conf, db/) to plant mistakes in."""
    top = tmp_path / "project"
    top.mkdir()
    for name in ("sqitch.plan", "sqitch.conf"):
        shutil.copy(REPO / name, top / name)
    shutil.copytree(REPO / "db", top / "db")
    return top


def test_comparison_sees_a_rework_that_forgets_a_grant(databases: Any, db_copy: Path) -> None:
    """The newest privileges script without the operators' read of attempts: the
    replayed plan still has it (from the older script), the flattened one does not."""
    script = db_copy / "db" / "deploy" / "privileges.sql"
    text = script.read_text()
    assert "GRANT SELECT ON pgfence.attempts, " in text
    script.write_text(text.replace("GRANT SELECT ON pgfence.attempts, ", "GRANT SELECT ON "))
    flat, replay = databases(2)
    deploy_flattened(db_copy, flat)
    sqitch_in(db_copy, replay, "deploy")
    diff = differences(schema_of(flat), schema_of(replay))
    assert diff == ["+GRANT SELECT ON TABLE pgfence.attempts TO pgfence_operator;"], diff


def test_comparison_sees_a_rework_that_states_a_rule_row_differently(databases: Any, db_copy: Path) -> None:
    """A rule row whose newest statement differs from what the replay kept (a rework
    that inserts without updating) shows in the rule rows and the grants."""
    script = db_copy / "db" / "deploy" / "functions" / "stats.sql"
    text = script.read_text()
    row = "('stats', '{pgfence_operator,pgfence_viewer}')\nON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;"
    assert row in text
    script.write_text(text.replace(row,
                                   "('stats', '{}')\nON CONFLICT (routine) DO NOTHING;"))
    flat, replay = databases(2)
    deploy_flattened(db_copy, flat)
    sqitch_in(db_copy, replay, "deploy")
    diff = differences(schema_of(flat), schema_of(replay))
    assert "+GRANT ALL ON FUNCTION pgfence.stats() TO pgfence_operator;" in diff \
        or "+GRANT EXECUTE ON FUNCTION pgfence.stats() TO pgfence_operator;" in diff, diff
    assert "-rule: stats []" in diff and "+rule: stats ['pgfence_operator']" in diff, diff


def test_a_newest_script_that_forgets_its_rule_row_fails_to_deploy(databases: Any, db_copy: Path) -> None:
    """Without its row in pgfence.routine_grants, a public routine makes the change's
    _apply_privileges refuse (55000) on the flattened deploy (a replay from an old tag
    gets the rows of routines that existed before the rule from the schema change)."""
    script = db_copy / "db" / "deploy" / "functions" / "heartbeat.sql"
    text = script.read_text()
    script.write_text(text.replace("    ('heartbeat_many', '{pgfence_worker}')", "    ('heartbeat_x', '{pgfence_worker}')"))
    [flat] = databases(1)
    with pytest.raises(AssertionError, match="heartbeat_many.*is not in the privilege rule"):
        deploy_flattened(db_copy, flat)
