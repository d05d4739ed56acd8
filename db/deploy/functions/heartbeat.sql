-- Deploy pgfence:functions/heartbeat to pg (reworked after @v0.7.0)
-- requires: functions/heartbeat@v0.7.0
-- requires: functions/_fence
-- requires: functions/_checks
-- requires: functions/_rules
--
-- heartbeat and heartbeat_many, whole. Changed after @v0.7.0: heartbeat_many never
-- reads pgfence.jobs sequentially (enable_seqscan = off, jit = off, as claim): once a
-- backlog had left the table and its primary key large and a vacuum or ANALYZE had
-- counted a few live rows, its generic plan read the whole table on every call (230 MB,
-- 2 live rows: 150-220 ms a heartbeat; with the setting 0.8-1.3 ms). And a job's run timeout
-- (tables/job_timeouts) bounds its attempt: a heartbeat never extends a lease past the
-- deadline reserved_at + timeout (the reply shows the capped expiry), and once the
-- deadline has passed it is refused (PF001, "timed out after ..."), ending the attempt
-- as the reclaim would (_end_timed_out) instead of waiting for the sweeper.

BEGIN;

-- Extend the leases of a batch of attempts (typically all of one worker's
-- in-flight jobs) in one round trip: lease_expires_at = clock_timestamp() + lease,
-- heartbeat_at stamped, only where the token is current. A lease stays valid until
-- someone takes it away: a heartbeat after expiry but before any reclaim succeeds.
-- A run timeout caps it: never past reserved_at + timeout, and no heartbeat from then on.
CREATE OR REPLACE FUNCTION pgfence.heartbeat_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    lease          interval DEFAULT '30 seconds'
) RETURNS TABLE(id bigint, accepted boolean, lease_expires_at timestamptz, status text, detail text)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan
-- Rows are reached by primary key, never by reading pgfence.jobs (docs/performance.md,
-- "No sequential scans"), and no JIT (with sequential scans off, a statement that can
-- only scan sequentially is costed 10^10).
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_now timestamptz;
    v_count integer;
    v_acc boolean[];
    v_quiet boolean[];
BEGIN
    PERFORM pgfence._check_lease(lease);
    v_now := clock_timestamp();
    -- Rows in id order: a fixed lock order, so no deadlock against complete_many.
    UPDATE pgfence.jobs j
       SET lease_expires_at = least(v_now + lease, j.reserved_at + j.timeout),  -- (least ignores a NULL)
           heartbeat_at = v_now, updated_at = v_now
      FROM (SELECT t.id, t.token, 'processing'::text AS held
              FROM unnest(job_ids, attempt_tokens) AS t(id, token) ORDER BY t.id) i
     WHERE j.id = i.id AND j.status = i.held AND j.attempt_token = i.token
       AND (j.timeout IS NULL OR v_now < j.reserved_at + j.timeout);
    -- (j.status = <column> rather than = 'processing': the literal would let the
    -- planner drive the join from the partial index jobs_reclaim_idx, whose row
    -- estimate is tiny, and rescan the input for every processing row.)

    GET DIAGNOSTICS v_count = ROW_COUNT;

    -- Tokens are fresh per claim, so processing with this token now means we extended it.
    IF v_count = n THEN
        v_acc := array_fill(true, ARRAY[n]);
    ELSE
        -- (an attempt refused because its run timeout passed ends now, as timed_out)
        PERFORM pgfence._end_timed_out(job_ids, attempt_tokens);
        v_acc := pgfence._accepted(job_ids, attempt_tokens, 'processing');
        -- A heartbeat that crossed its own attempt's complete, fail or release (a worker
        -- heartbeats every job in flight, including one whose outcome is on its way) is
        -- refused but is no stale worker: it is not recorded. (A healthy worker draining
        -- 20,000 jobs with a 1.5 s lease recorded 624 such "refusals".)
        SELECT array_agg(v_acc[i.ord] OR pgfence._attempt_ended(i.id, i.token, '{done,failed,released,snoozed}')
                         ORDER BY i.ord)
          INTO v_quiet
          FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord);
        PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_quiet, 'heartbeat');
    END IF;

    RETURN QUERY
    SELECT a.id, a.accepted, a.lease_expires_at, a.status, a.detail
      FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
END $$;

COMMENT ON FUNCTION pgfence.heartbeat_many(bigint[], uuid[], interval) IS
$$Extend 1..10000 leases in one call to clock_timestamp() + lease (1 ms..1 day) where the token is
current, never past the attempt's run timeout (reserved_at + timeout; after it refused, the attempt ended as
timed_out). Returns (id, accepted, lease_expires_at, status, detail) per input in input order; refused rows
change nothing and are recorded in pgfence.rejections, except those whose attempt already ended by its own
complete, fail or release (a heartbeat that crossed it). Errors: 22004, 22023, PF004.$$;

CREATE OR REPLACE FUNCTION pgfence.heartbeat(job_id bigint, attempt_token uuid, lease interval DEFAULT '30 seconds')
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job being worked on');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    SELECT * INTO r FROM pgfence.heartbeat_many(ARRAY[job_id], ARRAY[attempt_token], lease);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
    RETURN r.lease_expires_at;
END $$;

COMMENT ON FUNCTION pgfence.heartbeat(bigint, uuid, interval) IS
$$Extend a lease to clock_timestamp() + lease and stamp heartbeat_at, only while attempt_token is
current; returns the new expiry, capped at the attempt's run timeout (reserved_at + timeout; once it passed,
PF001 timed out). Errors: PF001 lease lost (DETAIL), PF002 unknown job, 22004, 22023, PF004.$$;

-- The privilege rule's rows for this change's routines, applied.
INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('heartbeat',      '{pgfence_worker}'),
    ('heartbeat_many', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
