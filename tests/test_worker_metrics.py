"""A worker's own /metrics (``metrics_port``): what it counts, against what the database says.

The workers (threaded and asyncio, the ``flavor`` fixture) serve on port 0 (any free
port, read back from ``metrics_address``), scraped with urllib and read with
prometheus_client's own parser. The counts are compared with the jobs' attempt history
(``pgfence.attempts_of``), never with numbers the test assumes.
"""
from __future__ import annotations

import errno
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.db import TESTS
from support.processes import HANDLERS, cli_env, run_cli
from support.workers import running, start, wait_for, wait_status
from pgfence import Client, Interrupted, Job, PermanentFailure, RetryAfter, Snooze, Worker
from pgfence.worker_metrics import OUTCOMES, MetricsError

WEIRD = 'we"ird\\<script>alert(1)</script>'  # (a kind holds no control character: the database refuses them)


def scrape(address: tuple[str, int], path: str = "/metrics") -> tuple[str, Any]:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=10) as response:
        return response.read().decode(), response.headers


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}}, as prometheus_client's parser reads the text."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return found


def jobs_total(text: str) -> dict[tuple[str, str], int]:
    """{(kind, outcome): count} of pgfence_worker_jobs_total, zeros left out."""
    return {(dict(k)["kind"], dict(k)["outcome"]): int(v)
            for k, v in samples(text)["pgfence_worker_jobs_total"].items() if v}


def by_kind(text: str, name: str) -> dict[str, int]:
    return {dict(k)["kind"]: int(v) for k, v in samples(text)[name].items() if v}


