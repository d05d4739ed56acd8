-- Revert pgfence:functions/reclaim_expired from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- One batch of the reclaim sweep, callable by hand. processing rows whose lease
-- has passed (by clock_timestamp()), oldest first, SKIP LOCKED: auto with
-- attempts left -> queued (available now), manual -> manual_review, exhausted ->
-- failed; reclaim_count + 1; last_error = 'lease expired before completion'.
-- Each row is re-checked against the token selected: the last fence.
CREATE OR REPLACE FUNCTION pgfence.reclaim_expired(max_jobs integer DEFAULT 50)
RETURNS TABLE(id bigint, status text, reclaim_count integer)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan
-- Expired leases are found through jobs_reclaim_idx, never by reading the table (see
-- claim: a generic plan read the whole table when the index was large next to it).
SET enable_seqscan = off AS $$
BEGIN
    PERFORM pgfence._check_range('max_jobs', max_jobs, 1, 10000);
    PERFORM pgfence._check_isolation('reclaim_expired');
    RETURN QUERY SELECT * FROM pgfence._reclaim(max_jobs);
END $$;

COMMENT ON FUNCTION pgfence.reclaim_expired(integer) IS
$$Reclaim one batch (max_jobs 1..10000) of expired leases, oldest first, SKIP LOCKED: auto with attempts
left -> queued, manual -> manual_review, exhausted -> failed. Returns (id, status, reclaim_count) per
reclaimed job. For all of them, CALL pgfence.sweep(). Needs READ COMMITTED (PF004).$$;

SELECT pgfence._apply_privileges();

COMMIT;
