-- Deploy pgfence:schema to pg

BEGIN;

CREATE SCHEMA pgfence;

COMMENT ON SCHEMA pgfence IS
  'pgfence: a fenced job queue. Every state change is a function in this schema; tables are implementation detail.';

-- The API version a client checks on connect. Bumped by any change that alters
-- a public signature or behaviour a client relies on.
CREATE FUNCTION pgfence.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1 $$;

COMMENT ON FUNCTION pgfence.schema_version() IS
  'API version of the deployed pgfence schema; clients refuse to run against a version they do not know.';

COMMIT;
