-- Deploy pgfence:functions/_rules to pg (reworked after @v0.7.0)
-- requires: functions/_rules@v0.7.0
-- requires: tables/job_timeouts
--
-- Changed after @v0.3.0: _reclaim locks expired leases FOR NO KEY UPDATE SKIP LOCKED,
-- not FOR UPDATE. A refusal being recorded (functions/_fence) holds its job FOR KEY
-- SHARE until its transaction ends, and FOR UPDATE SKIP LOCKED passed over such a
-- job: a worker that left that transaction open kept the lease from being reclaimed.
-- Changed after @v0.6.0: the attempts a reclaim or release ends carry the job's queue
-- (tables/job_queue_keys).
-- Changed after @v0.7.0: run timeouts (tables/job_timeouts). An attempt whose lease
-- ended at its deadline (reserved_at + timeout: claim and heartbeat never set a lease
-- past it) is ended by the same reclaim as an expired lease, but recorded as timed_out,
-- with last_error 'timed out after <timeout>' and, for an auto job with attempts left,
-- the backoff of a failure before it runs again; the PF001 detail says so.
-- _end_timed_out lets heartbeat and complete end such an attempt at once when they are
-- refused for it.

BEGIN;

-- The retry schedule: 1 s * 2^(attempts-1), capped at 5 minutes. The exponent is
-- clamped first, so a huge attempt count cannot overflow.
CREATE OR REPLACE FUNCTION pgfence._backoff(attempts integer) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(interval '1 second' * power(2, least(greatest(attempts, 1) - 1, 20)),
                 interval '5 minutes')
$$;
COMMENT ON FUNCTION pgfence._backoff(integer) IS
  'Private: retry delay after the given attempt: least(1 s * 2^(attempts-1), 5 min).';

-- Where a job goes when its attempt ends without a result (lease expired, or the
-- worker gave it back): manual jobs wait for a human, auto jobs retry while
-- attempts remain, the rest are dead-lettered.
CREATE OR REPLACE FUNCTION pgfence._recovery_status(recovery_policy text, attempts integer, max_attempts integer)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN recovery_policy = 'manual' THEN 'manual_review'
                WHEN attempts < max_attempts THEN 'queued'
                ELSE 'failed' END
$$;
COMMENT ON FUNCTION pgfence._recovery_status(text, integer, integer) IS
  'Private: the reclaim rule: manual -> manual_review, auto with attempts left -> queued, else failed.';

