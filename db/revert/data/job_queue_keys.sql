-- Revert pgfence:data/job_queue_keys from pg
--
-- The keys without queue again (jobs (id), rejections (job_id, slot), rejection_overflow
-- (job_id)), built CONCURRENTLY and swapped in as the deploy does, and queue nullable
-- again, so that the writers of @v0.6.0 (reverted next) can insert without it.
-- (No transaction: CREATE INDEX CONCURRENTLY cannot run in one. Re-runnable.)

SET client_min_messages = warning;

SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.jobs_id_key',
       'CREATE UNIQUE INDEX CONCURRENTLY jobs_id_key ON pgfence.jobs (id)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 2
\gexec
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejection_overflow_job_key',
       'CREATE UNIQUE INDEX CONCURRENTLY rejection_overflow_job_key ON pgfence.rejection_overflow (job_id)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 2
\gexec
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejections_slot_old_idx',
       'CREATE UNIQUE INDEX CONCURRENTLY rejections_slot_old_idx ON pgfence.rejections (job_id, slot)',
       'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejections_slot_idx',
       'ALTER INDEX pgfence.rejections_slot_old_idx RENAME TO rejections_slot_idx'
 WHERE coalesce((SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_idx')), 0) <> 2
\gexec

DO $$
BEGIN
    FOR i IN 1..600 LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            IF (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 2 THEN
                ALTER TABLE pgfence.jobs DROP CONSTRAINT jobs_pkey;
                ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY USING INDEX jobs_id_key;
            END IF;
            IF (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 2 THEN
                ALTER TABLE pgfence.rejection_overflow DROP CONSTRAINT rejection_overflow_pkey;
                ALTER TABLE pgfence.rejection_overflow
                    ADD CONSTRAINT rejection_overflow_pkey PRIMARY KEY USING INDEX rejection_overflow_job_key;
            END IF;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    RAISE EXCEPTION 'revert data/job_queue_keys: pgfence.jobs stayed locked for 600 tries of 100 ms'
        USING ERRCODE = 'lock_not_available', HINT = 'Revert again when long transactions on pgfence.jobs have ended.';
END $$;

BEGIN;
SET LOCAL lock_timeout = '5s';
ALTER TABLE pgfence.attempts ALTER COLUMN queue DROP NOT NULL;
ALTER TABLE pgfence.rejections ALTER COLUMN queue DROP NOT NULL;
ALTER TABLE pgfence.rejection_overflow ALTER COLUMN queue DROP NOT NULL;
COMMIT;
