-- Revert pgfence:tables/secret_key from pg

BEGIN;

DROP FUNCTION pgfence.wakeup_tags(text[]);
DROP FUNCTION pgfence._wakeup_tag(text);
DROP TABLE pgfence.secret_key;
DELETE FROM pgfence.routine_grants WHERE routine = 'wakeup_tags';

COMMIT;
