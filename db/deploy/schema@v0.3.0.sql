-- Deploy pgfence:schema to pg (reworked after @v0.1.0)
-- requires: schema@v0.1.0
--
-- The schema itself is created by schema@v0.1.0.sql; this rework sets the API version.

BEGIN;

-- The API version a client checks on connect. Bumped by any change that alters
-- a public signature or behaviour a client relies on. 2: claim takes request_id,
-- claimed() is new, note_sweeper_pass takes error.
-- (CREATE OR REPLACE keeps owner and grants, and resets what privileges set.)
CREATE OR REPLACE FUNCTION pgfence.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 2 $$;
ALTER FUNCTION pgfence.schema_version() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;

COMMIT;
