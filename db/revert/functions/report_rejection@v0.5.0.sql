-- Revert pgfence:functions/report_rejection from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- A single fenced call that raised PF001 is rolled back with its transaction, so
-- its refusal cannot record itself. The caller reports it here (the Python
-- client does so for every LeaseLost) so operators see zombie activity in
-- pgfence.rejections next to the attempt history. Batch calls record their own.
CREATE OR REPLACE FUNCTION pgfence.report_rejection(job_id bigint, attempt_token uuid, operation text)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    j record;
BEGIN
    IF job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job whose call was refused');
    ELSIF attempt_token IS NULL THEN
        PERFORM pgfence._raise_null('attempt_token', 'pass the attempt_token the refused call carried');
    ELSIF operation IS NULL THEN
        PERFORM pgfence._raise_null('operation', 'pass heartbeat, complete, fail or release');
    ELSIF operation NOT IN ('heartbeat', 'complete', 'fail', 'release') THEN
        PERFORM pgfence._raise_invalid('operation', quote_literal(operation), 'unknown operation',
            'pass heartbeat, complete, fail or release');
    END IF;
    SELECT x.status, x.attempt_token, x.last_error, x.reserved_by INTO j FROM pgfence.jobs x WHERE x.id = job_id;
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
    ELSIF operation = 'heartbeat' AND pgfence._attempt_ended(job_id, attempt_token, '{done,failed,released}') THEN
        -- As heartbeat_many: a heartbeat that crossed its own attempt's end is no stale worker.
        PERFORM pgfence._raise_invalid('attempt_token', attempt_token::text,
            'ended its own attempt (complete, fail or release): a heartbeat crossing that is not recorded',
            'report only calls of an attempt that something else ended');
    END IF;
    INSERT INTO pgfence.rejections (job_id, attempt_token, operation, caller, detail)
    VALUES (job_id, attempt_token, operation, pgfence._invoker(),
            pgfence._fence_detail(j.status, j.attempt_token, attempt_token, j.last_error, j.reserved_by));
END $$;

COMMENT ON FUNCTION pgfence.report_rejection(bigint, uuid, text) IS
$$Record that a single heartbeat/complete/fail/release call with attempt_token was refused with PF001 (its own
transaction rolled back). Errors: PF002 unknown job, 22004, 22023 (unknown operation; the token is current;
it completed (failed, released) the job, so a complete (fail, release) with it is accepted as a repeat; or, for a heartbeat, its
attempt ended by its own complete, fail or release, which heartbeat_many does not record either).$$;

SELECT pgfence._apply_privileges();

COMMIT;
