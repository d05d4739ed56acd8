-- Revert pgfence:tables/sweeper_pause from pg

BEGIN;

ALTER TABLE pgfence.sweeper_status DROP COLUMN paused_at, DROP COLUMN paused_by;

COMMIT;
