-- Deploy pgfence:functions/release to pg
-- requires: functions/_fence
-- requires: functions/_checks

BEGIN;

-- Give a batch of attempts back without a result (a worker shutting down): the
-- same rule as an expired lease, applied now: auto jobs with attempts left go
-- back to the queue at once, manual jobs to manual_review (their handler may
-- have started a side effect), exhausted jobs to failed. The attempt counts.
CREATE FUNCTION pgfence.release_many(job_ids bigint[], attempt_tokens uuid[])
RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT t.id, t.token, t.ord FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS t(id, token, ord)
    ), rec AS (
        SELECT r.id, r.status FROM pgfence._recover(job_ids, attempt_tokens, 'released by worker before completion', false) r
    )
    SELECT i.id, r.id IS NOT NULL, coalesce(r.status, j.status),
           CASE WHEN r.id IS NOT NULL THEN NULL
                ELSE pgfence._fence_detail(j.status, j.attempt_token, i.token, j.last_error, j.reserved_by) END
      FROM input i
      LEFT JOIN rec r ON r.id = i.id
      LEFT JOIN pgfence.jobs j ON j.id = i.id
     ORDER BY i.ord;
END $$;

COMMENT ON FUNCTION pgfence.release_many(bigint[], uuid[]) IS
$$Give 1..10000 attempts back without a result (graceful shutdown), fenced by token, by the reclaim rule:
auto with attempts left -> queued now, manual -> manual_review, exhausted -> failed. The attempt counts;
reclaim_count does not change. Returns (id, accepted, status, detail) per input in input order.$$;

CREATE FUNCTION pgfence.release(job_id bigint, attempt_token uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to give back');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    SELECT * INTO r FROM pgfence.release_many(ARRAY[job_id], ARRAY[attempt_token]);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
    RETURN r.status;
END $$;

COMMENT ON FUNCTION pgfence.release(bigint, uuid) IS
$$Give one attempt back without a result (fenced); returns the new status (queued, manual_review or
failed, by the reclaim rule). Errors: PF001 lease lost, PF002 unknown job, 22004.$$;

COMMIT;
