-- Deploy pgfence:functions/snooze to pg
-- requires: tables/attempt_snoozes
-- requires: functions/fail
-- requires: functions/_fence
-- requires: functions/_checks
-- requires: functions/_rules
--
-- snooze and snooze_many: a handler that cannot run its job yet (a resource not ready,
-- a rate limit outside) hands it back to run again after a delay, and that is not a
-- failure. Fenced like fail: only while the token is current (PF001 otherwise, refusals
-- recorded as for the other fenced calls). snooze_many, as the other fenced batches,
-- never reads pgfence.jobs sequentially (enable_seqscan = off, jit = off): see
-- functions/complete.
--
-- How "not counted" works: claim counts every attempt (attempts + 1), and the dead-letter
-- rule is attempts >= max_attempts. A snooze keeps attempts as it is (so attempt numbers
-- stay unique in the history: the snoozed attempt is recorded with its number, outcome
-- snoozed) and gives the job one more attempt instead: max_attempts + 1 (Oban's way; the
-- same as requeue, which also raises max_attempts). So every rule that reads
-- attempts/max_attempts (fail, reclaim, release) is unchanged, and a job still gets
-- exactly its enqueued max_attempts attempts that are not snoozes. The backoff of a later
-- failure counts the snoozed attempts (it is capped at 5 minutes).
-- At most 100 snoozes per job (limits(): snoozes_per_job), counted in its attempt history:
-- past that, a snooze is a fail of the attempt (error "snooze limit reached ...", retried
-- after the delay while attempts remain, else dead-lettered), so a handler that snoozes
-- forever ends in the dead letter. delay: more than 0, at most 365 days (snooze_max_s).
-- A snooze past the attempt's run timeout (reserved_at + timeout, tables/job_timeouts)
-- is refused (PF001, timed out) and ends the attempt as timed_out, as complete does: a
-- snooze must not make a timed-out attempt uncounted (nor skip manual_review).

BEGIN;

