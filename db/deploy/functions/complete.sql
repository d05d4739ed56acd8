-- Deploy pgfence:functions/complete to pg
-- requires: functions/_fence
-- requires: functions/_checks

BEGIN;

-- Complete a batch of attempts: processing -> done for each (job, token) that
-- still holds its lease. One row per input, in input order: accepted is true when
-- the job is done by that token (now, or already: a retry after a lost reply is
-- accepted and changes nothing). A refused row changes nothing and says why.
CREATE FUNCTION pgfence.complete_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    results        jsonb[] DEFAULT NULL
) RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_now timestamptz := clock_timestamp();
BEGIN
    IF cardinality(results) <> n THEN
        PERFORM pgfence._raise_invalid('results length', cardinality(results)::text,
            format('job_ids has %s elements', n), 'pass NULL, or one result (or NULL) per job id');
    END IF;
    -- Two statements, no join between CTEs: the UPDATE walks the primary key per
    -- input row, then the answer is read back (our updated rows are locked by us).
    UPDATE pgfence.jobs j
       SET status = 'done', result = i.result, lease_expires_at = NULL,
           finished_at = v_now, updated_at = v_now
      FROM unnest(job_ids, attempt_tokens, results) AS i(id, token, result)
     WHERE j.id = i.id AND j.status = 'processing' AND j.attempt_token = i.token;

    RETURN QUERY
    SELECT i.id,
           coalesce(j.status = 'done' AND j.attempt_token = i.token, false),
           j.status,
           CASE WHEN j.status = 'done' AND j.attempt_token = i.token THEN NULL
                ELSE pgfence._fence_detail(j.status, j.attempt_token, i.token, j.last_error, j.reserved_by) END
      FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord)
      LEFT JOIN pgfence.jobs j ON j.id = i.id
     ORDER BY i.ord;
END $$;

COMMENT ON FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[]) IS
$$Complete 1..10000 attempts in one call: processing -> done where (job_ids[i], attempt_tokens[i]) still
holds the lease, storing results[i]. Returns (id, accepted, status, detail) per input in input order;
accepted = done by this token (idempotent). Refused rows change nothing; detail says why.
Errors: 22004, 22023 (NULLs, lengths, duplicate ids).$$;

-- Complete one attempt: processing -> done, only with the current token.
CREATE FUNCTION pgfence.complete(job_id bigint, attempt_token uuid, result jsonb DEFAULT NULL)
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
the token that completed it. Errors: PF001 lease lost (DETAIL says why), PF002 unknown job, 22004.$$;

COMMIT;
