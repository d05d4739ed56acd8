"""pgfence test harness: test-database selection and shared fixtures.

Database selection (once per session, in this order). The tests never use the
developer's cluster (``make db``, port 54329) or its database, which ``make demo``
and a newcomer's worker use:

1. ``PGFENCE_TEST_DSN`` set: used as is (a database of its own, please: the tests
   create queues, roles and jobs in it).
2. ``PGFENCE_TEST_BACKEND=docker``: a throwaway container (below).
3. A PostgreSQL server is installed here (``make test`` installs one): the tests'
   own throwaway cluster (tests/support/clusters.py: ``.pgdata-test``, database
   ``pgfence_test``, the first free port from 54349 or ``PGFENCE_TEST_PGPORT``, with
   pg_cron running the sweeper in that database), wiped, started and deployed for the
   session and stopped after it (``PGFENCE_TEST_KEEP=1``: reused and left running).
4. A Docker engine answers (``docker info`` exits 0 within 5 s) and testcontainers
   imports: a throwaway container from image ``PGFENCE_TEST_IMAGE`` (default
   ``postgres:<major>``, the official Debian-based image, whose PGDG apt source has
   ``postgresql-<major>-cron``). Its startup command apt-installs pg_cron when the
   image lacks it, then runs the normal entrypoint with
   ``-c shared_preload_libraries=pg_cron -c cron.database_name=pgfence ...``.

Whatever the source, ``sqitch deploy --target db:<dsn>`` runs once per session
(idempotent; skipped while sqitch.plan has no changes).

The helpers of the suite are in tests/support/ (see its ``__init__``); the fixtures here.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support.clusters import Cluster, session, test_cluster
from support.db import Conn, connect, connection, id_floor, scratch_database, set_id_floor, sqitch_deploy

DB_NAME = "pgfence"


# ---------------------------------------------------------------- options --
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-full", action="store_true", default=False,
        help="run the full (long) chaos variants",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running test")
    config.addinivalue_line("markers", "chaos: fault-injection test (full variants only with --chaos-full)")


@pytest.fixture(scope="session")
def chaos_full(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--chaos-full"))


# ------------------------------------------------------ backend selection --
def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import testcontainers.core.container  # noqa: F401
    except Exception:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _server_installed() -> bool:
    return any((p / "bin" / "postgres").exists() for p in Path("/usr/lib/postgresql").glob("*"))


def _installed_major() -> str:
    majors = [int(p.name) for p in Path("/usr/lib/postgresql").glob("*")
              if p.name.isdigit() and (p / "bin" / "postgres").exists()]
    return str(max(majors)) if majors else "15"


def _start_container() -> tuple[Any, str]:
    from testcontainers.core.container import DockerContainer

    image = os.environ.get("PGFENCE_TEST_IMAGE") or f"postgres:{_installed_major()}"
    # $PG_MAJOR is set by the official postgres images.
    script = (
        "set -e; "
        'if [ ! -f "/usr/lib/postgresql/$PG_MAJOR/lib/pg_cron.so" ]; then '
        "  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        '  "postgresql-$PG_MAJOR-cron" >/dev/null; '
        "fi; "
        "exec docker-entrypoint.sh postgres "
        f"-c shared_preload_libraries=pg_cron -c cron.database_name={DB_NAME} "
        "-c cron.use_background_workers=on -c max_worker_processes=32 "
        "-c max_connections=300 -c timezone=UTC"
    )
    c = (
        DockerContainer(image)
        .with_env("POSTGRES_DB", DB_NAME)
        .with_env("POSTGRES_HOST_AUTH_METHOD", "trust")  # throwaway container
        .with_exposed_ports(5432)
        .with_command(["bash", "-c", script])
    )
    c.start()
    try:
        dsn = f"postgresql://postgres@{c.get_container_host_ip()}:{c.get_exposed_port(5432)}/{DB_NAME}"
        deadline = time.monotonic() + 300  # includes the apt-get install
        last: Exception | None = None
        while time.monotonic() < deadline:
            wrapped = c.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                out, err = c.get_logs()
                raise RuntimeError(f"postgres container exited:\n{out.decode()[-3000:]}{err.decode()[-3000:]}")
            try:
                with connect(dsn, connect_timeout=3) as cx:
                    cx.execute("SELECT 1")
                    cx.execute("SET client_min_messages = warning")
                    cx.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
                return c, dsn
            except psycopg.Error as e:
                last = e
                time.sleep(1)
        raise RuntimeError(f"postgres container not ready after 300 s: {last}")
    except BaseException:
        c.stop()
        raise


# --------------------------------------------------------------- fixtures --
@pytest.fixture(scope="session")
def test_db_cluster() -> Iterator[Cluster | None]:
    """The tests' own cluster when the session uses it (see module docstring), else None."""
    backend = os.environ.get("PGFENCE_TEST_BACKEND", "").lower()
    if os.environ.get("PGFENCE_TEST_DSN") or backend == "docker" or (
            backend != "local" and not _server_installed() and _docker_available()):
        yield None
        return
    with session(test_cluster(), keep=os.environ.get("PGFENCE_TEST_KEEP") == "1") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def dsn(test_db_cluster: Cluster | None) -> Iterator[str]:
    """The test database DSN (see module docstring), deployed with sqitch once."""
    container = None
    if os.environ.get("PGFENCE_TEST_DSN"):
        the_dsn = os.environ["PGFENCE_TEST_DSN"]
    elif test_db_cluster is not None:
        the_dsn = test_db_cluster.dsn()
    else:
        container, the_dsn = _start_container()
    try:
        sqitch_deploy(the_dsn)
        yield the_dsn
    finally:
        if container is not None:
            container.stop()


