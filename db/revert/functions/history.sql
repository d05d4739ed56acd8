-- Revert pgfence:functions/history from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- partition maintenance that counts nothing into pgfence.metric_totals. Then every
-- partition gets autovacuum's defaults back (vacuum for inserts, ANALYZE after a tenth's
-- growth) and its BRIN index autosummarize off, as the @v0.7.0 maintenance makes them.

\ir ../../deploy/functions/history@v0.7.0.sql

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY(
    SELECT st FROM (
        SELECT c.relname AS part, 1 AS k,
               format('ALTER TABLE pgfence.%I RESET (autovacuum_vacuum_insert_threshold,'
                      ' autovacuum_analyze_scale_factor, toast.autovacuum_vacuum_insert_threshold)', c.relname) AS st
          FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'pgfence.finished_jobs'::regclass AND c.relname <> 'finished_jobs_default'
        UNION ALL
        SELECT c.relname, 2, format('ALTER INDEX pgfence.%I RESET (autosummarize)', ic.relname)
          FROM pg_catalog.pg_inherits ii
          JOIN pg_catalog.pg_class ic ON ic.oid = ii.inhrelid
          JOIN pg_catalog.pg_index x ON x.indexrelid = ic.oid
          JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
         WHERE ii.inhparent = 'pgfence.finished_jobs_finished_idx'::regclass AND c.relname <> 'finished_jobs_default'
    ) s ORDER BY s.part, s.k));

COMMIT;
