"""db/include/keep_view.sql, which the scripts that change the type of a column a view
reads include: the view comes back as it was (definition, options, comment, owner,
grants), and a view with column grants or column comments, which it does not keep, is
refused before anything is dropped."""
from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from support.clusters import pg_bindir
from support.db import REPO, connect, scratch_database

INCLUDE = REPO / "db" / "include" / "keep_view.sql"


def psql(dsn: str, script: str) -> subprocess.CompletedProcess[str]:
    """The script in one psql session that has included keep_view.sql (ON_ERROR_STOP)."""
    p = conninfo_to_dict(dsn)
    return subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(p["host"]),
                           "-p", str(p["port"]), "-U", str(p["user"]), "-d", str(p["dbname"])],
                          input=f"\\i {INCLUDE}\n{script}", capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))


def catalog(dsn: str) -> Any:
    with connect(dsn) as c:
        return c.execute("""
            SELECT pg_get_viewdef(c.oid), c.reloptions, obj_description(c.oid, 'pg_class'), c.relowner::regrole::text,
                   ARRAY(SELECT format('%s %s %s', a.grantee::regrole, a.privilege_type, a.is_grantable)
                           FROM aclexplode(c.relacl) a ORDER BY 1)
              FROM pg_class c WHERE c.oid = 'kv.v'::regclass""").fetchone()


def test_a_view_comes_back_as_it_was(dsn: str) -> None:
    role = f"kv reader {secrets.token_hex(3)}"  # (a name that needs quoting)
    with connect(dsn) as c:
        c.execute(f'CREATE ROLE "{role}"')
    try:
        with scratch_database(dsn, "keepview") as db:
            with connect(db) as c:
                c.execute("CREATE SCHEMA kv; CREATE TABLE kv.t (a integer, b text);"
                          "CREATE VIEW kv.v WITH (security_invoker = true, security_barrier = true) AS"
                          " SELECT a, b FROM kv.t WHERE a > 0;"
                          "COMMENT ON VIEW kv.v IS 'it''s a view';"
                          f'GRANT SELECT ON kv.v TO "{role}" WITH GRANT OPTION; GRANT INSERT ON kv.v TO PUBLIC')
            before = catalog(db)
            r = psql(db, "BEGIN; SELECT pg_temp.keep_view('kv.v'); DROP VIEW kv.v;"
                         " ALTER TABLE kv.t ALTER COLUMN a TYPE bigint; SELECT pg_temp.restore_view('kv.v'); COMMIT;")
            assert r.returncode == 0, r.stderr
            assert catalog(db) == before
    finally:
        with connect(dsn) as c:
            c.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_a_view_with_a_column_comment_or_grant_is_refused_before_anything_is_dropped(dsn: str) -> None:
    with scratch_database(dsn, "keepview") as db:
        with connect(db) as c:
            c.execute("CREATE SCHEMA kv; CREATE TABLE kv.t (a integer); CREATE VIEW kv.v AS SELECT a FROM kv.t")
        for mark, undo in (("COMMENT ON COLUMN kv.v.a IS 'x'", "COMMENT ON COLUMN kv.v.a IS NULL"),
                           ("GRANT SELECT (a) ON kv.v TO PUBLIC", "REVOKE SELECT (a) ON kv.v FROM PUBLIC")):
            with connect(db) as c:
                c.execute(mark)
            r = psql(db, "BEGIN; SELECT pg_temp.keep_view('kv.v'); DROP VIEW kv.v; COMMIT;")
            assert r.returncode != 0
            assert "view kv.v has column grants or column comments" in r.stderr, r.stderr
            with connect(db) as c:
                assert c.execute("SELECT to_regclass('kv.v') IS NOT NULL").fetchone() == (True,)
                c.execute(undo)
        r = psql(db, "BEGIN; SELECT pg_temp.keep_view('kv.v'); DROP VIEW kv.v; SELECT pg_temp.restore_view('kv.v');"
                     " COMMIT;")
        assert r.returncode == 0, r.stderr  # (the control: without them it is kept)
