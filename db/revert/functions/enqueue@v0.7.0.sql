-- Revert pgfence:functions/enqueue from pg (back to @v0.5.0)
--
-- Runs the @v0.5.0 script again (re-runnable: CREATE OR REPLACE, its rule rows):
-- enqueue without held keys; then drops the helpers the rework added (enqueue_many
-- and requeue, which call them, are reverted before this).

\ir ../../deploy/functions/enqueue@v0.5.0.sql

BEGIN;
DROP FUNCTION IF EXISTS pgfence._key_held_after_insert(text, text);
DROP FUNCTION IF EXISTS pgfence._held_key(text, text);
COMMIT;
