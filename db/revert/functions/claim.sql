-- Revert pgfence:functions/claim from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- claim whose lease knows no run timeout, and whose rows have no waited_s. The
-- functions with the new column are dropped first, in the same transaction (the
-- script's BEGIN warns that one is open, its COMMIT commits both): no moment
-- without claim.

BEGIN;
DROP FUNCTION IF EXISTS pgfence.claimed(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim_results(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim(text, text[], interval, integer, uuid);
DROP FUNCTION IF EXISTS pgfence._names_ok(text[]);

\ir ../../deploy/functions/claim@v0.7.0.sql
