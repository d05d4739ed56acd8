-- Deploy pgfence:tables/job_queue_keys to pg
-- requires: tables/attempts
-- requires: tables/rejections_cap
--
-- Keys ready for distribution by queue (docs/storage.md, "Keys for scale-out"): every
-- table that refers to a job carries the job's queue. This change adds the column,
-- nullable: the reworked writers after it (functions/_rules, fail, cancel, _fence) fill
-- it for new rows, and data/job_queue_keys fills the older rows in batches, makes it
-- NOT NULL and puts queue into the keys. (Adding a nullable column without a default
-- rewrites nothing and takes its lock for an instant.)

BEGIN;

SET LOCAL lock_timeout = '10s';

ALTER TABLE pgfence.attempts ADD COLUMN IF NOT EXISTS queue text;
ALTER TABLE pgfence.rejections ADD COLUMN IF NOT EXISTS queue text;
ALTER TABLE pgfence.rejection_overflow ADD COLUMN IF NOT EXISTS queue text;

COMMENT ON COLUMN pgfence.attempts.queue IS
  'The job''s queue (its distribution key; the job''s queue never changes).';
COMMENT ON COLUMN pgfence.rejections.queue IS
  'The job''s queue (its distribution key; the job''s queue never changes).';
COMMENT ON COLUMN pgfence.rejection_overflow.queue IS
  'The job''s queue (its distribution key; the job''s queue never changes).';

COMMIT;
