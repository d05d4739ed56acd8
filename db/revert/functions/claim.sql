-- Revert pgfence:functions/claim from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- claim whose lease knows no run timeout, whose rows have no waited_s, and which takes
-- no queue_set. The functions with the new column or argument, and the helpers only
-- they call (_claim_controlled over a set included: the revert of functions/queue_controls
-- leaves it as a wrapper for this claim), are dropped first, in the same transaction (the script's BEGIN warns
-- that one is open, its COMMIT commits both): no moment without claim.

BEGIN;
DROP FUNCTION IF EXISTS pgfence.claimed(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim_results(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim(text, text[], interval, integer, uuid);
DROP FUNCTION IF EXISTS pgfence.claim(text, text[], interval, integer, uuid, text);
DROP FUNCTION IF EXISTS pgfence._claim_refuse(text, text[], interval, integer, text);
DROP FUNCTION IF EXISTS pgfence._claim_from_set(jsonb, integer, integer, timestamptz);
DROP FUNCTION IF EXISTS pgfence._claim_controlled(jsonb, integer, integer, timestamptz);  -- (functions/queue_controls left it)
DROP FUNCTION IF EXISTS pgfence._queue_set_of(text[]);
DROP FUNCTION IF EXISTS pgfence._check_queues(text, text[], text);
DROP FUNCTION IF EXISTS pgfence._names_ok(text[]);
DROP FUNCTION IF EXISTS pgfence._request_lock_key(text, uuid);

\ir ../../deploy/functions/claim@v0.7.0.sql
