-- Revert pgfence:schema from pg (back to @v0.1.0: API version 1)

BEGIN;

-- The API version a client checks on connect. Bumped by any change that alters
-- a public signature or behaviour a client relies on. 1: the API of @v0.1.0.
-- (CREATE OR REPLACE keeps owner and grants, and resets what privileges set.)
CREATE OR REPLACE FUNCTION pgfence.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1 $$;
ALTER FUNCTION pgfence.schema_version() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;

COMMIT;
