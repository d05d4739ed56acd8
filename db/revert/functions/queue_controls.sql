-- Revert pgfence:functions/queue_controls from pg (back to @v0.7.0)
--
-- What the rework added goes (set_queue_rate_limit; queue_limits with the rate columns,
-- dropped because its @v0.7.0 result differs), the @v0.7.0 script runs again
-- (re-runnable: CREATE OR REPLACE, its rule rows), then the bucket helpers go (nothing
-- of @v0.7.0 calls them). _claim_controlled over a set stays, as a wrapper of the
-- @v0.7.0 list body: the reworked claim (functions/claim, reverted after this, in a
-- later transaction, or not at all by a revert to a change between them) passes it a
-- stored set while a queue has a control, and sets stay defined until tables/queue_sets
-- is reverted. The revert of functions/claim drops it, with that claim.

BEGIN;

DROP FUNCTION IF EXISTS pgfence.set_queue_rate_limit(text, integer, interval);
DROP FUNCTION IF EXISTS pgfence.queue_limits();
DELETE FROM pgfence.routine_grants WHERE routine = 'set_queue_rate_limit';

COMMIT;

\ir ../../deploy/functions/queue_controls@v0.7.0.sql

BEGIN;

CREATE OR REPLACE FUNCTION pgfence._claim_controlled(members jsonb, names integer, max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT pgfence._claim_controlled(CASE WHEN members IS NOT NULL THEN ARRAY(SELECT jsonb_object_keys(members)) END,
                                     max_jobs, as_of)
$$;
DROP FUNCTION IF EXISTS pgfence._rate_allowance(integer, interval, double precision, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS pgfence._rate_tokens(integer, interval, double precision, timestamptz, timestamptz);
SELECT pgfence._apply_privileges();  -- (the wrapper: the owner's, no grant to PUBLIC)

COMMIT;
