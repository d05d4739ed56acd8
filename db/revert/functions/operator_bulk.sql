-- Revert pgfence:functions/operator_bulk from pg

BEGIN;

DROP FUNCTION pgfence.act_on_filter(text, text, jsonb, text, text, text, text, timestamptz, timestamptz, integer);
DROP FUNCTION pgfence.preview_action(text, text, text, text, text, timestamptz, timestamptz);
DROP FUNCTION pgfence._filtered(text, text, text, text, text, timestamptz, timestamptz, integer);
DROP FUNCTION pgfence._check_filter(text, text, text, text, timestamptz, timestamptz);
DROP FUNCTION pgfence.purge_many(bigint[], text);
DROP FUNCTION pgfence.mark_done_many(bigint[], text, jsonb);
DROP FUNCTION pgfence.cancel_many(bigint[], text);
DROP FUNCTION pgfence.requeue_many(bigint[], text);
DROP FUNCTION pgfence._act_on(text, bigint[], text, jsonb, jsonb);
DROP FUNCTION pgfence._check_action(text, text, jsonb);
DROP FUNCTION pgfence._action_statuses(text);
DROP FUNCTION pgfence._check_job_ids(bigint[]);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('requeue_many', 'cancel_many', 'mark_done_many', 'purge_many', 'preview_action', 'act_on_filter');

COMMIT;
