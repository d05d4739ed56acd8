-- Deploy pgfence:functions/cancel to pg (reworked after @v0.7.0)
-- requires: functions/cancel@v0.7.0
-- requires: functions/audit
-- requires: tables/job_queue_keys
-- requires: tables/history
--
-- cancel, whole, with its privilege-rule row. The job is locked FOR NO KEY UPDATE, not
-- FOR UPDATE (a refusal being recorded holds its job FOR KEY SHARE). Changed after
-- @v0.5.0: a done job is in the history, not pgfence.jobs; cancel of it is PF003 (it is
-- done) as before, not PF002.
-- Changed after @v0.6.0: the attempt a cancel ends carries the job's queue
-- (tables/job_queue_keys).
-- Changed after @v0.7.0: the transition is the private _cancel (the bulk actions call it
-- too); cancel(job_id, note DEFAULT NULL) records each success in
-- pgfence.operator_audit (cancel(bigint) is dropped: see functions/requeue).

BEGIN;

-- Operator: cancel a queued, processing or manual_review job. A running worker
-- loses its lease: its next heartbeat, complete or fail gets PF001.
-- Returns the job's queue. Private: the transition without the audit.
CREATE OR REPLACE FUNCTION pgfence._cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_queue text;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to cancel');
    END IF;
    SELECT status, queue INTO v_status, v_queue FROM pgfence.jobs WHERE id = job_id FOR NO KEY UPDATE;
    IF NOT FOUND AND EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = job_id) THEN
        PERFORM pgfence._raise_transition(job_id, 'cancel', 'done', 'queued, processing or manual_review');
    ELSIF NOT FOUND THEN
        PERFORM pgfence._raise_fence(job_id, NULL, NULL);
    ELSIF v_status NOT IN ('queued', 'processing', 'manual_review') THEN
        PERFORM pgfence._raise_transition(job_id, 'cancel', v_status, 'queued, processing or manual_review');
    END IF;
    -- A running attempt ends here: record it.
    INSERT INTO pgfence.attempts (job_id, queue, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                  lease_expires_at, ended_at, outcome)
    SELECT j.id, j.queue, j.attempts, j.attempt_token, j.reserved_by, j.reserved_at, j.heartbeat_at,
           j.lease_expires_at, v_now, 'cancelled'
      FROM pgfence.jobs j WHERE j.id = job_id AND j.status = 'processing';
    UPDATE pgfence.jobs
       SET status = 'cancelled', attempt_token = NULL, lease_expires_at = NULL,
           finished_at = v_now, updated_at = v_now
     WHERE id = job_id;
    RETURN v_queue;
END $$;
COMMENT ON FUNCTION pgfence._cancel(bigint) IS
  'Private: cancel''s transition (PF002, PF003 as cancel), without the audit; returns the job''s queue.';

DROP FUNCTION IF EXISTS pgfence.cancel(bigint);
CREATE OR REPLACE FUNCTION pgfence.cancel(job_id bigint, note text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    IF cancel.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to cancel');
    END IF;
    PERFORM pgfence._check_note(note, false);
    v_queue := pgfence._cancel(cancel.job_id);
    PERFORM pgfence._audit('cancel', ARRAY[v_queue], ARRAY[cancel.job_id], note);
END $$;

COMMENT ON FUNCTION pgfence.cancel(bigint, text) IS
$$Operator: queued, processing or manual_review -> cancelled. A running worker loses its lease (its next
heartbeat/complete/fail raises PF001). Recorded in pgfence.operator_audit with note (optional, 1..10000 characters).
Errors: PF002 unknown job, PF003 done/failed/cancelled, 22004, 22023 (a blank note).$$;

-- The privilege rule's row for this change's routine, applied.
INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('cancel', '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
