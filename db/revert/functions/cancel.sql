-- Revert pgfence:functions/cancel from pg (back to @v0.7.0)
--
-- cancel(bigint, text) and _cancel go; the @v0.7.0 script runs again (re-runnable:
-- CREATE OR REPLACE, its rule row) and makes cancel(bigint).

BEGIN;
DROP FUNCTION pgfence.cancel(bigint, text);
DROP FUNCTION pgfence._cancel(bigint);
COMMIT;

\ir ../../deploy/functions/cancel@v0.7.0.sql
