-- Revert pgfence:functions/release from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): a
-- CREATE OR REPLACE sets a function's settings to those its definition names, so
-- release_many is back to plan_cache_mode alone.

\ir ../../deploy/functions/release@v0.7.0.sql
