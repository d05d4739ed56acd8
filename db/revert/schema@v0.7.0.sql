-- Revert pgfence:schema from pg (back to @v0.3.0: API version 2)

BEGIN;

-- The grants the rule applied are those the privileges change gives (same roles), so
-- they stay when the rule goes.
DROP FUNCTION pgfence._apply_privileges();
DROP TABLE pgfence.routine_grants;

-- 2: claim takes request_id, claimed() is new, note_sweeper_pass takes error.
-- (CREATE OR REPLACE keeps owner and grants, and resets what privileges set.)
CREATE OR REPLACE FUNCTION pgfence.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 2 $$;
ALTER FUNCTION pgfence.schema_version() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;

COMMIT;
