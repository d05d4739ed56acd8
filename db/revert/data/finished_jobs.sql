-- Revert pgfence:data/finished_jobs from pg
--
-- Moves the done jobs of the history back into pgfence.jobs (with their attempts, as
-- the older version stores them), 10,000 per committed transaction; those past their
-- retention are deleted instead. (No transaction: the procedure commits each batch.)

CALL pgfence._move_history_to_jobs(10000);
