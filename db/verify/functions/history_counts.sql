-- Verify pgfence:functions/history_counts on pg
--
-- (Also after a later change: metrics(), stats() and purge_finished must still use the
-- counts, and the two writers of the history still take their transaction id before
-- their finished_at. A rework of those changes starts from this change's definitions.)

BEGIN;

SELECT 'pgfence._count_history()'::regprocedure, 'pgfence._history_stored()'::regprocedure;
SELECT 1 / (prosrc LIKE '%pgfence._history_stored()%')::int FROM pg_proc
 WHERE oid IN ('pgfence.metrics()'::regprocedure, 'pgfence.stats()'::regprocedure);
SELECT 1 / (prosrc LIKE '%pgfence._count_history()%'
            AND proconfig @> '{enable_seqscan=off,jit=off,lock_timeout=5s}')::int
  FROM pg_proc WHERE oid = 'pgfence.purge_finished(integer)'::regprocedure;
SELECT 1 / (prosrc LIKE '%CASE WHEN pg_current_xact_id() IS NOT NULL THEN clock_timestamp() END%')::int
  FROM pg_proc WHERE oid IN ('pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure,
                             'pgfence._mark_done(bigint, jsonb)'::regprocedure);

ROLLBACK;
