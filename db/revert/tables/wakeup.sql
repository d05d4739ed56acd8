-- Revert pgfence:tables/wakeup from pg

BEGIN;

DROP FUNCTION pgfence.wakeup_tags(text[]);
DROP FUNCTION pgfence._wakeup_tag(text);
DROP FUNCTION pgfence._wakeup_key();
DROP TABLE pgfence.wakeup_key;
DELETE FROM pgfence.routine_grants WHERE routine = 'wakeup_tags';

COMMIT;
