"""Who may do what: the catalog (no routine executable by PUBLIC, SECURITY DEFINER
routines pin search_path, no role can write the tables, no dynamic SQL running with
the owner's rights), each scan shown able to fail on a planted bad object that is
rolled back; then the role matrix, played by real LOGIN roles (and by SET ROLE):
producers enqueue and read only their own jobs, workers run the fenced calls,
operators administer and read everything, and nobody but the owner writes a table
or calls a private function."""
from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support.api import claim, enqueue
from support.db import (REPO, ZERO_TOKEN, connect, connection, one, queues_removed_after, rows, sqitch,
                        sqitch_target, sqlstate_of, sqlstate_rolled_back)
from support.roles import connect_as, login_roles, set_role

Conn = psycopg.Connection[Any]

APP_ROLES = ("pgfence_producer", "pgfence_worker", "pgfence_operator", "pgfence_viewer")


# ========================================================= catalog scans ==
# Each returns the offending objects (empty = fine). They take any connection, so a
# negative control can plant a bad object in an open transaction and scan there.

def public_executable_routines(conn: Conn) -> list[str]:
    """(a) pgfence routines PUBLIC may execute (has_function_privilege with the
    pseudo-role 'public'; a NULL proacl means the default, which grants PUBLIC)."""
    return [r[0] for r in conn.execute("""
        SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace
           AND has_function_privilege('public', p.oid, 'EXECUTE')
         ORDER BY 1""")]


def public_executable_routines_by_acl(conn: Conn) -> list[str]:
    """(a), computed independently from the ACL itself: an EXECUTE item whose
    grantee is 0 (PUBLIC), with a NULL proacl read as the default ACL."""
    return [r[0] for r in conn.execute("""
        SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace
           AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
         ORDER BY 1""")]


def definer_routines_without_pinned_search_path(conn: Conn) -> list[str]:
    """(b) SECURITY DEFINER routines with no search_path in proconfig, or whose
    search_path does not end with pg_temp (else a caller's temporary objects could
    shadow the owner's)."""
    found = conn.execute("""
        SELECT p.oid::regprocedure::text,
               (SELECT substr(c, length('search_path=') + 1) FROM unnest(p.proconfig) c
                 WHERE c LIKE 'search_path=%%' LIMIT 1)
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace AND p.prosecdef
         ORDER BY 1""").fetchall()
    bad = []
    for name, path in found:
        items = [s.strip().strip('"') for s in path.split(",")] if path else []
        if not items or items[-1] != "pg_temp":
            bad.append(name)
    return bad


TABLE_WRITES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "TRIGGER")


def writable_relations(conn: Conn) -> list[tuple[str, str, str]]:
    """(c) (relation, role, privilege) for every write privilege the application roles
    or PUBLIC hold on a pgfence table, view or sequence: table-level INSERT, UPDATE,
    DELETE, TRUNCATE, TRIGGER (a trigger would run inside the owner's functions),
    column-level INSERT/UPDATE, and USAGE/UPDATE on sequences."""
    return [tuple(r) for r in conn.execute("""
        WITH rel AS (SELECT c.oid, c.oid::regclass::text AS name, c.relkind FROM pg_catalog.pg_class c
                      WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')),
             who AS (SELECT unnest(%(roles)s::text[]) AS role)
        SELECT rel.name, who.role, w.priv
          FROM rel CROSS JOIN who
         CROSS JOIN LATERAL unnest(CASE WHEN rel.relkind = 'S' THEN ARRAY['USAGE', 'UPDATE']
                                        ELSE %(writes)s::text[] END) AS w(priv)
         WHERE CASE WHEN rel.relkind = 'S' THEN has_sequence_privilege(who.role, rel.oid, w.priv)
                    ELSE has_table_privilege(who.role, rel.oid, w.priv)
                         OR (w.priv IN ('INSERT', 'UPDATE') AND has_any_column_privilege(who.role, rel.oid, w.priv))
               END
         ORDER BY 1, 2, 3""", {"roles": [*APP_ROLES, "public"], "writes": list(TABLE_WRITES)})]


# EXECUTE followed by format(...), a string literal or a v_ variable: dynamic SQL.
DYNAMIC_SQL = r"EXECUTE\s+(format\s*\(|'|v_)"
# The routines allowed to build SQL, each by its exact signature, and why it is safe:
# the deploy-time privilege rule takes no argument, builds its statements from the
# catalog only, and runs with its caller's rights (the deployer's), not the owner's.
# _apply_privileges (deploy-time grants) and _maintain_history (the history's partitions,
# named only from dates: test_storage.test_the_partition_routine_takes_table_names_only_from_dates).
DYNAMIC_SQL_ALLOWED = {"pgfence._apply_privileges()", "pgfence._maintain_history()"}


def dynamic_sql_with_owner_rights(conn: Conn) -> list[str]:
    """(d) routines that build SQL at run time (EXECUTE format(...) / EXECUTE '...' /
    EXECUTE v_...) and run with the owner's rights: SECURITY DEFINER routines, and the
    private helpers (_name), which only ever run inside them; except exactly those of
    DYNAMIC_SQL_ALLOWED."""
    return [r[0] for r in conn.execute("""
        SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace
           AND (p.prosecdef OR p.proname LIKE '\\_%%')
           AND p.prosrc ~* %s
         ORDER BY 1""", (DYNAMIC_SQL,)) if r[0] not in DYNAMIC_SQL_ALLOWED]


def seqscan_off_without_jit_off(conn: Conn) -> list[str]:
    """Routines that set enable_seqscan = off but not jit = off: a statement that can
    only scan sequentially is then costed at 10^10, and JIT compiles it on every call
    (the sweeper's steps spent 100-250 ms so on a one-row table)."""
    return [r[0] for r in conn.execute("""
        SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace
           AND 'enable_seqscan=off' = ANY (p.proconfig) AND NOT 'jit=off' = ANY (p.proconfig)
         ORDER BY 1""")]


# The routines allowed to lock jobs FOR UPDATE: the purge (it deletes them, SKIP LOCKED)
# and mark_done's transition (it deletes the job, moving it to the history, as complete
# does; a concurrent requeue or cancel either wins or waits, then finds it done).
# (the two purges delete what they lock: the retention's SKIP LOCKED, the operator's purge_many /
# act_on_filter('purge') through _act_on, which waits as the DELETE would; mark_done moves its job)
FOR_UPDATE_ALLOWED = {"pgfence.purge_finished(integer)", "pgfence._mark_done(bigint,jsonb)",
                      "pgfence._act_on(text,bigint[],text,jsonb,jsonb,text,text,text,text,timestamp with time zone,"
                      "timestamp with time zone)"}


def locks_stronger_than_no_key_update(conn: Conn) -> list[str]:
    """Routines that lock rows FOR UPDATE (except FOR_UPDATE_ALLOWED): a refusal being
    recorded holds its job FOR KEY SHARE (as a foreign key would), which FOR UPDATE
    waits for or, with SKIP LOCKED, passes over; everything but the purge's delete
    takes FOR NO KEY UPDATE (the purges' and mark_done's)."""
    return [r[0] for r in conn.execute(r"""
        SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pgfence'::regnamespace
           AND regexp_replace(p.prosrc, '--[^\n]*', '', 'g') ~* 'FOR\s+UPDATE'
         ORDER BY 1""") if r[0] not in FOR_UPDATE_ALLOWED]


