-- Deploy pgfence:tables/jobs_no_truncate to pg
-- requires: tables/jobs
--
-- pgfence.jobs is vacuumed without truncating it. A vacuum that freed pages at the end
-- of a table gives them back by truncating it, under an ACCESS EXCLUSIVE lock that it
-- tries for (without queueing) for up to 5 s and gives up as soon as anyone waits for
-- it. The claims and completions of a busy queue never leave the table unlocked that
-- long: in a 180 s soak (make bench's, 2 x 8 workers at 13-20k jobs/s) most of
-- autovacuum's passes over pgfence.jobs spent 1.4 to 7.7 s in that phase (its progress:
-- 'truncating heap'), no next pass could start meanwhile, the dead rows reached
-- 360,000 and the table grew. The pages at the end stay the table's, free for new rows
-- (the queue fills them again within seconds). The setting's lock (SHARE UPDATE
-- EXCLUSIVE) does not wait for reads or writes. A DBA who wants the room back runs
-- VACUUM (TRUNCATE) pgfence.jobs at a quiet time.

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY['ALTER TABLE pgfence.jobs SET (vacuum_truncate = false)']);

COMMIT;
