-- Verify pgfence:functions/requeue on pg

BEGIN;

SELECT 'pgfence.requeue(bigint)'::regprocedure,
       'pgfence._raise_transition(bigint, text, text, text)'::regprocedure;

ROLLBACK;