def owner_members(conn: Conn) -> list[str]:
    """Roles that are members of pgfence_owner (and so hold all its rights)."""
    return [r[0] for r in conn.execute("""
        SELECT m.rolname FROM pg_catalog.pg_auth_members a
          JOIN pg_catalog.pg_roles m ON m.oid = a.member
         WHERE a.roleid = 'pgfence_owner'::regrole ORDER BY 1""")]


def routines_off_the_rule(conn: Conn) -> list[str]:
    """(h) routines whose catalog entry differs from the privilege rule
    (pgfence.routine_grants, applied by pgfence._apply_privileges): each with what
    differs. Every routine: owned by pgfence_owner, no EXECUTE for PUBLIC. Private
    helpers (_name): SECURITY INVOKER, EXECUTE for no pgfence role. Public routines: a
    row in the rule; functions SECURITY DEFINER with search_path pg_catalog, pgfence,
    pg_temp; procedures SECURITY INVOKER; EXECUTE for exactly the roles the row names."""
    return [f"{r[0]}: {r[1]}" for r in conn.execute("""
        WITH r AS (
            SELECT p.oid::regprocedure::text AS sig, p.proname, p.prokind, p.prosecdef, p.proconfig,
                   p.proowner, p.proname LIKE '\\_%%' AS private, g.roles AS rule_roles,
                   ARRAY(SELECT a.rolname::text FROM unnest(%(roles)s::text[]) AS a(rolname)
                          WHERE has_function_privilege(a.rolname, p.oid, 'EXECUTE') ORDER BY 1) AS may
              FROM pg_catalog.pg_proc p
              LEFT JOIN pgfence.routine_grants g ON g.routine = p.proname
             WHERE p.pronamespace = 'pgfence'::regnamespace)
        SELECT sig, problem FROM (
            SELECT sig, 'owner ' || proowner::regrole::text AS problem FROM r WHERE proowner <> 'pgfence_owner'::regrole
            UNION ALL SELECT sig, 'PUBLIC may execute' FROM r WHERE has_function_privilege('public', sig::regprocedure, 'EXECUTE')
            UNION ALL SELECT sig, 'private helper is SECURITY DEFINER' FROM r WHERE private AND prosecdef
            UNION ALL SELECT sig, 'private helper executable by ' || array_to_string(may, ', ')
                        FROM r WHERE private AND may <> '{}'
            UNION ALL SELECT sig, 'no row in pgfence.routine_grants' FROM r WHERE NOT private AND rule_roles IS NULL
            UNION ALL SELECT sig, 'function not SECURITY DEFINER' FROM r WHERE NOT private AND prokind = 'f' AND NOT prosecdef
            UNION ALL SELECT sig, 'procedure SECURITY DEFINER' FROM r WHERE NOT private AND prokind = 'p' AND prosecdef
            UNION ALL SELECT sig, 'search_path not pinned to pg_catalog, pgfence, pg_temp'
                        FROM r WHERE NOT private AND prokind = 'f'
                         AND NOT coalesce('search_path=pg_catalog, pgfence, pg_temp' = ANY (proconfig), false)
            UNION ALL SELECT sig, format('executable by {%%s}, the rule says {%%s}', array_to_string(may, ','),
                                         array_to_string(ARRAY(SELECT unnest(rule_roles) ORDER BY 1), ','))
                        FROM r WHERE NOT private AND rule_roles IS NOT NULL
                         AND may <> ARRAY(SELECT unnest(rule_roles) ORDER BY 1)
        ) x ORDER BY 1, 2""", {"roles": list(APP_ROLES)})]


# ------------------------------------------------------- the live catalog --
def test_no_pgfence_routine_is_executable_by_public(conn: Conn) -> None:
    assert public_executable_routines(conn) == []
    assert public_executable_routines_by_acl(conn) == []


