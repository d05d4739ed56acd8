-- Revert pgfence:functions/_checks from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- Argument checks shared by every public function. Each raises before anything
-- is written: 22004 for a NULL, 22023 for a bad value, always naming the argument
-- and carrying a HINT. Callers match the SQLSTATE, never the text.

CREATE OR REPLACE FUNCTION pgfence._raise_null(arg text, hint text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = format('pgfence: argument %s must not be NULL', arg),
        HINT = hint;
END $$;
COMMENT ON FUNCTION pgfence._raise_null(text, text) IS
  'Private: raise 22004 naming a NULL argument.';

CREATE OR REPLACE FUNCTION pgfence._raise_invalid(arg text, value text, problem text, hint text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('pgfence: invalid %s %s: %s', arg, coalesce(left(value, 200), 'NULL'), problem),
        HINT = hint;
END $$;
COMMENT ON FUNCTION pgfence._raise_invalid(text, text, text, text) IS
  'Private: raise 22023 naming the argument, its (truncated) value and the problem.';

-- A name: kind, queue, worker_id. Not NULL, 1..128 characters, no whitespace at
-- either end: 'default ' would be a queue of its own that no worker of 'default'
-- ever claims from.
-- The *_ok predicates are the one statement of each rule: plain SQL, so they are
-- inlined into the expressions of the callers' fast paths; the _check_* functions
-- use them to decide and then say what is wrong.
CREATE OR REPLACE FUNCTION pgfence._name_ok(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NOT NULL AND value <> '' AND char_length(value) <= 128
       AND value = btrim(value, E' \t\n\r\f\x0B')  -- (\x0B: vertical tab; E'\v' is a plain v)
$$;
COMMENT ON FUNCTION pgfence._name_ok(text) IS
  'Private: true for a valid kind, queue or worker id (not NULL, 1..128 characters, no whitespace at either end), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_name(arg text, value text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._name_ok(value) THEN
        RETURN;
    ELSIF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, format('pass a %s of 1 to 128 characters', arg));
    ELSIF value <> '' AND char_length(value) <= 128 THEN
        PERFORM pgfence._raise_invalid(arg, quote_literal(value), 'starts or ends with whitespace',
            format('pass the %s without leading or trailing spaces, tabs or line breaks', arg));
    ELSE
        PERFORM pgfence._raise_invalid(arg, quote_literal(value),
            format('length %s is outside 1..128', char_length(value)),
            format('pass a %s of 1 to 128 characters', arg));
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_name(text, text) IS
  'Private: check a kind, queue or worker id (not NULL, 1..128 characters).';

-- An interval is compared as if a month were 30 days and a day 24 hours, but added
-- to a timestamp it moves by calendar months and calendar days (23 or 25 hours
-- across a daylight-saving change). The two agree closely enough unless its parts
-- have opposite signs: '1200000 mons -36000000 days 1 hour' compares as 1 hour and
-- adds 1,436 years; '1 mon -30 days 1 hour' added to 31 January moves 1 day 1 hour;
-- '-1 day 24:00:00.5' compares as 0.5 s and can move -59 minutes. Bounds on a lease,
-- a retry delay or a retention are only true of intervals whose months, days and
-- time agree in sign (NULL for NULL).
-- (One expression, no FROM, so that it is inlined into its callers.)
CREATE OR REPLACE FUNCTION pgfence._interval_signs_agree(value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT greatest(sign(extract(year FROM value) * 12 + extract(month FROM value)), sign(extract(day FROM value)),
                    sign(extract(hour FROM value) * 3600 + extract(minute FROM value) * 60 + extract(second FROM value)))
         * least(sign(extract(year FROM value) * 12 + extract(month FROM value)), sign(extract(day FROM value)),
                 sign(extract(hour FROM value) * 3600 + extract(minute FROM value) * 60 + extract(second FROM value)))
           >= 0
$$;
COMMENT ON FUNCTION pgfence._interval_signs_agree(interval) IS
  'Private: false when the months, days and time of an interval do not all have the same sign (or zero).';

-- An interval argument within lo..hi: not NULL, and its months, days and time do
-- not have opposite signs (see _interval_signs_agree).
CREATE OR REPLACE FUNCTION pgfence._check_interval(arg text, value interval, lo interval, hi interval, bounds text, hint text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, hint);
    ELSIF value < lo OR value > hi THEN
        PERFORM pgfence._raise_invalid(arg, value::text, format('outside %s', bounds), hint);
    ELSIF NOT pgfence._interval_signs_agree(value) THEN
        PERFORM pgfence._raise_invalid(arg, value::text,
            'has parts (months, days, time) of opposite signs: its length depends on the date', hint);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_interval(text, interval, interval, interval, text, text) IS
  'Private: check an interval argument is not NULL, within lo..hi (said as bounds), and its parts not of opposite signs.';

-- A lease: not NULL, 1 ms .. 1 day.
CREATE OR REPLACE FUNCTION pgfence._check_lease(lease interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_interval('lease', lease, interval '1 millisecond', interval '1 day', '1 millisecond..1 day',
        'pass a lease between 1 millisecond and 1 day, e.g. ''30 seconds''');
END $$;
COMMENT ON FUNCTION pgfence._check_lease(interval) IS
  'Private: check a lease interval (1 millisecond .. 1 day).';

-- An array argument: NULL (left to the caller), empty, or one-dimensional and
-- indexed from 1. The element checks find a bad element by its position in
-- unnest() and name it arg[position]: for '[0:1]={...}' or a 2-D array that
-- subscript would name, and read back, another element.
CREATE OR REPLACE FUNCTION pgfence._array_ok(value anyarray) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR array_ndims(value) IS NULL OR (array_ndims(value) = 1 AND array_lower(value, 1) = 1)
$$;
COMMENT ON FUNCTION pgfence._array_ok(anyarray) IS
  'Private: true for NULL, an empty array, or a one-dimensional array indexed from 1.';

CREATE OR REPLACE FUNCTION pgfence._check_array(arg text, value anyarray) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgfence._array_ok(value) THEN
        PERFORM pgfence._raise_invalid(arg, array_dims(value),
            CASE WHEN array_ndims(value) > 1 THEN format('has %s dimensions', array_ndims(value))
                 ELSE format('starts at index %s', array_lower(value, 1)) END,
            'pass a one-dimensional array indexed from 1, e.g. ARRAY[...] or ''{...}''');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_array(text, anyarray) IS
  'Private: check an array argument is one-dimensional and indexed from 1 (NULL and empty pass).';

-- A count in lo..hi (max_jobs, max_attempts, batch sizes).
CREATE OR REPLACE FUNCTION pgfence._check_range(arg text, value integer, lo integer, hi integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, format('pass a %s between %s and %s', arg, lo, hi));
    ELSIF value < lo OR value > hi THEN
        PERFORM pgfence._raise_invalid(arg, value::text, format('outside %s..%s', lo, hi),
            format('pass a %s between %s and %s', arg, lo, hi));
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_range(text, integer, integer, integer) IS
  'Private: check an integer argument is not NULL and within lo..hi.';

-- A payload: not NULL, a JSON object, at most 1 MiB as jsonb.
-- The size is the uncompressed jsonb's: a value read from a table column arrives
-- still compressed, and pg_column_size would measure that (a 50 MB payload
-- compressed to 572 kB passed). '{}' || value is value itself, decompressed.
CREATE OR REPLACE FUNCTION pgfence._payload_size(value jsonb) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT pg_column_size('{}'::jsonb || value)
$$;
COMMENT ON FUNCTION pgfence._payload_size(jsonb) IS
  'Private: the size of a jsonb value uncompressed, in bytes.';

CREATE OR REPLACE FUNCTION pgfence._payload_ok(value jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT value IS NOT NULL AND jsonb_typeof(value) = 'object' AND pgfence._payload_size(value) <= 1048576
$$;
COMMENT ON FUNCTION pgfence._payload_ok(jsonb) IS
  'Private: true for a valid payload (a JSON object of at most 1 MiB as jsonb), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_payload(arg text, value jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._payload_ok(value) THEN
        RETURN;
    ELSIF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, 'pass a JSON object, e.g. ''{}''');
    ELSIF jsonb_typeof(value) <> 'object' THEN
        PERFORM pgfence._raise_invalid(arg, left(value::text, 60), format('is a JSON %s, not an object', jsonb_typeof(value)),
            'payloads are JSON objects so that fields can be added later; wrap the value, e.g. {"value": ...}');
    ELSIF pgfence._payload_size(value) > 1048576 THEN
        PERFORM pgfence._raise_invalid(arg, format('(%s bytes)', pgfence._payload_size(value)), 'larger than the 1 MiB payload limit',
            'store large data in your own table and put its key in the payload');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_payload(text, jsonb) IS
  'Private: check a payload (a JSON object of at most 1 MiB as jsonb).';

-- When a job may run: NULL (now) or a finite timestamp. 'infinity' would queue a
-- job that never runs, and '-infinity' breaks the age arithmetic of stats().
CREATE OR REPLACE FUNCTION pgfence._run_at_ok(value timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR isfinite(value)
$$;
COMMENT ON FUNCTION pgfence._run_at_ok(timestamptz) IS
  'Private: true for a valid run_at (NULL, or a finite timestamp), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_run_at(arg text, value timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgfence._run_at_ok(value) THEN
        PERFORM pgfence._raise_invalid(arg, value::text, 'is not a finite timestamp',
            'pass NULL to run the job now, or the time from which it may run');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_run_at(text, timestamptz) IS
  'Private: check a run_at (NULL, or a finite timestamp).';

-- Parallel arrays of a batch call: not NULL, no NULL elements where required,
-- 1..10000 elements, equal lengths, no duplicate job ids.
CREATE OR REPLACE FUNCTION pgfence._check_batch(job_ids bigint[], attempt_tokens uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(job_ids);
BEGIN
    IF job_ids IS NULL THEN
        PERFORM pgfence._raise_null('job_ids', 'pass an array of job ids');
    ELSIF attempt_tokens IS NULL THEN
        PERFORM pgfence._raise_null('attempt_tokens', 'pass one attempt token per job id');
    END IF;
    IF NOT (pgfence._array_ok(job_ids) AND pgfence._array_ok(attempt_tokens)) THEN  -- (inlined: no call when fine)
        PERFORM pgfence._check_array('job_ids', job_ids);
        PERFORM pgfence._check_array('attempt_tokens', attempt_tokens);
    END IF;
    PERFORM pgfence._check_range('job_ids length', n, 1, 10000);
    PERFORM pgfence._check_isolation('a fenced call (heartbeat, complete, fail, release, or their _many form)');
    IF cardinality(attempt_tokens) <> n THEN
        PERFORM pgfence._raise_invalid('attempt_tokens length', cardinality(attempt_tokens)::text,
            format('job_ids has %s elements', n), 'pass exactly one attempt token per job id, in the same order');
    ELSIF array_position(job_ids, NULL) IS NOT NULL THEN
        PERFORM pgfence._raise_null(format('job_ids[%s]', array_position(job_ids, NULL)), 'every job id must be given');
    ELSIF array_position(attempt_tokens, NULL) IS NOT NULL THEN
        PERFORM pgfence._raise_null(format('attempt_tokens[%s]', array_position(attempt_tokens, NULL)),
            'pass the attempt_token that claim returned for each job');
    ELSIF n > 1 AND (SELECT count(DISTINCT x) FROM unnest(job_ids) x) <> n THEN
        PERFORM pgfence._raise_invalid('job_ids',
            (SELECT min(x)::text FROM unnest(job_ids) x GROUP BY x HAVING count(*) > 1 LIMIT 1),
            'appears more than once', 'pass each job id once per call');
    END IF;
    RETURN n;
END $$;
COMMENT ON FUNCTION pgfence._check_batch(bigint[], uuid[]) IS
  'Private: check the job_ids/attempt_tokens arrays of a batch call; returns their length.';

-- The fenced calls update rows other sessions update too; under REPEATABLE READ
-- or SERIALIZABLE that surfaces as a raw 40001 deep inside. Refuse up front.
CREATE OR REPLACE FUNCTION pgfence._check_isolation(fn text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'PF004',
            MESSAGE = format('pgfence: %s needs READ COMMITTED, not %s', fn, current_setting('transaction_isolation')),
            HINT = 'run it in its own transaction (autocommit) or at READ COMMITTED isolation';
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_isolation(text) IS
  'Private: raise PF004 unless the transaction is READ COMMITTED.';

-- The role calling pgfence, even from inside a SECURITY DEFINER function (where
-- current_user is the owner): the SET ROLE in effect, else the session user.
-- Not spoofable: a session can only SET ROLE to roles it is a member of.
CREATE OR REPLACE FUNCTION pgfence._invoker() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('role') = 'none' THEN session_user::text ELSE current_setting('role') END
$$;
COMMENT ON FUNCTION pgfence._invoker() IS
  'Private: the calling role (SET ROLE respected), also inside SECURITY DEFINER functions.';

DROP FUNCTION pgfence._check_result(text, jsonb);
DROP FUNCTION pgfence._result_ok(jsonb);
DROP FUNCTION pgfence._check_json_limits(text, jsonb);
DROP FUNCTION pgfence._json_nesting_ok(jsonb, integer);
DROP FUNCTION pgfence._printable(text);
DROP FUNCTION pgfence._modifier_chars();
DROP FUNCTION pgfence._hex4(integer);
DROP FUNCTION pgfence._edge_chars();
DROP FUNCTION pgfence._unsafe_chars();
SELECT pgfence._apply_privileges();

COMMIT;
