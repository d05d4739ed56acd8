-- Deploy pgfence:functions/read_api to pg (reworked after @v0.7.0)
-- requires: functions/read_api@v0.7.0
-- requires: tables/history
-- requires: viewer
--
-- Reading a job and its history through functions, so that a caller in any language
-- gets the same rows without knowing the tables (which a later change may split: the
-- functions keep their results), and under the same visibility as the tables'
-- row-level security: operators see every job, a producer the jobs it enqueued, any
-- other caller none. Changed after @v0.5.0: a done job is read from the history
-- (pgfence.finished_jobs, through pgfence.all_jobs and pgfence.all_attempts), with the
-- same columns and rows as when it stayed in pgfence.jobs.
-- Changed after @v0.7.0: pgfence_viewer (read-only) reads every job, as operators do,
-- and may call these functions; job() also returns the job's run timeout and unique_for
-- (pgfence.jobs' columns since tables/job_timeouts and tables/job_unique_for, earlier in
-- the plan; NULL for a done job, whose history row keeps neither): a DROP and CREATE, as
-- its result changed. job, attempts_of, rejections_of and rejections_not_stored run
-- with enable_seqscan = off and jit = off: after a backlog had left pgfence.jobs large
-- with a few live rows counted, job() read it whole twice per call.

BEGIN;

