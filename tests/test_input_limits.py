"""The limits of the rework after @v0.3.0, refused up front with 22023 naming the
argument, and nothing written:

* names (kind, queue, worker_id): no control, line-separator or bidirectional control
  character anywhere, and no Unicode whitespace or invisible character at either end
  (U+00A0, U+3000 and U+0085 at the ends, and newline, ESC, U+0001 inside, were
  accepted; `pgfence stats` printed them raw, a forged "sweeper:" line and a colour
  escape reached an operator's terminal);
* payloads and results nest objects and arrays at most 64 levels (a payload nested
  1,000 deep killed the Python worker);
* results are at most 1 MiB as jsonb (a 19 MB result was accepted);
* error messages show the characters they name escaped, never raw.
"""
from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from support.api import claim_job, enqueue
from support.db import assert_error, one, queue_count, sql_error

Conn = psycopg.Connection[Any]

# Refused anywhere in a name.
UNSAFE = [chr(c) for c in range(1, 0x20)] + [chr(0x7F)] + [chr(c) for c in range(0x80, 0xA0)] + [
    "\u061c", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069"]
# Refused at either end (Unicode White_Space and the characters that show as nothing or
# as a blank: 'default' and U+3164 looked like 'default' in pgfence stats).
EDGE = [" ", "\u00a0", "\u1680", "\u180e"] + [chr(c) for c in range(0x2000, 0x200E)] + [
    "\u202f", "\u205f", "\u2060", "\u3000", "\ufeff",
    "\u00ad", "\u034f", "\u115f", "\u1160", "\u17b4", "\u17b5", "\u2061", "\u2062", "\u2063", "\u2064",
    "\u206a", "\u206f", "\u2800", "\u3164", "\uffa0", "\ufff9", "\ufffb",
    "\u2065", "\ufff0", "\ufff8", "\U0001bca0", "\U0001d173", "\U0001d17a", "\U000e0080", "\U000e0fff"]
# Variation selectors and tag characters: refused at the start, and at the end after
# an ASCII character; accepted at the end after an emoji (they belong to it).
MODIFIERS = ["\ufe00", "\ufe0f", "\U000e0020", "\U000e007f", "\U000e0001", "\u180b", "\u180f", "\U000e0100",
             "\U000e01ef"]
# Unicode 15's Default_Ignorable_Code_Point and White_Space ranges (DerivedCoreProperties.txt,
# PropList.txt), as (first, last) code points: none may end a name after an ASCII letter
# or start one.
DEFAULT_IGNORABLE = [(0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF)]
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
# Allowed anywhere but at the ends (spaces), or anywhere (letters of other scripts).
INSIDE_OK = [" ", "\u00a0", "\u3000"]
LETTERS = st.text(st.characters(categories=("Lu", "Ll", "Lo", "Nd"), codec="utf-8"), min_size=1, max_size=10)


def nested_text(depth: int) -> str:
    """The JSON text of an object with `depth` levels of objects and arrays, itself the
    outermost (built as text: Python's json recurses, and gives up near 1,000)."""
    opens = ['{"a": ' if level % 2 else "[" for level in range(1, depth)]  # level 1 outermost
    closes = ["}" if o.startswith("{") else "]" for o in reversed(opens)]
    return "".join(opens) + "{}" + "".join(closes)


def nested(depth: int) -> Any:
    return json.loads(nested_text(depth))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=LETTERS, bad=st.sampled_from(UNSAFE), at=st.sampled_from(["start", "middle", "end"]),
       arg=st.sampled_from(["kind", "queue"]))
def test_a_name_with_a_control_or_bidi_character_anywhere_is_refused(conn: Conn, base: str, bad: str, at: str,
                                                                      arg: str) -> None:
    name = {"start": bad + base, "middle": base[:1] + bad + base[1:], "end": base + bad}[at]
    if arg == "kind":
        err = sql_error(conn, "SELECT pgfence.enqueue(%s, queue => 't_limits')", (name,))
    else:
        err = sql_error(conn, "SELECT pgfence.enqueue('k', queue => %s)", (name,))
    assert_error(err, "22023", arg)
    assert all(c not in (err.diag.message_primary or "") for c in UNSAFE)  # escaped in the message
    assert f"\\u{ord(bad):04x}" in (err.diag.message_primary or "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=LETTERS, space=st.sampled_from(EDGE), end=st.sampled_from(["start", "end"]))
def test_a_name_starting_or_ending_with_unicode_whitespace_is_refused(conn: Conn, base: str, space: str,
                                                                       end: str) -> None:
    name = space + base if end == "start" else base + space
    for call, arg in (("SELECT pgfence.enqueue('k', queue => %s)", "queue"),
                      ("SELECT * FROM pgfence.claim(%s)", "worker_id"),
                      ("SELECT * FROM pgfence.claim('w', ARRAY[%s])", "queues[1]")):
        assert_error(sql_error(conn, call, (name,)), "22023", arg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=10),
       mod=st.sampled_from(MODIFIERS), end=st.sampled_from(["start", "end"]))
def test_a_variation_selector_or_tag_character_that_modifies_nothing_is_refused(conn: Conn, base: str, mod: str,
                                                                                end: str) -> None:
    name = mod + base if end == "start" else base + mod
    err = sql_error(conn, "SELECT pgfence.enqueue('k', queue => %s)", (name,))
    assert_error(err, "22023", "queue")
    assert f"U+{ord(mod):04X}" in (err.diag.message_primary or "")


