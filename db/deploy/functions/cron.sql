-- Deploy pgfence:functions/cron to pg
-- requires: functions/_checks
--
-- Cron expressions, evaluated by pgfence itself (pg_cron only keeps the sweeper alive):
--   * _cron_parse: the 5 standard fields (minute hour day-of-month month day-of-week),
--     each a list of *, n, a-b, with /step (a/step = a-max/step), month and weekday names
--     (jan..dec, sun..sat, case-insensitive; 7 is Sunday too), and @yearly, @annually,
--     @monthly, @weekly, @daily, @midnight, @hourly; parsed once into arrays of allowed
--     values. A bad expression is 22023 naming the field and the bad element; one that
--     matches no day (0 0 30 2 *) is refused too.
--   * _cron_next: the first slot strictly after an instant, as wall-clock times of a
--     time zone. Days are walked (not minutes), at most 3700 days ahead (Feb 29 comes back
--     within 8 years). Vixie semantics for the two day fields: when both are restricted
--     (neither starts with *), a day matches either; else both must match.
--     DST: a slot in a spring-forward gap (02:30 Europe/Berlin on the last Sunday of
--     March) fires once at the end of the gap (03:00 local, the instant the clocks jump);
--     every slot of the gap and a 03:00 slot are that same instant, so they fire once.
--     A slot in a fall-back repeated hour (02:30 on the last Sunday of October) fires
--     once, at its first occurrence (summer time); the repeated hour fires nothing more.
--   * cron_next(cron, after, time_zone): the same, for an operator checking an expression.

BEGIN;

-- One field of a cron expression: the sorted allowed values, or 22023 naming the field.
CREATE OR REPLACE FUNCTION pgfence._cron_field(field text, spec text, lo integer, hi integer, cron text)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_names text[] := CASE field
        WHEN 'month' THEN ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec']
        WHEN 'day of week' THEN ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] END;
    -- The highest value written: 7 is Sunday in the day-of-week field.
    v_top integer := CASE WHEN field = 'day of week' THEN 7 ELSE hi END;
    v_hint text := format('write the %s field as *, a value, a range a-b, a list a,b and a /step (values %s..%s%s)',
                          field, lo, v_top, CASE field WHEN 'month' THEN ' or jan..dec'
                                                       WHEN 'day of week' THEN ' or sun..sat; 0 and 7 are Sunday'
                                                       ELSE '' END);
    v_item text;
    v_parts text[];
    v_bounds text[];
    v_tok text;
    v_val integer;
    v_ab integer[];
    v_step integer;
    v_out integer[] := '{}'::integer[];
