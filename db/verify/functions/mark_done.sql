-- Verify pgfence:functions/mark_done on pg

BEGIN;

SELECT 'pgfence.mark_done(bigint, text, jsonb)'::regprocedure, 'pgfence._mark_done(bigint, jsonb)'::regprocedure;

ROLLBACK;
