-- Deploy pgfence:functions/requeue to pg (reworked after @v0.7.0)
-- requires: functions/requeue@v0.7.0
-- requires: functions/audit
-- requires: tables/history
--
-- requeue, and PF003 for a refused transition. The NOTIFY carries the queue's wake-up
-- tag; the job is locked FOR NO KEY UPDATE. Changed after @v0.5.0: a done job is in the
-- history, not pgfence.jobs, and requeue of it is PF003 (it is done) as before, not
-- PF002; an idempotency key held by a done job (pgfence.held_keys) refuses the requeue
-- of another job with that key, as a live holder does.
-- Changed after @v0.7.0: the transition is the private _requeue (the bulk actions of
-- functions/operator_bulk call it too); requeue(job_id, note DEFAULT NULL) records
-- each success in pgfence.operator_audit with its optional note. (A new parameter
-- with a DEFAULT would be an overload beside requeue(bigint): the old signature is
-- dropped, and every call that worked, positional or named, still does.) A job without
-- an idempotency key is updated outside a subtransaction (a bulk requeue opened one per
-- job); both branches make the same row update, _requeue_row.

BEGIN;

-- Raise PF003 for a transition the job's status does not allow.
CREATE OR REPLACE FUNCTION pgfence._raise_transition(job_id bigint, action text, status text, allowed text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'PF003',
        MESSAGE = format('pgfence: cannot %s job %s: it is %s', action, job_id, status),
        HINT = format('%s applies only to jobs that are %s', action, allowed);
END $$;
COMMENT ON FUNCTION pgfence._raise_transition(bigint, text, text, text) IS
  'Private: raise PF003 (refused transition).';

-- The row update of a requeue: queued and runnable at `at`, the lease fields cleared,
-- one more attempt allowed. Its caller has locked the row and checked the transition.
-- (PL/pgSQL, not SQL: the bulk actions call it per job, and a SQL function is parsed
-- and planned again on every call: requeuing 5,000 jobs took 2.3x as long.)
CREATE OR REPLACE FUNCTION pgfence._requeue_row(job_id bigint, at timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgfence.jobs
       SET status = 'queued', available_at = _requeue_row.at, attempt_token = NULL, reserved_by = NULL,
           reserved_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL, finished_at = NULL,
           max_attempts = greatest(max_attempts, attempts + 1), updated_at = _requeue_row.at
     WHERE id = _requeue_row.job_id;
END $$;
COMMENT ON FUNCTION pgfence._requeue_row(bigint, timestamptz) IS
  'Private: the row update of _requeue (queued, runnable at at, lease cleared, max_attempts at least attempts + 1); the caller locked the row and checked the transition.';

-- Operator: put a failed, manual_review or cancelled job back in the queue,
-- runnable now. The next claim issues a new token. Attempts are kept (history);
-- an exhausted job gets one more attempt (max_attempts raised to attempts + 1).
-- Returns the job's queue. Private: the transition without the audit.
CREATE OR REPLACE FUNCTION pgfence._requeue(job_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j pgfence.jobs;
    v_holder bigint;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to requeue');
    END IF;
    SELECT * INTO j FROM pgfence.jobs WHERE id = job_id FOR NO KEY UPDATE;
    IF NOT FOUND AND EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = job_id) THEN
        PERFORM pgfence._raise_transition(job_id, 'requeue', 'done', 'failed, manual_review or cancelled');
    ELSIF NOT FOUND THEN
        PERFORM pgfence._raise_fence(job_id, NULL, NULL);
    ELSIF j.status NOT IN ('failed', 'manual_review', 'cancelled') THEN
        PERFORM pgfence._raise_transition(job_id, 'requeue', j.status, 'failed, manual_review or cancelled');
    END IF;
    IF j.idempotency_key IS NOT NULL AND j.status <> 'manual_review' THEN
        SELECT h.id INTO v_holder FROM pgfence.jobs h
         WHERE h.queue = j.queue AND h.idempotency_key = j.idempotency_key
           AND h.status IN ('queued', 'processing', 'manual_review', 'done') AND h.id <> j.id;
        v_holder := coalesce(v_holder, pgfence._held_key(j.queue, j.idempotency_key));
        IF v_holder IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PF003',
                MESSAGE = format('pgfence: cannot requeue job %s: job %s now holds its idempotency key', job_id, v_holder),
                HINT = format('job %s is the live job for this key; requeue is refused so the key stays unique', v_holder);
        END IF;
    END IF;
    IF j.idempotency_key IS NULL THEN
        -- No key, no unique index to violate: the same update without the block below,
        -- whose exception handler opens a subtransaction (requeue_many and act_on_filter
        -- call this per job: 10,000 subtransaction ids in one transaction, far past the
        -- 64 a snapshot lists, and every session's visibility checks read pg_subtrans
        -- until it commits).
        PERFORM pgfence._requeue_row(job_id, v_now);
        PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(j.queue));
        RETURN j.queue;
    END IF;
    -- The check above cannot see a holder that commits after it (a concurrent
    -- enqueue or requeue with the same key): the unique index decides, and its
    -- violation is reported like the check's.
    BEGIN
        PERFORM pgfence._requeue_row(job_id, v_now);
        -- A holder that completed while the update waited for it: its key is in
        -- held_keys now (see _key_held_after_insert).
        v_holder := pgfence._key_held_after_insert(j.queue, j.idempotency_key);
        IF v_holder IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PF003',
                MESSAGE = format('pgfence: cannot requeue job %s: job %s now holds its idempotency key',
                                 job_id, v_holder),
                HINT = format('job %s is done with this key and its history is kept; requeue is refused so the key stays unique', v_holder);
        END IF;
    EXCEPTION WHEN unique_violation THEN
        SELECT h.id INTO v_holder FROM pgfence.jobs h
         WHERE h.queue = j.queue AND h.idempotency_key = j.idempotency_key
           AND h.status IN ('queued', 'processing', 'manual_review', 'done') AND h.id <> j.id;
        RAISE EXCEPTION USING ERRCODE = 'PF003',
            MESSAGE = format('pgfence: cannot requeue job %s: job %s now holds its idempotency key',
                             job_id, coalesce(v_holder::text, 'another job')),
            HINT = 'the live job for this key wins; requeue is refused so the key stays unique';
    END;
    PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(j.queue));
    RETURN j.queue;
END $$;
COMMENT ON FUNCTION pgfence._requeue(bigint) IS
  'Private: requeue''s transition (PF002, PF003 as requeue), without the audit; returns the job''s queue.';

DROP FUNCTION IF EXISTS pgfence.requeue(bigint);
CREATE OR REPLACE FUNCTION pgfence.requeue(job_id bigint, note text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
BEGIN
    IF requeue.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to requeue');
    END IF;
    PERFORM pgfence._check_note(note, false);
    v_queue := pgfence._requeue(requeue.job_id);
    PERFORM pgfence._audit('requeue', ARRAY[v_queue], ARRAY[requeue.job_id], note);
END $$;

COMMENT ON FUNCTION pgfence.requeue(bigint, text) IS
$$Operator: failed, manual_review or cancelled -> queued, runnable now; the next claim gets a new token.
Attempts are kept; max_attempts becomes at least attempts + 1 so the job gets another try. Recorded in
pgfence.operator_audit with note (optional, 1..10000 characters). Errors: PF002 unknown job, PF003 other status (or its
idempotency key is held by another job), 22004, 22023 (a blank note).$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('requeue', '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
