"""Fixtures of the chaos suite: its own throwaway cluster and one scenario per session.

The suite crash-restarts PostgreSQL, so it never uses the developer's cluster nor
the tests' one: ``chaos_cluster`` wipes and starts ``<repo>/.pgdata-chaos`` on the
first free port from 54339 (``PGFENCE_CHAOS_PGDATA`` / ``PGFENCE_CHAOS_PGPORT``
override; see tests/support/clusters.py), deploys with sqitch, and stops it at the end of
the session. ``chaos_report``
runs the scenario once (short form by default, ``--chaos-full`` for the long
one); every test asserts one invariant of it, and the terminal summary prints
the table of faults and invariants.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

import chaos_runner
from chaos_runner import Report
from support.clusters import Cluster, chaos_cluster as make_chaos_cluster, session


@pytest.fixture(scope="session")
def chaos_cluster() -> Iterator[Cluster]:
    with session(make_chaos_cluster(), before_fresh=chaos_runner.reap_orphans) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def chaos_report(chaos_cluster: Cluster, chaos_full: bool, tmp_path_factory: pytest.TempPathFactory) -> Report:
    return chaos_runner.run(chaos_cluster, chaos_full, tmp_path_factory.mktemp("chaos"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    for report in chaos_runner.iter_reports():
        terminalreporter.write_sep("=", f"pgfence chaos report ({report.form} form)")
        for line in report.render().splitlines():
            terminalreporter.write_line(line)
