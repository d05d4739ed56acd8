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
-- index in a catalog-only step under ACCESS EXCLUSIVE, taken with lock_timeout 100 ms
-- and retried (so claims wait at most 100 ms behind a try). bench/upgrade_rate.py
-- measures the swap at 1,000,000 jobs (docs/storage.md has the figure).
--
-- (No transaction: the fill commits each batch and CREATE INDEX CONCURRENTLY cannot
-- run in one. Re-runnable: every step looks first whether it is done, and an index a
-- failed run left invalid is dropped and built again.)

SET client_min_messages = warning;  -- (the IF EXISTS and rename notices of the steps below)

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
-- validated while writes go on, lets SET NOT NULL skip its own scan. (These tables are
-- written only when an attempt ends otherwise than done, or a call is refused.)
SET lock_timeout = '5s';
-- (first, a check a failed run left behind)
SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname)
  FROM pg_constraint c
 WHERE c.connamespace = 'pgfence'::regnamespace AND c.conname LIKE '%\_queue\_set'
\gexec
SELECT format('ALTER TABLE pgfence.%I ADD CONSTRAINT %I CHECK (queue IS NOT NULL) NOT VALID', t, t || '_queue_set'),
       format('ALTER TABLE pgfence.%I VALIDATE CONSTRAINT %I', t, t || '_queue_set'),
       format('ALTER TABLE pgfence.%I ALTER COLUMN queue SET NOT NULL', t),
       format('ALTER TABLE pgfence.%I DROP CONSTRAINT %I', t, t || '_queue_set')
  FROM unnest(ARRAY['attempts', 'rejections', 'rejection_overflow']) AS t
 WHERE NOT (SELECT a.attnotnull FROM pg_attribute a
             WHERE a.attrelid = format('pgfence.%I', t)::regclass AND a.attname = 'queue')
\gexec
RESET lock_timeout;

-- 3. The unique indexes with queue, built while writes go on (a leftover of a failed
-- build is dropped first).
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.jobs_id_queue_key',
       'CREATE UNIQUE INDEX CONCURRENTLY jobs_id_queue_key ON pgfence.jobs (id, queue)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 1
\gexec
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejection_overflow_queue_key',
       'CREATE UNIQUE INDEX CONCURRENTLY rejection_overflow_queue_key ON pgfence.rejection_overflow (job_id, queue)'
 WHERE (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 1
\gexec
-- The slot's unique index is no constraint: the new one replaces the old under its name.
-- (_record_rejection's insert names no conflict target, so it works with either.)
SELECT 'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejections_slot_queue_idx',
       'CREATE UNIQUE INDEX CONCURRENTLY rejections_slot_queue_idx ON pgfence.rejections (job_id, queue, slot)',
       'DROP INDEX CONCURRENTLY IF EXISTS pgfence.rejections_slot_idx',
       'ALTER INDEX pgfence.rejections_slot_queue_idx RENAME TO rejections_slot_idx'
 WHERE coalesce((SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('pgfence.rejections_slot_idx')), 0) <> 3
\gexec

-- 4. The primary keys onto the new indexes: a catalog change under ACCESS EXCLUSIVE
-- (no scan: the columns are NOT NULL and the index is built), each try waiting at most
-- 100 ms for the lock, so the claims queued behind it wait no longer than that.
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            IF (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.jobs_pkey'::regclass) = 1 THEN
                ALTER TABLE pgfence.jobs DROP CONSTRAINT jobs_pkey;
                ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY USING INDEX jobs_id_queue_key;
            END IF;
            IF (SELECT indnatts FROM pg_index WHERE indexrelid = 'pgfence.rejection_overflow_pkey'::regclass) = 1 THEN
                ALTER TABLE pgfence.rejection_overflow DROP CONSTRAINT rejection_overflow_pkey;
                ALTER TABLE pgfence.rejection_overflow
                    ADD CONSTRAINT rejection_overflow_pkey PRIMARY KEY USING INDEX rejection_overflow_queue_key;
            END IF;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    RAISE EXCEPTION 'data/job_queue_keys: pgfence.jobs stayed locked for 600 tries of 100 ms'
        USING ERRCODE = 'lock_not_available', HINT = 'Deploy again when long transactions on pgfence.jobs have ended.';
END $$;
