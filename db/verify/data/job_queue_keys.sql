-- Verify pgfence:data/job_queue_keys on pg

BEGIN;

-- Every key that refers to a job has queue in it, and the column is NOT NULL.
SELECT 1 / (count(*) = 3)::int
  FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
 WHERE i.indexrelid IN ('pgfence.jobs_pkey'::regclass, 'pgfence.rejection_overflow_pkey'::regclass,
                        'pgfence.rejections_slot_idx'::regclass)
   AND i.indisunique AND i.indisvalid AND a.attname = 'queue';
SELECT 1 / (count(*) = 3)::int
  FROM pg_attribute a
 WHERE a.attrelid IN ('pgfence.attempts'::regclass, 'pgfence.rejections'::regclass,
                      'pgfence.rejection_overflow'::regclass)
   AND a.attname = 'queue' AND a.attnotnull;

ROLLBACK;
