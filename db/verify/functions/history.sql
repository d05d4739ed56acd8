-- Verify pgfence:functions/history on pg

BEGIN;

SELECT 'pgfence.maintain_history()'::regprocedure, 'pgfence._maintain_history()'::regprocedure,
       'pgfence.set_history_partition_width(interval)'::regprocedure;
SELECT 1 / (count(*) >= 1)::int FROM pgfence.history_partitions;

-- The rework after @v0.7.0: what goes is counted into pgfence.metric_totals.
SELECT 1 / (prosrc LIKE '%metric_totals%')::int FROM pg_proc WHERE oid = 'pgfence._maintain_history()'::regprocedure;

ROLLBACK;
