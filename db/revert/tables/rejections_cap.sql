-- Revert pgfence:tables/rejections_cap from pg

BEGIN;

DROP TABLE pgfence.rejection_overflow;
DROP INDEX pgfence.rejections_slot_idx;
ALTER TABLE pgfence.rejections DROP COLUMN slot;

COMMIT;
