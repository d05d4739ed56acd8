-- Revert pgfence:tables/job_unique_for from pg
--
-- After enqueue and complete are back to @v0.7.0 (later changes are reverted first).
-- The @v0.7.0 enqueue reads pgfence.held_keys without held_until: a row whose
-- held_until has passed holds nothing now and would hold the key again (until the
-- purge, after the job's retention), so it goes first. A key whose held_until is still
-- ahead stays held, now until the purge (longer than unique_for asked, never shorter).
-- The columns go under locks taken by pg_temp.locked (100 ms tries), as they came.

\ir ../../include/lock_retry.sql

BEGIN;

DELETE FROM pgfence.held_keys k WHERE k.held_until <= clock_timestamp();
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.held_keys DROP COLUMN held_until',
    'ALTER TABLE pgfence.jobs DROP COLUMN unique_for']);
DROP DOMAIN pgfence.unique_for_period;

COMMIT;
