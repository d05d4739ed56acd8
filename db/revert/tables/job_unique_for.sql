-- Revert pgfence:tables/job_unique_for from pg
--
-- After enqueue and complete are back to @v0.7.0 (later changes are reverted first).

BEGIN;

ALTER TABLE pgfence.held_keys DROP COLUMN held_until;
ALTER TABLE pgfence.jobs DROP COLUMN unique_for;

COMMIT;
