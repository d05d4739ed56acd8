-- Revert pgfence:functions/queue_sets from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.queue_sets();
DROP FUNCTION IF EXISTS pgfence.drop_queue_set(text);
DROP FUNCTION IF EXISTS pgfence.define_queue_set(text, text[]);
DROP FUNCTION IF EXISTS pgfence._check_set_owner(text, text);
DROP FUNCTION IF EXISTS pgfence._queue_set_tag(text);
DELETE FROM pgfence.routine_grants WHERE routine IN ('define_queue_set', 'drop_queue_set', 'queue_sets');

COMMIT;
