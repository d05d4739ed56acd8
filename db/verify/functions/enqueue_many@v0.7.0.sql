-- Verify pgfence:functions/enqueue_many on pg

BEGIN;

SELECT 'pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])'::regprocedure,
       'pgfence.jobs_id_seq'::regclass,
       'pgfence._check_enqueue_many_inputs(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])'::regprocedure;
-- The rework after @v0.3.0: the NOTIFY carries the wake-up tag.
SELECT 1 / (prosrc LIKE '%pg_notify(''pgfence_enqueue'', pgfence._wakeup_tag(%')::int
  FROM pg_proc WHERE oid = 'pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])'::regprocedure;

ROLLBACK;