BEGIN
    FOREACH v_item IN ARRAY string_to_array(spec, ',') LOOP
        IF v_item = '' THEN
            PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                format('%s field %s has an empty list element', field, quote_literal(spec)), v_hint);
        END IF;
        v_parts := string_to_array(v_item, '/');
        IF cardinality(v_parts) > 2 THEN
            PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                format('%s field: %s has more than one /', field, quote_literal(v_item)), v_hint);
        END IF;
        v_step := 1;
        IF cardinality(v_parts) = 2 THEN
            IF v_parts[2] !~ '^[0-9]{1,3}$' OR v_parts[2]::integer NOT BETWEEN 1 AND v_top - lo + 1 THEN
                PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                    format('%s field: step %s is not a number in 1..%s', field, quote_literal(v_parts[2]), v_top - lo + 1),
                    v_hint);
            END IF;
            v_step := v_parts[2]::integer;
        END IF;
        IF v_parts[1] = '*' THEN
            v_ab := ARRAY[lo, hi];
        ELSE
            v_bounds := string_to_array(v_parts[1], '-');
            IF cardinality(v_bounds) > 2 THEN
                PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                    format('%s field: %s is not a range a-b', field, quote_literal(v_item)), v_hint);
            END IF;
            v_ab := '{}'::integer[];
            FOREACH v_tok IN ARRAY v_bounds LOOP
                IF v_tok ~ '^[0-9]{1,2}$' THEN
                    v_val := v_tok::integer;
                ELSE
                    v_val := array_position(v_names, lower(v_tok));
                    IF v_val IS NULL THEN
                        PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                            format('%s field: %s is not a value', field, quote_literal(v_tok)), v_hint);
                    END IF;
                    v_val := v_val - CASE WHEN field = 'day of week' THEN 1 ELSE 0 END;
                END IF;
                IF v_val NOT BETWEEN lo AND v_top THEN
                    PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                        format('%s field: %s is outside %s..%s', field, v_val, lo, v_top), v_hint);
                END IF;
                v_ab := v_ab || v_val;
            END LOOP;
            IF cardinality(v_ab) = 1 THEN
                -- a value; a/step runs to the field's end
                v_ab := ARRAY[v_ab[1], CASE WHEN cardinality(v_parts) = 2 THEN v_top ELSE v_ab[1] END];
            ELSIF v_ab[1] > v_ab[2] THEN
                PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
                    format('%s field: range %s runs backwards', field, quote_literal(v_parts[1])), v_hint);
            END IF;
        END IF;
        v_out := v_out || ARRAY(SELECT CASE WHEN g = 7 AND field = 'day of week' THEN 0 ELSE g END
                                  FROM generate_series(v_ab[1], v_ab[2], v_step) AS g);
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT x FROM unnest(v_out) AS x ORDER BY x);
END $$;
COMMENT ON FUNCTION pgfence._cron_field(text, text, integer, integer, text) IS
  'Private: the sorted values one cron field allows (lists, ranges, steps, names); 22023 naming the field and the bad element.';

