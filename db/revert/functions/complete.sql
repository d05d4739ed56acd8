-- Revert pgfence:functions/complete from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- complete that knows no run timeout.

BEGIN;
-- (_utc_plus: the changes after this one that call it are reverted before it.)
DROP FUNCTION IF EXISTS pgfence._utc_plus(timestamptz, interval);

\ir ../../deploy/functions/complete@v0.7.0.sql
