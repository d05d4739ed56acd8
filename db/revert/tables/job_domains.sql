-- Revert pgfence:tables/job_domains from pg
--
-- The columns back to their base types and their rules back to CHECKs of the table
-- (added NOT VALID under the lock, validated apart: SHARE UPDATE EXCLUSIVE, reads and
-- writes go on), pgfence.all_jobs made again as it was, the domains dropped.

\ir ../../include/lock_retry.sql
\ir ../../include/keep_view.sql

BEGIN;

SELECT pg_temp.keep_view('pgfence.all_jobs');
DROP VIEW pgfence.all_jobs;
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs'
    '    ALTER COLUMN status TYPE text, ALTER COLUMN recovery_policy TYPE text,'
    '    ALTER COLUMN queue TYPE text, ALTER COLUMN kind TYPE text,'
    '    ALTER COLUMN idempotency_key TYPE text, ALTER COLUMN payload TYPE jsonb,'
    '    ALTER COLUMN attempts TYPE integer, ALTER COLUMN reclaim_count TYPE integer,'
    '    ALTER COLUMN max_attempts TYPE integer,'
    '    ADD CONSTRAINT jobs_status_valid CHECK ('
    '        status IN (''queued'', ''processing'', ''done'', ''failed'', ''manual_review'', ''cancelled'')) NOT VALID,'
    '    ADD CONSTRAINT jobs_recovery_policy_valid CHECK (recovery_policy IN (''auto'', ''manual'')) NOT VALID,'
    '    ADD CONSTRAINT jobs_queue_length CHECK (char_length(queue) BETWEEN 1 AND 128) NOT VALID,'
    '    ADD CONSTRAINT jobs_kind_length CHECK (char_length(kind) BETWEEN 1 AND 128) NOT VALID,'
    '    ADD CONSTRAINT jobs_idempotency_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 255) NOT VALID,'
    '    ADD CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) = ''object'') NOT VALID,'
    '    ADD CONSTRAINT jobs_attempts_nonnegative CHECK (attempts >= 0 AND reclaim_count >= 0) NOT VALID,'
    '    ADD CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1) NOT VALID']);
SELECT pg_temp.restore_view('pgfence.all_jobs');
DROP DOMAIN pgfence.job_status, pgfence.recovery_policy, pgfence.job_name, pgfence.idempotency_key,
    pgfence.job_payload, pgfence.job_count, pgfence.max_attempts;

COMMIT;

BEGIN;

ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_status_valid;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_recovery_policy_valid;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_queue_length;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_kind_length;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_idempotency_key_length;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_payload_object;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_attempts_nonnegative;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_max_attempts_positive;

COMMIT;
