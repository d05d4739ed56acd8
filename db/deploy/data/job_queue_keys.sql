-- Deploy pgfence:data/job_queue_keys to pg
-- requires: functions/_fence
-- requires: functions/_rules
-- requires: functions/cancel
-- requires: functions/fail
--
-- Keys ready for distribution by queue (docs/storage.md, "Keys for scale-out"). The
-- writers before this change fill the queue of every new attempt and rejection; this
-- change fills the rows written before them, makes the column NOT NULL and puts queue
-- into every key that refers to a job:
--   pgfence.jobs                PRIMARY KEY (id, queue)         (was (id))
--   pgfence.rejections          UNIQUE (job_id, queue, slot)    (was (job_id, slot))
--   pgfence.rejection_overflow  PRIMARY KEY (job_id, queue)     (was (job_id))
-- (pgfence.finished_jobs and held_keys have queue in their keys already.) A job's queue
-- never changes, so each new key is as unique as the old one; ids stay unique by their
-- identity sequence on one node, and look-ups by id use the keys' leading id column.
--
-- Nothing here holds the queue for the length of a scan: the fill commits every 10,000
-- job ids; NOT NULL is proven by a NOT VALID check validated under SHARE UPDATE
-- EXCLUSIVE; each unique index is built CONCURRENTLY; a key is then swapped onto its
-- index in a catalog-only step under ACCESS EXCLUSIVE. Every ACCESS EXCLUSIVE lock is
-- taken with lock_timeout 100 ms and retried (pg_temp.locked, db/include/lock_retry.sql),
-- so claims and completions wait at most 100 ms behind a try. bench/upgrade_rate.py
-- measures the swap at 1,000,000 jobs (docs/storage.md has the figure).
--
-- (No transaction: the fill commits each batch and CREATE INDEX CONCURRENTLY cannot
-- run in one. Re-runnable: every step looks first whether it is done; an index a failed
-- build left invalid is dropped and built again, a valid one is kept. If this change
-- fails, sqitch reverts the changes before it in the same run: the revert of
-- tables/job_queue_keys first puts back the keys without queue, so the writers of
-- @v0.6.0 find theirs.)

SET client_min_messages = warning;  -- (the IF EXISTS and rename notices of the steps below)
\ir ../../include/lock_retry.sql

-- 1. The queue of the rows written before the reworked writers: from the job in
-- pgfence.jobs, else from its history row; a row whose job is gone from both is one
-- the purge would delete, and is deleted.
DO $$
DECLARE
    t text;
    lo bigint;
BEGIN
    FOREACH t IN ARRAY ARRAY['attempts', 'rejections', 'rejection_overflow'] LOOP
        EXECUTE format('SELECT min(job_id) FROM pgfence.%I WHERE queue IS NULL', t) INTO lo;
        WHILE lo IS NOT NULL LOOP
            EXECUTE format($q$
                UPDATE pgfence.%1$I r SET queue = j.queue FROM pgfence.jobs j
                 WHERE r.job_id >= $1 AND r.job_id < $1 + 10000 AND r.queue IS NULL AND j.id = r.job_id$q$, t)
              USING lo;
            EXECUTE format($q$
                UPDATE pgfence.%1$I r
                   SET queue = (SELECT h.queue FROM pgfence.finished_jobs h WHERE h.id = r.job_id LIMIT 1)
                 WHERE r.job_id >= $1 AND r.job_id < $1 + 10000 AND r.queue IS NULL$q$, t)
              USING lo;
            EXECUTE format($q$
                DELETE FROM pgfence.%1$I r WHERE r.job_id >= $1 AND r.job_id < $1 + 10000 AND r.queue IS NULL$q$, t)
              USING lo;
            COMMIT;
            EXECUTE format('SELECT min(job_id) FROM pgfence.%I WHERE queue IS NULL AND job_id >= $1', t)
              INTO lo USING lo + 10000;
        END LOOP;
    END LOOP;