-- A snooze delay: not NULL, more than 0, at most 365 days.
CREATE OR REPLACE FUNCTION pgfence._check_snooze_delay(arg text, value interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_hint text := 'pass a delay more than 0 and at most 365 days, e.g. ''5 minutes''';
BEGIN
    IF value IS NOT NULL AND value <= interval '0' THEN
        PERFORM pgfence._raise_invalid(arg, value::text, 'is not more than 0', v_hint);
    END IF;
    PERFORM pgfence._check_interval(arg, value, interval '0', interval '365 days', '0..365 days', v_hint);
END $$;
COMMENT ON FUNCTION pgfence._check_snooze_delay(text, interval) IS
  'Private: check a snooze delay (not NULL, more than 0, at most 365 days).';

-- Snooze a batch of attempts. Per job, only where the token is current: back to queued,
-- available at clock_timestamp() + delays[i], max_attempts + 1 (the attempt is not
-- counted), the attempt recorded snoozed; a job snoozed 100 times already fails the
-- attempt instead (fail_many, retry_in = the delay). One row per input in input order.
CREATE OR REPLACE FUNCTION pgfence.snooze_many(job_ids bigint[], attempt_tokens uuid[], delays interval[])
RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql
-- Generic plans, as fail_many: every input row is looked up by primary key.
SET plan_cache_mode = force_generic_plan
-- Rows are reached by primary key, never by reading pgfence.jobs (docs/performance.md,
-- "No sequential scans"), and no JIT (with sequential scans off, a statement that can
-- only scan sequentially is costed 10^10).
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_cap constant integer := 100;  -- limits(): snoozes_per_job
    v_now timestamptz := clock_timestamp();
    v_bad integer;
    v_over integer[];
    v_failed record;
    v_ords integer[];
    v_acc boolean[];
    v_did text[];
    v_note text[];
BEGIN
    IF delays IS NULL THEN
        PERFORM pgfence._raise_null('delays', 'pass one delay per job id');
    END IF;
    PERFORM pgfence._check_array('delays', delays);
    IF cardinality(delays) <> n THEN
        PERFORM pgfence._raise_invalid('delays length', cardinality(delays)::text,
            format('job_ids has %s elements', n), 'pass exactly one delay per job id');
    END IF;
    SELECT min(t.ord) INTO v_bad FROM unnest(delays) WITH ORDINALITY t(d, ord)
     WHERE t.d IS NULL OR t.d <= interval '0' OR t.d > interval '365 days' OR NOT pgfence._interval_signs_agree(t.d);
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._check_snooze_delay(format('delays[%s]', v_bad), delays[v_bad]);
    END IF;

    v_acc := array_fill(false, ARRAY[n]);
    v_did := array_fill(NULL::text, ARRAY[n]);
    v_note := array_fill(NULL::text, ARRAY[n]);
    -- The current attempts locked first, in id order (as every batch call locks), so
    -- that the count of snoozes and what follows see the same rows; the inputs at the cap.
    -- (Each input looked up by primary key, in id order, locking as it goes: a join could
    -- be driven from jobs_reclaim_idx over every processing job; see fail_many.)
    WITH held AS (
        SELECT j.id, i.ord
          FROM (SELECT t.id, t.token, t.ord::integer AS ord, 'processing'::text AS held
                  FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS t(id, token, ord)
                 ORDER BY t.id) i
          CROSS JOIN LATERAL (SELECT x.id FROM pgfence.jobs x
                               WHERE x.id = i.id AND x.attempt_token = i.token AND x.status = i.held
                                 AND (x.timeout IS NULL OR v_now < x.reserved_at + x.timeout)
                                 FOR NO KEY UPDATE) j
    )
    SELECT array_agg(h.ord ORDER BY h.ord) INTO v_over
      FROM held h
     WHERE (SELECT count(*) FROM pgfence.attempts a WHERE a.job_id = h.id AND a.outcome = 'snoozed') >= v_cap;

    IF v_over IS NOT NULL THEN
        FOR v_failed IN
            SELECT f.accepted, f.status, o.ord
              FROM pgfence.fail_many(
                       (SELECT array_agg(job_ids[o] ORDER BY k) FROM unnest(v_over) WITH ORDINALITY u(o, k)),
                       (SELECT array_agg(attempt_tokens[o] ORDER BY k) FROM unnest(v_over) WITH ORDINALITY u(o, k)),
                       (SELECT array_agg(format('snooze limit reached: job %s was snoozed %s times (limits(): '
                                                'snoozes_per_job), so this snooze fails the attempt', job_ids[o], v_cap)
                                         ORDER BY k) FROM unnest(v_over) WITH ORDINALITY u(o, k)),
                       (SELECT array_agg(delays[o] ORDER BY k) FROM unnest(v_over) WITH ORDINALITY u(o, k)),
                       array_fill(false, ARRAY[cardinality(v_over)])) WITH ORDINALITY AS f(id, accepted, status, detail, k)
              JOIN unnest(v_over) WITH ORDINALITY AS o(ord, k) ON o.k = f.k
        LOOP
            v_acc[v_failed.ord] := v_failed.accepted;
            v_did[v_failed.ord] := v_failed.status;
            v_note[v_failed.ord] := format('snooze limit reached (%s snoozes): the attempt failed instead', v_cap);
        END LOOP;
    END IF;

    WITH target AS (
        SELECT j.id, j.queue, j.attempt_token, j.attempts, j.reserved_by, j.reserved_at, j.heartbeat_at,
               j.lease_expires_at, i.delay, i.ord::integer AS ord, 'processing'::text AS held
          FROM unnest(job_ids, attempt_tokens, delays) WITH ORDINALITY AS i(id, token, delay, ord)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id AND x.attempt_token = i.token OFFSET 0) j
         WHERE j.status = 'processing' AND NOT (i.ord::integer = ANY (coalesce(v_over, '{}')))
           AND (j.timeout IS NULL OR v_now < j.reserved_at + j.timeout)  -- (past it: refused, timed out)
         ORDER BY j.id
    ), upd AS (
        UPDATE pgfence.jobs j
           SET status           = 'queued',
               available_at     = v_now + t.delay,
               max_attempts     = j.max_attempts + 1,
               attempt_token    = NULL,
               reserved_by      = NULL,
               reserved_at      = NULL,
               heartbeat_at     = NULL,
               lease_expires_at = NULL,
               updated_at       = v_now
          FROM target t
         WHERE j.id = t.id AND j.status = t.held AND j.attempt_token = t.attempt_token  -- see fail_many
        RETURNING t.*
    ), hist AS (
        INSERT INTO pgfence.attempts (job_id, queue, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                      lease_expires_at, ended_at, outcome, error)
        SELECT u.id, u.queue, u.attempts, u.attempt_token, u.reserved_by, u.reserved_at, u.heartbeat_at,
               u.lease_expires_at, v_now, 'snoozed', NULL
          FROM upd u
    )
    SELECT coalesce(array_agg(upd.ord), '{}') INTO v_ords FROM upd;
    FOREACH v_bad IN ARRAY v_ords LOOP
        v_acc[v_bad] := true;
        v_did[v_bad] := 'queued';
    END LOOP;

    IF false = ANY (v_acc) THEN
        -- An attempt refused because its run timeout passed ends now, as timed_out (as
        -- complete_many does): a snooze never turns a timed-out attempt into an
        -- uncounted one, nor sends a manual job back to the queue.
        PERFORM pgfence._end_timed_out(job_ids, attempt_tokens);
        -- Refused, unless this very token's snooze is already recorded (a retry after a
        -- lost reply): snoozed, or failed by the snooze limit. Such a repeat is accepted,
        -- changes nothing, and answers the job's status now.
        SELECT array_agg(v_acc[i.ord] OR EXISTS (
                   SELECT FROM pgfence.all_attempts a
                    WHERE a.job_id = i.id AND a.attempt_token = i.token
                      AND (a.outcome = 'snoozed' OR (a.outcome = 'failed' AND starts_with(a.error, 'snooze limit reached'))))
                 ORDER BY i.ord)
          INTO v_acc
          FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord);
        PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'snooze');
    END IF;

    RETURN QUERY
    SELECT a.id, a.accepted, coalesce(v_did[a.ord], a.status), coalesce(v_note[a.ord], a.detail)
      FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc)
           WITH ORDINALITY AS a(id, accepted, status, detail, lease_expires_at, ord);
