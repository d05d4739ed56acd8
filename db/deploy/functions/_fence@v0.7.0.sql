-- Deploy pgfence:functions/_fence to pg (reworked after @v0.6.0)
-- requires: functions/_fence@v0.6.0
-- requires: tables/job_queue_keys
-- requires: tables/history
-- requires: tables/rejections_cap
--
-- The answers of the fenced calls and the record of refused ones: a refusal is
-- recorded only for a token that really held an attempt of that job, at most 100 per
-- job (the rest counted in pgfence.rejection_overflow). Changed after @v0.5.0: a done
-- job is no longer in pgfence.jobs but in pgfence.finished_jobs, so the answers read
-- the job through pgfence.all_jobs and its attempts through pgfence.all_attempts (a
-- repeat of a complete whose reply was lost, and the PF001 detail "completed by another
-- attempt", work as before), and a refusal of a call on a done job is recorded while
-- its history exists (the sweeper deletes it with the job's partition).
-- Changed after @v0.6.0: a stored refusal and the overflow count carry the job's queue
-- (tables/job_queue_keys); the slot insert names no conflict target (the slot key gains
-- queue in data/job_queue_keys).

BEGIN;

-- Raise the error a single-job fenced call owes its caller when the batch
-- machinery did not accept its token: PF002 for an unknown job, PF001 otherwise.
CREATE OR REPLACE FUNCTION pgfence._raise_fence(job_id bigint, status text, detail text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF status IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PF002',
            MESSAGE = format('pgfence: job %s not found', job_id),
            HINT = 'check the job id; finished jobs are deleted after their retention period (done ones with their history partition)';
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
      LEFT JOIN LATERAL (SELECT * FROM pgfence.all_jobs x WHERE x.id = i.id LIMIT 1) j ON true
$$;
COMMENT ON FUNCTION pgfence._accepted(bigint[], uuid[], text) IS
  'Private: per input of a fenced batch call, accepted = the job is now in status with this token.';

-- Whether this token's attempt of the job ended with one of outcomes (by the attempt
-- history): how a repeat of the call that ended its own attempt (a retry after a lost
-- reply), or a heartbeat that crossed that call, is told from a stale worker's call.
CREATE OR REPLACE FUNCTION pgfence._attempt_ended(job_id bigint, attempt_token uuid, outcomes text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgfence.all_attempts a
                    WHERE a.job_id = _attempt_ended.job_id AND a.attempt_token = _attempt_ended.attempt_token
                      AND a.outcome = ANY (outcomes))
$$;
COMMENT ON FUNCTION pgfence._attempt_ended(bigint, uuid, text[]) IS
  'Private: true when the attempt of job_id with attempt_token ended with one of outcomes (pgfence.all_attempts).';

-- Whether attempt_token held an attempt of job_id: it is the job's token now, or the
-- attempt history has it. What a refusal of a call carrying it proves depends on
-- this: a token that never held an attempt of the job (made up, or another job's)
-- proves nothing about this job, and is not recorded.
CREATE OR REPLACE FUNCTION pgfence._token_held(job_id bigint, attempt_token uuid, current_token uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT (current_token IS NOT NULL AND attempt_token = current_token)
        OR EXISTS (SELECT 1 FROM pgfence.all_attempts a
                    WHERE a.job_id = _token_held.job_id AND a.attempt_token = _token_held.attempt_token)
$$;
COMMENT ON FUNCTION pgfence._token_held(bigint, uuid, uuid) IS
  'Private: true when attempt_token is the job''s current token or ended one of its attempts (pgfence.all_attempts).';

-- The DETAIL of a refused fenced call (PF001, or a batch row's detail): why this
-- token is not current, from the job's state (see _fence_detail), or that it never
-- held an attempt of this job at all.
CREATE OR REPLACE FUNCTION pgfence._refusal_detail(job_id bigint, attempt_token uuid, status text, current_token uuid,
                                                   last_error text, reserved_by text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN status IS NOT NULL AND NOT pgfence._token_held(job_id, attempt_token, current_token)
            THEN 'this token never held an attempt of this job (a token of another job, one never issued, or '
                 'one whose claim was given back unstarted)'
        ELSE pgfence._fence_detail(status, current_token, attempt_token, last_error, reserved_by)
    END
$$;
COMMENT ON FUNCTION pgfence._refusal_detail(bigint, uuid, text, uuid, text, text) IS
  'Private: the detail of a refused fenced call: _fence_detail, or that the token never held an attempt of the job.';

-- Record one refused call in pgfence.rejections, if its token held an attempt of the
-- job (the caller checks that), in the job's lowest free slot of 100: the later ones
-- are counted in pgfence.rejection_overflow instead (a worker retrying a stale call in
-- a loop, or a caller that floods report_rejection, cannot grow the table without
-- bound; the slot is unique per job, so concurrent refusals cannot overfill it, and a
-- slot freed by hand is used again). The job is first locked FOR KEY SHARE,
-- as a foreign key would: the purge deletes a job with its rejections only when it can
-- lock it (SKIP LOCKED), so it passes over a job whose refusal is being recorded
-- instead of waiting for that transaction, and a refusal recorded after its job was
-- purged stores nothing (no rejection outlives its job). Claim, reclaim, cancel and
-- requeue lock FOR NO KEY UPDATE, which FOR KEY SHARE does not delay.
CREATE OR REPLACE FUNCTION pgfence._record_rejection(job_id bigint, attempt_token uuid, operation text, detail text)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_slot integer;
    v_queue text;
BEGIN
    SELECT x.queue INTO v_queue FROM pgfence.jobs x WHERE x.id = _record_rejection.job_id FOR KEY SHARE OF x;
    -- A done job is in the history, which nothing changes; the partition drop that
    -- removes it waits for this transaction (it locks pgfence.finished_jobs, which this
    -- read holds), and the sweeper then deletes the rejections of jobs gone from both.
    IF NOT FOUND THEN
        SELECT h.queue INTO v_queue FROM pgfence.finished_jobs h WHERE h.id = _record_rejection.job_id LIMIT 1;
        IF NOT FOUND THEN
            RETURN;  -- purged meanwhile
        END IF;
    END IF;
    -- Losing the race for a slot means another refusal took it and committed (an
    -- insert that conflicts with an uncommitted one waits for it): look again. Bounded,
    -- in case slots are being freed and taken faster than this loop runs.
    FOR i IN 1..200 LOOP
        SELECT s.n INTO v_slot
          FROM generate_series(1, 100) AS s(n)
         WHERE NOT EXISTS (SELECT FROM pgfence.rejections r
                            WHERE r.job_id = _record_rejection.job_id AND r.slot = s.n)
         ORDER BY s.n LIMIT 1;
        EXIT WHEN v_slot IS NULL;
        -- (No conflict target: the slot's unique key is (job_id, slot) before
        -- data/job_queue_keys and (job_id, queue, slot) after it; it is the only one.)
        INSERT INTO pgfence.rejections (job_id, queue, attempt_token, operation, caller, detail, slot)
        VALUES (_record_rejection.job_id, v_queue, _record_rejection.attempt_token, _record_rejection.operation,
                pgfence._invoker(), _record_rejection.detail, v_slot)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    INSERT INTO pgfence.rejection_overflow AS o (job_id, queue, not_stored, last_rejected_at)
    VALUES (_record_rejection.job_id, v_queue, 1, clock_timestamp())
    ON CONFLICT ON CONSTRAINT rejection_overflow_pkey
        DO UPDATE SET not_stored = o.not_stored + 1, last_rejected_at = excluded.last_rejected_at;
END $$;
COMMENT ON FUNCTION pgfence._record_rejection(bigint, uuid, text, text) IS
  'Private: store a refused call in pgfence.rejections (lowest free slot, at most 100 per job), else count it in rejection_overflow; nothing for a job that no longer exists. Holds the job FOR KEY SHARE.';

-- Record the refused inputs of a batch call (accepted[i] false, the job exists, and
-- the token held an attempt of it) with the reason. Called only when a batch had
-- refusals.
CREATE OR REPLACE FUNCTION pgfence._record_rejections(job_ids bigint[], attempt_tokens uuid[], accepted boolean[],
                                           operation text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._record_rejection(i.id, i.token, operation,
                pgfence._fence_detail(j.status, j.attempt_token, i.token, j.last_error, j.reserved_by))
       FROM unnest(job_ids, attempt_tokens, accepted) AS i(id, token, ok)
      CROSS JOIN LATERAL (SELECT * FROM pgfence.all_jobs x WHERE x.id = i.id LIMIT 1) j
      WHERE NOT i.ok AND pgfence._token_held(i.id, i.token, j.attempt_token)
      ORDER BY i.id;
END $$;
COMMENT ON FUNCTION pgfence._record_rejections(bigint[], uuid[], boolean[], text) IS
  'Private: record the refused fenced calls of a batch whose token held an attempt of the job (see _record_rejection).';

-- The answer of a fenced batch call, one row per input in input order, read after
-- its UPDATE: accepted[i] as the call decided it, the job's status now (NULL: no
-- such job), the lease when accepted, and for a refused row why (the PF001 DETAIL).
-- STABLE so that it is inlined into the caller's statement (and its cached plan);
-- every input reaches pgfence.jobs and each history partition by primary key.
CREATE OR REPLACE FUNCTION pgfence._batch_answer(job_ids bigint[], attempt_tokens uuid[], accepted boolean[])
RETURNS TABLE(id bigint, accepted boolean, status text, detail text, lease_expires_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT i.id, i.ok, j.status,
           CASE WHEN i.ok THEN NULL
                ELSE pgfence._refusal_detail(i.id, i.token, j.status, j.attempt_token, j.last_error, j.reserved_by) END,
           CASE WHEN i.ok THEN j.lease_expires_at END
      FROM unnest(job_ids, attempt_tokens, accepted) WITH ORDINALITY AS i(id, token, ok, ord)
      LEFT JOIN LATERAL (SELECT * FROM pgfence.all_jobs x WHERE x.id = i.id LIMIT 1) j ON true
     ORDER BY i.ord
$$;
COMMENT ON FUNCTION pgfence._batch_answer(bigint[], uuid[], boolean[]) IS
  'Private: the per-input answer (id, accepted, status, detail, lease) of a fenced batch call.';

SELECT pgfence._apply_privileges();

COMMIT;
