-- Verify pgfence:functions/history on pg

BEGIN;

SELECT 'pgfence.maintain_history()'::regprocedure, 'pgfence._maintain_history()'::regprocedure,
       'pgfence.set_history_partition_width(interval)'::regprocedure;
SELECT 1 / (count(*) >= 1)::int FROM pgfence.history_partitions;

ROLLBACK;
