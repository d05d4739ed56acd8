-- Deploy pgfence:functions/complete to pg (reworked after @v0.7.0)
-- requires: functions/complete@v0.7.0
-- requires: tables/history
-- requires: functions/_checks
-- requires: functions/_rules
-- requires: tables/job_unique_for
--
-- complete and complete_many. Results at most 1 MiB as jsonb, nested at most 64
-- levels, checked before anything is written. Changed after @v0.5.0: a completed job
-- leaves pgfence.jobs. Its row is deleted and one row of pgfence.finished_jobs is
-- written in the same statement: the job, its result, the final attempt (no
-- pgfence.attempts row for it) and its earlier attempts (moved out of
-- pgfence.attempts). That is one insert where there were an update of the job (a new
-- version of the row and of its index entries) and an insert into pgfence.attempts,
-- and the purge no longer deletes it later. A job with an idempotency key leaves its
-- key in pgfence.held_keys until its history goes.
-- Changed after @v0.7.0: complete_many never reads pgfence.jobs sequentially
-- (enable_seqscan = off, jit = off, as claim): once a backlog had left the table and
-- its primary key large and a vacuum or ANALYZE had counted a few live rows, its
-- generic plan read the whole table on every call (230 MB, 2 live rows: 45 ms a
-- complete; with the setting 0.9 ms). Also after @v0.7.0: an attempt whose run timeout
-- (tables/job_timeouts) has passed cannot complete, even before the sweeper reclaimed
-- it: it is refused (PF001, "timed out after ...") and ended as timed_out
-- (_end_timed_out). A job enqueued with unique_for (tables/job_unique_for) holds its key
-- once done only until created_at + unique_for (held_keys.held_until), or not at all
-- when that has passed (unique_for 0).
-- A done job's purge_at is finished_at + its retention counted in UTC (_utc_plus), the
-- same whatever the worker's session TimeZone.

BEGIN;

-- t + d, the days and months of d counted in UTC: the same instant whatever the
-- session's TimeZone. (timestamptz + interval counts them in the session's zone, where
-- a day across a daylight-saving change is 23 or 25 hours: a worker whose session was
-- in New York kept a done job with a 150-day retention an hour less than one in UTC,
-- and the sweeper, in a zone of its own, made the history's partitions ahead for
-- purge_at values an hour off.) Every retention is applied through it.
CREATE OR REPLACE FUNCTION pgfence._utc_plus(t timestamptz, d interval) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT ((t AT TIME ZONE 'UTC') + d) AT TIME ZONE 'UTC'
$$;
COMMENT ON FUNCTION pgfence._utc_plus(timestamptz, interval) IS
  'Private: t + d with the days and months of d counted in UTC (the same whatever the session''s TimeZone).';

-- Complete a batch of attempts: processing -> done for each (job, token) that
-- still holds its lease. One row per input, in input order: accepted is true when
-- the job is done by that token (now, or already: a retry after a lost reply is
-- accepted and changes nothing). A refused row changes nothing and says why.
CREATE OR REPLACE FUNCTION pgfence.complete_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    results        jsonb[] DEFAULT NULL
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
    v_count integer;
    v_acc boolean[];
    v_bad integer;
    v_keep interval;
