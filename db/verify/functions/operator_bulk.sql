-- Verify pgfence:functions/operator_bulk on pg

BEGIN;

SELECT 'pgfence.requeue_many(bigint[], text)'::regprocedure, 'pgfence.cancel_many(bigint[], text)'::regprocedure,
       'pgfence.mark_done_many(bigint[], text, jsonb)'::regprocedure, 'pgfence.purge_many(bigint[], text)'::regprocedure,
       'pgfence.preview_action(text, text, text, text, text, timestamptz, timestamptz)'::regprocedure,
       'pgfence.act_on_filter(text, text, jsonb, text, text, text, text, timestamptz, timestamptz, integer)'::regprocedure,
       'pgfence._act_on(text, bigint[], text, jsonb, jsonb, text, text, text, text, timestamptz, timestamptz)'::regprocedure,
       'pgfence._filter_matches(text, text, text, text, timestamptz, text, text, text, text, timestamptz, timestamptz)'::regprocedure;

ROLLBACK;