def expected_from_history(client: Client, jobs: dict[int, str], handlers: dict[str, Any]) -> Counter[tuple[str, str]]:
    """What pgfence_worker_jobs_total must say, from each job's ended attempts and status: a
    failed attempt is ``failed`` when it dead-lettered the job (its last, the job failed),
    else ``retried``; kinds without a handler count under ``""``."""
    expected: Counter[tuple[str, str]] = Counter()
    for job_id, kind in jobs.items():
        record = client.get_job(job_id)
        history = client.attempts(job_id)
        for a in history:
            outcome = a.outcome
            if outcome == "failed":
                last = a.attempt == max(h.attempt for h in history)
                outcome = "failed" if last and record.status == "failed" else "retried"
            expected[(kind if kind in handlers else "", outcome)] += 1
    return expected


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port``: a server may listen there (SO_REUSEADDR, as servers
    set, lets it past the closed scrapes' TIME_WAIT)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


# --------------------------------------------------------------- counts ----
def test_worker_metrics_count_each_attempt_as_the_database_recorded_it(
        dsn: str, client: Client, queue: str, workers: list[Client], flavor: str) -> None:
    def ok(job: Job) -> Any:
        return {"ok": job.id}

    def flaky(job: Job) -> Any:  # retried once at once, then done
        if job.attempts == 1:
            raise RetryAfter(timedelta(0), "not yet")
        return "second time lucky"

    def boom(job: Job) -> Any:
        raise ValueError("boom")

    def doomed(job: Job) -> Any:
        raise PermanentFailure("never")

    def nap(job: Job) -> Any:
        raise Snooze(timedelta(hours=1))

    def shy(job: Job) -> Any:  # gives the job back once, then done
        if job.attempts == 1:
            raise Interrupted()
        return None

    handlers = {"ok": ok, "flaky": flaky, "boom": boom, "doomed": doomed, "nap": nap, "shy": shy, WEIRD: ok}
    jobs: dict[int, str] = {}
    for kind, max_attempts in [("ok", 3), ("ok", 3), ("ok", 3), ("flaky", 3), ("boom", 1), ("boom", 2),
                               ("doomed", 3), ("nap", 3), ("shy", 3), (WEIRD, 3), ("nobody", 3)]:
        jobs[client.enqueue(kind, {}, queue=queue, max_attempts=max_attempts)] = kind

    worker = start(dsn, queue, handlers, workers, flavor=flavor, metrics_port=0, concurrency=4, prefetch=4)
    assert worker.metrics_address is None  # (not before run())
    with running(worker):
        address = wait_for(lambda: worker.metrics_address, 10, "the metrics server")
        assert address[0] == "127.0.0.1" and address[1] > 0
        for job_id, kind in jobs.items():
            if kind == "nap":
                wait_for(lambda: client.attempts(job_id), 15, "the snooze")
            else:
                wait_status(client, job_id, "done", "failed")
        expected = expected_from_history(client, jobs, handlers)
        # (a count moves once the database's answer is back: shortly after the row changed)
        wait_for(lambda: jobs_total(scrape(address)[0]) == dict(expected), 10,
                 f"jobs_total to be {dict(expected)}")
        text = scrape(address)[0]
    assert worker.metrics_address is None
    assert port_is_free(address[1])

    assert dict(expected) == {
        ("ok", "done"): 3, ("flaky", "retried"): 1, ("flaky", "done"): 1, ("boom", "failed"): 2,
        ("boom", "retried"): 1, ("doomed", "failed"): 1, ("nap", "snoozed"): 1, ("shy", "released"): 1,
        ("shy", "done"): 1, (WEIRD, "done"): 1, ("", "failed"): 1}  # (the test's own reading of the history)
    ran = Counter[str]()
    for (kind, _), n in expected.items():
        ran[kind] += n
    assert by_kind(text, "pgfence_worker_handler_duration_seconds_count") == dict(ran)
    assert by_kind(text, "pgfence_worker_claim_to_start_seconds_count") == dict(ran)
    assert by_kind(text, "pgfence_worker_enqueue_to_start_seconds_count") == dict(ran)
    # (enqueue-to-start = the database's waited_s + claim-to-start: never less, kind by kind)
    queued, waited = by_kind(text, "pgfence_worker_enqueue_to_start_seconds_sum"), by_kind(
        text, "pgfence_worker_claim_to_start_seconds_sum")
    assert all(queued[k] >= waited[k] for k in waited)
    found = samples(text)
    # every series of a handler's kind exists from the start, at 0 where nothing happened
    assert found["pgfence_worker_jobs_total"][(("kind", "ok"), ("outcome", "rejected"))] == 0
    assert {dict(k)["kind"] for k in found["pgfence_worker_jobs_total"]} == set(handlers) | {""}
    assert {dict(k)["outcome"] for k in found["pgfence_worker_jobs_total"]} == set(OUTCOMES)
    assert found["pgfence_worker_in_flight"] == {(("state", "waiting"),): 0, (("state", "running"),): 0,
                                                 (("state", "reporting"),): 0}
    durations = found["pgfence_worker_handler_duration_seconds_bucket"]
    assert durations[(("kind", "ok"), ("le", "+Inf"))] == 3


def test_in_flight_shows_running_and_waiting_attempts(dsn: str, client: Client, queue: str,
                                                      workers: list[Client], flavor: str) -> None:
    def hold(job: Job) -> Any:
        while not job.should_stop():
            time.sleep(0.02)
        raise Interrupted()

    for _ in range(3):
        client.enqueue("hold", {}, queue=queue)
    worker = start(dsn, queue, {"hold": hold}, workers, flavor=flavor, metrics_port=0, concurrency=1,
                   prefetch=2)
    with running(worker):
        address = wait_for(lambda: worker.metrics_address, 10, "the metrics server")
        in_flight = wait_for(
            lambda: (lambda f: f if f[(("state", "running"),)] == 1 and f[(("state", "waiting"),)] == 2 else None)(
                samples(scrape(address)[0])["pgfence_worker_in_flight"]), 15, "1 running and 2 waiting")
        assert in_flight[(("state", "reporting"),)] == 0


# ------------------------------------------------------------ the server ----
def test_a_metrics_port_in_use_fails_before_claiming_anything(dsn: str, client: Client, queue: str,
                                                             workers: list[Client], flavor: str) -> None:
    job_id = client.enqueue("ok", {}, queue=queue)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = start(dsn, queue, {"ok": lambda job: None}, workers, flavor=flavor, metrics_port=port)
        with pytest.raises(MetricsError, match=rf"127\.0\.0\.1:{port}: the address is already in use") as caught:
            worker.run()
    assert "another metrics_port" in caught.value.hint
    record = client.get_job(job_id)
    assert (record.status, record.attempts, record.reserved_by) == ("queued", 0, None)
    assert worker.counters["claimed"] == 0 and worker.metrics_address is None


def test_metrics_are_off_unless_a_port_is_given(dsn: str, queue: str, workers: list[Client], flavor: str) -> None:
    worker = start(dsn, queue, {"ok": lambda job: None}, workers, flavor=flavor)
    assert worker.metrics_port is None and worker._metrics is None
    with running(worker):
        assert worker.metrics_address is None
    # and nothing of it is imported: prometheus_client, the server's modules
    code = ("import os, sys\n"
            "from pgfence import Client, Limits, Worker\n"
            "from pgfence.aio import AsyncWorker\n"
            "c = Client.connect(os.environ['PGFENCE_DSN'], min_size=1, max_size=1)\n"
            "w = Worker(c, {'ok': print}, limits=Limits())\n"
            "assert w.metrics_address is None\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in\n"
            "             ('prometheus_client', 'wsgiref', 'socketserver', 'http') or m == 'pgfence.worker_metrics'))\n"
            "c.close()\n")
    result = subprocess.run([sys.executable, "-c", code], env=cli_env(dsn), cwd=TESTS, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


def test_the_port_is_free_again_after_the_worker_stops(dsn: str, queue: str, workers: list[Client],
                                                       flavor: str) -> None:
    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for _ in range(2):  # the same port twice: the first worker let it go
        worker = start(dsn, queue, {"ok": lambda job: None}, workers, flavor=flavor, metrics_port=port)
        with running(worker):
            assert wait_for(lambda: worker.metrics_address, 10, "the metrics server") == ("127.0.0.1", port)
            assert "pgfence_worker_jobs_total" in scrape(("127.0.0.1", port))[0]
        assert worker.metrics_address is None
        with pytest.raises(urllib.error.URLError):
            scrape(("127.0.0.1", port))
        assert port_is_free(port)


def test_two_workers_in_one_process_keep_their_own_metrics(dsn: str, client: Client, queue: str,
                                                           workers: list[Client]) -> None:
    client.enqueue("ok", {}, queue=queue)
    first = start(dsn, queue, {"ok": lambda job: None}, workers, metrics_port=0)
    second = start(dsn, queue + "_other", {"ok": lambda job: None}, workers, metrics_port=0)
    with running(first), running(second):
        a = wait_for(lambda: first.metrics_address, 10, "the first server")
        b = wait_for(lambda: second.metrics_address, 10, "the second server")
        assert a != b
        wait_for(lambda: jobs_total(scrape(a)[0]) == {("ok", "done"): 1}, 15, "the first worker's job")
        assert jobs_total(scrape(b)[0]) == {}


def test_label_values_are_escaped_and_nothing_else_is_echoed(dsn: str, client: Client, queue: str,
                                                             workers: list[Client]) -> None:
    job_id = client.enqueue(WEIRD, {}, queue=queue)
    line_break = "line\nbreak"  # (a handler's kind only: no job can have it)
    worker = start(dsn, queue, {WEIRD: lambda job: None, line_break: lambda job: None}, workers, metrics_port=0)
    with running(worker):
        address = wait_for(lambda: worker.metrics_address, 10, "the metrics server")
        wait_status(client, job_id, "done")
        wait_for(lambda: jobs_total(scrape(address)[0]).get((WEIRD, "done")) == 1, 10, "the count")
        text, headers = scrape(address)
        assert headers["Content-Type"].startswith("text/plain") and headers["X-Content-Type-Options"] == "nosniff"
        # the exposition's escapes (backslash, double quote), and the line break written as \u000a
        assert 'pgfence_worker_jobs_total{kind="we\\"ird\\\\<script>alert(1)</script>",outcome="done"} 1.0' \
            in text.splitlines()
        assert 'kind="line\\\\u000abreak"' in text and "line\nbreak" not in text
        kinds = {dict(k)["kind"] for k in samples(text)["pgfence_worker_jobs_total"]}
        assert kinds == {WEIRD, "line\\u000abreak", ""}
        # any other path or method: a fixed answer, nothing of the request echoed
        for path in ("/<script>x</script>", "/metrics/../x", "/"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                scrape(address, path)
            assert caught.value.code == 404
            body = caught.value.read().decode()
            assert "script" not in body and body == "not found: this worker serves its metrics at /metrics\n"
        request = urllib.request.Request(f"http://{address[0]}:{address[1]}/metrics", method="<script>")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code in (400, 405) and b"<script>" not in caught.value.read()
        request = urllib.request.Request(f"http://{address[0]}:{address[1]}/metrics", method="POST", data=b"x")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 405


# ------------------------------------------------------------- options ----
def test_a_bad_metrics_port_is_refused_at_construction(client: Client) -> None:
    for port in (-1, 65536, 1.5, True, "9100"):
        with pytest.raises(ValueError, match="metrics_port must be an integer in 0..65535"):
            Worker(client, {}, metrics_port=port)  # type: ignore[arg-type]


def test_without_prometheus_client_a_metrics_port_names_the_extra(dsn: str, queue: str) -> None:
    code = ("import os, sys\n"
            "sys.modules['prometheus_client'] = None  # (as if not installed: import raises ImportError)\n"
            "from pgfence import Client, Limits, Worker\n"
            "from pgfence.worker_metrics import MetricsError\n"
            "c = Client.connect(os.environ['PGFENCE_DSN'], min_size=1, max_size=1)\n"
            "try:\n"
            "    Worker(c, {}, limits=Limits(), metrics_port=0)\n"
            "except MetricsError as exc:\n"
            "    print(exc)\n"
            "c.close()\n")
    result = subprocess.run([sys.executable, "-c", code], env=cli_env(dsn), cwd=TESTS, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("metrics_port needs the prometheus_client package, which is not installed "
                             "(install pgfence's metrics extra: pip install 'pgfence[metrics]')\n")


def test_the_cli_worker_reports_a_metrics_port_in_use_as_one_error(dsn: str, client: Client, queue: str,
                                                                   flavor: str) -> None:
    job_id = client.enqueue("echo", {}, queue=queue)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(dsn, "worker", HANDLERS, "--queue", queue, "--metrics-port", str(port),
                         *(["--asyncio"] if flavor == "asyncio" else []), timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-2] == (f"pgfence: error: cannot serve the worker's metrics on 127.0.0.1:{port}: the address is "
                         "already in use (another process listens on that port)"), result.stderr
    assert lines[-1].startswith("hint: pick another metrics_port / --metrics-port"), result.stderr
    assert "Traceback" not in result.stderr
    assert client.get_job(job_id).attempts == 0
    usage = run_cli(dsn, "worker", HANDLERS, "--metrics-port", "70000")
    assert usage.returncode == 2 and "must be a TCP port, 0..65535" in usage.stderr

