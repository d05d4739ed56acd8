-- Revert pgfence:functions/cron from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.cron_next(text, timestamptz, text);
DROP FUNCTION IF EXISTS pgfence._check_time_zone(text, text);
DROP FUNCTION IF EXISTS pgfence._cron_next(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamptz, text);
DROP FUNCTION IF EXISTS pgfence._local_instant(timestamp, text);
DROP FUNCTION IF EXISTS pgfence._cron_next_local(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamp);
DROP FUNCTION IF EXISTS pgfence._cron_parse(text);
DROP FUNCTION IF EXISTS pgfence._cron_field(text, text, integer, integer, text);
DELETE FROM pgfence.routine_grants WHERE routine IN ('cron_next');

COMMIT;
