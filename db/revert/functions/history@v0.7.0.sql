-- Revert pgfence:functions/history from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.set_history_partition_width(interval);
DROP FUNCTION IF EXISTS pgfence.maintain_history();
DROP FUNCTION IF EXISTS pgfence._maintain_history();
DROP FUNCTION IF EXISTS pgfence._utc_literal(timestamptz);
DROP FUNCTION IF EXISTS pgfence._history_partition_name(timestamptz);
DELETE FROM pgfence.routine_grants WHERE routine IN ('maintain_history', 'set_history_partition_width');

COMMIT;
