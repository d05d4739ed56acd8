-- Revert pgfence:functions/enqueue_many from pg (back to @v0.7.0)
--
-- Drops the enqueue_many of this rework (a new signature), then runs the @v0.7.0
-- script again (re-runnable: CREATE OR REPLACE, its rule rows): enqueue_many without
-- timeout and unique_for.

BEGIN;
DROP FUNCTION IF EXISTS pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[], interval, interval);
COMMIT;

\ir ../../deploy/functions/enqueue_many@v0.7.0.sql
