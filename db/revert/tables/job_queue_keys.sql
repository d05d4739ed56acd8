-- Revert pgfence:tables/job_queue_keys from pg

BEGIN;

ALTER TABLE pgfence.rejection_overflow DROP COLUMN IF EXISTS queue;
ALTER TABLE pgfence.rejections DROP COLUMN IF EXISTS queue;
ALTER TABLE pgfence.attempts DROP COLUMN IF EXISTS queue;

COMMIT;
