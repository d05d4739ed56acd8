-- Deploy pgfence:functions/report_rejection to pg (reworked after @v0.7.0)
-- requires: functions/report_rejection@v0.7.0
-- requires: functions/snooze
-- requires: functions/_fence
-- requires: tables/history
--
-- Only a token that held an attempt of the job is recorded (a made-up one, or another
-- job's, is refused with 22023), at most 100 per job (later ones counted, not
-- stored). Changed after @v0.5.0: a done job is read from the history
-- (pgfence.all_jobs), so a refused call on it is reported as before.
-- Changed after @v0.7.0: the operation snooze (functions/snooze); a repeat by the token
-- whose snooze is recorded is accepted, so it is not reported. And it runs with
-- enable_seqscan = off and jit = off, as the fenced batches: its private
-- _record_rejection is theirs too, and PL/pgSQL keeps the generic plan a function's
-- sixth call makes for the rest of the session. Made while report_rejection ran, on a
-- table a backlog had left large with a few live rows counted, it read the whole table,
-- and every later refused batch on the connection did the same.

BEGIN;

-- A single fenced call that raised PF001 is rolled back with its transaction, so
-- its refusal cannot record itself. The caller reports it here (the Python
-- client does so for every LeaseLost) so operators see zombie activity in
-- pgfence.rejections next to the attempt history. Batch calls record their own.
CREATE OR REPLACE FUNCTION pgfence.report_rejection(job_id bigint, attempt_token uuid, operation text)
RETURNS void
LANGUAGE plpgsql
-- No sequential scan, no JIT, as the fenced batches (functions/complete): the job is
-- read by primary key, and _record_rejection, which the batches' refusals run too,
-- keeps for the session the plans its first calls made, whoever called it.
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_variable
DECLARE
    j record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job whose call was refused');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token the refused call carried');
    ELSIF operation IS NULL THEN
        PERFORM pgfence._raise_null('operation', 'pass heartbeat, complete, fail, release or snooze');
    ELSIF operation NOT IN ('heartbeat', 'complete', 'fail', 'release', 'snooze') THEN
        PERFORM pgfence._raise_invalid('operation', quote_literal(operation), 'unknown operation',
            'pass heartbeat, complete, fail, release or snooze');
    END IF;
    SELECT x.status, x.attempt_token, x.last_error, x.reserved_by INTO j FROM pgfence.all_jobs x WHERE x.id = job_id LIMIT 1;
    IF NOT FOUND THEN
        PERFORM pgfence._raise_fence(job_id, NULL, NULL);
    ELSIF j.status = 'processing' AND j.attempt_token = attempt_token THEN
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text, 'is the current token: nothing was refused',
            'report only calls that raised PF001');
    ELSIF (operation = 'complete' AND j.status = 'done' AND j.attempt_token = attempt_token)
       OR (operation = 'fail' AND pgfence._attempt_ended(job_id, attempt_token, '{failed}')) THEN
        -- A repeated complete (fail) by the token that completed (failed) the job
        -- is accepted as a retry after a lost reply; it never raised PF001.
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            format('already %s this job: a %s with it is accepted, not refused',
                   CASE operation WHEN 'complete' THEN 'completed' ELSE 'failed' END, operation),
            'report only calls that raised PF001');
    ELSIF operation = 'release' AND pgfence._attempt_ended(job_id, attempt_token, '{released}') THEN
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            'already released this job: a release with it is accepted, not refused',
            'report only calls that raised PF001');
    ELSIF operation = 'snooze' AND (pgfence._attempt_ended(job_id, attempt_token, '{snoozed}')
          OR EXISTS (SELECT FROM pgfence.all_attempts a
                      WHERE a.job_id = report_rejection.job_id AND a.attempt_token = report_rejection.attempt_token
                        AND a.outcome = 'failed' AND starts_with(a.error, 'snooze limit reached'))) THEN
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            'already snoozed this job: a snooze with it is accepted, not refused',
            'report only calls that raised PF001');
    ELSIF operation = 'heartbeat' AND pgfence._attempt_ended(job_id, attempt_token, '{done,failed,released,snoozed}') THEN
        -- As heartbeat_many: a heartbeat that crossed its own attempt's end is no stale worker.
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            'ended its own attempt (complete, fail, release or snooze): a heartbeat crossing that is not recorded',
            'report only calls of an attempt that something else ended');
    END IF;
    IF NOT pgfence._token_held(job_id, attempt_token, j.attempt_token) THEN
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            format('never held an attempt of job %s: a refusal with it proves nothing', job_id),
            'report only calls that raised PF001, with the attempt_token claim returned for this job');
    END IF;
    PERFORM pgfence._record_rejection(job_id, attempt_token, operation,
        pgfence._fence_detail(j.status, j.attempt_token, attempt_token, j.last_error, j.reserved_by));
END $$;

COMMENT ON FUNCTION pgfence.report_rejection(bigint, uuid, text) IS
$$Record that a single heartbeat/complete/fail/release/snooze call with attempt_token was refused with PF001 (its own
transaction rolled back). Stored in pgfence.rejections while the job has fewer than 100 stored, else counted in
pgfence.rejection_overflow. Errors: PF002 unknown job, 22004, 22023 (unknown operation; the token never held
an attempt of this job; the token is current; it completed (failed, released) the job, so a complete (fail,
release, snooze) with it is accepted as a repeat; or, for a heartbeat, its attempt ended by its own complete,
fail, release or snooze, which heartbeat_many does not record either).$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('report_rejection', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
