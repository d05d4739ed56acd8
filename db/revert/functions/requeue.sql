-- Revert pgfence:functions/requeue from pg (back to @v0.7.0)
--
-- requeue(bigint, text), _requeue and _requeue_row go; the @v0.7.0 script runs again (re-runnable:
-- CREATE OR REPLACE, its rule row) and makes requeue(bigint).

BEGIN;
DROP FUNCTION pgfence.requeue(bigint, text);
DROP FUNCTION pgfence._requeue(bigint);
-- (IF EXISTS: a database that deployed this change before _requeue_row existed has none)
DROP FUNCTION IF EXISTS pgfence._requeue_row(bigint, timestamptz);
COMMIT;

\ir ../../deploy/functions/requeue@v0.7.0.sql
