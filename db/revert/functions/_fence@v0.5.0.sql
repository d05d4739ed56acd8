-- Revert pgfence:functions/_fence from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- Raise the error a single-job fenced call owes its caller when the batch
-- machinery did not accept its token: PF002 for an unknown job, PF001 otherwise.
CREATE OR REPLACE FUNCTION pgfence._raise_fence(job_id bigint, status text, detail text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF status IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PF002',
            MESSAGE = format('pgfence: job %s not found', job_id),
            HINT = 'check the job id; finished jobs are deleted after their retention period';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PF001',
        MESSAGE = format('pgfence: lease lost on job %s (status %s)', job_id, status),
        DETAIL = detail,
        HINT = 'stop working on this job: its result will not be recorded by this attempt';
END $$;
COMMENT ON FUNCTION pgfence._raise_fence(bigint, text, text) IS
  'Private: raise PF002 (no such job) or PF001 (lease lost, with DETAIL) for a refused fenced call.';

-- Which inputs of a fenced batch call that did not update every row count as
-- accepted: the job is now in `status` with this very token (the call's own
-- UPDATE, or an idempotent repeat of it). For calls whose status keeps the token
-- (complete: done, heartbeat: processing). Only read when some row was refused.
CREATE OR REPLACE FUNCTION pgfence._accepted(job_ids bigint[], attempt_tokens uuid[], status text) RETURNS boolean[]
LANGUAGE sql STABLE AS $$
    SELECT array_agg(coalesce(j.status = _accepted.status AND j.attempt_token = i.token, false)
                     ORDER BY i.ord)
      FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord)
      LEFT JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id OFFSET 0) j ON true
$$;
COMMENT ON FUNCTION pgfence._accepted(bigint[], uuid[], text) IS
  'Private: per input of a fenced batch call, accepted = the job is now in status with this token.';

-- Whether this token's attempt of the job ended with one of outcomes (by the attempt
-- history): how a repeat of the call that ended its own attempt (a retry after a lost
-- reply), or a heartbeat that crossed that call, is told from a stale worker's call.
CREATE OR REPLACE FUNCTION pgfence._attempt_ended(job_id bigint, attempt_token uuid, outcomes text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgfence.attempts a
                    WHERE a.job_id = _attempt_ended.job_id AND a.attempt_token = _attempt_ended.attempt_token
                      AND a.outcome = ANY (outcomes))
$$;
COMMENT ON FUNCTION pgfence._attempt_ended(bigint, uuid, text[]) IS
  'Private: true when the attempt of job_id with attempt_token ended with one of outcomes (pgfence.attempts).';

-- Record the refused inputs of a batch call (accepted[i] false, job exists) in
-- pgfence.rejections, with the reason. Called only when a batch had refusals.
CREATE OR REPLACE FUNCTION pgfence._record_rejections(job_ids bigint[], attempt_tokens uuid[], accepted boolean[],
                                           operation text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO pgfence.rejections (job_id, attempt_token, operation, caller, detail)
    SELECT i.id, i.token, operation, pgfence._invoker(),
           pgfence._fence_detail(j.status, j.attempt_token, i.token, j.last_error, j.reserved_by)
      FROM unnest(job_ids, attempt_tokens, accepted) AS i(id, token, ok)
      CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id OFFSET 0) j
     WHERE NOT i.ok
$$;
COMMENT ON FUNCTION pgfence._record_rejections(bigint[], uuid[], boolean[], text) IS
  'Private: record refused fenced calls of a batch in pgfence.rejections.';

-- The answer of a fenced batch call, one row per input in input order, read after
-- its UPDATE: accepted[i] as the call decided it, the job's status now (NULL: no
-- such job), the lease when accepted, and for a refused row why (the PF001 DETAIL).
-- STABLE so that it is inlined into the caller's statement (and its cached plan);
-- every input reaches pgfence.jobs by primary key.
CREATE OR REPLACE FUNCTION pgfence._batch_answer(job_ids bigint[], attempt_tokens uuid[], accepted boolean[])
RETURNS TABLE(id bigint, accepted boolean, status text, detail text, lease_expires_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT i.id, i.ok, j.status,
           CASE WHEN i.ok THEN NULL
                ELSE pgfence._fence_detail(j.status, j.attempt_token, i.token, j.last_error, j.reserved_by) END,
           CASE WHEN i.ok THEN j.lease_expires_at END
      FROM unnest(job_ids, attempt_tokens, accepted) WITH ORDINALITY AS i(id, token, ok, ord)
      LEFT JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id OFFSET 0) j ON true
     ORDER BY i.ord
$$;
COMMENT ON FUNCTION pgfence._batch_answer(bigint[], uuid[], boolean[]) IS
  'Private: the per-input answer (id, accepted, status, detail, lease) of a fenced batch call.';

DROP FUNCTION pgfence._record_rejection(bigint, uuid, text, text);
DROP FUNCTION pgfence._refusal_detail(bigint, uuid, text, uuid, text, text);
DROP FUNCTION pgfence._token_held(bigint, uuid, uuid);
SELECT pgfence._apply_privileges();

COMMIT;
