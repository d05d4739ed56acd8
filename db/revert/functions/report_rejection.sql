-- Revert pgfence:functions/report_rejection from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows):
-- report_rejection without the operation snooze.

\ir ../../deploy/functions/report_rejection@v0.7.0.sql
