-- Revert pgfence:functions/release from pg (back to @v0.4.0)
--
-- The rework changed no definition: it restates the change whole (CREATE OR REPLACE,
-- its rows in pgfence.routine_grants, which @v0.4.0 had too, from the schema change).
-- Nothing to undo but to apply the rule again.

BEGIN;

SELECT pgfence._apply_privileges();

COMMIT;
