-- Revert pgfence:functions/queue_controls from pg (back to @v0.7.0)
--
-- What the rework added goes (set_queue_rate_limit; queue_limits with the rate columns,
-- dropped because its @v0.7.0 result differs), the @v0.7.0 script runs again
-- (re-runnable: CREATE OR REPLACE, its rule rows), then the bucket helpers go (nothing
-- of @v0.7.0 calls them), and _claim_controlled over a set: last, since the list
-- signature calls it until the @v0.7.0 script has replaced that (each part here is a
-- transaction of its own). Only claim(queue_set) calls it otherwise, and no set can be
-- defined or dropped once functions/queue_sets, after this in the plan, is reverted.

BEGIN;

DROP FUNCTION IF EXISTS pgfence.set_queue_rate_limit(text, integer, interval);
DROP FUNCTION IF EXISTS pgfence.queue_limits();
DELETE FROM pgfence.routine_grants WHERE routine = 'set_queue_rate_limit';

COMMIT;

\ir ../../deploy/functions/queue_controls@v0.7.0.sql

BEGIN;

DROP FUNCTION IF EXISTS pgfence._claim_controlled(jsonb, integer, integer, timestamptz);
DROP FUNCTION IF EXISTS pgfence._rate_allowance(integer, interval, double precision, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS pgfence._rate_tokens(integer, interval, double precision, timestamptz, timestamptz);

COMMIT;
