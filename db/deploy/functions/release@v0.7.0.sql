-- Deploy pgfence:functions/release to pg (reworked after @v0.4.0)
-- requires: functions/release@v0.4.0
-- requires: functions/_fence
-- requires: functions/_checks

BEGIN;

-- Give a batch of attempts back without a result (a worker shutting down).
-- started = true (a handler ran): the same rule as an expired lease, applied now:
-- auto jobs with attempts left go back to the queue at once, manual jobs to
-- manual_review (the handler may have begun a side effect), exhausted jobs to
-- failed; the attempt counts. started = false (claimed but never handed to a
-- handler): back to the queue, and the attempt does not count.
CREATE OR REPLACE FUNCTION pgfence.release_many(job_ids bigint[], attempt_tokens uuid[], started boolean DEFAULT true)
RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    v_now timestamptz := clock_timestamp();
    v_ords integer[];
    v_acc boolean[];
    v_i integer;
BEGIN
    IF started IS NULL THEN
        PERFORM pgfence._raise_null('started', 'pass true if a handler ran the job, false if it never started');
    END IF;
    IF started THEN
        SELECT coalesce(array_agg(r.ord), '{}') INTO v_ords
          FROM pgfence._recover(job_ids, attempt_tokens, 'released by worker before completion', false) r;
    ELSE
        WITH upd AS (
            UPDATE pgfence.jobs j
               SET status = 'queued', attempts = j.attempts - 1, available_at = v_now, attempt_token = NULL,
                   reserved_by = NULL, reserved_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL,
                   updated_at = v_now
              FROM (SELECT t.id, t.token, t.ord, 'processing'::text AS held
                      FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS t(id, token, ord)
                     ORDER BY t.id) i
             WHERE j.id = i.id AND j.status = i.held AND j.attempt_token = i.token  -- see complete_many
            RETURNING i.ord
        )
        SELECT coalesce(array_agg(upd.ord::integer), '{}') INTO v_ords FROM upd;
    END IF;
    v_acc := array_fill(false, ARRAY[n]);
    FOREACH v_i IN ARRAY v_ords LOOP
        v_acc[v_i] := true;
    END LOOP;
    IF cardinality(v_ords) < n THEN
        IF started THEN
            -- A repeat by a token whose release is already recorded (a worker retrying
            -- after a lost reply) is accepted and changes nothing, like complete and fail.
            -- (started => false undoes the claim and leaves no attempt to recognise.)
            SELECT array_agg(v_acc[i.ord] OR pgfence._attempt_ended(i.id, i.token, '{released}') ORDER BY i.ord)
              INTO v_acc
              FROM unnest(job_ids, attempt_tokens) WITH ORDINALITY AS i(id, token, ord);
        END IF;
        PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'release');
    END IF;

    RETURN QUERY
    SELECT a.id, a.accepted, a.status, a.detail FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
END $$;

COMMENT ON FUNCTION pgfence.release_many(bigint[], uuid[], boolean) IS
$$Give 1..10000 attempts back without a result (graceful shutdown), fenced by token. started = true (default):
by the reclaim rule (auto with attempts left -> queued now, manual -> manual_review, exhausted -> failed), the
attempt counts. started = false (never handed to a handler): -> queued now, the attempt does not count.
reclaim_count does not change. Returns (id, accepted, status, detail) per input in input order.
With started = true it is idempotent for the token: a repeat whose release is already recorded is accepted and
changes nothing (status: the job's status now). Errors: 22004, 22023, PF004.$$;

CREATE OR REPLACE FUNCTION pgfence.release(job_id bigint, attempt_token uuid, started boolean DEFAULT true) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to give back');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    SELECT * INTO r FROM pgfence.release_many(ARRAY[job_id], ARRAY[attempt_token], started);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
    RETURN r.status;
END $$;

COMMENT ON FUNCTION pgfence.release(bigint, uuid, boolean) IS
$$Give one attempt back without a result (fenced); returns the new status: by the reclaim rule (queued,
manual_review or failed) when started, else queued with the attempt uncounted. Errors: PF001 lease lost,
PF002 unknown job, 22004, PF004.$$;

-- The privilege rule's rows for this change's routines, applied.
INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('release',      '{pgfence_worker}'),
    ('release_many', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