def test_no_default_ignorable_or_white_space_character_of_unicode_15_starts_or_ends_a_name(conn: Conn) -> None:
    # Every code point of those ranges (4,200 or so), each at the start and at the end
    # after an ASCII letter, through the predicate enqueue, enqueue_many and claim inline.
    ranges = DEFAULT_IGNORABLE + WHITE_SPACE
    accepted = conn.execute(
        "SELECT to_hex(c), pgfence._name_ok(chr(c) || 'q'), pgfence._name_ok('q' || chr(c))"
        "  FROM unnest(%s::int[], %s::int[]) AS r(lo, hi), generate_series(r.lo, r.hi) AS c"
        " WHERE pgfence._name_ok(chr(c) || 'q') OR pgfence._name_ok('q' || chr(c))",
        ([lo for lo, _ in ranges], [hi for _, hi in ranges])).fetchall()
    assert accepted == []
    # (a variation selector after the character it varies is part of the name)
    for name in ["\u845b\U000e0100", "\u1820\u180b", "q \u2764\ufe0f"]:
        assert one(conn, "SELECT pgfence._name_ok(%s)", (name,)) is True


@pytest.mark.parametrize("name", ["\u2764\ufe0f", "q \u2764\ufe0f", "\U0001f3f4\U000e0067\U000e0062\U000e007f",
                                  "caf\u00e9", "\u65e5\u672c\u8a9e"])
def test_emoji_sequences_and_other_scripts_are_accepted(conn: Conn, name: str) -> None:
    job_id = enqueue(conn, name)
    assert one(conn, "SELECT queue FROM pgfence.jobs WHERE id = %s", (job_id,)) == name
    conn.execute("DELETE FROM pgfence.jobs WHERE id = %s", (job_id,))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=LETTERS, b=LETTERS, space=st.sampled_from(INSIDE_OK))
def test_names_of_any_script_with_spaces_inside_are_accepted(conn: Conn, a: str, b: str, space: str) -> None:
    queue = f"t_lim {a}{space}{b}"[:128]
    job_id = enqueue(conn, queue, kind=f"{b}{space}{a}"[:128])
    assert one(conn, "SELECT queue FROM pgfence.jobs WHERE id = %s", (job_id,)) == queue
    conn.execute("DELETE FROM pgfence.jobs WHERE id = %s", (job_id,))


@pytest.mark.parametrize("depth", [64, 65, 1000])
def test_payloads_nest_at_most_64_levels(conn: Conn, queue: str, depth: int) -> None:
    text = nested_text(depth)
    if depth <= 64:
        conn.execute("SELECT pgfence.enqueue('k', %s::jsonb, %s)", (text, queue))
        assert queue_count(conn, queue) == 1
        return
    err = sql_error(conn, "SELECT pgfence.enqueue('k', %s::jsonb, %s)", (text, queue))
    assert_error(err, "22023", "payload")
    assert "more than 64 levels" in (err.diag.message_primary or "")
    assert_error(sql_error(conn, "SELECT * FROM pgfence.enqueue_many(ARRAY['k', 'k'], ARRAY['{}', %s]::jsonb[], %s)",
                           (text, queue)), "22023", "payloads[2]")
    assert queue_count(conn, queue) == 0


@pytest.mark.parametrize(("result", "ok"), [
    (nested(64), True), (nested(65), False), ([[1, [2]], "list results"], True), ("a string", True),
    ({"blob": "x" * (1024 * 1024)}, False), ({"blob": "x" * (1024 * 1000)}, True)],
    ids=["64-deep", "65-deep", "list", "string", "over-1-MiB", "under-1-MiB"])
def test_results_are_any_json_of_at_most_1_mib_and_64_levels(conn: Conn, queue: str, result: Any, ok: bool) -> None:
    job_id = enqueue(conn, queue)
    token = claim_job(conn, queue, job_id, lease="1 hour")
    single = "SELECT pgfence.complete(%s, %s, %s)"
    if ok:
        conn.execute(single, (job_id, token, Jsonb(result)))
        assert one(conn, "SELECT result FROM pgfence.all_jobs WHERE id = %s", (job_id,)) == result
        return
    err = sql_error(conn, single, (job_id, token, Jsonb(result)))
    assert_error(err, "22023", "result")
    assert ("more than 64 levels" if "blob" not in str(result)[:10] else "1 MiB") in (err.diag.message_primary or "")
    assert_error(sql_error(conn, "SELECT * FROM pgfence.complete_many(%s, %s, ARRAY[NULL, %s]::jsonb[])",
                           ([job_id, -1], [token, token], json.dumps(result))), "22023", "results[2]")
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "processing"


def test_the_sql_and_the_python_escape_the_same_characters(conn: Conn) -> None:
    """Messages from the database (SQL _printable) and what the CLI and logs print
    (pgfence._text.printable) write the same characters as \\uXXXX: every code point
    but NUL and the surrogates, in one text."""
    from pgfence._text import printable
    every = "".join(chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    escaped = one(conn, "SELECT pgfence._printable(%s)", (every,))
    assert escaped == printable(every)
    assert escaped.count("\\u") >= 100  # (the set is not empty)
