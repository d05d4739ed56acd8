-- Revert pgfence:data/job_queue_keys from pg
--
-- The keys without queue again (jobs (id), rejections (job_id, slot), rejection_overflow
-- (job_id)), built CONCURRENTLY and swapped in as the deploy does (every ACCESS
-- EXCLUSIVE lock with lock_timeout 100 ms, retried), queue nullable again so that the
-- writers of @v0.6.0 (reverted next) can insert without it, and what a failed deploy
-- left (its new indexes, a NOT NULL check) gone. The revert of tables/job_queue_keys
-- runs this too, first: after a deploy of this change that failed halfway (which sqitch
-- follows with a revert of the changes before it), whatever it had swapped is put back.
-- (No transaction: CREATE INDEX CONCURRENTLY cannot run in one. Re-runnable.)

SET client_min_messages = warning;
\ir ../../include/lock_retry.sql

SELECT format('DROP INDEX CONCURRENTLY pgfence.%I', c.relname)
  FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relnamespace = 'pgfence'::regnamespace AND NOT i.indisvalid
   AND c.relname IN ('jobs_id_key', 'rejection_overflow_job_key', 'rejections_slot_old_idx')
\gexec
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_id_key ON pgfence.jobs (id)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 2
\gexec
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS rejection_overflow_job_key ON pgfence.rejection_overflow (job_id)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 2
\gexec
SELECT 'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS rejections_slot_old_idx ON pgfence.rejections (job_id, slot)'
 WHERE coalesce((SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_idx')), 0) <> 2
\gexec
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejections_slot_idx'
 WHERE (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_old_idx'))
\gexec
SELECT 'ALTER INDEX pgfence.rejections_slot_old_idx RENAME TO rejections_slot_idx'
 WHERE to_regclass('pgfence.rejections_slot_idx') IS NULL
   AND (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_old_idx'))
\gexec

SELECT 'SELECT pg_temp.locked(ARRAY[''ALTER TABLE pgfence.jobs DROP CONSTRAINT jobs_pkey'','
       ' ''ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY USING INDEX jobs_id_key''])'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 2
\gexec
SELECT 'SELECT pg_temp.locked(ARRAY[''ALTER TABLE pgfence.rejection_overflow DROP CONSTRAINT rejection_overflow_pkey'','
       ' ''ALTER TABLE pgfence.rejection_overflow ADD CONSTRAINT rejection_overflow_pkey'
       ' PRIMARY KEY USING INDEX rejection_overflow_job_key''])'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 2
\gexec

-- (a failed deploy's leftovers: its valid new indexes not yet swapped in, its check)
SELECT format('DROP INDEX CONCURRENTLY IF EXISTS pgfence.%I', n)
  FROM unnest(ARRAY['jobs_id_queue_key', 'rejection_overflow_queue_key', 'rejections_slot_queue_idx']) AS n
\gexec
SELECT format('SELECT pg_temp.locked(ARRAY[%L])', format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname))
  FROM pg_constraint c
 WHERE c.connamespace = 'pgfence'::regnamespace AND c.conname LIKE '%\_queue\_set'
\gexec

SELECT format('SELECT pg_temp.locked(ARRAY[%L])', format('ALTER TABLE pgfence.%I ALTER COLUMN queue DROP NOT NULL', t))
  FROM unnest(ARRAY['attempts', 'rejections', 'rejection_overflow']) AS t
 WHERE (SELECT a.attnotnull FROM pg_attribute a
         WHERE a.attrelid = format('pgfence.%I', t)::regclass AND a.attname = 'queue')
\gexec
