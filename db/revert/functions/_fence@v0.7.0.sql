-- Revert pgfence:functions/_fence from pg (back to @v0.6.0)
--
-- Runs the @v0.6.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- definitions that write no queue into attempts and rejections.

\ir ../../deploy/functions/_fence@v0.6.0.sql
