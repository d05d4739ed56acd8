-- Revert pgfence:tables/history from pg
--
-- (No transaction around the move: the procedure commits each batch. Done jobs that
-- completed after data/finished_jobs was reverted, while the reworked complete was
-- still deployed, are in the history too: they are moved back first.)

CALL pgfence._move_history_to_jobs(10000);

BEGIN;

DROP PROCEDURE IF EXISTS pgfence._move_history_to_jobs(integer);
DROP PROCEDURE IF EXISTS pgfence._move_done_to_history(integer);
DROP VIEW IF EXISTS pgfence.all_attempts;
DROP VIEW IF EXISTS pgfence.all_jobs;
DROP TABLE IF EXISTS pgfence.history_partitions;
DROP TABLE IF EXISTS pgfence.history_settings;
DROP TABLE IF EXISTS pgfence.held_keys;
DROP TABLE IF EXISTS pgfence.finished_jobs;

COMMIT;
