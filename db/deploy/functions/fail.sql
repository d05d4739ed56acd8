-- Deploy pgfence:functions/fail to pg (reworked after @v0.7.0)
-- requires: functions/fail@v0.7.0
--
-- fail, fail_many and their checks, whole (CREATE OR REPLACE: re-runnable), with
-- their privilege-rule rows. Changed after @v0.4.0: fail_many's checks of its
-- per-job inputs are a function of their own (_check_fail_inputs); behaviour unchanged.
-- Changed after @v0.6.0: the attempts a fail ends carry the job's queue
-- (tables/job_queue_keys). Changed after @v0.7.0: the array-lengths message shows NULL
-- for a retry_ins or permanents not given (it showed nothing: "retry_ins= permanents=2");
-- fail_many never reads pgfence.jobs sequentially (enable_seqscan = off, jit = off, as
-- claim): once a backlog had left the table and its primary key large and a vacuum or
-- ANALYZE had counted a few live rows, its generic plan read the whole table on every
-- call (230 MB, 2 live rows: 130 ms a fail; with the setting 0.9-1.6 ms).

BEGIN;

-- The retry decision, in one place: a failed attempt goes back to the queue with
-- a backoff while attempts remain and the error is not permanent, else it is
-- dead-lettered (failed).
CREATE OR REPLACE FUNCTION pgfence._fail_status(permanent boolean, attempts integer, max_attempts integer)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN permanent OR attempts >= max_attempts THEN 'failed' ELSE 'queued' END
$$;
COMMENT ON FUNCTION pgfence._fail_status(boolean, integer, integer) IS
  'Private: the retry rule: permanent or attempts exhausted -> failed, else queued.';

-- fail_many's per-job inputs, for n job ids: raise the error that names the first
-- bad one (22004, 22023); returns for valid inputs.
CREATE OR REPLACE FUNCTION pgfence._check_fail_inputs(n integer, errors text[], retry_ins interval[],
                                                      permanents boolean[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad integer;
BEGIN
    IF errors IS NULL THEN
        PERFORM pgfence._raise_null('errors', 'pass one error text per job id');
    ELSIF cardinality(errors) <> n OR cardinality(retry_ins) <> n OR cardinality(permanents) <> n THEN
        PERFORM pgfence._raise_invalid('array lengths',
            format('errors=%s retry_ins=%s permanents=%s', cardinality(errors),
                   coalesce(cardinality(retry_ins)::text, 'NULL'), coalesce(cardinality(permanents)::text, 'NULL')),
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
END $$;
COMMENT ON FUNCTION pgfence._check_fail_inputs(integer, text[], interval[], boolean[]) IS
  'Private: check fail_many''s errors, retry_ins and permanents for n job ids, raising the error that names the first bad one.';

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
SET plan_cache_mode = force_generic_plan
-- Rows are reached by primary key, never by reading pgfence.jobs (docs/performance.md,
-- "No sequential scans"), and no JIT (with sequential scans off, a statement that can
-- only scan sequentially is costed 10^10).
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_now timestamptz := clock_timestamp();
    v_bad integer;
    v_ords integer[];
    v_acc boolean[];
    v_did text[];
BEGIN
    PERFORM pgfence._check_fail_inputs(n, errors, retry_ins, permanents);

    -- target reads each failing attempt before the update (a retry clears the
    -- reservation); rows are locked in id order; each ended attempt is recorded.
    -- The accepted inputs come back by ordinal: a fail that requeued clears the
    -- token, so acceptance cannot be read back from the row afterwards.
    WITH target AS (
        SELECT j.id, j.queue, j.attempt_token, j.attempts, j.reserved_by, j.reserved_at, j.heartbeat_at,
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
        INSERT INTO pgfence.attempts (job_id, queue, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                      lease_expires_at, ended_at, outcome, error)
        SELECT u.id, u.queue, u.attempts, u.attempt_token, u.reserved_by, u.reserved_at, u.heartbeat_at,
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

CREATE OR REPLACE FUNCTION pgfence._check_error(arg text, value text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, 'pass an error text (type, message, traceback)');
    ELSIF char_length(value) > 100000 THEN
        PERFORM pgfence._raise_invalid(arg, format('(%s characters)', char_length(value)),
            'longer than 100000 characters', 'truncate the error text, e.g. keep the end of the traceback');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_error(text, text) IS
  'Private: check an error text (not NULL, at most 100000 characters).';

CREATE OR REPLACE FUNCTION pgfence._check_retry_in(arg text, value interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value IS NOT NULL THEN
        PERFORM pgfence._check_interval(arg, value, interval '0', interval '365 days', '0..365 days',
            'pass NULL for the default backoff, or a delay between 0 and 365 days');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_retry_in(text, interval) IS
  'Private: check a retry delay (NULL, or 0..365 days).';

-- Fail one attempt. Returns the job's new status: queued (retry later) or failed.
CREATE OR REPLACE FUNCTION pgfence.fail(
    job_id        bigint,
    attempt_token uuid,
    error         text,
    retry_in      interval DEFAULT NULL,
    permanent     boolean  DEFAULT false
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job that failed');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    ELSIF permanent IS NULL THEN
        PERFORM pgfence._raise_null('permanent', 'pass true to dead-letter now, false to retry while attempts remain');
    END IF;
    PERFORM pgfence._check_error('error', error);
    PERFORM pgfence._check_retry_in('retry_in', retry_in);
    SELECT * INTO r FROM pgfence.fail_many(ARRAY[job_id], ARRAY[attempt_token], ARRAY[error],
                                           ARRAY[retry_in], ARRAY[permanent]);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
    RETURN r.status;
END $$;

COMMENT ON FUNCTION pgfence.fail(bigint, uuid, text, interval, boolean) IS
$$Fail a job's current attempt with error, only while attempt_token is current. Returns the new status:
'queued' (available at clock_timestamp() + coalesce(retry_in, least(1 s * 2^(attempts-1), 5 min))) while
attempts < max_attempts and not permanent, else 'failed' (dead letter). Idempotent for the token whose
failure is recorded (a repeat changes nothing). Errors: PF001 lease lost (DETAIL), PF002 unknown job,
22004, 22023, PF004.$$;

-- The privilege rule's rows for this change's routines, applied.
INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('fail',      '{pgfence_worker}'),
    ('fail_many', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
