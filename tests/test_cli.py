"""The ``pgfence`` command line, run as ``python -m pgfence ...`` with PGFENCE_DSN set.

(The ``worker`` command's crash, freeze and signal behaviour is in
tests/test_worker.py.)
"""
from __future__ import annotations

import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from support.db import LEASE_EXPIRED, TESTS, UNKNOWN_ID, connect, scratch_database
from support.processes import HANDLERS, cli_env, run_cli, worker_process
from support.roles import login_roles
from support.workers import wait_for
from pgfence import Client, JobRecord
from pgfence.cli import format_age, format_table, main

COMMANDS = ["worker", "enqueue", "stats", "show", "requeue", "cancel", "reclaim", "queue"]


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def assert_one_error(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> list[str]:
    """Exit ``code``, nothing on stdout, ``pgfence: error: ...`` (+ an optional ``hint:`` line) on stderr."""
    assert result.returncode == code, f"exit {result.returncode}, stderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith("pgfence: error: "), result.stderr
    assert len(lines) == 1 or lines[1].startswith("hint: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, result.stderr)
    assert result.stdout == ""
    return lines


# ------------------------------------------------------------- commands ----
def test_every_command_has_help(dsn: str) -> None:
    top = ok(run_cli(dsn, "--help"))
    for command in COMMANDS:
        assert command in top
        out = ok(run_cli(dsn, command, "--help"))
        assert out.startswith(f"usage: pgfence {command}") and "--dsn" in out


def test_enqueue_prints_the_id_of_a_job_with_every_option(dsn: str, client: Client, queue: str) -> None:
    out = ok(run_cli(dsn, "enqueue", "email", '{"to": "a@example.com", "n": [1, 2]}', "--queue", queue,
                     "--priority", "5", "--run-at", "2031-02-03T04:05:06Z", "--max-attempts", "4",
                     "--recovery-policy", "manual", "--idempotency-key", "k1"))
    assert re.fullmatch(r"\d+\n", out)
    job = client.get_job(int(out))
    assert (job.queue, job.kind, job.payload, job.priority, job.max_attempts, job.recovery_policy,
            job.idempotency_key, job.status) == (queue, "email", {"to": "a@example.com", "n": [1, 2]}, 5, 4,
                                                 "manual", "k1", "queued")
    assert job.available_at == datetime(2031, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    again = ok(run_cli(dsn, "enqueue", "email", "{}", "--queue", queue, "--idempotency-key", "k1"))
    assert again == out


def test_enqueue_defaults_and_payload_from_stdin(dsn: str, client: Client, queue: str) -> None:
    plain = client.get_job(int(ok(run_cli(dsn, "enqueue", "noop", "--queue", queue))))
    assert (plain.payload, plain.priority, plain.max_attempts, plain.recovery_policy) == ({}, 0, 3, "auto")
    piped = client.get_job(int(ok(run_cli(dsn, "enqueue", "noop", "-", "--queue", queue, input='{"from": "stdin"}'))))
    assert piped.payload == {"from": "stdin"}


def test_global_dsn_option_overrides_the_environment(dsn: str, client: Client, queue: str) -> None:
    env = cli_env("postgresql://postgres@127.0.0.1:1/nowhere")
    out = ok(run_cli(dsn, "--dsn", dsn, "enqueue", "k", "--queue", queue, env=env))
    assert client.get_job(int(out)).queue == queue
    out = ok(run_cli(dsn, "enqueue", "k", "--queue", queue, "--dsn", dsn, env=env))
    assert client.get_job(int(out)).queue == queue


def test_show_prints_every_field(dsn: str, client: Client, queue: str) -> None:
    job_id = client.enqueue("report", {"title": "Q3", "rows": [1, 2]}, queue=queue, idempotency_key="show-1")
    job = client.claim("cli-test", [queue])[0]
    client.complete(job.id, job.attempt_token, {"pages": 12})
    out = ok(run_cli(dsn, "show", str(job_id)))
    fields = [name for name in JobRecord.__dataclass_fields__]
    record, _, history = out.partition("\n\nattempts:\n")
    starts = [line.split()[0] for line in record.splitlines() if line and not line[0].isspace()]
    assert starts == fields
    values = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in record.splitlines()
              if line and not line[0].isspace() and len(line.split(None, 1)) == 2}
    attempt_rows = [line.split() for line in history.splitlines()[1:] if line.startswith("1 ")]
    assert len(attempt_rows) == 1 and "done" in attempt_rows[0] and str(job.attempt_token) in attempt_rows[0]
    assert "refused stale calls:\n  (none)" in history
    assert (values["id"], values["queue"], values["kind"], values["status"], values["attempts"],
            values["idempotency_key"], values["reserved_by"], values["last_error"]) == \
        (str(job_id), queue, "report", "done", "1", "show-1", "cli-test", "-")
    assert values["attempt_token"] == str(job.attempt_token)
    lines = record.splitlines()
    payload_at = [i for i, line in enumerate(lines) if line.startswith("payload ")][0]
    pad = " " * (len("lease_expires_at") + 2)
    assert lines[payload_at].endswith("  {")                      # pretty JSON, indented under its value
    assert lines[payload_at + 1:payload_at + 7] == [pad + '  "rows": [', pad + "    1,", pad + "    2",
                                                    pad + "  ],", pad + '  "title": "Q3"', pad + "}"]
    assert pad + '  "pages": 12' in lines
    assert (values["timeout"], values["unique_for"]) == ("-", "-")  # (done: the history keeps neither)


def test_show_prints_a_live_jobs_run_timeout_and_unique_for(dsn: str, client: Client, queue: str) -> None:
    job_id = client.enqueue("report", queue=queue, timeout=timedelta(seconds=90), unique_for=timedelta(hours=2),
                            idempotency_key="show-2")
    out = ok(run_cli(dsn, "show", str(job_id)))
    values = dict(line.split(None, 1) for line in out.partition("\n\nattempts:\n")[0].splitlines()
                  if line and not line[0].isspace() and len(line.split(None, 1)) == 2)
    assert (values["timeout"], values["unique_for"]) == ("0:01:30", "2:00:00")


def test_stats_shows_the_queue_per_status_and_the_sweeper(dsn: str, client: Client, queue: str) -> None:
    ids = [r.id for r in client.enqueue_many(["k"] * 3, queue=queue)]
    client.cancel(ids[0])
    out = ok(run_cli(dsn, "stats", "--queue", queue))
    lines = out.splitlines()
    assert lines[0].split() == ["QUEUE", "STATUS", "JOBS", "OLDEST", "RUNNABLE", "EXPIRED", "LEASES"]
    rows = [line.split() for line in lines[1:] if line.startswith(queue)]
    assert [(r[1], r[2], r[4]) for r in rows] == [("cancelled", "1", "0"), ("queued", "2", "0")]
    assert rows[0][3] == "-" and re.fullmatch(r"\d+(ms|\.\ds)|\d+m\d\ds", rows[1][3])
    sweeper = [line for line in lines if line.startswith("sweeper: ")]
    assert len(sweeper) == 1
    assert ("pg_cron job pgfence-reclaim: active" in sweeper[0]) == client.sweeper_active()
    assert re.search(r"last pass (never|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* \(.+ ago\))", sweeper[0])
    everything = ok(run_cli(dsn, "stats"))
    assert any(line.startswith(queue) for line in everything.splitlines())
    assert re.search(r"last hour: attempts done \d+, .*, cancelled \d+, snoozed \d+;", everything)


def test_stats_shows_the_last_error_the_sweeper_survived(dsn: str) -> None:
    with connect(dsn) as c:
        before = c.execute("SELECT last_error, last_error_at FROM pgfence.sweeper_status").fetchone()
        try:
            c.execute("SELECT pgfence.note_sweeper_pass(NULL, NULL, 'purge_finished failed: boom (SQLSTATE XX000)')")
            lines = ok(run_cli(dsn, "stats")).splitlines()
        finally:
            c.execute("UPDATE pgfence.sweeper_status SET last_error = %s, last_error_at = %s", before)
    errors = [line for line in lines if line.startswith("sweeper error: ")]
    assert len(errors) == 1, lines
    assert re.fullmatch(r"sweeper error: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* \(.+ ago\): "
                        r"purge_finished failed: boom \(SQLSTATE XX000\)", errors[0]), errors[0]


def test_cancel_and_requeue_change_the_status(dsn: str, client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue)
    assert ok(run_cli(dsn, "cancel", str(job_id))) == f"job {job_id} cancelled\n"
    assert client.get_job(job_id).status == "cancelled"
    assert ok(run_cli(dsn, "requeue", str(job_id))) == f"job {job_id} requeued\n"
    assert client.get_job(job_id).status == "queued"


def test_reclaim_prints_how_many_leases_were_reclaimed(dsn: str, client: Client, sweep_paused: Any,
                                                       queue: str) -> None:
    ids = [r.id for r in client.enqueue_many(["k"] * 2, queue=queue)]
    client.claim("cli-test", [queue], lease=timedelta(milliseconds=1), max_jobs=2)
    out = ok(run_cli(dsn, "reclaim"))
    # Another session's claim may reclaim ours before the command runs (claims reclaim
    # expired leases of every queue), so the count is only known to be a number.
    assert re.fullmatch(r"reclaimed \d+ expired leases?\n", out)
    for i in ids:
        wait_for(lambda: client.get_job(i).status == "queued", 5, f"job {i} reclaimed")
        row = client.get_job(i)
        assert (row.reclaim_count, row.last_error) == (1, LEASE_EXPIRED)


# --------------------------------------------------------------- errors ----
def test_bad_json_payload_is_a_usage_error(dsn: str, client: Client, queue: str) -> None:
    lines = assert_one_error(run_cli(dsn, "enqueue", "k", "{not json", "--queue", queue), 2,
                             "PAYLOAD_JSON is not valid JSON")
    assert len(lines) == 2
    assert [s for s in client.stats() if s.queue == queue] == []


def test_a_payload_that_is_not_an_object_reports_the_servers_hint(dsn: str, queue: str) -> None:
    lines = assert_one_error(run_cli(dsn, "enqueue", "k", "[1, 2]", "--queue", queue), 1, "payload")
    assert len(lines) == 2 and "JSON object" in lines[1]


@pytest.mark.parametrize("command", ["show", "cancel", "requeue"])
def test_an_unknown_job_id_is_one_error_line(dsn: str, command: str) -> None:
    assert_one_error(run_cli(dsn, command, str(UNKNOWN_ID)), 1, f"job {UNKNOWN_ID} not found")


def test_a_refused_transition_is_one_error_line_with_the_hint(dsn: str, client: Client, queue: str) -> None:
    job_id = client.enqueue("k", queue=queue)
    lines = assert_one_error(run_cli(dsn, "requeue", str(job_id)), 1, f"cannot requeue job {job_id}: it is queued")
    assert len(lines) == 2 and "failed, manual_review or cancelled" in lines[1]
    assert client.get_job(job_id).status == "queued"


@pytest.mark.parametrize("spec, fragment", [
    ("support.handlers", "expected MODULE:HANDLERS"),
    ("no_such_module_xyz:HANDLERS", "no module named 'no_such_module_xyz'"),
    ("support.handlers:NOPE", "has no attribute 'NOPE'"),
    ("support.handlers:echo", "not a dict"),
])
def test_a_bad_handler_spec_is_a_usage_error(dsn: str, spec: str, fragment: str) -> None:
    assert_one_error(run_cli(dsn, "worker", spec, "--queue", "never-used", timeout=30), 2, fragment)


@pytest.mark.parametrize("args, fragment", [
    ([], "required: COMMAND"),
    (["frobnicate"], "invalid choice"),
    (["show", "abc"], "not an integer"),
    (["enqueue", "k", "--run-at", "tomorrow"], "not an ISO-8601 timestamp"),
    (["enqueue", "k", "--recovery-policy", "sometimes"], "invalid choice"),
    (["worker", HANDLERS, "--concurrency", "0"], "must be at least 1"),
    (["worker", HANDLERS, "--lease", "-1"], "more than 0 seconds"),
    (["worker", HANDLERS, "--queue", "a", "--queue-set", "s"], "not allowed with argument"),
])
def test_bad_arguments_are_usage_errors(dsn: str, args: list[str], fragment: str) -> None:
    lines = assert_one_error(run_cli(dsn, *args), 2, fragment)
    assert len(lines) == 2 and "--help" in lines[1]


@pytest.mark.parametrize("args", [["stats"], ["enqueue", "k"], ["worker", HANDLERS]])
def test_an_unreachable_database_is_one_error_line(dsn: str, args: list[str]) -> None:
    result = run_cli("postgresql://postgres@127.0.0.1:1/pgfence", *args, timeout=30)
    lines = assert_one_error(result, 1, "cannot connect to the database")
    assert len(lines) == 2 and "PGFENCE_DSN" in lines[1]


def test_a_database_without_the_schema_says_to_deploy(dsn: str) -> None:
    with scratch_database(dsn, "pgfence_nodeploy") as undeployed:
        for args in (["stats"], ["worker", HANDLERS]):
            assert_one_error(run_cli(undeployed, *args), 1, "sqitch deploy")


def test_the_console_script_imports_handlers_from_the_current_directory(dsn: str) -> None:
    # The `pgfence` console script (pgfence.cli:main) does not put the current directory
    # on sys.path by itself, as `python -m` does: the worker command must.
    script = Path(sys.executable).with_name("pgfence")
    assert script.exists(), f"console script not installed next to {sys.executable}"
    env = cli_env("postgresql://postgres@127.0.0.1:1/pgfence")
    result = subprocess.run([str(script), "worker", HANDLERS], cwd=TESTS, env=env,
                            capture_output=True, text=True, timeout=60)
    assert_one_error(result, 1, "cannot connect")  # the handlers imported; only then the connect failed
    result = subprocess.run([str(script), "show", str(UNKNOWN_ID)], cwd=TESTS, env=cli_env(dsn),
                            capture_output=True, text=True, timeout=60)
    assert_one_error(result, 1, "not found")
    assert main(["--help"]) == 0


# ---------------------------------------------------------------- roles ----
@pytest.fixture(scope="module")
def role_dsns(dsn: str) -> Iterator[dict[str, str]]:
    """LOGIN roles for the three pgfence application roles; {pgfence role: its DSN}."""
    suffix = secrets.token_hex(3)
    names = {f"t_cli_{short}_{suffix}": role for short, role in
             (("prod", "pgfence_producer"), ("work", "pgfence_worker"), ("oper", "pgfence_operator"))}
    with login_roles(dsn, dict(names)):
        yield {role: make_conninfo(dsn, user=name) for name, role in names.items()}


def test_each_command_works_with_the_least_privileged_role(dsn: str, client: Client, queue: str,
                                                            role_dsns: dict[str, str], tmp_path: Path) -> None:
    producer, worker, operator = (role_dsns[r] for r in ("pgfence_producer", "pgfence_worker", "pgfence_operator"))
    job_id = int(ok(run_cli(producer, "enqueue", "echo", "{}", "--queue", queue)))
    assert "status            queued" in ok(run_cli(producer, "show", str(job_id)))  # its own job (RLS)
    lines = assert_one_error(run_cli(producer, "stats"), 1, "permission denied")
    assert len(lines) == 2 and "pgfence_operator" in lines[1]
    with worker_process(worker, tmp_path / "w.log", "--queue", queue, "--worker-id", "role-w") as w:
        done = wait_for(lambda: client.get_job(job_id).status == "done", 20, "the job to be done")
        w.signal(signal.SIGTERM)
        assert w.wait(20) == 0, w.log()
    assert done and client.get_job(job_id).result == {"pid": w.pid, "attempt": 1}
    assert "Traceback" not in w.log()
    assert f"{queue}  done" in ok(run_cli(operator, "stats", "--queue", queue))
    other = client.enqueue("echo", queue=queue)
    assert ok(run_cli(operator, "cancel", str(other))) == f"job {other} cancelled\n"
    assert ok(run_cli(operator, "requeue", str(other))) == f"job {other} requeued\n"
    assert "kind              echo" in ok(run_cli(operator, "show", str(other)))
    assert re.fullmatch(r"reclaimed \d+ expired leases?\n", ok(run_cli(operator, "reclaim")))
    client.cancel(other)


# ----------------------------------------------------------- formatting ----
def test_format_table_aligns_columns() -> None:
    text = format_table(["NAME", "N"], [["a", "1"], ["long-name", "100"]], [False, True])
    assert text.splitlines() == ["NAME         N", "a            1", "long-name  100"]


@pytest.mark.parametrize("td, text", [
    (None, "-"), (timedelta(milliseconds=850), "850ms"), (timedelta(seconds=12.34), "12.3s"),
    (timedelta(minutes=4, seconds=5), "4m05s"), (timedelta(hours=3, minutes=4), "3h04m"),
    (timedelta(days=2, hours=3), "2d03h"),
])
def test_format_age_is_short_and_human(td: Any, text: str) -> None:
    assert format_age(td) == text


# ------------------------------------------- the database's strings, escaped ----
HOSTILE = "x\x1b[31mRED\nsweeper: last pass never; pg_cron job pgfence-reclaim: active\u202eevil\x07"


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal would act on (newlines aside, which separate our own lines)."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0
            or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"]


def test_stats_and_show_escape_what_they_print_from_the_database(dsn: str, queue: str) -> None:
    """Names refused by today's rules may be in the table from before them (written here
    directly, as the database accepted them then), and payloads, errors, results and
    worker ids are anyone's: the CLI shows every one escaped, so none forges a line of
    its output or reaches the terminal as a control sequence."""
    legacy_queue = f"t_esc_{secrets.token_hex(3)}{HOSTILE}"
    with connect(dsn) as c:
        # (priority: the claim over every queue below takes this job first)
        [job_id] = c.execute(
            "INSERT INTO pgfence.jobs (queue, kind, payload, priority) VALUES (%s, %s,"
            " jsonb_build_object('note', %s::text), 1000000) RETURNING id",
            (legacy_queue, "kind" + HOSTILE, HOSTILE)).fetchone()  # type: ignore[misc]
        [(claimed, token)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w', NULL, '1 hour', 1)").fetchall()
        assert claimed == job_id
        c.execute("SELECT pgfence.fail(%s, %s, %s, permanent => true)", (job_id, token, "boom" + HOSTILE))
    try:
        stats = run_cli(dsn, "stats")
        assert stats.returncode == 0, stats.stderr
        assert _raw_controls(stats.stdout) == []
        assert sum(line.startswith("sweeper: ") for line in stats.stdout.splitlines()) == 1  # no forged line
        assert "\\u001b[31mRED\\u000asweeper:" in stats.stdout
        show = run_cli(dsn, "show", str(job_id))
        assert show.returncode == 0, show.stderr
        assert _raw_controls(show.stdout) == []
        assert not any(line.startswith("sweeper:") for line in show.stdout.splitlines())
        assert "\\u202eevil" in show.stdout
    finally:
        with connect(dsn) as c:
            c.execute("DELETE FROM pgfence.attempts WHERE job_id = %s", (job_id,))
            c.execute("DELETE FROM pgfence.jobs WHERE id = %s", (job_id,))


def test_an_error_from_the_database_is_shown_escaped(dsn: str) -> None:
    r = run_cli(dsn, "enqueue", "k\x1b[2J", "--queue", "q")
    assert r.returncode == 1
    assert _raw_controls(r.stderr) == [] and "\\u001b[2J" in r.stderr


def test_worker_options_carry_the_queue_set() -> None:
    from pgfence.cli import _worker_options, build_parser
    args = build_parser().parse_args(["worker", HANDLERS, "--queue-set", "tenants"])
    assert (_worker_options(args)["queue_set"], _worker_options(args)["queues"]) == ("tenants", None)
