-- Deploy pgfence:functions/mark_done to pg
-- requires: functions/requeue
-- requires: functions/cancel
-- requires: functions/audit
-- requires: tables/history
-- requires: tables/job_unique_for
--
-- mark_done: an operator asserts that a job in manual_review had its side effect (its
-- lease expired while it ran; a human checked, e.g. the payment went through) and ends
-- it done, as complete leaves a job: its row leaves pgfence.jobs for one row of
-- pgfence.finished_jobs (the job, the result given, its attempts moved out of
-- pgfence.attempts into earlier_attempts), its idempotency key held in
-- pgfence.held_keys (as its unique_for says). The final attempt of that row is the operator's: no token, no
-- worker (all_attempts shows it as outcome done with worker NULL, ended at
-- finished_at); the audit row says who.
--
-- MERGE NOTE: the move into the history is complete_many's (functions/complete),
-- written again here for one job (complete_many's is inline and fenced by a token,
-- which a manual_review job no longer has). A change to the history row's shape must
-- change both.

BEGIN;

-- The transition: the job locked FOR UPDATE (it is deleted: a concurrent requeue or
-- cancel, FOR NO KEY UPDATE, either committed first, and this sees the new status and
-- refuses with PF003, or waits for this one and then finds the job done: PF003).
-- Returns the job's queue. Private: without the audit.
CREATE OR REPLACE FUNCTION pgfence._mark_done(job_id bigint, result jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j pgfence.jobs;
    v_now timestamptz := clock_timestamp();
    v_keep interval;
BEGIN
    SELECT * INTO j FROM pgfence.jobs x WHERE x.id = _mark_done.job_id FOR UPDATE;
    IF NOT FOUND AND EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = _mark_done.job_id) THEN
        PERFORM pgfence._raise_transition(_mark_done.job_id, 'mark_done', 'done', 'manual_review');
    ELSIF NOT FOUND THEN
        PERFORM pgfence._raise_fence(_mark_done.job_id, NULL, NULL);
    ELSIF j.status <> 'manual_review' THEN
        PERFORM pgfence._raise_transition(_mark_done.job_id, 'mark_done', j.status, 'manual_review');
    END IF;
    SELECT coalesce(q.retain_done, d.retain_done) INTO v_keep
      FROM pgfence.retention d LEFT JOIN pgfence.retention q ON q.queue = j.queue
     WHERE d.queue = '';
    WITH gone AS (
        DELETE FROM pgfence.jobs x WHERE x.id = j.id AND x.queue = j.queue AND x.status = 'manual_review'
        RETURNING x.*
    ), earlier AS (
        DELETE FROM pgfence.attempts a USING gone g WHERE a.job_id = g.id RETURNING a.*
    ), earlier_by_job AS (
        SELECT e.job_id, jsonb_agg(to_jsonb(e) - 'job_id' ORDER BY e.ended_at, e.attempt) AS attempts
          FROM earlier e GROUP BY e.job_id
    ), keys AS (
        -- (unique_for as complete applies it: no key held once done when created_at +
        -- unique_for has passed, 0 among them; else held until then, at most until the purge)
        INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at, held_until)
        SELECT g.queue, g.idempotency_key, g.id, pgfence._utc_plus(v_now, v_keep), g.created_at + g.unique_for
          FROM gone g
         WHERE g.idempotency_key IS NOT NULL
           AND (g.unique_for IS NULL OR g.created_at + g.unique_for > v_now)
        ON CONFLICT ON CONSTRAINT held_keys_pkey
            DO UPDATE SET job_id = excluded.job_id, purge_at = excluded.purge_at, held_until = excluded.held_until
    )
    INSERT INTO pgfence.finished_jobs (id, queue, kind, payload, priority, attempts, max_attempts, available_at,
                                       recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,
                                       heartbeat_at, lease_expires_at, reclaim_count, last_error, result,
                                       created_at, finished_at, enqueued_by, earlier_attempts, purge_at)
    SELECT g.id, g.queue, g.kind, g.payload, g.priority, g.attempts, g.max_attempts, g.available_at,
           g.recovery_policy, g.idempotency_key, NULL, NULL, NULL,
           NULL, NULL, g.reclaim_count, g.last_error, _mark_done.result,
           g.created_at, v_now, g.enqueued_by, e.attempts, pgfence._utc_plus(v_now, v_keep)
      FROM gone g LEFT JOIN earlier_by_job e ON e.job_id = g.id;
    RETURN j.queue;
END $$;
COMMENT ON FUNCTION pgfence._mark_done(bigint, jsonb) IS
  'Private: mark_done''s transition (manual_review -> done, moved to the history; PF002, PF003), without the audit; returns the queue.';

-- Operator: the job's side effect happened; end it done with result.
CREATE OR REPLACE FUNCTION pgfence.mark_done(job_id bigint, note text, result jsonb DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    IF mark_done.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the manual_review job to mark done');
    END IF;
    PERFORM pgfence._check_note(note, true);
    PERFORM pgfence._check_result('result', result);
    v_queue := pgfence._mark_done(mark_done.job_id, result);
    PERFORM pgfence._audit('mark_done', ARRAY[v_queue], ARRAY[mark_done.job_id], note,
                           CASE WHEN result IS NULL THEN NULL ELSE jsonb_build_object('result', result) END);
END $$;
COMMENT ON FUNCTION pgfence.mark_done(bigint, text, jsonb) IS
$$Operator: manual_review -> done. The operator asserts the job's side effect happened (its lease expired while it
ran); the job ends as complete leaves it (moved to the history with its attempts and result, its idempotency key
held), its final attempt without token or worker. note is required (1..10000 characters), result as complete's
(NULL, or any JSON value of at most 1 MiB, 64 levels). Recorded in pgfence.operator_audit. A concurrent requeue or
cancel either wins (then PF003 here) or waits and gets PF003. Errors: PF002 unknown job, PF003 not manual_review,
22004, 22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('mark_done', '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
