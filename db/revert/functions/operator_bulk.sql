-- Revert pgfence:functions/operator_bulk from pg

BEGIN;

DROP FUNCTION pgfence.act_on_filter(text, text, jsonb, text, text, text, text, timestamptz, timestamptz, integer);
DROP FUNCTION pgfence.preview_action(text, text, text, text, text, timestamptz, timestamptz);
DROP FUNCTION pgfence._filtered(text, text, text, text, text, timestamptz, timestamptz, integer);
-- (IF EXISTS for _filter_matches and the 11-argument _act_on: added after a first version of this change)
DROP FUNCTION IF EXISTS pgfence._filter_matches(text, text, text, text, timestamptz, text, text, text, text,
                                              timestamptz, timestamptz);
DROP FUNCTION pgfence._check_filter(text, text, text, text, timestamptz, timestamptz);
DROP FUNCTION pgfence.purge_many(bigint[], text);
DROP FUNCTION pgfence.mark_done_many(bigint[], text, jsonb);
DROP FUNCTION pgfence.cancel_many(bigint[], text);
DROP FUNCTION pgfence.requeue_many(bigint[], text);
DROP FUNCTION IF EXISTS pgfence._act_on(text, bigint[], text, jsonb, jsonb, text, text, text, text, timestamptz,
                                      timestamptz);
DROP FUNCTION IF EXISTS pgfence._act_on(text, bigint[], text, jsonb, jsonb);  -- (its signature before the filter check)
DROP FUNCTION pgfence._check_action(text, text, jsonb);
DROP FUNCTION pgfence._action_statuses(text);
DROP FUNCTION pgfence._check_job_ids(bigint[]);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('requeue_many', 'cancel_many', 'mark_done_many', 'purge_many', 'preview_action', 'act_on_filter');

COMMIT;
