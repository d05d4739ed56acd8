"""The tests run on a cluster and in a database of their own, and the suite's clusters
start wherever a user clones.

`make test` used to leave its data (420 queues, 6,160 live jobs, a forced sweeper
error) in the database that `make demo` and a newcomer's worker use; and on a checkout
whose parent directory the postgres OS user cannot traverse (a clone under /root, a
0700 home directory), scripts/pg.sh fell back to a data directory under /tmp for the
main cluster but the chaos suite refused to run.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from support.clusters import Cluster, SHARED_PORT, free_port
from support.db import REPO, connect
from support.workers import wait_for


def test_the_tests_use_a_cluster_and_a_database_of_their_own(dsn: str, test_db_cluster: Cluster | None) -> None:
    if test_db_cluster is None:
        pytest.skip("PGFENCE_TEST_DSN or a container decides where the tests run")
    with connect(dsn) as c:
        assert c.execute("SELECT current_database(), current_setting('port')::int").fetchone() == (
            "pgfence_test", test_db_cluster.port)
        assert c.execute("SELECT current_setting('cron.database_name')").fetchone() == ("pgfence_test",)
    assert test_db_cluster.port != SHARED_PORT
    assert test_db_cluster.datadir != (REPO / ".pgdata").resolve()


@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user matters only when run as root")
def test_the_test_and_chaos_clusters_start_in_a_clone_the_postgres_user_cannot_traverse() -> None:
    home = Path(tempfile.mkdtemp(prefix="pgfence-0700-"))  # 0700, owned by root
    clone = home / "pgfence"
    try:
        assert oct(home.stat().st_mode & 0o777) == "0o700"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
        script = textwrap.dedent("""
            import sys
            sys.path.insert(0, "tests")
            from support.clusters import chaos_cluster, test_cluster
            clusters = [test_cluster(), chaos_cluster()]
            try:
                for c in clusters:
                    c.fresh()
                for c in clusters:
                    assert c.running(), c.name
                    print(c.name, c.datadir, c.port)
            finally:
                for c in clusters:
                    c.stop()
        """)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PGFENCE_TEST_PG", "PGFENCE_CHAOS_PG"))}
        r = subprocess.run([sys.executable, "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = dict((line.split()[0], line.split()[1:]) for line in r.stdout.splitlines())
        assert set(lines) == {"test", "chaos"}
        dirs = {name: Path(v[0]) for name, v in lines.items()}
        # each under /tmp (the clone is not traversable), each its own
        assert all(str(d).startswith("/tmp/pgfence-") for d in dirs.values()), dirs
        assert dirs["test"] != dirs["chaos"]
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_pg_sh_says_when_its_port_is_taken(test_db_cluster: Cluster | None) -> None:
    if test_db_cluster is None:
        pytest.skip("no cluster of the tests' own")
    with tempfile.TemporaryDirectory(prefix="pgfence-port-") as tmp:
        os.chmod(tmp, 0o755)
        env = dict(os.environ, PGFENCE_PGDATA=str(Path(tmp) / "data"), PGFENCE_PGPORT=str(test_db_cluster.port))
        r = subprocess.run([str(REPO / "scripts" / "pg.sh"), "start"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0
        assert f"port {test_db_cluster.port} on 127.0.0.1 is already taken" in r.stderr, r.stderr
        assert "PGFENCE_PGPORT" in r.stderr
        subprocess.run([str(REPO / "scripts" / "pg.sh"), "stop"], env=env, capture_output=True, timeout=60)




def test_pg_sh_says_when_its_port_is_held_without_accepting_connections(test_db_cluster: Cluster | None) -> None:
    # A socket bound to the port but not listening passes the connect probe, and the
    # server then fails to bind: pg.sh must say the port is taken and name the override,
    # not end with the server's raw "could not bind ... Address already in use".
    if test_db_cluster is None:
        pytest.skip("no cluster of the tests' own")
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))  # no SO_REUSEADDR, no listen()
        port = holder.getsockname()[1]
        with tempfile.TemporaryDirectory(prefix="pgfence-port-") as tmp:
            os.chmod(tmp, 0o755)
            env = dict(os.environ, PGFENCE_PGDATA=str(Path(tmp) / "data"), PGFENCE_PGPORT=str(port))
            r = subprocess.run([str(REPO / "scripts" / "pg.sh"), "start"], env=env, capture_output=True,
                               text=True, timeout=180)
            subprocess.run([str(REPO / "scripts" / "pg.sh"), "stop"], env=env, capture_output=True, timeout=60)
        assert r.returncode != 0, r.stderr
        assert f"port {port} on 127.0.0.1 is already taken" in r.stderr, r.stderr
        assert "PGFENCE_PGPORT" in r.stderr, r.stderr
    finally:
        holder.close()


def test_pg_sh_starts_pg_crons_scheduler_again_after_its_database_was_dropped(
        test_db_cluster: Cluster | None) -> None:
    # pg_cron's scheduler exits cleanly when DROP DATABASE ... WITH (FORCE) ends it, and a
    # background worker that exits cleanly is never restarted: before pg.sh looked, a
    # dropped and remade dev database had no sweeper until the cluster was restarted.
    if test_db_cluster is None:
        pytest.skip("no cluster of the tests' own")
    with connect(f"postgresql://postgres@127.0.0.1:{test_db_cluster.port}/postgres") as c:
        if not c.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_cron'").fetchone()[0]:
            pytest.skip("pg_cron is not installed")
    port = free_port(54369)
    with tempfile.TemporaryDirectory(prefix="pgfence-cron-") as tmp:
        os.chmod(tmp, 0o755)
        env = dict(os.environ, PGFENCE_PGDATA=str(Path(tmp) / "data"), PGFENCE_PGPORT=str(port),
                   PGFENCE_DB="cron_home")
        pg_sh = [str(REPO / "scripts" / "pg.sh")]

        def schedulers() -> int:
            with connect(f"postgresql://postgres@127.0.0.1:{port}/postgres") as c:
                return c.execute("SELECT count(*) FROM pg_stat_activity"
                                 " WHERE backend_type = 'pg_cron launcher'").fetchone()[0]

        try:
            subprocess.run(pg_sh + ["start"], env=env, check=True, capture_output=True, timeout=180)
            # at the first start the database comes after the server: the scheduler
            # fails to connect once and is started again a second later
            wait_for(lambda: schedulers() == 1, 10, "pg_cron's scheduler after the first start")
            with connect(f"postgresql://postgres@127.0.0.1:{port}/postgres") as c:
                c.execute("DROP DATABASE cron_home WITH (FORCE)")
                c.execute("CREATE DATABASE cron_home")
            assert schedulers() == 0
            r = subprocess.run(pg_sh + ["start"], env=env, capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stderr
            assert "pg_cron's scheduler is not running" in r.stderr, r.stderr
            wait_for(lambda: schedulers() == 1, 10, "pg_cron's scheduler after the restart")
            r = subprocess.run(pg_sh + ["start"], env=env, capture_output=True, text=True, timeout=180)
            assert r.returncode == 0 and "restarting" not in r.stderr, r.stderr
        finally:
            subprocess.run(pg_sh + ["stop"], env=env, capture_output=True, timeout=60)
