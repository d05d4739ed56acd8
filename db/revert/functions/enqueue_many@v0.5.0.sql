-- Revert pgfence:functions/enqueue_many from pg (back to @v0.4.0)
--
-- The deploy script of @v0.4.0 is re-runnable: it puts enqueue_many's checks back
-- inline; then the helper the rework added goes.

\ir ../../deploy/functions/enqueue_many@v0.4.0.sql

BEGIN;

DROP FUNCTION IF EXISTS pgfence._check_enqueue_many_inputs(text[], jsonb[], text, integer[], timestamptz[],
                                                           integer, text, text[]);

COMMIT;