END $$;

-- 2. NOT NULL without a scan under ACCESS EXCLUSIVE: a NOT VALID check (an instant),
-- validated while writes go on (SHARE UPDATE EXCLUSIVE), lets SET NOT NULL skip its own
-- scan. (A check a failed run left behind is used as it is.)
SELECT format('SELECT pg_temp.locked(ARRAY[%L])',
              format('ALTER TABLE pgfence.%I ADD CONSTRAINT %I CHECK (queue IS NOT NULL) NOT VALID', t, t || '_queue_set'))
  FROM unnest(ARRAY['attempts', 'rejections', 'rejection_overflow']) AS t
 WHERE NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = format('pgfence.%I', t)::regclass
                                                AND c.conname = t || '_queue_set')
   AND NOT (SELECT a.attnotnull FROM pg_attribute a
             WHERE a.attrelid = format('pgfence.%I', t)::regclass AND a.attname = 'queue')
\gexec
SELECT format('ALTER TABLE pgfence.%I VALIDATE CONSTRAINT %I', t, t || '_queue_set'),
       format('SELECT pg_temp.locked(ARRAY[%L, %L])',
              format('ALTER TABLE pgfence.%I ALTER COLUMN queue SET NOT NULL', t),
              format('ALTER TABLE pgfence.%I DROP CONSTRAINT %I', t, t || '_queue_set'))
  FROM unnest(ARRAY['attempts', 'rejections', 'rejection_overflow']) AS t
 WHERE EXISTS (SELECT FROM pg_constraint c WHERE c.conrelid = format('pgfence.%I', t)::regclass
                                            AND c.conname = t || '_queue_set')
\gexec

-- 3. The unique indexes with queue, built while writes go on: an invalid one a failed
-- build left is dropped first, a valid one kept.
SELECT format('DROP INDEX CONCURRENTLY pgfence.%I', c.relname)
  FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relnamespace = 'pgfence'::regnamespace AND NOT i.indisvalid
   AND c.relname IN ('jobs_id_queue_key', 'rejection_overflow_queue_key', 'rejections_slot_queue_idx')
\gexec
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_id_queue_key ON pgfence.jobs (id, queue)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 1
\gexec
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS rejection_overflow_queue_key'
       ' ON pgfence.rejection_overflow (job_id, queue)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 1
\gexec
-- The slot's unique index is no constraint: the new one replaces the old under its name,
-- the old dropped only once the new is valid. (_record_rejection's insert names no
-- conflict target, so it works with either.)
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS rejections_slot_queue_idx'
       ' ON pgfence.rejections (job_id, queue, slot)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_idx')) = 2
\gexec
SELECT 'DROP INDEX CONCURRENTLY pgfence.rejections_slot_idx'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_idx')) = 2
   AND (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_queue_idx'))
\gexec
SELECT 'ALTER INDEX pgfence.rejections_slot_queue_idx RENAME TO rejections_slot_idx'
 WHERE to_regclass('pgfence.rejections_slot_idx') IS NULL
   AND (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_queue_idx'))
\gexec

-- 4. The primary keys onto the new indexes: a catalog change under ACCESS EXCLUSIVE (no
-- scan: the columns are NOT NULL and the index is built).
SELECT 'SELECT pg_temp.locked(ARRAY[''ALTER TABLE pgfence.jobs DROP CONSTRAINT jobs_pkey'','
       ' ''ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY USING INDEX jobs_id_queue_key''])'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 1
\gexec
SELECT 'SELECT pg_temp.locked(ARRAY[''ALTER TABLE pgfence.rejection_overflow DROP CONSTRAINT rejection_overflow_pkey'','
       ' ''ALTER TABLE pgfence.rejection_overflow ADD CONSTRAINT rejection_overflow_pkey'
       ' PRIMARY KEY USING INDEX rejection_overflow_queue_key''])'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 1
\gexec
