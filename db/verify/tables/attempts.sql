-- Verify pgfence:tables/attempts on pg

BEGIN;

SELECT job_id, attempt, attempt_token, worker, claimed_at, heartbeat_at, lease_expires_at, ended_at,
       outcome, error
  FROM pgfence.attempts WHERE false;
SELECT job_id, attempt_token, operation, caller, detail, rejected_at FROM pgfence.rejections WHERE false;

ROLLBACK;
