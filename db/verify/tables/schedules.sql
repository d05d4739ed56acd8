-- Verify pgfence:tables/schedules on pg

BEGIN;

SELECT name, cron, every, cron_minutes, cron_hours, cron_days, cron_months, cron_weekdays, cron_days_any,
       cron_weekdays_any, kind, payload, queue, priority, max_attempts, recovery_policy, time_zone, catch_up, slot_key,
       paused_at, paused_by, created_at, created_by, next_fire_at, last_fire_at, last_slot, last_job_id,
       last_error, last_error_at
  FROM pgfence.schedules WHERE false;
SELECT schedule, slot, job_id, fired_at FROM pgfence.schedule_slots WHERE false;

ROLLBACK;
