-- Verify pgfence:tables/job_queue_keys on pg

BEGIN;

SELECT queue FROM pgfence.attempts WHERE false;
SELECT queue FROM pgfence.rejections WHERE false;
SELECT queue FROM pgfence.rejection_overflow WHERE false;

ROLLBACK;
