-- Revert pgfence:functions/enqueue from pg (back to @v0.7.0)
--
-- Drops the enqueue of this rework (a new signature), runs the @v0.7.0 script again
-- (re-runnable: CREATE OR REPLACE, its rule rows) for the enqueue without timeout and
-- unique_for, then drops the helpers the rework added (enqueue_many, which calls them,
-- is reverted before this).

BEGIN;
DROP FUNCTION IF EXISTS pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, interval, interval);
COMMIT;

\ir ../../deploy/functions/enqueue@v0.7.0.sql

BEGIN;
DROP FUNCTION IF EXISTS pgfence._check_unique_for_has_key(interval, boolean);
DROP FUNCTION IF EXISTS pgfence._check_unique_for(text, interval);
DROP FUNCTION IF EXISTS pgfence._unique_for_ok(interval);
COMMIT;
