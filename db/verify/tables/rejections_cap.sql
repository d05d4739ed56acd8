-- Verify pgfence:tables/rejections_cap on pg

BEGIN;

SELECT slot FROM pgfence.rejections WHERE false;
SELECT job_id, not_stored, last_rejected_at FROM pgfence.rejection_overflow WHERE false;
SELECT 1 / (indisunique AND indisvalid)::int FROM pg_catalog.pg_index
 WHERE indexrelid = 'pgfence.rejections_slot_idx'::regclass;

ROLLBACK;
