-- Revert pgfence:tables/job_queue_keys from pg
--
-- First the revert of data/job_queue_keys (a no-op when it has run): a deploy of that
-- change that failed halfway may have swapped keys onto indexes with queue, and
-- dropping the column would drop them with it, leaving the @v0.6.0 writers without the
-- unique index their ON CONFLICT names. (No transaction around that part: it builds
-- indexes CONCURRENTLY; it defines pg_temp.locked, used here too.)

\ir ../data/job_queue_keys.sql

SELECT pg_temp.locked(ARRAY['ALTER TABLE pgfence.rejection_overflow DROP COLUMN IF EXISTS queue',
                             'ALTER TABLE pgfence.rejections DROP COLUMN IF EXISTS queue',
                             'ALTER TABLE pgfence.attempts DROP COLUMN IF EXISTS queue']);
