-- Revert pgfence:tables/schedules from pg

BEGIN;

DROP TABLE IF EXISTS pgfence.schedule_slots;
DROP TABLE IF EXISTS pgfence.schedules;

COMMIT;
