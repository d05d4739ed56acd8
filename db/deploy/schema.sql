-- Deploy pgfence:schema to pg (reworked after @v0.7.0)
-- requires: schema@v0.7.0
--
-- Schema pgfence, the API version clients check, and the privilege rule every later
-- change applies: pgfence.routine_grants says which pgfence roles may call each public
-- routine (by name, so every overload and every later signature follows it), and
-- pgfence._apply_privileges() makes the catalog say so. Every change that creates or
-- replaces routines states its rows and ends by calling it, so no script restates a
-- grant by hand, and a public routine missing from the table makes the deploy fail
-- instead of leaving it callable by nobody or by the wrong role.
-- Changed after @v0.7.0: the rule knows a fourth role, pgfence_viewer (read-only: the
-- operator console's read mode and metrics scrapers; created by the change viewer).

BEGIN;

CREATE SCHEMA IF NOT EXISTS pgfence;
COMMENT ON SCHEMA pgfence IS
  'pgfence: a fenced job queue. Every state change is a function in this schema; tables are implementation detail.';

-- The API version a client checks on connect. Bumped by any change that alters a
-- public signature or result, or behaviour a client relies on. 3: enqueue's NOTIFY
-- carries a wake-up tag (pgfence.wakeup_tags), not the queue name.
CREATE OR REPLACE FUNCTION pgfence.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 3 $$;
COMMENT ON FUNCTION pgfence.schema_version() IS
  'API version of the deployed pgfence schema; clients refuse to run against a version they do not know.';

CREATE TABLE IF NOT EXISTS pgfence.routine_grants (
    routine text   PRIMARY KEY,
    roles   text[] NOT NULL,
    CONSTRAINT routine_grants_public CHECK (routine !~ '^_'),
    CONSTRAINT routine_grants_roles CHECK (
        roles <@ ARRAY['pgfence_producer', 'pgfence_worker', 'pgfence_operator', 'pgfence_viewer']::text[])
);
-- (A table deployed before @v0.7.0 knows three roles: its CHECK is stated again.)
ALTER TABLE pgfence.routine_grants DROP CONSTRAINT routine_grants_roles,
    ADD CONSTRAINT routine_grants_roles CHECK (
        roles <@ ARRAY['pgfence_producer', 'pgfence_worker', 'pgfence_operator', 'pgfence_viewer']::text[]);
COMMENT ON TABLE pgfence.routine_grants IS
$$The privilege rule: which pgfence roles may EXECUTE each public routine of schema pgfence (by name:
every overload). pgfence._apply_privileges() applies it; private helpers (names starting with _) are never
granted to anyone.$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_owner') THEN
        ALTER TABLE pgfence.routine_grants OWNER TO pgfence_owner;
    END IF;
END $$;
REVOKE ALL ON TABLE pgfence.routine_grants FROM PUBLIC;

-- Apply the rule to every routine of schema pgfence:
--   * owned by pgfence_owner, EXECUTE revoked from PUBLIC;
--   * private helpers (_name): SECURITY INVOKER (they run inside the public
--     functions, with the owner's rights already) and granted to no role;
--   * public functions: SECURITY DEFINER with search_path pg_catalog, pgfence,
--     pg_temp, EXECUTE for exactly the roles routine_grants names (revoked from the
--     other pgfence roles);
--   * public procedures (they COMMIT, so they cannot be SECURITY DEFINER): the
--     caller's rights, the same grants; they pin their search_path in their body.
-- A public routine with no row in routine_grants raises 55000 naming it.
-- Deploy-time DDL built from the catalog only (no argument reaches it); called by the
-- deployer at the end of every change, never by an application role. Idempotent.
CREATE OR REPLACE FUNCTION pgfence._apply_privileges() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_roles text[];
    v_role text;
    v_owner boolean;
BEGIN
    -- (Roles not created yet, when the changes are deployed from their newest scripts
    -- alone, in plan order: the privileges change applies the rule again after roles.)
    v_owner := EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_owner');
    FOR r IN SELECT p.oid::regprocedure::text AS sig, p.proname::text AS name, p.prokind, p.prosecdef
               FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgfence'::regnamespace
              ORDER BY 1 LOOP
        IF v_owner THEN
            EXECUTE format('ALTER ROUTINE %s OWNER TO pgfence_owner', r.sig);
        END IF;
        EXECUTE format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', r.sig);
        IF left(r.name, 1) = '_' THEN
            v_roles := '{}';
            IF r.prosecdef THEN
                EXECUTE format('ALTER ROUTINE %s SECURITY INVOKER', r.sig);
            END IF;
        ELSE
            SELECT g.roles INTO v_roles FROM pgfence.routine_grants g WHERE g.routine = r.name;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
                    MESSAGE = format('pgfence: routine %s is not in the privilege rule', r.sig),
                    HINT = 'add a row for it to pgfence.routine_grants (routine name, roles that may call it) '
                           'in the change that creates it';
            END IF;
            IF r.prokind = 'f' THEN
                EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp',
                               r.sig);
            END IF;
        END IF;
        FOREACH v_role IN ARRAY ARRAY['pgfence_producer', 'pgfence_worker', 'pgfence_operator', 'pgfence_viewer'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
                CONTINUE;
            ELSIF v_role = ANY (v_roles) THEN
                EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
            ELSE
                EXECUTE format('REVOKE EXECUTE ON ROUTINE %s FROM %I', r.sig, v_role);
            END IF;
        END LOOP;
    END LOOP;
END $$;

COMMENT ON FUNCTION pgfence._apply_privileges() IS
$$Private, deploy time: give every routine of schema pgfence the privileges pgfence.routine_grants says
(owner pgfence_owner, nothing for PUBLIC, public functions SECURITY DEFINER with a pinned search_path,
EXECUTE for the roles named; private helpers for nobody). Raises 55000 for a public routine missing from
the table. Every change ends by calling it.$$;

-- An upgrade from @v0.3.0: the public routines of the changes deployed before this
-- one, with the roles the privileges change gave them, for those that exist. On a
-- fresh database none exists yet: every change states its own rows (and a change that
-- forgets one fails at its _apply_privileges, where this list would have hidden it).
INSERT INTO pgfence.routine_grants (routine, roles)
SELECT v.routine, v.roles::text[] FROM (VALUES
    ('schema_version',    '{pgfence_producer,pgfence_worker,pgfence_operator}'),
    ('enqueue',           '{pgfence_producer}'),
    ('enqueue_many',      '{pgfence_producer}'),
    ('claim',             '{pgfence_worker}'),
    ('claimed',           '{pgfence_worker}'),
    ('heartbeat',         '{pgfence_worker}'),
    ('heartbeat_many',    '{pgfence_worker}'),
    ('complete',          '{pgfence_worker}'),
    ('complete_many',     '{pgfence_worker}'),
    ('fail',              '{pgfence_worker}'),
    ('fail_many',         '{pgfence_worker}'),
    ('release',           '{pgfence_worker}'),
    ('release_many',      '{pgfence_worker}'),
    ('report_rejection',  '{pgfence_worker}'),
    ('sweeper_last_pass', '{pgfence_worker,pgfence_operator}'),
    ('requeue',           '{pgfence_operator}'),
    ('cancel',            '{pgfence_operator}'),
    ('reclaim_expired',   '{pgfence_operator}'),
    ('purge_finished',    '{pgfence_operator}'),
    ('set_retention',     '{pgfence_operator}'),
    ('stats',             '{pgfence_operator}'),
    ('note_sweeper_pass', '{pgfence_operator}'),
    ('sweep',             '{pgfence_operator}'),
    ('run_sweeper',       '{pgfence_operator}')
) AS v(routine, roles)
 WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'pgfence'::regnamespace AND p.proname = v.routine)
ON CONFLICT (routine) DO NOTHING;
-- Every pgfence role may ask the API version (clients check it on connect), the viewer too.
INSERT INTO pgfence.routine_grants (routine, roles)
VALUES ('schema_version', '{pgfence_producer,pgfence_worker,pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;

SELECT pgfence._apply_privileges();

COMMIT;
