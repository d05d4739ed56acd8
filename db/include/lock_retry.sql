-- Included (\ir) by the scripts that change a hot table: pg_temp.locked(statements)
-- runs the statements in one transaction, taking each lock with lock_timeout 100 ms and
-- trying again (600 times, 50 ms apart) when one is not granted, so the claims and
-- completions queued behind a waiting ACCESS EXCLUSIVE request wait at most 100 ms per
-- try. A temporary function: it goes with the psql session, nothing of it stays in the
-- database. (Its statements are the scripts' own constants.)

CREATE FUNCTION pg_temp.locked(statements text[]) RETURNS void
LANGUAGE plpgsql AS $f$
DECLARE
    s text;
BEGIN
    FOR i IN 1..600 LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            FOREACH s IN ARRAY statements LOOP
                EXECUTE s;
            END LOOP;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    RAISE EXCEPTION 'a pgfence table stayed locked for 600 tries of 100 ms: %', statements[1]
        USING ERRCODE = 'lock_not_available',
              HINT = 'Run sqitch again when long transactions on pgfence''s tables have ended.';
END $f$;
