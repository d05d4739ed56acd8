"""What the test suites share (tests/, tests/chaos/; bench/ uses :mod:`support.processes`).

* :mod:`support.db`: connections, queries, expected errors (``sql_error``,
  ``assert_error``), the job-id floor, scratch databases, sqitch;
* :mod:`support.api`: the pgfence SQL functions called directly (the SQL-level tests);
* :mod:`support.roles`: throwaway LOGIN roles, a grantless login, SET ROLE blocks;
* :mod:`support.clusters`: the suites' own throwaway PostgreSQL clusters;
* :mod:`support.processes`: child processes in their own process group (worker
  processes, the CLI, the chaos workers, the benchmark's runners);
* :mod:`support.workers`: waiting with a deadline, a worker on a thread;
* :mod:`support.handlers`: the handlers of the tests' worker processes.

Fixtures live in tests/conftest.py. tests/ is on sys.path (pytest's rootdir conftest),
so a test imports ``from support.db import connect``.
"""