@pytest.fixture
def scratch_dsn(dsn: str) -> Iterator[str]:
    """A new, empty database pgfence_roundtrip_<random> on the test server (nothing
    deployed, no pg_cron); dropped after, with its sessions ended."""
    with scratch_database(dsn, "pgfence_roundtrip") as scratch:
        yield scratch


@pytest.fixture
def conn(dsn: str) -> Iterator[Conn]:
    """A fresh autocommit psycopg 3 connection, closed after the test."""
    with connection(dsn) as c:
        yield c


@pytest.fixture
def conn2(dsn: str) -> Iterator[Conn]:
    """A second autocommit connection (another worker, the operator or the sweep)."""
    with connection(dsn) as c:
        yield c


@pytest.fixture
def tx_conn(dsn: str) -> Iterator[Conn]:
    """A connection with autocommit off: every statement runs in an explicit
    transaction until commit()/rollback(); rolled back and closed after the test."""
    with connection(dsn, autocommit=False) as c:
        yield c


@pytest.fixture
def job_id_floor(dsn: str) -> Iterator[None]:
    """The job-id floor of support.db (queue lookups by primary key range) for this test;
    a module opts in with ``pytestmark = pytest.mark.usefixtures("job_id_floor")``."""
    with connection(dsn) as c:
        set_id_floor(id_floor(c))
    yield
    set_id_floor(0)


@pytest.fixture
def client(dsn: str) -> Iterator[Any]:
    """A pgfence.Client with its own small pool, closed after the test."""
    from pgfence import Client  # imported here: the SQL-only tests do not need the client
    c = Client.connect(dsn, max_size=4)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(params=["threads", "asyncio"])
def flavor(request: pytest.FixtureRequest) -> str:
    """The in-process worker of a test that takes it: pgfence.Worker, or
    pgfence.aio.AsyncWorker on a loop thread of its own, driven like a Worker
    (``support.workers.start(..., flavor=flavor)``, ``support.aio.AsyncWorkerOnLoop``)."""
    return str(request.param)


@pytest.fixture
def workers(dsn: str) -> Iterator[list[Any]]:
    """Collects worker clients (support.workers.start) to close at teardown."""
    owned: list[Any] = []
    yield owned
    for c in owned:
        c.close()


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name unique to this test (<= 100 chars): t_<test name>_<random hex>.
    Tests share one database (and the running pg_cron sweeper), so each uses its own queue."""
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")
    return f"t_{base[:80]}_{secrets.token_hex(4)}"


@pytest.fixture
def sweep_paused(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """Pause the background pg_cron sweeper for the duration of the test.

    Calls ``pgfence.pause_sweeper()`` (it waits for a sweeper step in progress, so no
    reclaim or purge of the background sweeper happens after it returns) and
    ``pgfence.resume_sweeper()`` at teardown, on a dedicated autocommit connection,
    which it yields; do not use it for test work. Claims and CALL pgfence.sweep()
    still reclaim."""
    c = connect(dsn)
    try:
        c.execute("SET lock_timeout = '60s'")
        c.execute("SELECT pgfence.pause_sweeper()")
        yield c
        c.execute("SELECT pgfence.resume_sweeper()")
    finally:
        c.close()
