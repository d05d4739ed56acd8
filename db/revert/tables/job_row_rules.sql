-- Revert pgfence:tables/job_row_rules from pg
--
-- The five CHECKs back as they were (added NOT VALID under the lock, validated apart:
-- SHARE UPDATE EXCLUSIVE, reads and writes go on), the function dropped.

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs DROP CONSTRAINT jobs_row_rules,'
    '    ADD CONSTRAINT jobs_processing_has_lease CHECK ('
    '        status <> ''processing'''
    '        OR (attempt_token IS NOT NULL AND lease_expires_at IS NOT NULL'
    '            AND reserved_by IS NOT NULL AND reserved_at IS NOT NULL AND attempts >= 1)) NOT VALID,'
    '    ADD CONSTRAINT jobs_queued_has_no_lease CHECK ('
    '        status <> ''queued'''
    '        OR (attempt_token IS NULL AND lease_expires_at IS NULL'
    '            AND reserved_by IS NULL AND reserved_at IS NULL AND heartbeat_at IS NULL)) NOT VALID,'
    '    ADD CONSTRAINT jobs_lease_only_when_processing CHECK ('
    '        (status = ''processing'') = (lease_expires_at IS NOT NULL)) NOT VALID,'
    '    ADD CONSTRAINT jobs_finished_at_terminal CHECK ('
    '        (status IN (''done'', ''failed'', ''cancelled'')) = (finished_at IS NOT NULL)) NOT VALID,'
    '    ADD CONSTRAINT jobs_lease_within_timeout CHECK ('
    '        timeout IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= reserved_at + timeout) NOT VALID']);
DROP FUNCTION pgfence._job_row_rules(bigint, text, integer, uuid, text, timestamptz, timestamptz, timestamptz,
                                     timestamptz, interval);

COMMIT;

BEGIN;

ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_processing_has_lease;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_queued_has_no_lease;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_lease_only_when_processing;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_finished_at_terminal;
ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_lease_within_timeout;

COMMIT;
