-- Revert pgfence:functions/fail from pg (back to @v0.4.0)
--
-- fail_many as @v0.4.0 defined it (its checks inline; the script of @v0.4.0 used
-- CREATE FUNCTION, so it cannot be run again), then the helper the rework added
-- goes. fail and the other helpers did not change; their rule rows stay (@v0.4.0 had
-- them too, from the schema change).

BEGIN;

-- Fail a batch of attempts, each with its error. Per job: back to queued at
-- clock_timestamp() + (retry_ins[i] or the backoff) while attempts < max_attempts
-- and not permanent, else failed. Only where the token is current. One row per
-- input in input order; accepted = this token's failure is recorded (now or
-- already: a retry of a fail whose reply was lost is accepted, and changes nothing).
CREATE OR REPLACE FUNCTION pgfence.fail_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    errors         text[],
    retry_ins      interval[] DEFAULT NULL,
    permanents     boolean[]  DEFAULT NULL
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
    v_bad integer;
    v_ords integer[];
    v_acc boolean[];
    v_did text[];
BEGIN
    IF errors IS NULL THEN
        PERFORM pgfence._raise_null('errors', 'pass one error text per job id');
    ELSIF cardinality(errors) <> n OR cardinality(retry_ins) <> n OR cardinality(permanents) <> n THEN
        PERFORM pgfence._raise_invalid('array lengths',
            format('errors=%s retry_ins=%s permanents=%s', cardinality(errors), cardinality(retry_ins), cardinality(permanents)),
            format('job_ids has %s elements', n), 'pass exactly one element per job id (retry_ins and permanents may be NULL)');
    END IF;
    PERFORM pgfence._check_array('errors', errors);
    PERFORM pgfence._check_array('retry_ins', retry_ins);
    PERFORM pgfence._check_array('permanents', permanents);
    SELECT min(t.ord) INTO v_bad FROM unnest(errors) WITH ORDINALITY t(e, ord)
     WHERE t.e IS NULL OR char_length(t.e) > 100000;
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._check_error(format('errors[%s]', v_bad), errors[v_bad]);
    END IF;
    SELECT min(t.ord) INTO v_bad FROM unnest(retry_ins) WITH ORDINALITY t(r, ord)
     WHERE t.r < interval '0' OR t.r > interval '365 days' OR NOT pgfence._interval_signs_agree(t.r);
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._check_retry_in(format('retry_ins[%s]', v_bad), retry_ins[v_bad]);
    END IF;
    IF array_position(permanents, NULL) IS NOT NULL THEN
        PERFORM pgfence._raise_null(format('permanents[%s]', array_position(permanents, NULL)),
            'pass NULL when no failure is permanent, or true or false for every job');
    END IF;

    -- target reads each failing attempt before the update (a retry clears the
    -- reservation); rows are locked in id order; each ended attempt is recorded.
    -- The accepted inputs come back by ordinal: a fail that requeued clears the
    -- token, so acceptance cannot be read back from the row afterwards.
    WITH target AS (
        SELECT j.id, j.attempt_token, j.attempts, j.reserved_by, j.reserved_at, j.heartbeat_at,
               j.lease_expires_at, i.error, i.ord::integer AS ord,
               pgfence._fail_status(i.permanent, j.attempts, j.max_attempts) AS new_status,
               coalesce(i.retry_in, pgfence._backoff(j.attempts)) AS delay, 'processing'::text AS held
          FROM unnest(job_ids, attempt_tokens, errors, retry_ins, permanents)
               WITH ORDINALITY AS i(id, token, error, retry_in, permanent, ord)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id AND x.attempt_token = i.token OFFSET 0) j
         WHERE j.status = 'processing'
         ORDER BY j.id
    ), upd AS (
        UPDATE pgfence.jobs j
           SET status           = t.new_status,
               available_at     = CASE WHEN t.new_status = 'queued' THEN v_now + t.delay ELSE j.available_at END,
               attempt_token    = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.attempt_token END,
               reserved_by      = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.reserved_by END,
               reserved_at      = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.reserved_at END,
               heartbeat_at     = CASE WHEN t.new_status = 'queued' THEN NULL ELSE j.heartbeat_at END,
               lease_expires_at = NULL,
               last_error       = t.error,
               finished_at      = CASE WHEN t.new_status = 'failed' THEN v_now END,
               updated_at       = v_now
          FROM target t
         WHERE j.id = t.id AND j.status = t.held AND j.attempt_token = t.attempt_token
        -- (j.status = <column> rather than = 'processing': the literal would let the
        -- planner drive the join from the partial index jobs_reclaim_idx, whose row
        -- estimate is tiny, and rescan the input for every processing row.)

        RETURNING t.*
    ), hist AS (
        INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                      lease_expires_at, ended_at, outcome, error)
        SELECT u.id, u.attempts, u.attempt_token, u.reserved_by, u.reserved_at, u.heartbeat_at,
               u.lease_expires_at, v_now, 'failed', u.error
          FROM upd u
    )
    SELECT coalesce(array_agg(upd.ord), '{}') INTO v_ords FROM upd;
    v_acc := array_fill(false, ARRAY[n]);
    FOREACH v_bad IN ARRAY v_ords LOOP
        v_acc[v_bad] := true;
    END LOOP;
    IF cardinality(v_ords) = n THEN
        RETURN QUERY
        SELECT a.id, a.accepted, a.status, a.detail FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
        RETURN;
    END IF;
    -- Refused, unless this very token's failure is already recorded: a retry of a
    -- call whose reply was lost. A fail that dead-lettered the job kept the token on
    -- the row, one that requeued it cleared it; the attempt history has both. An
    -- accepted input answers failed while the row is failed with this token, else
    -- queued (what its failure did, unless an operator requeued the dead letter since).
    SELECT array_agg(v_acc[i.ord] OR pgfence._attempt_ended(i.id, i.token, '{failed}') ORDER BY i.ord),
           array_agg(CASE WHEN j.status = 'failed' AND j.attempt_token = i.token THEN 'failed' ELSE 'queued' END
             ORDER BY i.ord)
      INTO v_acc, v_did
      FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord)
      LEFT JOIN LATERAL (SELECT x.status, x.attempt_token FROM pgfence.jobs x WHERE x.id = i.id OFFSET 0) j ON true;
    PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'fail');

    RETURN QUERY
    SELECT a.id, a.accepted, CASE WHEN a.accepted THEN v_did[a.ord] ELSE a.status END, a.detail
      FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc)
           WITH ORDINALITY AS a(id, accepted, status, detail, lease_expires_at, ord);
END $$;

COMMENT ON FUNCTION pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[]) IS
$$Fail 1..10000 attempts in one call, each with errors[i]; retry_ins[i] (0..365 days) overrides the
backoff least(1 s * 2^(attempts-1), 5 min); permanents[i] dead-letters at once. Returns (id, accepted,
status, detail) per input in input order; status is queued (retry) or failed (dead letter) when accepted.
Idempotent for the token: a repeated call whose failure is already recorded is accepted, changes
nothing, and answers failed while the job is dead-lettered by that token, else queued (what that
failure did, unless an operator has requeued the dead-lettered job since).
Each ended attempt is recorded in pgfence.attempts (outcome failed, with its error); refused rows
change nothing and are recorded in pgfence.rejections.
Errors: 22004, 22023, PF004.$$;

DROP FUNCTION IF EXISTS pgfence._check_fail_inputs(integer, text[], interval[], boolean[]);
SELECT pgfence._apply_privileges();

COMMIT;