def test_has_function_privilege_public_agrees_with_the_acl(conn: Conn) -> None:
    """The pseudo-role 'public' is understood by has_function_privilege: on a
    default-ACL function (NULL proacl) both methods say PUBLIC may execute it."""
    name = f"zz_default_acl_{secrets.token_hex(4)}"
    with conn.transaction(force_rollback=True):
        conn.execute(f"CREATE FUNCTION pgfence.{name}() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        assert one(conn, "SELECT proacl IS NULL FROM pg_proc WHERE proname = %s", (name,)) is True
        assert public_executable_routines(conn) == [f"pgfence.{name}()"]
        assert public_executable_routines_by_acl(conn) == [f"pgfence.{name}()"]


def test_every_security_definer_routine_pins_search_path_ending_with_pg_temp(conn: Conn) -> None:
    assert definer_routines_without_pinned_search_path(conn) == []
    # and the public API really is SECURITY DEFINER (otherwise the scan is vacuous)
    definers = {r[0] for r in conn.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = 'pgfence'::regnamespace AND prosecdef")}
    assert {"enqueue", "enqueue_many", "claim", "heartbeat", "heartbeat_many", "complete", "complete_many",
            "fail", "fail_many", "release", "release_many", "report_rejection", "reclaim_expired", "requeue",
            "cancel", "stats", "purge_finished", "set_retention", "sweeper_last_pass", "sweeper_health",
            "pause_sweeper", "resume_sweeper", "wakeup_tags", "sweep_batch", "sweeper_begin", "sweeper_step"} <= definers


def test_no_application_role_or_public_can_write_a_pgfence_relation(conn: Conn) -> None:
    assert writable_relations(conn) == []
    # the scan covers every table and the identity sequence
    assert {r[0] for r in conn.execute(
        "SELECT oid::regclass::text FROM pg_class WHERE relnamespace = 'pgfence'::regnamespace"
        " AND relkind IN ('r', 'S')")} >= {"pgfence.jobs", "pgfence.attempts", "pgfence.rejections",
                                           "pgfence.retention", "pgfence.sweeper_status", "pgfence.jobs_id_seq"}


def test_no_dynamic_sql_runs_with_the_owners_rights(conn: Conn) -> None:
    assert dynamic_sql_with_owner_rights(conn) == []


def test_the_routines_allowed_dynamic_sql_take_no_argument_and_no_role_may_call_them(conn: Conn) -> None:
    for sig in DYNAMIC_SQL_ALLOWED:
        row = conn.execute("SELECT pronargs, prosecdef FROM pg_proc WHERE oid = %s::regprocedure", (sig,)).fetchone()
        assert row == (0, False), sig
        for role in (*APP_ROLES, "public"):
            assert one(conn, "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, sig)) is False, (role, sig)


def test_dynamic_sql_scan_allows_only_the_exact_signature(tx: Conn) -> None:
    """An overload of an allowed routine, or another definer, building SQL is still reported."""
    tx.execute("""CREATE FUNCTION pgfence._apply_privileges(t text) RETURNS void LANGUAGE plpgsql AS $$
                  BEGIN EXECUTE format('SELECT %s', t); END $$""")
    assert dynamic_sql_with_owner_rights(tx) == ["pgfence._apply_privileges(text)"]


def test_every_routine_that_turns_off_sequential_scans_turns_off_jit(conn: Conn) -> None:
    assert seqscan_off_without_jit_off(conn) == []
    assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgfence'::regnamespace"
                     " AND 'enable_seqscan=off' = ANY (proconfig)") >= 4  # (the scan is not vacuous)


def test_jit_scan_reports_a_routine_without_jit_off(tx: Conn) -> None:
    tx.execute("ALTER FUNCTION pgfence.reclaim_expired(integer) RESET jit")
    assert seqscan_off_without_jit_off(tx) == ["pgfence.reclaim_expired(integer)"]


def test_only_the_purge_locks_rows_for_update(conn: Conn) -> None:
    assert locks_stronger_than_no_key_update(conn) == []
    assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgfence'::regnamespace"
                     " AND prosrc ~ 'FOR NO KEY UPDATE'") >= 5  # (claim, claimed, _reclaim, cancel, requeue)


def test_for_update_scan_reports_a_routine_that_locks_for_update(tx: Conn) -> None:
    tx.execute("""CREATE FUNCTION pgfence._zz_locker() RETURNS void LANGUAGE sql AS $$
                  SELECT 1 FROM pgfence.jobs -- a comment: FOR UPDATE
                   FOR  UPDATE SKIP LOCKED $$""")
    assert locks_stronger_than_no_key_update(tx) == ["pgfence._zz_locker()"]


def test_owner_owns_everything_and_has_no_members(conn: Conn) -> None:
    assert owner_members(conn) == []
    assert one(conn, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'pgfence_owner'") is False
    not_owned = rows(conn, """
        SELECT oid::regprocedure::text AS name FROM pg_proc
         WHERE pronamespace = 'pgfence'::regnamespace AND proowner <> 'pgfence_owner'::regrole
        UNION ALL
        SELECT oid::regclass::text FROM pg_class
         WHERE relnamespace = 'pgfence'::regnamespace AND relowner <> 'pgfence_owner'::regrole
           AND relkind IN ('r', 'S', 'v', 'm', 'p')
        UNION ALL  -- (composite types of their own: a table's row type goes with the table)
        SELECT oid::regtype::text FROM pg_type
         WHERE typnamespace = 'pgfence'::regnamespace AND typowner <> 'pgfence_owner'::regrole
           AND typtype IN ('c', 'e', 'd') AND (typrelid = 0 OR typrelid IN (SELECT oid FROM pg_class WHERE relkind = 'c'))""")
    assert not_owned == []
    assert one(conn, "SELECT relrowsecurity FROM pg_class WHERE oid = 'pgfence.jobs'::regclass") is True
    assert one(conn, "SELECT has_schema_privilege('public', 'pgfence', 'USAGE')") is False


def test_every_routine_matches_the_privilege_rule(conn: Conn) -> None:
    assert routines_off_the_rule(conn) == []
    n = one(conn, "SELECT count(*) FROM pgfence.routine_grants g WHERE EXISTS"
                  " (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'pgfence'::regnamespace AND p.proname = g.routine)")
    assert n >= 35  # (the rule covers the API: the scan is not vacuous)


def test_the_role_matrix_calls_every_public_routine(conn: Conn) -> None:
    """Every public routine of schema pgfence is in the role matrix below, so a new one
    is called as every role the day it is added (private helpers: the rule scan above
    holds that no role may execute any of them)."""
    names = {r[0] for r in conn.execute("SELECT DISTINCT proname::text FROM pg_proc"
                                        " WHERE pronamespace = 'pgfence'::regnamespace AND proname !~ '^_'")}
    assert sorted(names - set(CALLS)) == []


# ------------------------------------------------------ negative controls --
@pytest.fixture
def tx(dsn: str) -> Iterator[Conn]:
    """A transactional superuser connection, always rolled back: planted objects never
    become visible to any other session."""
    c = connect(dsn, autocommit=False)
    try:
        c.execute("SET LOCAL lock_timeout = '10s'")
        yield c
    finally:
        c.rollback()
        c.close()


def _uniq(prefix: str) -> str:
    return f"zz_{prefix}_{secrets.token_hex(4)}"


def test_public_scan_reports_a_public_function(tx: Conn) -> None:
    fresh = _uniq("public")
    tx.execute(f"CREATE FUNCTION pgfence.{fresh}() RETURNS int LANGUAGE sql AS 'SELECT 1'")  # default ACL
    tx.execute("GRANT EXECUTE ON FUNCTION pgfence._reclaim(integer) TO PUBLIC")
    want = sorted([f"pgfence.{fresh}()", "pgfence._reclaim(integer)"])
    assert public_executable_routines(tx) == want
    assert public_executable_routines_by_acl(tx) == want


@pytest.mark.parametrize(("plant", "problem"), [
    ("CREATE FUNCTION pgfence.zz_unruled() RETURNS int LANGUAGE sql AS 'SELECT 1'",
     "no row in pgfence.routine_grants"),
    ("GRANT EXECUTE ON FUNCTION pgfence.job(bigint) TO pgfence_worker",
     "executable by {pgfence_operator,pgfence_producer,pgfence_viewer,pgfence_worker}, the rule says"
     " {pgfence_operator,pgfence_producer,pgfence_viewer}"),
    ("REVOKE EXECUTE ON FUNCTION pgfence.stats() FROM pgfence_operator",
     "executable by {pgfence_viewer}, the rule says {pgfence_operator,pgfence_viewer}"),
    ("REVOKE EXECUTE ON FUNCTION pgfence.metrics() FROM pgfence_viewer",
     "executable by {pgfence_operator}, the rule says {pgfence_operator,pgfence_viewer}"),
    ("ALTER FUNCTION pgfence._backoff(integer) SECURITY DEFINER", "private helper is SECURITY DEFINER"),
    ("GRANT EXECUTE ON FUNCTION pgfence._backoff(integer) TO pgfence_worker",
     "private helper executable by pgfence_worker"),
    ("ALTER FUNCTION pgfence.limits() SECURITY INVOKER", "function not SECURITY DEFINER"),
    ("ALTER FUNCTION pgfence.limits() SET search_path = pgfence, pg_temp",
     "search_path not pinned to pg_catalog, pgfence, pg_temp"),
    ("ALTER FUNCTION pgfence.limits() OWNER TO postgres", "owner postgres"),
])
def test_rule_scan_reports_a_routine_off_the_rule(tx: Conn, plant: str, problem: str) -> None:
    tx.execute(plant)
    off = routines_off_the_rule(tx)
    assert len(off) >= 1 and any(o.endswith(": " + problem) for o in off), off


def test_search_path_scan_reports_unpinned_definers(tx: Conn) -> None:
    none_ = _uniq("nopath")
    late = _uniq("latetemp")
    good = _uniq("pinned")
    tx.execute(f"CREATE FUNCTION pgfence.{none_}() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'")
    tx.execute(f"CREATE FUNCTION pgfence.{late}() RETURNS int LANGUAGE sql SECURITY DEFINER"
               " SET search_path = pgfence, pg_temp, public AS 'SELECT 1'")
    tx.execute(f"CREATE FUNCTION pgfence.{good}() RETURNS int LANGUAGE sql SECURITY DEFINER"
               " SET search_path = pg_catalog, pgfence, pg_temp AS 'SELECT 1'")
    tx.execute("ALTER FUNCTION pgfence.stats() RESET search_path")
    assert definer_routines_without_pinned_search_path(tx) == sorted(
        [f"pgfence.{none_}()", f"pgfence.{late}()", "pgfence.stats()"])


def test_write_scan_reports_write_grants(tx: Conn) -> None:
    tx.execute("GRANT UPDATE ON pgfence.jobs TO pgfence_worker")            # seed 000's naive fix
    tx.execute("GRANT UPDATE (status) ON pgfence.jobs TO pgfence_producer")  # column-level
    tx.execute("GRANT TRUNCATE ON pgfence.attempts TO PUBLIC")
    tx.execute("GRANT USAGE ON SEQUENCE pgfence.jobs_id_seq TO pgfence_operator")
    assert writable_relations(tx) == sorted([
        ("pgfence.attempts", "pgfence_operator", "TRUNCATE"),   # PUBLIC's grant reaches everyone
        ("pgfence.attempts", "pgfence_producer", "TRUNCATE"),
        ("pgfence.attempts", "pgfence_viewer", "TRUNCATE"),
        ("pgfence.attempts", "pgfence_worker", "TRUNCATE"),
        ("pgfence.attempts", "public", "TRUNCATE"),
        ("pgfence.jobs", "pgfence_producer", "UPDATE"),
        ("pgfence.jobs", "pgfence_worker", "UPDATE"),
        ("pgfence.jobs_id_seq", "pgfence_operator", "USAGE"),
    ])


def test_write_scan_reports_membership_in_the_owner(tx: Conn) -> None:
    tx.execute("GRANT pgfence_owner TO pgfence_operator")
    found = writable_relations(tx)
    assert ("pgfence.jobs", "pgfence_operator", "UPDATE") in found
    assert {r[1] for r in found} == {"pgfence_operator"}
    assert owner_members(tx) == ["pgfence_operator"]


@pytest.mark.parametrize("body", [
    "EXECUTE format('SELECT %s', t)",
    "EXECUTE 'SELECT ' || t",
    "EXECUTE v_sql",
], ids=["format", "literal", "variable"])
def test_dynamic_sql_scan_reports_a_definer_building_sql(tx: Conn, body: str) -> None:
    fn = _uniq("dynamic")
    helper = "_" + _uniq("helper")
    tx.execute(f"""CREATE FUNCTION pgfence.{fn}(t text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
                   SET search_path = pg_catalog, pgfence, pg_temp AS $$
                   DECLARE v_sql text := 'SELECT ' || t; BEGIN {body}; END $$""")
    tx.execute(f"""CREATE FUNCTION pgfence.{helper}(t text) RETURNS void LANGUAGE plpgsql AS $$
                   DECLARE v_sql text := 'SELECT ' || t; BEGIN {body}; END $$""")
    assert dynamic_sql_with_owner_rights(tx) == sorted([f"pgfence.{fn}(text)", f"pgfence.{helper}(text)"])


def _verify_statements(path: Path) -> list[str]:
    text = "\n".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("--"))
    stmts = [s.strip() for s in text.split(";")]
    return [s for s in stmts if s and s.upper() not in ("BEGIN", "ROLLBACK", "COMMIT")]


@pytest.mark.parametrize("plant", [
    "CREATE FUNCTION pgfence.{name}() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION pgfence.{name}() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
], ids=["public-execute", "definer-without-search_path"])
def test_sqitch_verify_privileges_catches_a_planted_object(tx: Conn, plant: str) -> None:
    """The checks in db/verify/privileges.sql fail (by division by zero) on a bad object."""
    stmts = _verify_statements(REPO / "db" / "verify" / "privileges.sql")
    assert len(stmts) >= 3
    for s in stmts:  # all pass on the deployed catalog
        tx.execute(s)
    name = _uniq("verify")
    tx.execute(plant.format(name=name))
    if "SECURITY DEFINER" in plant:
        tx.execute(f"REVOKE ALL ON FUNCTION pgfence.{name}() FROM PUBLIC")
    failures = []
    for s in stmts:
        try:
            with tx.transaction():
                tx.execute(s)
        except psycopg.errors.DivisionByZero:
            failures.append(s)
    assert len(failures) == 1, failures


def test_sqitch_verify_passes(dsn: str) -> None:
    r = sqitch("verify", target=sqitch_target(dsn))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert re.search(r"\* privileges (@\S+ )?\.+ ok", out), out
    assert "Verify successful" in out


# ============================================================ role matrix ==
# Logical role -> the pgfence role it is a member of. The real role names carry a
# per-run suffix (R("t_prod_a") = "t_prod_a_<hex>"): roles are cluster-wide, and two
# runs sharing the test cluster must not drop each other's roles.
ROLES: dict[str, str | None] = {
    "t_prod_a": "pgfence_producer",
    "t_prod_b": "pgfence_producer",
    "t_worker": "pgfence_worker",
    "t_oper": "pgfence_operator",
    "t_viewer": "pgfence_viewer",
    "t_nobody": None,  # LOGIN, no pgfence role
}
RUN_SUFFIX = secrets.token_hex(3)


def R(key: str) -> str:
    """The real name of logical role key in this run."""
    return f"{key}_{RUN_SUFFIX}"


@pytest.fixture(scope="module")
def roles(dsn: str) -> Iterator[None]:
    with login_roles(dsn, {R(k): member_of for k, member_of in ROLES.items()}):
        yield


@pytest.fixture(scope="module")
def sessions(dsn: str, roles: None) -> Iterator[dict[str, Conn]]:
    """One LOGIN connection per role (keyed by logical name), for the whole module."""
    conns = {key: connect_as(dsn, R(key)) for key in ROLES}
    try:
        yield conns
    finally:
        for c in conns.values():
            c.close()


@pytest.fixture
def q(conn: Conn, queue: str) -> Iterator[str]:
    """The test's queue; its jobs, history and retention row are removed afterwards."""
    with queues_removed_after(conn, queue):
        yield queue


# Every entry point; dummy arguments are enough where privileges are checked before
# the function runs (a denied call never starts).
CALLS: dict[str, str] = {
    "schema_version": "SELECT pgfence.schema_version()",
    "enqueue": "SELECT pgfence.enqueue('k', '{}', %(q)s)",
    "enqueue_many": "SELECT * FROM pgfence.enqueue_many(ARRAY['k'], queue => %(q)s)",
    "claim": "SELECT * FROM pgfence.claim('w', ARRAY[%(q)s])",
    "heartbeat": "SELECT pgfence.heartbeat(%(id)s, %(tok)s)",
    "heartbeat_many": "SELECT * FROM pgfence.heartbeat_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
    "complete": "SELECT pgfence.complete(%(id)s, %(tok)s)",
    "complete_many": "SELECT * FROM pgfence.complete_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
    "fail": "SELECT pgfence.fail(%(id)s, %(tok)s, 'boom')",
    "fail_many": "SELECT * FROM pgfence.fail_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[], ARRAY['boom'])",
    "release": "SELECT pgfence.release(%(id)s, %(tok)s)",
    "release_many": "SELECT * FROM pgfence.release_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
    "snooze": "SELECT pgfence.snooze(%(id)s, %(tok)s, '1 minute')",
    "snooze_many": "SELECT * FROM pgfence.snooze_many(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[],"
                   " ARRAY['1 minute']::interval[])",
    "report_rejection": "SELECT pgfence.report_rejection(%(id)s, %(tok)s, 'complete')",
    "sweeper_last_pass": "SELECT pgfence.sweeper_last_pass()",
    "requeue": "SELECT pgfence.requeue(%(id)s)",
    "cancel": "SELECT pgfence.cancel(%(id)s)",
    "reclaim_expired": "SELECT * FROM pgfence.reclaim_expired(1)",
    "stats": "SELECT * FROM pgfence.stats() LIMIT 0",
    "purge_finished": "SELECT pgfence.purge_finished(1)",
    "set_retention": "SELECT pgfence.set_retention(%(q)s, '1 day', '7 days')",
    "sweep": "CALL pgfence.sweep()",
    "run_sweeper": "CALL pgfence.run_sweeper(run_until => clock_timestamp())",
    "sweep_batch": "SELECT * FROM pgfence.sweep_batch(1)",
    "sweeper_begin": "SELECT pgfence.sweeper_begin('1 second', clock_timestamp())",
    "sweeper_step": "SELECT pgfence.sweeper_step(pgfence.sweeper_begin('10 ms', clock_timestamp()))",
    "pause_sweeper": "SELECT pgfence.pause_sweeper()",
    "resume_sweeper": "SELECT pgfence.resume_sweeper()",
    "sweeper_health": "SELECT * FROM pgfence.sweeper_health()",
    "note_sweeper_pass": "SELECT pgfence.note_sweeper_pass(0, 0)",
    "wakeup_tags": "SELECT * FROM pgfence.wakeup_tags(ARRAY[%(q)s])",
    "claim_results": "SELECT * FROM pgfence.claim_results('w', ARRAY[%(tok)s]::uuid[])",
    "claimed": "SELECT * FROM pgfence.claimed('w', ARRAY[%(tok)s]::uuid[])",
    "limits": "SELECT count(*) FROM pgfence.limits()",
    "job": "SELECT count(*) FROM pgfence.job(%(id)s)",
    "attempts_of": "SELECT count(*) FROM pgfence.attempts_of(%(id)s)",
    "rejections_of": "SELECT count(*) FROM pgfence.rejections_of(%(id)s)",
    "rejections_not_stored": "SELECT pgfence.rejections_not_stored(%(id)s)",
    "history_summary": "SELECT count(*) FROM pgfence.history_summary('1 second')",
    "maintain_history": "SELECT count(*) FROM pgfence.maintain_history()",
    "set_history_partition_width": "SELECT pgfence.set_history_partition_width('1 hour')",
    "select_finished_jobs": "SELECT count(*) FROM pgfence.finished_jobs WHERE id = %(id)s",
    "select_all_jobs": "SELECT count(*) FROM pgfence.all_jobs WHERE id = %(id)s",
    "select_all_attempts": "SELECT count(*) FROM pgfence.all_attempts WHERE job_id = %(id)s",
    "select_held_keys": "SELECT count(*) FROM pgfence.held_keys",
    "select_history_partitions": "SELECT count(*) FROM pgfence.history_partitions",
    "select_history_settings": "SELECT count(*) FROM pgfence.history_settings",
    "select_secret_key": "SELECT count(*) FROM pgfence.secret_key",
    "select_routine_grants": "SELECT count(*) FROM pgfence.routine_grants",
    "select_rejection_overflow": "SELECT count(*) FROM pgfence.rejection_overflow",
    "_apply_privileges": "SELECT pgfence._apply_privileges()",
    "_record_rejection": "SELECT pgfence._record_rejection(%(id)s, %(tok)s::uuid, 'complete', 'x')",
    "select_jobs": "SELECT count(*) FROM pgfence.jobs",
    "select_attempts": "SELECT count(*) FROM pgfence.attempts",
    "select_rejections": "SELECT count(*) FROM pgfence.rejections",
    "select_sweeper_status": "SELECT * FROM pgfence.sweeper_status",
    "select_retention": "SELECT count(*) FROM pgfence.retention",
    "pause_queue": "SELECT pgfence.pause_queue(%(q)s)",
    "resume_queue": "SELECT pgfence.resume_queue(%(q)s)",
    "set_queue_limit": "SELECT pgfence.set_queue_limit(%(q)s, 2)",
    "set_queue_rate_limit": "SELECT pgfence.set_queue_rate_limit(%(q)s, 2, '1 second')",
    "queue_limits": "SELECT count(*) FROM pgfence.queue_limits()",
    "select_queue_controls": "SELECT count(*) FROM pgfence.queue_controls",
    "set_queue_timeout": "SELECT pgfence.set_queue_timeout(%(q)s, '1 hour')",
    "queue_timeouts": "SELECT count(*) FROM pgfence.queue_timeouts()",
    "select_queue_timeouts": "SELECT count(*) FROM pgfence.queue_timeouts",
    "define_queue_set": "SELECT pgfence.define_queue_set(%(q)s, ARRAY[%(q)s])",
    "drop_queue_set": "SELECT pgfence.drop_queue_set(%(q)s)",
    "queue_sets": "SELECT count(*) FROM pgfence.queue_sets()",
    "select_queue_sets": "SELECT count(*) FROM pgfence.queue_sets",
    "insert_queue_sets": "INSERT INTO pgfence.queue_sets VALUES (%(q)s, '{}', 1, now(), 'me')",
    "_check_set_owner": "SELECT pgfence._check_set_owner(%(q)s, 'someone')",
    "schedule": "SELECT pgfence.schedule(%(q)s, kind => 'k', every => '1 hour', queue => %(q)s, replace => true)",
    "unschedule": "SELECT pgfence.unschedule(%(q)s)",
    "pause_schedule": "SELECT pgfence.pause_schedule('t_no_such_schedule')",
    "resume_schedule": "SELECT pgfence.resume_schedule('t_no_such_schedule')",
    "schedules": "SELECT count(*) FROM pgfence.schedules()",
    "fire_schedules": "SELECT pgfence.fire_schedules(1)",
    "cron_next": "SELECT pgfence.cron_next('0 * * * *')",
    "select_schedules": "SELECT count(*) FROM pgfence.schedules",
    "select_schedule_slots": "SELECT count(*) FROM pgfence.schedule_slots",
    "insert_schedule_slots": "INSERT INTO pgfence.schedule_slots VALUES (%(q)s, now(), 1, now())",
    "update_schedules": "UPDATE pgfence.schedules SET next_fire_at = now() WHERE false",
    # the operator console (issue 18)
    "mark_done": "SELECT pgfence.mark_done(%(id)s, 'checked')",
    "requeue_many": "SELECT count(*) FROM pgfence.requeue_many(ARRAY[%(id)s]::bigint[])",
    "cancel_many": "SELECT count(*) FROM pgfence.cancel_many(ARRAY[%(id)s]::bigint[])",
    "mark_done_many": "SELECT count(*) FROM pgfence.mark_done_many(ARRAY[%(id)s]::bigint[], 'checked')",
    "purge_many": "SELECT count(*) FROM pgfence.purge_many(ARRAY[%(id)s]::bigint[], 'checked')",
    "preview_action": "SELECT * FROM pgfence.preview_action('requeue', queue => %(q)s)",
    "act_on_filter": "SELECT count(*) FROM pgfence.act_on_filter('requeue', queue => %(q)s)",
    "audit_of": "SELECT count(*) FROM pgfence.audit_of(%(id)s)",
    "set_audit_retention": "SELECT pgfence.set_audit_retention('90 days')",
    "purge_audit": "SELECT pgfence.purge_audit(1)",
    "metrics": "SELECT count(*) FROM pgfence.metrics()",
    "select_operator_audit": "SELECT count(*) FROM pgfence.operator_audit",
    "select_operator_audit_settings": "SELECT count(*) FROM pgfence.operator_audit_settings",
    "select_metric_totals": "SELECT count(*) FROM pgfence.metric_totals",
    "insert_operator_audit": "INSERT INTO pgfence.operator_audit (db_role, login, action) VALUES ('me', 'me', 'x')",
    "delete_operator_audit": "DELETE FROM pgfence.operator_audit",
    "update_metric_totals": "UPDATE pgfence.metric_totals SET value = 0",
    "_audit": "SELECT pgfence._audit('x', NULL, NULL, NULL)",
    "_forget_jobs": "SELECT pgfence._forget_jobs(ARRAY[%(id)s]::bigint[])",
    "_act_on": "SELECT count(*) FROM pgfence._act_on('requeue', ARRAY[%(id)s]::bigint[], NULL, NULL, NULL)",
    "_mark_done": "SELECT pgfence._mark_done(%(id)s, NULL)",
    "_requeue": "SELECT pgfence._requeue(%(id)s)",
    "_cancel": "SELECT pgfence._cancel(%(id)s)",
    # private helpers: nobody but the owner
    "_reclaim": "SELECT * FROM pgfence._reclaim(1)",
    "_recover": "SELECT * FROM pgfence._recover(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[], 'x', true)",
    "_record_rejections": "SELECT pgfence._record_rejections(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[],"
                          " ARRAY[false], 'complete')",
    "_invoker": "SELECT pgfence._invoker()",
    "_check_isolation": "SELECT pgfence._check_isolation('x')",
    "_backoff": "SELECT pgfence._backoff(1)",
    "_fence_detail": "SELECT pgfence._fence_detail('done', NULL, NULL, NULL, NULL)",
    "_end_timed_out": "SELECT pgfence._end_timed_out(ARRAY[%(id)s]::bigint[], ARRAY[%(tok)s]::uuid[])",
    "_may_read": "SELECT pgfence._may_read('x')",
    "_may_read_job": "SELECT pgfence._may_read_job(%(id)s)",
    "_claim_refuse": "SELECT pgfence._claim_refuse('w', NULL, '1 minute', 1, NULL)",
    "_claim_from_set": "SELECT pgfence._claim_from_set('{\"a\": \"a\"}', 1, 1, clock_timestamp())",
    "_check_queues": "SELECT pgfence._check_queues('queues', ARRAY['a'], '')",
    "_queue_set_of": "SELECT pgfence._queue_set_of(ARRAY['a'])",
    "_claim_from_list": "SELECT pgfence._claim_from_list(ARRAY['a', 'b'], 1, clock_timestamp())",
    "_claim_controlled": "SELECT pgfence._claim_controlled(ARRAY['a', 'b'], 1, clock_timestamp())",
    "_rate_tokens": "SELECT pgfence._rate_tokens(1, '1 second', 1, now(), now())",
    "_rate_allowance": "SELECT pgfence._rate_allowance(1, '1 second', 1, now(), now())",
    "_check_enqueue_many_inputs": "SELECT pgfence._check_enqueue_many_inputs(ARRAY['k'], NULL, 'q', NULL, NULL, 3,"
                                  " 'auto', NULL)",
    "_check_fail_inputs": "SELECT pgfence._check_fail_inputs(1, ARRAY['e'], NULL, NULL)",
    "_check_snooze_delay": "SELECT pgfence._check_snooze_delay('delay', '1 minute')",
    "_maintain_history": "SELECT count(*) FROM pgfence._maintain_history()",
    "_history_partition_name": "SELECT pgfence._history_partition_name(now())",
    "_utc_literal": "SELECT pgfence._utc_literal(now())",
    "_held_key": "SELECT pgfence._held_key(%(q)s, 'k')",
    "_key_held_after_insert": "SELECT pgfence._key_held_after_insert(%(q)s, 'k')",
    "_move_done_to_history": "CALL pgfence._move_done_to_history(1)",
    "_move_history_to_jobs": "CALL pgfence._move_history_to_jobs(1)",
    "_cron_field": "SELECT pgfence._cron_field('minute', '*', 0, 59, '* * * * *')",
    "_cron_parse": "SELECT * FROM pgfence._cron_parse('* * * * *')",
    "_cron_next_local": "SELECT pgfence._cron_next_local('{0}', '{0}', '{1}', '{1}', '{0}', true, true, now()::timestamp)",
    "_cron_next": "SELECT pgfence._cron_next('{0}', '{0}', '{1}', '{1}', '{0}', true, true, now(), 'UTC')",
    "_local_instant": "SELECT pgfence._local_instant(now()::timestamp, 'UTC')",
    "_check_time_zone": "SELECT pgfence._check_time_zone('tz', 'UTC')",
    "_schedule_next": "SELECT pgfence._schedule_next(NULL::pgfence.schedules, now())",
    "_schedule_due": "SELECT pgfence._schedule_due(NULL::pgfence.schedules, now(), 1)",
    "_raise_no_schedule": "SELECT pgfence._raise_no_schedule('x')",
    # direct writes: the fence cannot be walked around
    "update_jobs": "UPDATE pgfence.jobs SET status = 'queued' WHERE id = %(id)s",
    "insert_jobs": "INSERT INTO pgfence.jobs (queue, kind) VALUES (%(q)s, 'k')",
    "delete_jobs": "DELETE FROM pgfence.jobs WHERE id = %(id)s",
    "truncate_jobs": "TRUNCATE pgfence.jobs",
    "update_attempts": "UPDATE pgfence.attempts SET outcome = 'done' WHERE job_id = %(id)s",
    "insert_attempts": "INSERT INTO pgfence.attempts SELECT %(id)s::bigint, 1, %(tok)s::uuid, 'w', now(), NULL, NULL,"
                       " now(), 'done'",
    "delete_rejections": "DELETE FROM pgfence.rejections WHERE job_id = %(id)s",
    "insert_rejections": "INSERT INTO pgfence.rejections (job_id, attempt_token, operation, caller)"
                         " VALUES (%(id)s, %(tok)s::uuid, 'complete', 'me')",
    "truncate_attempts": "TRUNCATE pgfence.attempts",
    "insert_finished_jobs": "INSERT INTO pgfence.finished_jobs SELECT * FROM pgfence.finished_jobs WHERE false",
    "delete_finished_jobs": "DELETE FROM pgfence.finished_jobs WHERE id = %(id)s",
    "truncate_finished_jobs": "TRUNCATE pgfence.finished_jobs",
    "delete_held_keys": "DELETE FROM pgfence.held_keys WHERE job_id = %(id)s",
    "update_history_settings": "UPDATE pgfence.history_settings SET partition_width = '1 hour' WHERE false",
    "update_retention": "UPDATE pgfence.retention SET retain_done = '0' WHERE queue = %(q)s",
    "insert_queue_controls": "INSERT INTO pgfence.queue_controls (queue, max_running) VALUES (%(q)s, 1)",
    "update_sweeper_status": "UPDATE pgfence.sweeper_status SET last_pass_at = now() WHERE false",
    "nextval": "SELECT nextval('pgfence.jobs_id_seq')",
    "setval": "SELECT setval('pgfence.jobs_id_seq', 1, false)",
}

FENCED = {"claim", "heartbeat", "heartbeat_many", "complete", "complete_many", "fail", "fail_many",
          "release", "release_many", "snooze", "snooze_many", "report_rejection"}
READ_API = {"limits", "job", "attempts_of", "rejections_of", "rejections_not_stored"}
# What operators and viewers both read (the console's read mode, metrics scrapers).
CONSOLE_READS = {"job", "attempts_of", "rejections_of", "rejections_not_stored", "history_summary", "stats",
                 "metrics", "audit_of", "preview_action", "select_jobs", "select_finished_jobs", "select_all_jobs",
                 "select_attempts", "select_all_attempts", "select_rejections", "select_rejection_overflow",
                 "select_sweeper_status", "select_retention", "select_history_partitions", "select_operator_audit",
                 "select_operator_audit_settings", "select_metric_totals"}
GRANTED: dict[str, set[str]] = {
    "t_prod_a": {"schema_version", "enqueue", "enqueue_many", "select_jobs", "select_finished_jobs",
                 "select_all_jobs"} | READ_API,
    "t_worker": {"schema_version", "sweeper_last_pass", "sweeper_health", "wakeup_tags", "limits",
                 "claim_results", "claimed", "define_queue_set", "drop_queue_set", "queue_sets"} | FENCED,
    "t_oper": {"schema_version", "sweeper_last_pass", "sweeper_health", "history_summary"} | READ_API | {
               "requeue", "cancel", "reclaim_expired",
               "stats", "purge_finished", "set_retention", "sweep", "sweep_batch", "sweeper_begin", "sweeper_step",
               "note_sweeper_pass",
               "pause_sweeper", "resume_sweeper", "select_jobs", "select_attempts", "select_rejections",
               "select_rejection_overflow", "select_sweeper_status", "select_retention",
               "maintain_history", "set_history_partition_width", "select_finished_jobs", "select_all_jobs",
               "select_all_attempts", "select_held_keys", "select_history_partitions", "select_history_settings",
               "pause_queue", "resume_queue", "set_queue_limit", "set_queue_rate_limit", "queue_limits",
               "select_queue_controls", "set_queue_timeout", "queue_timeouts", "select_queue_timeouts",
               "define_queue_set", "drop_queue_set", "queue_sets", "select_queue_sets",
               "schedule", "unschedule", "pause_schedule", "resume_schedule", "schedules", "fire_schedules",
               "cron_next", "select_schedules", "select_schedule_slots",
               "mark_done", "requeue_many", "cancel_many", "mark_done_many", "purge_many", "act_on_filter",
               "set_audit_retention", "purge_audit"} | CONSOLE_READS,
    # Reads everything, changes nothing: every write routine is 42501 for it.
    "t_viewer": {"schema_version", "queue_limits", "select_queue_controls", "queue_timeouts", "queue_sets", "schedules",
                 "cron_next", "sweeper_health", "sweeper_last_pass", "limits"} | CONSOLE_READS,
    "t_nobody": set(),
}
# (t_oper, run_sweeper) is granted but cannot work: see test_operator_can_run_the_background_sweeper.
MATRIX = [(role, call, call in GRANTED[role]) for role in GRANTED for call in CALLS
          if (role, call) != ("t_oper", "run_sweeper")]


def _params(q: str) -> dict[str, Any]:
    return {"q": q, "id": 9_223_372_036_854_775_000, "tok": ZERO_TOKEN}


@pytest.fixture(scope="module")
def su(dsn: str) -> Iterator[Conn]:
    """A superuser connection for the module (the SET ROLE side of the matrix)."""
    with connection(dsn) as c:
        yield c


@pytest.fixture(scope="module")
def matrix_queue() -> str:
    return f"t_role_matrix_{secrets.token_hex(4)}"


@pytest.mark.parametrize("via", ["login", "set_role"])
@pytest.mark.parametrize(("role", "call", "granted"), MATRIX,
                         ids=[f"{r}-{c}-{'granted' if g else 'denied'}" for r, c, g in MATRIX])
def test_role_matrix(su: Conn, sessions: dict[str, Conn], matrix_queue: str, role: str, call: str,
                     granted: bool, via: str) -> None:
    """A denied entry point raises 42501 insufficient_privilege; a granted one gets past
    the privilege check (it succeeds, or fails for a reason of its own, e.g. PF002).
    Every call but sweep (which commits) runs in a transaction that is rolled back."""
    query = CALLS[call]
    run = sqlstate_of if call == "sweep" else sqlstate_rolled_back
    if via == "login":
        state = run(sessions[role], query, _params(matrix_queue))
    else:
        with set_role(su, R(role)):
            state = run(su, query, _params(matrix_queue))
    if granted:
        assert state != "42501", f"{role} was refused {call}"
    else:
        assert state == "42501", f"{role} may {call} (SQLSTATE {state})"


def test_table_writes_are_refused_to_every_role_and_change_nothing(conn: Conn, sessions: dict[str, Conn],
                                                                   q: str) -> None:
    """Seed 000's naive fix (UPDATE pgfence.jobs SET status = 'queued') is impossible for
    every application role, on a real job, and the row is left as it was."""
    job_id = enqueue(conn, q)
    token = claim(conn, [q], "worker-A", lease="1 hour")[0]["attempt_token"]
    before = rows(conn, "SELECT * FROM pgfence.jobs WHERE id = %s", (job_id,))
    for role in ("t_prod_a", "t_worker", "t_oper", "t_viewer", "t_nobody"):
        s = sessions[role]
        for query in ("UPDATE pgfence.jobs SET status = 'queued', attempt_token = NULL, lease_expires_at = NULL,"
                      " reserved_by = NULL, reserved_at = NULL WHERE id = %(id)s",
                      "INSERT INTO pgfence.jobs (queue, kind) VALUES (%(q)s, 'k')",
                      "DELETE FROM pgfence.jobs WHERE id = %(id)s",
                      "TRUNCATE pgfence.jobs"):
            assert sqlstate_rolled_back(s, query, {"id": job_id, "q": q}) == "42501", (role, query)
    assert rows(conn, "SELECT * FROM pgfence.jobs WHERE id = %s", (job_id,)) == before
    assert before[0]["attempt_token"] == token


def test_producer_enqueues_and_enqueue_many_record_the_role(conn: Conn, sessions: dict[str, Conn],
                                                             q: str) -> None:
    a = sessions["t_prod_a"]
    one_id = one(a, "SELECT pgfence.enqueue('k', '{\"n\": 1}', %s)", (q,))
    many = a.execute("SELECT ordinal, id, created FROM pgfence.enqueue_many(ARRAY['k', 'k'], queue => %s)",
                     (q,)).fetchall()
    assert [(o, c) for o, _, c in many] == [(1, True), (2, True)]
    ids = [one_id] + [i for _, i, _ in many]
    got = conn.execute("SELECT id, enqueued_by, status FROM pgfence.jobs WHERE queue = %s ORDER BY id",
                       (q,)).fetchall()
    assert got == [(i, R("t_prod_a"), "queued") for i in sorted(ids)]
    # and reads them back through row-level security
    assert sorted(r[0] for r in a.execute("SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))) == sorted(ids)


def test_producers_see_only_their_own_jobs_through_login_connections(conn: Conn, sessions: dict[str, Conn],
                                                                     q: str) -> None:
    a, b = sessions["t_prod_a"], sessions["t_prod_b"]
    ja = one(a, "SELECT pgfence.enqueue('k', '{}', %s)", (q,))
    jb = one(b, "SELECT pgfence.enqueue('k', '{}', %s)", (q,))
    assert [r[0] for r in a.execute("SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [ja]
    assert [r[0] for r in b.execute("SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [jb]
    assert b.execute("SELECT * FROM pgfence.jobs WHERE id = %s", (ja,)).fetchall() == []
    # the operator reads both, the superuser sees the recorded enqueuers
    assert sorted(r[0] for r in sessions["t_oper"].execute(
        "SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))) == sorted([ja, jb])
    assert dict(conn.execute("SELECT id, enqueued_by FROM pgfence.jobs WHERE queue = %s", (q,)).fetchall()) == {
        ja: R("t_prod_a"), jb: R("t_prod_b")}
    # a producer cannot borrow another's identity or the operator's
    for target in (R("t_prod_a"), R("t_oper"), "pgfence_operator", "pgfence_owner"):
        assert sqlstate_of(b, f'SET ROLE "{target}"') == "42501", target
    assert one(b, "SELECT current_user") == R("t_prod_b")


def test_producers_see_only_their_own_jobs_through_set_role(conn: Conn, sessions: dict[str, Conn], q: str) -> None:
    """SET ROLE from a superuser session: enqueued_by records the role set, not the
    session user, and row-level security filters by it."""
    with set_role(conn, R("t_prod_a")):
        ja = one(conn, "SELECT pgfence.enqueue('k', '{}', %s)", (q,))
    with set_role(conn, R("t_prod_b")):
        jb = one(conn, "SELECT id FROM pgfence.enqueue_many(ARRAY['k'], queue => %s)", (q,))
        assert [r[0] for r in conn.execute("SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [jb]
    with set_role(conn, R("t_prod_a")):
        assert [r[0] for r in conn.execute("SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [ja]
    j0 = one(conn, "SELECT pgfence.enqueue('k', '{}', %s)", (q,))  # no SET ROLE: the session user
    assert dict(conn.execute("SELECT id, enqueued_by FROM pgfence.jobs WHERE queue = %s", (q,)).fetchall()) == {
        ja: R("t_prod_a"), jb: R("t_prod_b"), j0: "postgres"}
    # the LOGIN sessions agree with what SET ROLE wrote
    assert [r[0] for r in sessions["t_prod_a"].execute(
        "SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [ja]
    assert [r[0] for r in sessions["t_prod_b"].execute(
        "SELECT id FROM pgfence.jobs WHERE queue = %s", (q,))] == [jb]


def test_worker_runs_the_fenced_calls(conn: Conn, sessions: dict[str, Conn], q: str) -> None:
    w = sessions["t_worker"]
    ids = [enqueue(conn, q, max_attempts=1) for _ in range(6)]
    got = rows(w, "SELECT id, attempt_token FROM pgfence.claim('t-worker-1', ARRAY[%s], '1 hour', 6)", (q,))
    assert sorted(r["id"] for r in got) == ids
    tok = {r["id"]: r["attempt_token"] for r in got}
    j1, j2, j3, j4, j5, j6 = ids
    assert one(w, "SELECT pgfence.heartbeat(%s, %s, '1 hour') IS NOT NULL", (j1, tok[j1])) is True
    assert [r[0] for r in w.execute("SELECT accepted FROM pgfence.heartbeat_many(%s, %s, '1 hour')",
                                    ([j1, j2], [tok[j1], tok[j2]]))] == [True, True]
    w.execute("SELECT pgfence.complete(%s, %s, '{\"ok\": true}')", (j1, tok[j1]))
    assert [r[0] for r in w.execute("SELECT accepted FROM pgfence.complete_many(%s, %s)",
                                    ([j2], [tok[j2]]))] == [True]
    assert one(w, "SELECT pgfence.fail(%s, %s, 'boom')", (j3, tok[j3])) == "failed"
    assert [r[0] for r in w.execute("SELECT status FROM pgfence.fail_many(%s, %s, ARRAY['boom'])",
                                    ([j4], [tok[j4]]))] == ["failed"]
    assert one(w, "SELECT pgfence.release(%s, %s, false)", (j5, tok[j5])) == "queued"
    assert [r[0] for r in w.execute("SELECT status FROM pgfence.release_many(%s, %s, false)",
                                    ([j6], [tok[j6]]))] == ["queued"]
    w.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (j3, tok[j3]))  # after its own fail
    w.execute("SELECT pgfence.sweeper_last_pass()")
    assert dict(conn.execute("SELECT id, status FROM pgfence.all_jobs WHERE queue = %s", (q,)).fetchall()) == {
        j1: "done", j2: "done", j3: "failed", j4: "failed", j5: "queued", j6: "queued"}
    assert conn.execute("SELECT caller FROM pgfence.rejections WHERE job_id = %s", (j3,)).fetchall() == [
        (R("t_worker"),)]
    # a worker reads no table, not even its own jobs
    for table in ("jobs", "attempts", "rejections"):
        assert sqlstate_of(w, f"SELECT 1 FROM pgfence.{table} LIMIT 1") == "42501", table


def test_operator_administers_and_reads_everything(conn: Conn, sessions: dict[str, Conn], q: str) -> None:
    o = sessions["t_oper"]
    queued = one(sessions["t_prod_a"], "SELECT pgfence.enqueue('k', '{}', %s)", (q,))
    running = enqueue(conn, q, priority=1)
    tok = claim(conn, [q], "worker-A", lease="1 hour")[0]["attempt_token"]
    o.execute("SELECT pgfence.cancel(%s)", (running,))
    o.execute("SELECT pgfence.cancel(%s)", (queued,))
    o.execute("SELECT pgfence.requeue(%s)", (queued,))
    assert dict(o.execute("SELECT id, status FROM pgfence.jobs WHERE queue = %s", (q,)).fetchall()) == {
        queued: "queued", running: "cancelled"}
    assert o.execute("SELECT job_id, attempt_token, outcome FROM pgfence.attempts WHERE job_id = %s",
                     (running,)).fetchall() == [(running, tok, "cancelled")]
    conn.execute("SELECT pgfence.report_rejection(%s, %s, 'complete')", (running, tok))
    assert o.execute("SELECT operation, caller FROM pgfence.rejections WHERE job_id = %s",
                     (running,)).fetchall() == [("complete", "postgres")]
    stats = {(r[0], r[1]): r[2] for r in o.execute("SELECT queue, status, jobs FROM pgfence.stats()")}
    assert stats[(q, "queued")] == 1 and stats[(q, "cancelled")] == 1
    o.execute("SELECT * FROM pgfence.reclaim_expired(1)")
    o.execute("SELECT pgfence.purge_finished(1)")
    o.execute("SELECT pgfence.set_retention(%s, '2 days', '3 days')", (q,))
    assert conn.execute("SELECT retain_done, retain_failed FROM pgfence.retention WHERE queue = %s",
                        (q,)).fetchone() == (dt.timedelta(days=2), dt.timedelta(days=3))
    assert one(o, "CALL pgfence.sweep()") >= 0
    o.execute("SELECT last_pass_at FROM pgfence.sweeper_status")
    # but cannot claim or enqueue
    assert sqlstate_of(o, "SELECT * FROM pgfence.claim('w', ARRAY[%s])", (q,)) == "42501"
    assert sqlstate_of(o, "SELECT pgfence.enqueue('k', '{}', %s)", (q,)) == "42501"
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (queued,)) == "queued"


def test_operator_can_run_the_background_sweeper(sessions: dict[str, Conn]) -> None:
    sessions["t_oper"].execute("CALL pgfence.run_sweeper(run_until => clock_timestamp())")
