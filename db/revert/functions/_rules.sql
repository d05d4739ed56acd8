-- Revert pgfence:functions/_rules from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE): the rule that knows no
-- run timeout; then drops the helpers this rework added.

\ir ../../deploy/functions/_rules@v0.7.0.sql

BEGIN;

DROP FUNCTION IF EXISTS pgfence._end_timed_out(bigint[], uuid[]);
DROP FUNCTION IF EXISTS pgfence._timeout_error(interval);

COMMIT;