END $$;

COMMENT ON FUNCTION pgfence.snooze_many(bigint[], uuid[], interval[]) IS
$$Snooze 1..10000 attempts in one call, fenced by token: each job back to queued, available after delays[i]
(more than 0, at most 365 days), the attempt recorded in pgfence.attempts with outcome snoozed and not counted
(max_attempts + 1, so attempt numbers stay unique and the dead-letter rule is unchanged). A job already snoozed
100 times (limits(): snoozes_per_job) fails the attempt instead, as fail with retry_in = the delay (detail says
so; status queued or failed). Returns (id, accepted, status, detail) per input in input order. Idempotent for
the token: a repeat whose snooze is recorded is accepted and changes nothing. Refused rows change nothing and
are recorded in pgfence.rejections. An attempt past its run timeout (reserved_at + timeout) is refused and
ends as timed_out. Errors: 22004, 22023, PF004.$$;

CREATE OR REPLACE FUNCTION pgfence.snooze(job_id bigint, attempt_token uuid, delay interval) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to snooze');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    PERFORM pgfence._check_snooze_delay('delay', delay);
    SELECT * INTO r FROM pgfence.snooze_many(ARRAY[job_id], ARRAY[attempt_token], ARRAY[delay]);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
    RETURN r.status;
END $$;

COMMENT ON FUNCTION pgfence.snooze(bigint, uuid, interval) IS
$$Snooze a job's current attempt (fenced): back to queued, available at clock_timestamp() + delay (more than 0,
at most 365 days); the attempt is recorded snoozed and not counted toward max_attempts (max_attempts + 1).
Returns the new status: queued; past 100 snoozes of the job (limits(): snoozes_per_job) the snooze fails the
attempt instead (retry after delay while attempts remain: queued, else failed). Past the attempt's run
timeout it is refused (PF001, timed out). Errors: PF001 lease lost (DETAIL), PF002 unknown job, 22004, 22023, PF004.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('snooze',      '{pgfence_worker}'),
    ('snooze_many', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
