-- Verify pgfence:tables/sweeper_pause on pg

BEGIN;

SELECT paused_at, paused_by FROM pgfence.sweeper_status WHERE false;

ROLLBACK;
