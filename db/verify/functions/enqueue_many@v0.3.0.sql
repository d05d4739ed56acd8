-- Verify pgfence:functions/enqueue_many on pg

BEGIN;

SELECT 'pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])'::regprocedure,
       'pgfence.jobs_id_seq'::regclass;

ROLLBACK;