-- A cron expression parsed: the allowed values of each field, and whether each day
-- field starts with * (Vixie cron's rule for combining them).
CREATE OR REPLACE FUNCTION pgfence._cron_parse(cron text, OUT minutes integer[], OUT hours integer[],
                                               OUT days integer[], OUT months integer[], OUT weekdays integer[],
                                               OUT days_any boolean, OUT weekdays_any boolean)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_expr text;
    v_fields text[];
BEGIN
    IF cron IS NULL THEN
        PERFORM pgfence._raise_null('cron', 'pass a cron expression such as ''*/5 * * * *'' (or every => an interval)');
    ELSIF char_length(cron) NOT BETWEEN 1 AND 200 THEN
        PERFORM pgfence._raise_invalid('cron', quote_literal(cron), format('is %s characters long (1..200)', char_length(cron)),
            'pass 5 fields: minute hour day-of-month month day-of-week, such as ''0 3 * * mon-fri''');
    END IF;
    v_expr := CASE lower(btrim(cron, E' \t'))
        WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *' WHEN '@monthly' THEN '0 0 1 * *'
        WHEN '@weekly' THEN '0 0 * * 0' WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@hourly' THEN '0 * * * *' ELSE btrim(cron, E' \t') END;
    IF v_expr LIKE '@%' THEN
        PERFORM pgfence._raise_invalid('cron', quote_literal(cron), 'is not a known @ macro',
            'use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly, or 5 fields');
    END IF;
    v_fields := regexp_split_to_array(v_expr, E'[ \t]+');
    IF cardinality(v_fields) <> 5 THEN
        PERFORM pgfence._raise_invalid('cron', quote_literal(cron), format('has %s fields, not 5', cardinality(v_fields)),
            'pass 5 fields: minute hour day-of-month month day-of-week, such as ''0 3 * * mon-fri''');
    END IF;
    minutes  := pgfence._cron_field('minute', v_fields[1], 0, 59, cron);
    hours    := pgfence._cron_field('hour', v_fields[2], 0, 23, cron);
    days     := pgfence._cron_field('day of month', v_fields[3], 1, 31, cron);
    months   := pgfence._cron_field('month', v_fields[4], 1, 12, cron);
    weekdays := pgfence._cron_field('day of week', v_fields[5], 0, 6, cron);
    days_any := left(v_fields[3], 1) = '*';
    weekdays_any := left(v_fields[5], 1) = '*';
    -- Days picked by day of month alone must exist in some month picked (Feb 29 counts:
    -- it comes back in leap years).
    IF NOT days_any AND weekdays_any
       AND NOT EXISTS (SELECT FROM unnest(days) d, unnest(months) m
                        WHERE d <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END) THEN
        PERFORM pgfence._raise_invalid('cron', quote_literal(cron),
            format('day of month field: no month of %s has day %s', quote_literal(v_fields[4]), quote_literal(v_fields[3])),
            'the expression would never fire: pick days that exist in the months given');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._cron_parse(text) IS
  'Private: a 5-field cron expression (or an @ macro) parsed into the allowed values of each field; 22004, 22023 naming the field.';

-- The first wall-clock slot at or after from (a minute), within 3700 days; NULL if none.
-- Days are walked in order (a function scan yields them in order; the first that
-- matches is the answer), then the earliest time of that day.
CREATE OR REPLACE FUNCTION pgfence._cron_next_local(minutes integer[], hours integer[], days integer[], months integer[],
                                                    weekdays integer[], days_any boolean, weekdays_any boolean,
                                                    from_local timestamp)
RETURNS timestamp
LANGUAGE sql IMMUTABLE AS $$
    SELECT x.day + make_interval(mins => (SELECT min(hh * 60 + mm) FROM unnest(hours) hh, unnest(minutes) mm
                                           WHERE x.day > date_trunc('day', from_local)
                                              OR hh * 60 + mm >= extract(hour FROM from_local) * 60
                                                                 + extract(minute FROM from_local)))
      FROM generate_series(date_trunc('day', from_local), date_trunc('day', from_local) + interval '3700 days',
                           interval '1 day') AS x(day)
     WHERE extract(month FROM x.day)::integer = ANY (months)
       AND CASE WHEN days_any OR weekdays_any
                THEN extract(day FROM x.day)::integer = ANY (days) AND extract(dow FROM x.day)::integer = ANY (weekdays)
                ELSE extract(day FROM x.day)::integer = ANY (days) OR extract(dow FROM x.day)::integer = ANY (weekdays) END
       AND (x.day > date_trunc('day', from_local)
            OR EXISTS (SELECT FROM unnest(hours) hh, unnest(minutes) mm
                        WHERE hh * 60 + mm >= extract(hour FROM from_local) * 60 + extract(minute FROM from_local)))
     LIMIT 1
$$;
COMMENT ON FUNCTION pgfence._cron_next_local(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamp) IS
  'Private: the first wall-clock time at or after from_local that the parsed cron fields match (days walked, at most 3700), or NULL.';

-- The instant of a wall-clock time in a zone: its only instant; in a repeated hour
-- (fall-back) the first; in a gap (spring-forward) the instant the gap ends.
CREATE OR REPLACE FUNCTION pgfence._local_instant(t timestamp, time_zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_x timestamptz;
    v_a timestamptz;
    v_b timestamptz;
    v_lo timestamptz;
    v_hi timestamptz;
    v_mid timestamptz;
BEGIN
    -- The offsets in force a day before and a day after give the candidates.
    v_x := (t - interval '1 day') AT TIME ZONE 'UTC';
    v_a := (t - ((v_x AT TIME ZONE time_zone) - (v_x AT TIME ZONE 'UTC'))) AT TIME ZONE 'UTC';
    v_x := (t + interval '1 day') AT TIME ZONE 'UTC';
    v_b := (t - ((v_x AT TIME ZONE time_zone) - (v_x AT TIME ZONE 'UTC'))) AT TIME ZONE 'UTC';
    IF (v_a AT TIME ZONE time_zone) = t AND (v_b AT TIME ZONE time_zone) = t THEN
        RETURN least(v_a, v_b);
    ELSIF (v_a AT TIME ZONE time_zone) = t THEN
        RETURN v_a;
    ELSIF (v_b AT TIME ZONE time_zone) = t THEN
        RETURN v_b;
    END IF;
    -- A gap: the first instant whose wall-clock time is past t (to the second).
    v_lo := least(v_a, v_b);
    v_hi := greatest(v_a, v_b);
    WHILE v_hi - v_lo > interval '1 second' LOOP
        v_mid := date_trunc('second', v_lo + (v_hi - v_lo) / 2);
        IF (v_mid AT TIME ZONE time_zone) > t THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_mid;
        END IF;
    END LOOP;
    RETURN v_hi;
END $$;
COMMENT ON FUNCTION pgfence._local_instant(timestamp, text) IS
  'Private: the instant of wall-clock time t in time_zone: in a repeated (fall-back) hour the first, in a spring-forward gap the end of the gap.';

-- The first slot of parsed cron fields strictly after an instant, in a zone; NULL if
-- none within 3700 days.
CREATE OR REPLACE FUNCTION pgfence._cron_next(minutes integer[], hours integer[], days integer[], months integer[],
                                              weekdays integer[], days_any boolean, weekdays_any boolean,
                                              after timestamptz, time_zone text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_from timestamp := date_trunc('minute', after AT TIME ZONE time_zone) + interval '1 minute';
    v_local timestamp;
    v_at timestamptz;
BEGIN
    -- Wall-clock slots whose instant is not after `after` (a repeated hour, or gap slots
    -- that are the gap's end) are passed over: at most a few hours of minutes.
    FOR i IN 1..2000 LOOP
        v_local := pgfence._cron_next_local(minutes, hours, days, months, weekdays, days_any, weekdays_any, v_from);
        IF v_local IS NULL THEN
            RETURN NULL;
        END IF;
        v_at := pgfence._local_instant(v_local, time_zone);
        IF v_at > after THEN
            RETURN v_at;
        END IF;
        v_from := v_local + interval '1 minute';
    END LOOP;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION pgfence._cron_next(integer[], integer[], integer[], integer[], integer[], boolean, boolean, timestamptz, text) IS
  'Private: the first slot of the parsed cron fields strictly after `after`, as wall-clock times of time_zone (DST: see functions/cron); NULL if none within 3700 days.';

-- A time zone argument: a name of pg_timezone_names.
CREATE OR REPLACE FUNCTION pgfence._check_time_zone(arg text, value text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM pgfence._raise_null(arg, 'pass a time zone name such as ''UTC'' or ''Europe/Berlin''');
    ELSIF char_length(value) > 100 OR NOT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z WHERE z.name = value) THEN
        PERFORM pgfence._raise_invalid(arg, quote_literal(value), 'is not a time zone name',
            'pass a name of pg_timezone_names, such as ''UTC'' or ''Europe/Berlin'' (abbreviations like CET are not zones)');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_time_zone(text, text) IS
  'Private: check a time zone argument (a name of pg_timezone_names).';

-- Operator: when a cron expression fires next after an instant, in a zone.
CREATE OR REPLACE FUNCTION pgfence.cron_next(cron text, after timestamptz DEFAULT now(), time_zone text DEFAULT 'UTC')
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    p record;
BEGIN
    SELECT * INTO p FROM pgfence._cron_parse(cron);
    IF after IS NULL THEN
        PERFORM pgfence._raise_null('after', 'pass the instant to look after, such as now()');
    ELSIF NOT isfinite(after) THEN
        PERFORM pgfence._raise_invalid('after', after::text, 'is not finite', 'pass a finite timestamp, such as now()');
    END IF;
    PERFORM pgfence._check_time_zone('time_zone', time_zone);
    RETURN pgfence._cron_next(p.minutes, p.hours, p.days, p.months, p.weekdays, p.days_any, p.weekdays_any,
                              after, time_zone);
END $$;
COMMENT ON FUNCTION pgfence.cron_next(text, timestamptz, text) IS
$$Operator: the first slot of cron (5 fields or an @ macro) strictly after `after`, as wall-clock times of time_zone
(a pg_timezone_names name): what a schedule with it would fire next. A slot in a spring-forward gap fires at the
gap's end; a repeated fall-back hour fires once (its first occurrence). NULL when none within 3700 days.
Errors: 22004, 22023 (naming the cron field).$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('cron_next', '{pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
