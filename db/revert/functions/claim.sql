-- Revert pgfence:functions/claim from pg

BEGIN;

DROP FUNCTION pgfence.claimed(text, uuid[]);
DROP FUNCTION pgfence.claim(text, text[], interval, integer, uuid);
DROP FUNCTION pgfence._request_token(text, bigint, integer);
DROP FUNCTION pgfence._request_prefix(uuid, timestamptz);
DROP FUNCTION pgfence._queued_queues();

COMMIT;