-- Whether the calling role (SET ROLE respected) may see a job enqueued by enqueued_by:
-- the rule of the row-level security policies on pgfence.jobs (operators read every
-- job, producers their own), also inside SECURITY DEFINER functions. A superuser, a
-- BYPASSRLS role or the owner sees every job, as they do in the table. The calling
-- role is the session's (pgfence._invoker(), the role enqueue records): called from
-- inside another role's SECURITY DEFINER function, these functions answer for the
-- session's role, where the table would answer for that function's owner.
CREATE OR REPLACE FUNCTION pgfence._may_read(enqueued_by text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT r.rolsuper
        OR r.rolbypassrls
        OR pg_catalog.pg_has_role(r.oid, 'pgfence_owner', 'USAGE')
        OR pg_catalog.pg_has_role(r.oid, 'pgfence_operator', 'USAGE')
        OR coalesce((SELECT pg_catalog.pg_has_role(r.oid, v.oid, 'USAGE') FROM pg_catalog.pg_roles v
                      WHERE v.rolname = 'pgfence_viewer'), false)
        OR (_may_read.enqueued_by = r.rolname AND pg_catalog.pg_has_role(r.oid, 'pgfence_producer', 'USAGE'))
      FROM pg_catalog.pg_roles r
     WHERE r.rolname = pgfence._invoker()
$$;
COMMENT ON FUNCTION pgfence._may_read(text) IS
  'Private: the calling role may read a job enqueued by enqueued_by (operators and viewers: every job; producers: their own).';

-- Whether the job exists and the calling role may see it (see _may_read).
CREATE OR REPLACE FUNCTION pgfence._may_read_job(job_id bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgfence.all_jobs j WHERE j.id = _may_read_job.job_id AND pgfence._may_read(j.enqueued_by))
$$;
COMMENT ON FUNCTION pgfence._may_read_job(bigint) IS
  'Private: the job exists and the calling role may read it (operators: every job; producers: their own).';

-- One job, whole: zero rows when there is no such job or the caller may not see it
-- (the two are not told apart, as in the table under row-level security).
DROP FUNCTION IF EXISTS pgfence.job(bigint);  -- (@v0.7.0's, without timeout and unique_for)
CREATE FUNCTION pgfence.job(job_id bigint)
RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, status text, priority integer,
              attempts integer, max_attempts integer, available_at timestamptz, recovery_policy text,
              idempotency_key text, attempt_token uuid, reserved_by text, reserved_at timestamptz,
              heartbeat_at timestamptz, lease_expires_at timestamptz, reclaim_count integer,
              last_error text, result jsonb, created_at timestamptz, updated_at timestamptz,
              finished_at timestamptz, enqueued_by text, timeout interval, unique_for interval)
LANGUAGE plpgsql STABLE
-- (by id, never by reading pgfence.jobs or the history whole: see functions/complete,
-- a table a backlog left large with a few live rows counted; and so no JIT)
SET enable_seqscan = off
SET jit = off AS $$
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to read');
    END IF;
    RETURN QUERY
    SELECT j.id, j.queue, j.kind, j.payload, j.status, j.priority, j.attempts, j.max_attempts,
           j.available_at, j.recovery_policy, j.idempotency_key, j.attempt_token, j.reserved_by,
           j.reserved_at, j.heartbeat_at, j.lease_expires_at, j.reclaim_count, j.last_error, j.result,
           j.created_at, j.updated_at, j.finished_at, j.enqueued_by, l.timeout::interval, l.unique_for::interval
      FROM pgfence.all_jobs j
      LEFT JOIN pgfence.jobs l ON l.id = j.id AND l.queue = j.queue
     WHERE j.id = job.job_id AND pgfence._may_read(j.enqueued_by);
END $$;
COMMENT ON FUNCTION pgfence.job(bigint) IS
$$One job, every column: zero rows when it does not exist or the caller may not see it (operators see
every job, producers the jobs they enqueued, as in the table). timeout (the run timeout of each attempt) and
unique_for are NULL when the job has none, and for a done job (its history row keeps neither). Errors: 22004.$$;

-- The ended attempts of a job the caller may see, oldest first.
CREATE OR REPLACE FUNCTION pgfence.attempts_of(job_id bigint)
RETURNS TABLE(attempt integer, attempt_token uuid, worker text, claimed_at timestamptz,
              heartbeat_at timestamptz, lease_expires_at timestamptz, ended_at timestamptz,
              outcome text, error text)
LANGUAGE plpgsql STABLE
-- (by id, never by reading pgfence.jobs or the history whole: see functions/complete,
-- a table a backlog left large with a few live rows counted; and so no JIT)
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF attempts_of.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job whose attempts to read');
    END IF;
    IF NOT pgfence._may_read_job(attempts_of.job_id) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT a.attempt, a.attempt_token, a.worker, a.claimed_at, a.heartbeat_at,
           a.lease_expires_at, a.ended_at, a.outcome, a.error
      FROM pgfence.all_attempts a
     WHERE a.job_id = attempts_of.job_id
     ORDER BY a.ended_at, a.attempt;
END $$;
COMMENT ON FUNCTION pgfence.attempts_of(bigint) IS
$$The ended attempts of a job (outcome done, failed, reclaimed, released or cancelled), oldest first; zero
rows when the job does not exist or the caller may not see it. The running attempt, if any, is the job's
own row (pgfence.job). Errors: 22004.$$;

-- The refused fenced calls of a job the caller may see, oldest first, and how many
-- more were refused but not stored (at most 100 are stored per job).
CREATE OR REPLACE FUNCTION pgfence.rejections_of(job_id bigint)
RETURNS TABLE(attempt_token uuid, operation text, caller text, detail text,
              rejected_at timestamptz)
LANGUAGE plpgsql STABLE
-- (by id, never by reading pgfence.jobs or the history whole: see functions/complete,
-- a table a backlog left large with a few live rows counted; and so no JIT)
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF rejections_of.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job whose refused calls to read');
    END IF;
    IF NOT pgfence._may_read_job(rejections_of.job_id) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.attempt_token, r.operation, r.caller, r.detail, r.rejected_at
      FROM pgfence.rejections r
     WHERE r.job_id = rejections_of.job_id
     ORDER BY r.rejected_at, r.slot;
END $$;
COMMENT ON FUNCTION pgfence.rejections_of(bigint) IS
$$The fenced calls refused for a job (a token that once held an attempt of it, no longer current), oldest
first, at most 100 stored per job (pgfence.rejections_not_stored counts the rest); zero rows when the job
does not exist or the caller may not see it. Errors: 22004.$$;

CREATE OR REPLACE FUNCTION pgfence.rejections_not_stored(job_id bigint) RETURNS bigint
LANGUAGE plpgsql STABLE
-- (by id, never by reading pgfence.jobs or the history whole: see functions/complete,
-- a table a backlog left large with a few live rows counted; and so no JIT)
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
BEGIN
    IF rejections_not_stored.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job');
    END IF;
    IF NOT pgfence._may_read_job(rejections_not_stored.job_id) THEN
        RETURN 0;
    END IF;
    RETURN (SELECT coalesce(sum(o.not_stored), 0)::bigint FROM pgfence.rejection_overflow o
             WHERE o.job_id = rejections_not_stored.job_id);
END $$;
COMMENT ON FUNCTION pgfence.rejections_not_stored(bigint) IS
$$How many refused fenced calls of a job were counted but not stored (beyond the 100 stored per job); 0
when the job does not exist or the caller may not see it. Errors: 22004.$$;

-- Ended attempts per outcome and refused calls within the last `since`.
CREATE OR REPLACE FUNCTION pgfence.history_summary(since interval DEFAULT '1 hour')
RETURNS TABLE(outcome text, count bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_from timestamptz;
BEGIN
    IF since IS NULL THEN
        PERFORM pgfence._raise_null('since', 'pass how far back to count, e.g. ''1 hour''');
    ELSIF since < interval '0' OR since > interval '3650 days' OR NOT pgfence._interval_signs_agree(since) THEN
        PERFORM pgfence._raise_invalid('since', since::text, 'outside 0..3650 days',
            'pass how far back to count, e.g. ''1 hour''');
    END IF;
    v_from := clock_timestamp() - since;
    RETURN QUERY
    -- (Done jobs by when they finished: the history's BRIN index on finished_at reads
    -- only the recent part. An earlier attempt that ended in the window belongs to a
    -- job that finished after it.)
    SELECT o.outcome, sum(o.n)::bigint
      FROM (SELECT a.outcome, count(*) AS n FROM pgfence.attempts a WHERE a.ended_at > v_from GROUP BY a.outcome
            UNION ALL
            SELECT 'done', count(*) FROM pgfence.finished_jobs h WHERE h.finished_at > v_from
            UNION ALL
            SELECT e.outcome, count(*)
              FROM pgfence.finished_jobs h
             CROSS JOIN LATERAL jsonb_to_recordset(h.earlier_attempts) AS e(outcome text, ended_at timestamptz)
             WHERE h.finished_at > v_from AND h.earlier_attempts IS NOT NULL AND e.ended_at > v_from
             GROUP BY e.outcome) o
     WHERE o.n > 0
     GROUP BY o.outcome
    UNION ALL
    SELECT 'rejected', count(*) FROM pgfence.rejections r WHERE r.rejected_at > v_from;
END $$;
COMMENT ON FUNCTION pgfence.history_summary(interval) IS
$$Operators: ended attempts per outcome (done, failed, reclaimed, released, cancelled; outcomes with none
are left out) and refused fenced calls (outcome rejected, always present) within the last since (0..3650
days, default 1 hour). Errors: 22004, 22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('job',                   '{pgfence_producer,pgfence_operator,pgfence_viewer}'),
    ('attempts_of',           '{pgfence_producer,pgfence_operator,pgfence_viewer}'),
    ('rejections_of',         '{pgfence_producer,pgfence_operator,pgfence_viewer}'),
    ('rejections_not_stored', '{pgfence_producer,pgfence_operator,pgfence_viewer}'),
    ('history_summary',       '{pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
