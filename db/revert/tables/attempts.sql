-- Revert pgfence:tables/attempts from pg

BEGIN;

DROP TABLE pgfence.rejections;
DROP TABLE pgfence.attempts;

COMMIT;
