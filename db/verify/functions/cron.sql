-- Verify pgfence:functions/cron on pg

BEGIN;

SELECT 'pgfence.cron_next(text, timestamptz, text)'::regprocedure,
       'pgfence._cron_parse(text)'::regprocedure,
       'pgfence._cron_field(text, text, integer, integer, text)'::regprocedure,
       'pgfence._cron_next(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamptz, text)'::regprocedure,
       'pgfence._cron_next_local(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamp)'::regprocedure,
       'pgfence._local_instant(timestamp, text)'::regprocedure,
       'pgfence._check_time_zone(text, text)'::regprocedure;
SELECT 1 / (pgfence.cron_next('0 0 29 2 *', '2025-01-01 00:00+00', 'UTC') = '2028-02-29 00:00+00')::int;

ROLLBACK;
