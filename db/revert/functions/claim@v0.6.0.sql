-- Revert pgfence:functions/claim from pg (back to @v0.4.0)
--
-- The deploy script of @v0.4.0 is re-runnable (CREATE OR REPLACE, rows upserted):
-- it puts back claim with its checks and list search inline and claimed() with its
-- own body; then what the rework added goes.

\ir ../../deploy/functions/claim@v0.4.0.sql

BEGIN;

DROP FUNCTION IF EXISTS pgfence.claim_results(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence._claim_refuse(text, text[], interval, integer);
DROP FUNCTION IF EXISTS pgfence._claim_from_list(text[], integer, timestamptz);
DELETE FROM pgfence.routine_grants WHERE routine = 'claim_results';
SELECT pgfence._apply_privileges();

COMMIT;
