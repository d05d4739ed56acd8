-- Deploy pgfence:functions/_checks to pg
-- requires: schema

BEGIN;

-- Argument checks shared by every public function. Each raises before anything
-- is written: 22004 for a NULL, 22023 for a bad value, always naming the argument
-- and carrying a HINT. Callers match the SQLSTATE, never the text.

CREATE FUNCTION pgfence._raise_null(arg text, hint text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = format('pgfence: argument %s must not be NULL', arg),
        HINT = hint;
END $$;
COMMENT ON FUNCTION pgfence._raise_null(text, text) IS
  'Private: raise 22004 naming a NULL argument.';

CREATE FUNCTION pgfence._raise_invalid(arg text, value text, problem text, hint text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('pgfence: invalid %s %s: %s', arg, coalesce(left(value, 200), 'NULL'), problem),
        HINT = hint;
END $$;
COMMENT ON FUNCTION pgfence._raise_invalid(text, text, text, text) IS
  'Private: raise 22023 naming the argument, its (truncated) value and the problem.';

-- A name: kind, queue, worker_id. Not NULL, 1..128 characters.
-- The *_ok predicates are the one statement of each rule: plain SQL, so they are
-- inlined into the expressions of the callers' fast paths; the _check_* functions
-- use them to decide and then say what is wrong.
CREATE FUNCTION pgfence._name_ok(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NOT NULL AND value <> '' AND char_length(value) <= 128
$$;
COMMENT ON FUNCTION pgfence._name_ok(text) IS
  'Private: true for a valid kind, queue or worker id (not NULL, 1..128 characters), never NULL.';

CREATE FUNCTION pgfence._check_name(arg text, value text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._name_ok(value) THEN
        RETURN;
    ELSIF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, format('pass a %s of 1 to 128 characters', arg));
    ELSE
        PERFORM pgfence._raise_invalid(arg, quote_literal(value),
            format('length %s is outside 1..128', char_length(value)),
            format('pass a %s of 1 to 128 characters', arg));
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_name(text, text) IS
  'Private: check a kind, queue or worker id (not NULL, 1..128 characters).';

-- A lease: not NULL, 1 ms .. 1 day.
CREATE FUNCTION pgfence._check_lease(lease interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF lease IS NULL THEN
        PERFORM pgfence._raise_null('lease', 'pass a lease between 1 millisecond and 1 day, e.g. ''30 seconds''');
    ELSIF lease < interval '1 millisecond' OR lease > interval '1 day' THEN
        PERFORM pgfence._raise_invalid('lease', lease::text, 'must be between 1 millisecond and 1 day',
            'pass a lease between 1 millisecond and 1 day, e.g. ''30 seconds''');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_lease(interval) IS
  'Private: check a lease interval (1 millisecond .. 1 day).';

-- A count in lo..hi (max_jobs, max_attempts, batch sizes).
CREATE FUNCTION pgfence._check_range(arg text, value integer, lo integer, hi integer) RETURNS void
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
CREATE FUNCTION pgfence._payload_ok(value jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT value IS NOT NULL AND jsonb_typeof(value) = 'object' AND pg_column_size(value) <= 1048576
$$;
COMMENT ON FUNCTION pgfence._payload_ok(jsonb) IS
  'Private: true for a valid payload (a JSON object of at most 1 MiB as jsonb), never NULL.';

CREATE FUNCTION pgfence._check_payload(arg text, value jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._payload_ok(value) THEN
        RETURN;
    ELSIF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, 'pass a JSON object, e.g. ''{}''');
    ELSIF jsonb_typeof(value) <> 'object' THEN
        PERFORM pgfence._raise_invalid(arg, left(value::text, 60), format('is a JSON %s, not an object', jsonb_typeof(value)),
            'payloads are JSON objects so that fields can be added later; wrap the value, e.g. {"value": ...}');
    ELSIF pg_column_size(value) > 1048576 THEN
        PERFORM pgfence._raise_invalid(arg, format('(%s bytes)', pg_column_size(value)), 'larger than the 1 MiB payload limit',
            'store large data in your own table and put its key in the payload');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_payload(text, jsonb) IS
  'Private: check a payload (a JSON object of at most 1 MiB as jsonb).';

-- Parallel arrays of a batch call: not NULL, no NULL elements where required,
-- 1..10000 elements, equal lengths, no duplicate job ids.
CREATE FUNCTION pgfence._check_batch(job_ids bigint[], attempt_tokens uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(job_ids);
BEGIN
    IF job_ids IS NULL THEN
        PERFORM pgfence._raise_null('job_ids', 'pass an array of job ids');
    ELSIF attempt_tokens IS NULL THEN
        PERFORM pgfence._raise_null('attempt_tokens', 'pass one attempt token per job id');
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
CREATE FUNCTION pgfence._check_isolation(fn text) RETURNS void
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
CREATE FUNCTION pgfence._invoker() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('role') = 'none' THEN session_user::text ELSE current_setting('role') END
$$;
COMMENT ON FUNCTION pgfence._invoker() IS
  'Private: the calling role (SET ROLE respected), also inside SECURITY DEFINER functions.';

COMMIT;