-- What to tell a caller whose token is not current (the DETAIL of PF001).
CREATE OR REPLACE FUNCTION pgfence._fence_detail(status text, current_token uuid, token uuid, last_error text, reserved_by text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN status IS NULL THEN 'the job does not exist'
        WHEN status = 'done' AND current_token = token THEN 'this attempt already completed the job'
        WHEN status = 'failed' AND current_token = token THEN 'this attempt already failed the job'
        WHEN status = 'processing' AND current_token = token THEN 'the job changed while this call ran; retry the call'
        WHEN status = 'processing' THEN format('the lease was taken over: another attempt (worker %s) now holds the job', reserved_by)
        WHEN status IN ('queued', 'manual_review', 'failed') AND last_error LIKE 'timed out after %'
            THEN format('the attempt %s (its run timeout passed) and the job %s', last_error,
                        CASE status WHEN 'queued' THEN 'went back to the queue'
                                    WHEN 'manual_review' THEN 'waits in manual_review'
                                    ELSE 'was dead-lettered (attempts exhausted)' END)
        WHEN status = 'queued' AND last_error = 'lease expired before completion'
            THEN 'the lease expired and the job was reclaimed into the queue'
        WHEN status = 'queued' THEN 'the attempt is over: the job is back in the queue (released, retried or requeued)'
        WHEN status = 'manual_review' THEN 'the lease expired or was released and the job waits in manual_review'
        WHEN status = 'cancelled' THEN 'the job was cancelled'
        WHEN status = 'done' THEN 'the job was completed by another attempt'
        WHEN status = 'failed' AND last_error = 'lease expired before completion'
            THEN 'the lease expired and the job was dead-lettered (attempts exhausted)'
        ELSE format('the job is %s, finished by another attempt', status)
    END
$$;
COMMENT ON FUNCTION pgfence._fence_detail(text, uuid, uuid, text, text) IS
  'Private: the DETAIL of a PF001 (lease lost), from the job''s current state.';

-- The last_error (and attempt error) of an attempt ended by its run timeout.
CREATE OR REPLACE FUNCTION pgfence._timeout_error(timeout interval) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'timed out after ' || timeout::text
$$;
COMMENT ON FUNCTION pgfence._timeout_error(interval) IS
  'Private: the last_error of an attempt ended by its run timeout: timed out after <timeout>.';

-- Ends the given attempts without a result, by the reclaim rule, and records
-- each ended attempt (outcome reclaimed, timed_out or released) in pgfence.attempts.
-- A reclaimed attempt whose lease had reached its deadline (reserved_at + timeout)
-- timed out: outcome timed_out, last_error 'timed out after <timeout>', and an auto
-- job with attempts left runs again after the backoff of a failure (_backoff), not at
-- once (a job that timed out is likely to time out again right away). Fenced:
-- a row changes only while it is processing with exactly the given token. Rows
-- are locked in id order (no deadlock against other batch calls). Shared by the
-- sweep, by claim's on-claim recovery and by release.
CREATE OR REPLACE FUNCTION pgfence._recover(job_ids bigint[], attempt_tokens uuid[], reason text, reclaimed boolean)
RETURNS TABLE(id bigint, status text, reclaim_count integer, ord integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    WITH target AS (
        SELECT j.id, j.queue, j.attempt_token, j.attempts, j.reserved_by, j.reserved_at, j.heartbeat_at,
               j.lease_expires_at, t.ord::integer AS ord,
               pgfence._recovery_status(j.recovery_policy, j.attempts, j.max_attempts) AS new_status,
               'processing'::text AS held,
               (reclaimed AND j.timeout IS NOT NULL AND j.lease_expires_at >= j.reserved_at + j.timeout) AS timed_out,
               CASE WHEN reclaimed AND j.timeout IS NOT NULL AND j.lease_expires_at >= j.reserved_at + j.timeout
                    THEN pgfence._timeout_error(j.timeout) ELSE reason END AS why
          FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS t(id, token, ord)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = t.id AND x.attempt_token = t.token OFFSET 0) j
         WHERE j.status = 'processing'
         ORDER BY j.id
    ), upd AS (
        UPDATE pgfence.jobs j
           SET status           = t.new_status,
               available_at     = CASE WHEN t.new_status <> 'queued' THEN j.available_at
                                           WHEN t.timed_out THEN v_now + pgfence._backoff(j.attempts)
                                           ELSE v_now END,
               attempt_token    = NULL,
               reserved_by      = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.reserved_by END,
               reserved_at      = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.reserved_at END,
               heartbeat_at     = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.heartbeat_at END,
               lease_expires_at = NULL,
               reclaim_count    = j.reclaim_count + CASE WHEN reclaimed THEN 1 ELSE 0 END,
               last_error       = t.why,
               finished_at      = CASE WHEN t.new_status = 'failed' THEN v_now END,
               updated_at       = v_now
          FROM target t
         WHERE j.id = t.id
           AND j.status = t.held
           AND j.attempt_token = t.attempt_token
        -- (j.status = <column> rather than = 'processing': the literal would let the
        -- planner drive the join from the partial index jobs_reclaim_idx, whose row
        -- estimate is tiny, and rescan the input for every processing row.)
        RETURNING j.id, j.status, j.reclaim_count, t.ord, t.queue, t.attempts, t.attempt_token, t.reserved_by,
                  t.reserved_at, t.heartbeat_at, t.lease_expires_at, t.timed_out, t.why
    ), hist AS (
        INSERT INTO pgfence.attempts (job_id, queue, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                      lease_expires_at, ended_at, outcome, error)
        SELECT u.id, u.queue, u.attempts, u.attempt_token, u.reserved_by, u.reserved_at, u.heartbeat_at,
               u.lease_expires_at, v_now,
               CASE WHEN u.timed_out THEN 'timed_out' WHEN reclaimed THEN 'reclaimed' ELSE 'released' END, u.why
          FROM upd u
    )
    SELECT u.id, u.status::text, u.reclaim_count::integer, u.ord FROM upd u;  -- (the columns' domains: RETURN QUERY wants the declared types)
END $$;
COMMENT ON FUNCTION pgfence._recover(bigint[], uuid[], text, boolean) IS
  'Private: end the given (job, token) attempts by the reclaim rule, recording them (reclaimed, timed_out at the run timeout, or released); fenced by the token. ord = input position.';

-- One batch of the reclaim: expired leases, oldest first, FOR NO KEY UPDATE SKIP
-- LOCKED, so that overlapping sweeps and claims never wait on each other or on a
-- worker that is completing the job right now, and a refusal being recorded for the
-- job (FOR KEY SHARE) does not hide it.
CREATE OR REPLACE FUNCTION pgfence._reclaim(max_jobs integer)
RETURNS TABLE(id bigint, status text, reclaim_count integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
    -- A variable, not clock_timestamp() in the WHERE clause: a volatile call cannot
    -- bound the index scan, and every processing row would be visited on every claim.
    v_now timestamptz := clock_timestamp();
BEGIN
    SELECT array_agg(e.id), array_agg(e.attempt_token) INTO v_ids, v_tokens
      FROM (SELECT j.id, j.attempt_token
              FROM pgfence.jobs j
             WHERE j.status = 'processing'
               AND j.lease_expires_at < v_now
             ORDER BY j.lease_expires_at
             LIMIT max_jobs
               FOR NO KEY UPDATE SKIP LOCKED) e;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT r.id, r.status, r.reclaim_count
                   FROM pgfence._recover(v_ids, v_tokens, 'lease expired before completion', true) r;
END $$;
COMMENT ON FUNCTION pgfence._reclaim(integer) IS
  'Private: reclaim one batch of expired leases (unchecked argument; see reclaim_expired).';

-- Of the given (job, token) attempts, end those whose run timeout has passed (still
-- processing with that token, reserved_at + timeout reached), as the reclaim would:
-- the attempt is recorded timed_out. heartbeat_many and complete_many call it for the
-- rows they refused, so the answer (and the PF001 detail) says the timeout passed
-- without waiting for the sweeper. Locks those rows in id order (FOR NO KEY UPDATE,
-- waiting: the caller's own update would have waited for them too).
CREATE OR REPLACE FUNCTION pgfence._end_timed_out(job_ids bigint[], attempt_tokens uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
BEGIN
    SELECT array_agg(e.id ORDER BY e.id), array_agg(e.attempt_token ORDER BY e.id) INTO v_ids, v_tokens
      FROM (SELECT j.id, j.attempt_token
              FROM unnest(job_ids, attempt_tokens) AS t(id, token)
              CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = t.id AND x.attempt_token = t.token
                                  OFFSET 0) j
             WHERE j.status = 'processing' AND j.timeout IS NOT NULL
               AND j.reserved_at + j.timeout <= clock_timestamp()
             ORDER BY j.id
               FOR NO KEY UPDATE OF j) e;
    IF v_ids IS NOT NULL THEN
        PERFORM pgfence._recover(v_ids, v_tokens, 'lease expired before completion', true);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._end_timed_out(bigint[], uuid[]) IS
  'Private: end, as the reclaim does (outcome timed_out), those of the given (job, token) attempts whose run timeout has passed.';

SELECT pgfence._apply_privileges();

COMMIT;
