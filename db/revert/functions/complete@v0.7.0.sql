-- Revert pgfence:functions/complete from pg (back to @v0.5.0)
--
-- Runs the @v0.5.0 script again (re-runnable: CREATE OR REPLACE, its rule rows):
-- complete_many keeps done jobs in pgfence.jobs again. Then the done jobs completed
-- since data/finished_jobs was reverted (the reworked complete was still deployed) are
-- moved back too, before the reverts of enqueue and enqueue_many (which come after this
-- one) stop looking at pgfence.held_keys: no done job's key is left held only there.
-- (No transaction around the move: the procedure commits each batch.)

\ir ../../deploy/functions/complete@v0.5.0.sql

CALL pgfence._move_history_to_jobs(10000);
