-- Revert pgfence:functions/history from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- partition maintenance that counts nothing into pgfence.metric_totals. Then every
-- partition gets autovacuum's defaults back (vacuum for inserts, ANALYZE after a tenth's
-- growth) and its BRIN index autosummarize off, as the @v0.7.0 maintenance makes them,
-- each partition in a transaction of its own (locks as the deploy's).

\ir ../../deploy/functions/history@v0.7.0.sql

\ir ../../include/lock_retry.sql

SELECT format('SELECT pg_temp.locked(ARRAY[%L, %L])',
              format('ALTER TABLE %s RESET (autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor,'
                     ' toast.autovacuum_vacuum_insert_threshold)', c.oid::regclass),
              format('ALTER INDEX %s RESET (autosummarize)', ic.oid::regclass))
  FROM pg_catalog.pg_inherits ii
  JOIN pg_catalog.pg_class ic ON ic.oid = ii.inhrelid
  JOIN pg_catalog.pg_index x ON x.indexrelid = ic.oid
  JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
 WHERE ii.inhparent = 'pgfence.finished_jobs_finished_idx'::regclass
   AND c.oid <> 'pgfence.finished_jobs_default'::regclass
 ORDER BY c.relname
\gexec
