-- Deploy pgfence:functions/_checks to pg (reworked after @v0.7.0)
-- requires: functions/_checks@v0.7.0
--
-- Argument checks shared by every public function. Changed after @v0.3.0: names
-- refuse control characters anywhere and Unicode whitespace or invisible characters
-- at either end (not only ASCII; variation selectors and tag characters neither at
-- the start nor after an ASCII character at the end); payloads and results nest at most 64 levels (a
-- payload nested 1,000 deep killed the Python worker); results get the payload's
-- 1 MiB limit; error messages show such characters escaped (\uXXXX), never raw.
-- Changed after @v0.7.0: every literal with a backslash is an E'' string (the
-- backslashes doubled, so the regex engine reads the same escapes). These SQL bodies
-- are parsed in the caller's session, and with standard_conforming_strings off a plain
-- '\x9f' became a raw byte: every enqueue and claim failed (22021, invalid byte
-- sequence), and the rest warned. Now they read the same under either setting
-- (tests/test_sql_lint.py checks every routine's body for such literals).

BEGIN;

-- Argument checks shared by every public function. Each raises before anything
-- is written: 22004 for a NULL, 22023 for a bad value, always naming the argument
-- and carrying a HINT. Callers match the SQLSTATE, never the text.

-- Characters that never belong in a name and are never shown raw: C0 and C1
-- controls (newline, ESC, ...), DEL, line and paragraph separators, and the
-- bidirectional controls (marks, embeddings, overrides, isolates) that reorder what
-- a terminal or a page shows.
CREATE OR REPLACE FUNCTION pgfence._unsafe_chars() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT E'[\\x01-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u2028-\\u202e\\u2066-\\u2069]'
$$;
COMMENT ON FUNCTION pgfence._unsafe_chars() IS
  'Private: a regex bracket expression of the characters never allowed in a name (controls, separators, bidi controls).';

-- What may not start or end a name: Unicode whitespace (the White_Space property,
-- beyond the controls above) and the characters that show as nothing or as a blank
-- (zero-width space, joiners, word joiner, invisible operators, deprecated format
-- characters, byte order mark, Mongolian vowel separator, soft hyphen, combining
-- grapheme joiner, the Hangul fillers, the Khmer inherent vowels, braille blank,
-- interlinear annotation marks, the shorthand and musical format controls, and the
-- default-ignorable code points not yet assigned: U+2065, U+FFF0..FFF8, U+E0080..E00FF,
-- U+E01F0..E0FFF, which a later Unicode may make anything invisible). With the unsafe
-- characters and the modifiers below, every Default_Ignorable_Code_Point and White_Space
-- character of Unicode 15 is refused at the edge of a name (tests/test_input_limits.py).
CREATE OR REPLACE FUNCTION pgfence._edge_chars() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT E'[ \\u00a0\\u00ad\\u034f\\u115f\\u1160\\u1680\\u17b4\\u17b5\\u180e\\u2000-\\u200d\\u202f\\u205f-\\u2065\\u206a-\\u206f'
           || E'\\u2800\\u3000\\u3164\\ufeff\\uffa0\\ufff0-\\ufffb\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a'
           || E'\\U000e0080-\\U000e00ff\\U000e01f0-\\U000e0fff]'
$$;
COMMENT ON FUNCTION pgfence._edge_chars() IS
  'Private: a regex bracket expression of the characters a name may not start or end with (Unicode whitespace, invisible characters).';

-- Variation selectors (U+FE00..FE0F, the Mongolian free variation selectors U+180B..180D
-- and U+180F, the ideographic variation selectors U+E0100..E01EF) and tag characters:
-- they modify the character before them, so they may not start a name, nor end one after
-- an ASCII character, which they leave looking the same ('default' and U+FE0F); after an
-- emoji, a Mongolian letter or an ideograph they belong to it.
CREATE OR REPLACE FUNCTION pgfence._modifier_chars() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT E'[\\ufe00-\\ufe0f\\u180b-\\u180d\\u180f\\U000e0000-\\U000e007f\\U000e0100-\\U000e01ef]'
$$;
COMMENT ON FUNCTION pgfence._modifier_chars() IS
  'Private: a regex bracket expression of the variation selectors and tag characters (not at the start of a name, nor at its end after an ASCII character).';

-- A code point in hexadecimal, at least 4 digits (lpad(..., 4) cut U+E0020 to E002).
CREATE OR REPLACE FUNCTION pgfence._hex4(code integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN code < 4096 THEN lpad(to_hex(code), 4, '0') ELSE to_hex(code) END
$$;
COMMENT ON FUNCTION pgfence._hex4(integer) IS
  'Private: a code point in lower-case hexadecimal, at least 4 digits.';

-- A text as it may be shown in a message: every unsafe or invisible character written
-- as \uXXXX (the database's strings are shown in terminals, logs and web pages). The
-- same set as _text.printable in the Python client.
CREATE OR REPLACE FUNCTION pgfence._printable(value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN value !~ E'[\\x01-\\x1f\\x7f-\\x9f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u3164\\ufeff\\uffa0\\ufff0-\\ufffb\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0080-\\U000e00ff\\U000e01f0-\\U000e0fff]' THEN value
        ELSE (SELECT string_agg(CASE WHEN t.c ~ E'[\\x01-\\x1f\\x7f-\\x9f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u3164\\ufeff\\uffa0\\ufff0-\\ufffb\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0080-\\U000e00ff\\U000e01f0-\\U000e0fff]'
                                     THEN E'\\u' || pgfence._hex4(ascii(t.c)) ELSE t.c END, '' ORDER BY t.n)
                FROM regexp_split_to_table(value, '') WITH ORDINALITY AS t(c, n))
    END
$$;
COMMENT ON FUNCTION pgfence._printable(text) IS
  E'Private: the text with control, bidirectional and invisible characters written as \\uXXXX (NULL for NULL).';

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
        MESSAGE = format('pgfence: invalid %s %s: %s', arg, coalesce(pgfence._printable(left(value, 200)), 'NULL'),
                         problem),
        HINT = hint;
END $$;
COMMENT ON FUNCTION pgfence._raise_invalid(text, text, text, text) IS
  'Private: raise 22023 naming the argument, its (truncated, escaped) value and the problem.';

-- A name: kind, queue, worker_id. Not NULL, 1..128 characters, no control, separator
-- or bidirectional control character anywhere (a newline or an ESC in a queue name
-- reached operators' terminals), and no whitespace or invisible character at either
-- end: 'default ' (or 'default' and a no-break space) would be a queue of its own
-- that no worker of 'default' ever claims from.
-- The *_ok predicates are the one statement of each rule: plain SQL, so they are
-- inlined into the expressions of the callers' fast paths; the _check_* functions
-- use them to decide and then say what is wrong.
CREATE OR REPLACE FUNCTION pgfence._name_ok(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NOT NULL AND value <> '' AND char_length(value) <= 128
       AND value !~ (pgfence._unsafe_chars() || '|^' || pgfence._edge_chars() || '|' || pgfence._edge_chars() || '$'
                     || '|^' || pgfence._modifier_chars() || E'|[\\x01-\\x7f]' || pgfence._modifier_chars() || '+$')
$$;
COMMENT ON FUNCTION pgfence._name_ok(text) IS
  'Private: true for a valid kind, queue or worker id (not NULL, 1..128 characters, no control or bidi character, no whitespace or invisible character at either end), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_name(arg text, value text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad text;
BEGIN
    IF pgfence._name_ok(value) THEN
        RETURN;
    ELSIF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, format('pass %s as a name of 1 to 128 characters', arg));
    ELSIF value = '' OR char_length(value) > 128 THEN
        PERFORM pgfence._raise_invalid(arg, quote_literal(value),
            format('length %s is outside 1..128', char_length(value)),
            format('pass %s as a name of 1 to 128 characters', arg));
    END IF;
    v_bad := substring(value FROM pgfence._unsafe_chars());
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._raise_invalid(arg, quote_literal(value),
            format('contains the control character U+%s at position %s', upper(pgfence._hex4(ascii(v_bad))),
                   strpos(value, v_bad)),
            format('pass a %s without control characters (newlines, tabs, escapes), line separators or '
                   'bidirectional controls', arg));
    END IF;
    v_bad := coalesce(substring(value FROM '^' || pgfence._edge_chars()),
                      substring(value FROM pgfence._edge_chars() || '$'),
                      substring(value FROM '^' || pgfence._modifier_chars()),
                      substring(value FROM E'[\\x01-\\x7f](' || pgfence._modifier_chars() || ')' || pgfence._modifier_chars() || '*$'));
    PERFORM pgfence._raise_invalid(arg, quote_literal(value),
        format('starts or ends with whitespace or an invisible character (U+%s)',
               upper(pgfence._hex4(ascii(v_bad)))),
        format('pass the %s without leading or trailing spaces (including no-break and zero-width ones)', arg));
END $$;
COMMENT ON FUNCTION pgfence._check_name(text, text) IS
  'Private: check a kind, queue or worker id (see _name_ok), naming what is wrong.';

-- An interval is compared as if a month were 30 days and a day 24 hours, but added
-- to a timestamp it moves by calendar months and calendar days (23 or 25 hours
-- across a daylight-saving change). The two agree closely enough unless its parts
-- have opposite signs: '1200000 mons -36000000 days 1 hour' compares as 1 hour and
-- adds 1,436 years; '1 mon -30 days 1 hour' added to 31 January moves 1 day 1 hour;
-- '-1 day 24:00:00.5' compares as 0.5 s and can move -59 minutes. Bounds on a lease,
-- a retry delay or a retention are only true of intervals whose months, days and
-- time agree in sign (NULL for NULL).
-- (One expression, no FROM, so that it is inlined into its callers.) The parts are
-- compared as intervals: date_trunc('month', v) keeps only the months, date_trunc('day',
-- v) the months and days, so each comparison below weighs one part against zero. Half
-- the steps of the twelve numeric extract()s it replaced, which matters because
-- PL/pgSQL sets a check expression up again in every transaction (claim's lease check
-- inlines this): 1.4 -> 0.4 us a call over 200,000 calls, and the same answer as the
-- extract() form for 202,535 intervals (every combination of edge values of the three
-- parts, and random ones).
CREATE OR REPLACE FUNCTION pgfence._interval_signs_agree(value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (date_trunc('month', value) >= interval '0' AND date_trunc('day', value) >= date_trunc('month', value)
            AND value >= date_trunc('day', value))
        OR (date_trunc('month', value) <= interval '0' AND date_trunc('day', value) <= date_trunc('month', value)
            AND value <= date_trunc('day', value))
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

-- The size of a jsonb value uncompressed, in bytes: a value read from a table column
-- arrives still compressed, and pg_column_size would measure that (a 50 MB payload
-- compressed to 572 kB passed). '{}' || value is an object itself, decompressed, and
-- '[]' || value an array itself (a scalar becomes a one-element array: 8 bytes more).
CREATE OR REPLACE FUNCTION pgfence._payload_size(value jsonb) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT pg_column_size(CASE WHEN jsonb_typeof(value) = 'object' THEN '{}'::jsonb || value
                               ELSE '[]'::jsonb || value END)
$$;
COMMENT ON FUNCTION pgfence._payload_size(jsonb) IS
  'Private: the size of a jsonb value (a payload or a result) uncompressed, in bytes.';

-- Objects and arrays nested at most 64 levels deep (the value itself is level 1).
-- Clients decode payloads and results recursively (Python's json gave up at about
-- 1,000 levels, and took the whole claimed batch with it), and no real payload needs
-- more. Looked at only from 520 bytes: a value nested 65 deep takes at least that (65
-- empty arrays inside one another), so small values cost nothing.
CREATE OR REPLACE FUNCTION pgfence._json_nesting_ok(value jsonb, size integer) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT size < 520
        OR NOT jsonb_path_exists(value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')
$$;
COMMENT ON FUNCTION pgfence._json_nesting_ok(jsonb, integer) IS
  'Private: true when objects and arrays nest at most 64 levels deep in value (size: its _payload_size).';

-- A payload: not NULL, a JSON object, at most 1 MiB as jsonb, nested at most 64 deep.
CREATE OR REPLACE FUNCTION pgfence._payload_ok(value jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT value IS NOT NULL AND jsonb_typeof(value) = 'object' AND pgfence._payload_size(value) <= 1048576
       AND pgfence._json_nesting_ok(value, pgfence._payload_size(value))
$$;
COMMENT ON FUNCTION pgfence._payload_ok(jsonb) IS
  'Private: true for a valid payload (a JSON object of at most 1 MiB as jsonb, nested at most 64 levels), never NULL.';

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
    END IF;
    PERFORM pgfence._check_json_limits(arg, value);
END $$;
COMMENT ON FUNCTION pgfence._check_payload(text, jsonb) IS
  'Private: check a payload (a JSON object of at most 1 MiB as jsonb, nested at most 64 levels).';

-- The limits a payload and a result share: 1 MiB as jsonb, 64 levels of nesting.
CREATE OR REPLACE FUNCTION pgfence._check_json_limits(arg text, value jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._payload_size(value) > 1048576 THEN
        PERFORM pgfence._raise_invalid(arg, format('(%s bytes)', pgfence._payload_size(value)), 'larger than the 1 MiB limit',
            'store large data in your own table and put its key in the payload or result');
    ELSIF NOT pgfence._json_nesting_ok(value, pgfence._payload_size(value)) THEN
        PERFORM pgfence._raise_invalid(arg, left(value::text, 60), 'nests objects and arrays more than 64 levels deep',
            'flatten the structure: at most 64 levels of objects and arrays inside one another');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_json_limits(text, jsonb) IS
  'Private: raise 22023 when a payload or result is over 1 MiB as jsonb or nests more than 64 levels.';

-- A result: NULL, or any JSON value of at most 1 MiB as jsonb, nested at most 64 deep
-- (handlers return objects, lists, strings ...).
CREATE OR REPLACE FUNCTION pgfence._result_ok(value jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT value IS NULL OR (pgfence._payload_size(value) <= 1048576
                             AND pgfence._json_nesting_ok(value, pgfence._payload_size(value)))
$$;
COMMENT ON FUNCTION pgfence._result_ok(jsonb) IS
  'Private: true for a valid result (NULL, or any JSON value of at most 1 MiB as jsonb, nested at most 64 levels), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_result(arg text, value jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgfence._result_ok(value) THEN
        PERFORM pgfence._check_json_limits(arg, value);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_result(text, jsonb) IS
  'Private: check a result (NULL, or any JSON value of at most 1 MiB as jsonb, nested at most 64 levels).';

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

SELECT pgfence._apply_privileges();

COMMIT;