BEGIN
    IF NOT pgfence._array_ok(results) THEN
        PERFORM pgfence._check_array('results', results);
    END IF;
    IF cardinality(results) <> n THEN
        PERFORM pgfence._raise_invalid('results length', cardinality(results)::text,
            format('job_ids has %s elements', n), 'pass NULL, or one result (or NULL) per job id');
    END IF;
    IF results IS NOT NULL THEN
        SELECT min(t.ord) INTO v_bad FROM unnest(results) WITH ORDINALITY t(r, ord) WHERE NOT pgfence._result_ok(t.r);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_result(format('results[%s]', v_bad), results[v_bad]);
        END IF;
    END IF;
    -- target reads each finishing attempt (its lease, for the history); rows are
    -- deleted in id order (a fixed lock order: no deadlock against a concurrent
    -- heartbeat_many of the same jobs). When a row was refused, the answer is read
    -- back afterwards (pgfence.all_jobs: a done job is in the history, with the
    -- finishing token).
    SELECT r.retain_done INTO v_keep FROM pgfence.retention r WHERE r.queue = '';
    WITH target AS (
        SELECT j.id, j.attempt_token, j.lease_expires_at, i.result, 'processing'::text AS held,
               pgfence._utc_plus(v_now, coalesce(q.retain_done, v_keep)) AS purge_at
          FROM unnest(job_ids, attempt_tokens, results) AS i(id, token, result)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id AND x.attempt_token = i.token OFFSET 0) j
          LEFT JOIN pgfence.retention q ON q.queue = j.queue
         WHERE j.status = 'processing'
           AND (j.timeout IS NULL OR v_now < j.reserved_at + j.timeout)
         ORDER BY j.id
    ), gone AS (
        DELETE FROM pgfence.jobs j
         USING target t
         WHERE j.id = t.id AND j.status = t.held AND j.attempt_token = t.attempt_token
        -- (j.status = <column> rather than = 'processing': the literal would let the
        -- planner drive the join from the partial index jobs_reclaim_idx, whose row
        -- estimate is tiny, and rescan the input for every processing row.)
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts, j.available_at,
                  j.recovery_policy, j.idempotency_key, j.attempt_token, j.reserved_by, j.reserved_at,
                  j.heartbeat_at, t.lease_expires_at, j.reclaim_count, j.last_error, t.result, j.created_at,
                  j.enqueued_by, t.purge_at, j.unique_for
    ), earlier AS (
        DELETE FROM pgfence.attempts a
         USING gone g
         WHERE a.job_id = g.id
        RETURNING a.*
    ), earlier_by_job AS (
        SELECT e.job_id, jsonb_agg(to_jsonb(e) - 'job_id' ORDER BY e.ended_at, e.attempt) AS attempts
          FROM earlier e GROUP BY e.job_id
    ), keys AS (
        -- (unique_for: no key held once done when created_at + unique_for has passed,
        -- 0 among them; else held until then, and at most until the purge)
        INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at, held_until)
        SELECT g.queue, g.idempotency_key, g.id, g.purge_at, g.created_at + g.unique_for
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
           g.recovery_policy, g.idempotency_key, g.attempt_token, g.reserved_by, g.reserved_at,
           g.heartbeat_at, g.lease_expires_at, g.reclaim_count, g.last_error, g.result,
           g.created_at, v_now, g.enqueued_by, e.attempts, g.purge_at
      FROM gone g LEFT JOIN earlier_by_job e ON e.job_id = g.id;
    GET DIAGNOSTICS v_count = ROW_COUNT;

    IF v_count = n THEN
        -- All accepted (duplicate ids are refused up front): every row is done and
        -- there is nothing to look up. The common case.
        RETURN QUERY SELECT i.id, true, 'done'::text, NULL::text
                       FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.ord;
        RETURN;
    END IF;
    -- Some were refused (or already done by this token: accepted, idempotent). An
    -- attempt refused because its run timeout passed ends now, as timed_out.
    PERFORM pgfence._end_timed_out(job_ids, attempt_tokens);
    v_acc := pgfence._accepted(job_ids, attempt_tokens, 'done');
    PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'complete');
    RETURN QUERY
    SELECT a.id, a.accepted, a.status, a.detail FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
END $$;

COMMENT ON FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[]) IS
$$Complete 1..10000 attempts in one call: processing -> done where (job_ids[i], attempt_tokens[i]) still
holds the lease and its run timeout (reserved_at + timeout) has not passed (else it ends as timed_out), storing results[i] (NULL, or any JSON value of at most 1 MiB as jsonb, nested at most 64
levels). Returns (id, accepted, status, detail) per input in input order; accepted = done by this token
(idempotent). A completed job leaves pgfence.jobs for the history (pgfence.finished_jobs, one row with its
attempts; read it through pgfence.all_jobs or pgfence.job). Refused rows change nothing; detail says why, and
they are recorded in pgfence.rejections (tokens that held an attempt of the job, at most 100 per job). Errors: 22004, 22023 (NULLs, lengths, duplicate ids, a result over the limits), PF004.$$;

-- Complete one attempt: processing -> done, only with the current token.
CREATE OR REPLACE FUNCTION pgfence.complete(job_id bigint, attempt_token uuid, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job to complete');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token that claim returned');
    END IF;
    PERFORM pgfence._check_result('result', result);
    SELECT * INTO r FROM pgfence.complete_many(ARRAY[job_id], ARRAY[attempt_token], ARRAY[result]);
    IF NOT r.accepted THEN
        PERFORM pgfence._raise_fence(job_id, r.status, r.detail);
    END IF;
END $$;

COMMENT ON FUNCTION pgfence.complete(bigint, uuid, jsonb) IS
$$Complete a job: processing -> done with result (NULL, or any JSON value of at most 1 MiB as jsonb, nested
at most 64 levels), only while attempt_token is current and the attempt's run timeout has not passed. Idempotent for the token that completed it.
Errors: PF001 lease lost (DETAIL says why), PF002 unknown job, 22004, 22023, PF004.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('complete', '{pgfence_worker}'),
                                                        ('complete_many', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
