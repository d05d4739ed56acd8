-- Deploy pgfence:functions/purge_plans to pg
-- requires: functions/retention
--
-- purge_finished runs with enable_seqscan = off and jit = off, whoever calls it. After
-- a backlog pgfence.jobs stays large (vacuum does not truncate it, a btree never
-- shrinks); once a vacuum or ANALYZE has counted a few live rows there, the purge's
-- generic plan read the whole table to find the finished jobs past their retention
-- (50 ms a call at 230 MB) instead of walking jobs_finished_idx. The sweeper's calls
-- already ran under sweeper_step's own setting; a DBA's cron line or a direct call did
-- not. Its other reads (held_keys by purge_at, rejections by job, the partition
-- catalogue) have indexes too; a table without a usable index is still read, at a
-- cost the planner takes as very high, so nothing fails for want of a plan.
--
-- A later rework of functions/retention must put these settings in purge_finished's
-- own definition: CREATE OR REPLACE FUNCTION resets what ALTER FUNCTION set here
-- (this change's verify, and tests/test_sql_bloated_plans.py, would then fail).

BEGIN;

ALTER FUNCTION pgfence.purge_finished(integer) SET enable_seqscan = off;
ALTER FUNCTION pgfence.purge_finished(integer) SET jit = off;

COMMIT;
