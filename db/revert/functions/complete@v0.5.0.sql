-- Revert pgfence:functions/complete from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- Complete a batch of attempts: processing -> done for each (job, token) that
-- still holds its lease. One row per input, in input order: accepted is true when
-- the job is done by that token (now, or already: a retry after a lost reply is
-- accepted and changes nothing). A refused row changes nothing and says why.
CREATE OR REPLACE FUNCTION pgfence.complete_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    results        jsonb[] DEFAULT NULL
) RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_now timestamptz := clock_timestamp();
    v_count integer;
    v_acc boolean[];
BEGIN
    IF NOT pgfence._array_ok(results) THEN
        PERFORM pgfence._check_array('results', results);
    END IF;
    IF cardinality(results) <> n THEN
        PERFORM pgfence._raise_invalid('results length', cardinality(results)::text,
            format('job_ids has %s elements', n), 'pass NULL, or one result (or NULL) per job id');
    END IF;
    -- target reads each finishing attempt (its lease, for the history); rows are
    -- updated in id order (a fixed lock order: no deadlock against a concurrent
    -- heartbeat_many of the same jobs) and each ended attempt is recorded. When a
    -- row was refused, the answer is read back afterwards: our updated rows are
    -- locked by us, and done keeps the finishing token.
    WITH target AS (
        SELECT j.id, j.attempt_token, j.lease_expires_at, i.result, 'processing'::text AS held
          FROM unnest(job_ids, attempt_tokens, results) AS i(id, token, result)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id AND x.attempt_token = i.token OFFSET 0) j
         WHERE j.status = 'processing'
         ORDER BY j.id
    ), upd AS (
        UPDATE pgfence.jobs j
           SET status = 'done', result = t.result, lease_expires_at = NULL,
               finished_at = v_now, updated_at = v_now
          FROM target t
         WHERE j.id = t.id AND j.status = t.held AND j.attempt_token = t.attempt_token
        -- (j.status = <column> rather than = 'processing': the literal would let the
        -- planner drive the join from the partial index jobs_reclaim_idx, whose row
        -- estimate is tiny, and rescan the input for every processing row.)

        RETURNING j.id, j.attempts, j.attempt_token, j.reserved_by, j.reserved_at, j.heartbeat_at,
                  t.lease_expires_at
    )
    INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                  lease_expires_at, ended_at, outcome)
    SELECT u.id, u.attempts, u.attempt_token, u.reserved_by, u.reserved_at, u.heartbeat_at,
           u.lease_expires_at, v_now, 'done'
      FROM upd u;
    GET DIAGNOSTICS v_count = ROW_COUNT;

    IF v_count = n THEN
        -- All accepted (duplicate ids are refused up front): every row is done and
        -- there is nothing to look up. The common case.
        RETURN QUERY SELECT i.id, true, 'done'::text, NULL::text
                       FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.ord;
        RETURN;
    END IF;
    -- Some were refused (or already done by this token: accepted, idempotent).
    v_acc := pgfence._accepted(job_ids, attempt_tokens, 'done');
    PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'complete');
    RETURN QUERY
    SELECT a.id, a.accepted, a.status, a.detail FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
END $$;

COMMENT ON FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[]) IS
$$Complete 1..10000 attempts in one call: processing -> done where (job_ids[i], attempt_tokens[i]) still
holds the lease, storing results[i]. Returns (id, accepted, status, detail) per input in input order;
accepted = done by this token (idempotent). Each ended attempt is recorded in pgfence.attempts.
Refused rows change nothing; detail says why, and they are recorded in pgfence.rejections.
Errors: 22004, 22023 (NULLs, lengths, duplicate ids), PF004.$$;

-- Complete one attempt: processing -> done, only with the current token.
CREATE OR REPLACE FUNCTION pgfence.complete(job_id bigint, attempt_token uuid, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to complete');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    SELECT * INTO r FROM pgfence.complete_many(ARRAY[job_id], ARRAY[attempt_token], ARRAY[result]);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
END $$;

COMMENT ON FUNCTION pgfence.complete(bigint, uuid, jsonb) IS
$$Complete a job: processing -> done with result, only while attempt_token is current. Idempotent for
the token that completed it. Errors: PF001 lease lost (DETAIL says why), PF002 unknown job, 22004, PF004.$$;

SELECT pgfence._apply_privileges();

COMMIT;
