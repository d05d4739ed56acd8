-- Revert pgfence:tables/history_counts from pg

BEGIN;

DROP TABLE pgfence.history_count_state;
DROP TABLE pgfence.history_count_marks;
DROP TABLE pgfence.history_counts;

COMMIT;
