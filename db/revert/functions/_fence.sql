-- Revert pgfence:functions/_fence from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): a
-- CREATE OR REPLACE sets a function's settings to those its definition names, so
-- _record_rejection and _record_rejections are back to none.

\ir ../../deploy/functions/_fence@v0.7.0.sql
