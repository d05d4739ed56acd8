-- Revert pgfence:privileges from pg (back to @v0.4.0)
--
-- The rework changed no privilege: it states the change whole, with current names
-- (the script of @v0.4.0 names signatures that later changes replaced). Nothing to
-- undo but to apply the routine rule again.

BEGIN;

SELECT pgfence._apply_privileges();

COMMIT;
