"""The worker options: one check for Worker and AsyncWorker (pgfence.worker_options).

A bad option is refused when the worker is made, naming it, before anything is claimed;
both workers refuse the same values with the same option named; the CLI says it in one
line and exits 2. Hypothesis generates the values (bad and good) for every option.
"""
from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.processes import HANDLERS, run_cli
from pgfence import Client, Limits, Worker, WorkerOptionError
from pgfence.worker_options import MAX_SECONDS, MIN_POLL_SECONDS, MIN_SWEEP_SECONDS, worker_options

GOOD: dict[str, Any] = dict(queues=None, queue_set=None, concurrency=8, prefetch=0, lease=timedelta(seconds=30),
                            poll_interval=1.0, shutdown_grace=30.0, run_sweeper=None, sweep_interval=1.0,
                            flush_interval=0.005, flush_batch=500, worker_id=None, listen=True, limits=None)


def noop(job: Any) -> None:
    return None


def refused(option: str, value: Any, *, handlers: Any = None, **more: Any) -> WorkerOptionError:
    kw = {**GOOD, **more, option: value} if option != "handlers" else {**GOOD, **more}
    with pytest.raises(WorkerOptionError) as info:
        worker_options({"noop": noop} if handlers is None else handlers, **kw)
    return info.value


not_a_number = st.one_of(st.booleans(), st.text(max_size=5), st.none(), st.just([1]), st.just(timedelta(seconds=1)))
bad_seconds_positive = st.one_of(
    not_a_number, st.floats(max_value=0.0), st.floats(min_value=MAX_SECONDS, exclude_min=True),
    st.just(math.nan), st.just(math.inf), st.integers(max_value=0))
bad_seconds_zero_ok = st.one_of(
    not_a_number, st.floats(max_value=0.0, exclude_max=True), st.floats(min_value=MAX_SECONDS, exclude_min=True),
    st.just(math.nan), st.integers(max_value=-1))


@settings(max_examples=60, deadline=None)
@given(option=st.sampled_from(["poll_interval", "sweep_interval"]), value=bad_seconds_positive)
def test_an_interval_that_must_be_positive_is_refused(option: str, value: Any) -> None:
    err = refused(option, value)
    assert err.option == option and option in str(err) and "seconds" in err.hint


#: The shortest each interval takes (an idle poll below a millisecond is a busy loop).
LEAST = {"poll_interval": MIN_POLL_SECONDS, "sweep_interval": MIN_SWEEP_SECONDS, "shutdown_grace": 0.0,
         "flush_interval": 0.0}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_an_interval_below_its_shortest_is_refused_and_the_hint_says_it(data: st.DataObject) -> None:
    option = data.draw(st.sampled_from(["poll_interval", "sweep_interval"]))
    value = data.draw(st.floats(min_value=0.0, max_value=LEAST[option], exclude_max=True))
    err = refused(option, value)
    assert err.option == option and err.problem == "is out of range"
    assert err.hint.endswith(f"{LEAST[option]:g}..86400 seconds"), err.hint


@settings(max_examples=60, deadline=None)
@given(option=st.sampled_from(["shutdown_grace", "flush_interval"]), value=bad_seconds_zero_ok)
def test_a_time_that_may_be_zero_is_refused_below_zero_or_not_a_number(option: str, value: Any) -> None:
    assert refused(option, value).option == option


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_time_in_range_is_taken_as_seconds(data: st.DataObject) -> None:
    option = data.draw(st.sampled_from(sorted(LEAST)))
    value = data.draw(st.one_of(st.floats(min_value=max(LEAST[option], 0.001), max_value=MAX_SECONDS),
                                st.just(LEAST[option] or 0.001), st.integers(1, int(MAX_SECONDS))))
    o = worker_options({"noop": noop}, **{**GOOD, option: value})
    assert getattr(o, option) == float(value)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_integers_are_ints_in_range(data: st.DataObject) -> None:
    option, lo, hi = data.draw(st.sampled_from([("concurrency", 1, None), ("prefetch", 0, None),
                                                ("flush_batch", 1, Limits().batch)]))
    bad = data.draw(st.one_of(st.integers(max_value=lo - 1), st.booleans(), st.floats(allow_nan=True),
                              st.text(max_size=3), st.none(),
                              *([st.integers(min_value=hi + 1)] if hi is not None else [])))
    assert refused(option, bad).option == option
    good = data.draw(st.integers(lo, hi if hi is not None else 10_000))
    assert getattr(worker_options({"noop": noop}, **{**GOOD, option: good}), option) == good


@settings(max_examples=60, deadline=None)
@given(ms=st.one_of(st.integers(min_value=-10**12, max_value=0), st.integers(min_value=86_400_001, max_value=10**12)))
def test_a_lease_outside_the_database_bounds_is_refused(ms: int) -> None:
    err = refused("lease", timedelta(milliseconds=ms))
    assert err.option == "lease" and "1 ms" in err.hint
    assert refused("lease", 30).option == "lease"  # (seconds as a number: a timedelta is asked for)
    # the database's own bounds, when the worker has them
    tight = Limits(lease_min_ms=1000, lease_max_ms=60_000)
    assert refused("lease", timedelta(minutes=2), limits=tight).option == "lease"
    assert worker_options({}, **{**GOOD, "lease": timedelta(minutes=1), "limits": tight}).lease == timedelta(minutes=1)


@settings(max_examples=60, deadline=None)
@given(value=st.one_of(st.text(max_size=8), st.binary(max_size=4), st.just([]), st.lists(st.none(), min_size=1),
                       st.just(["ok", ""]), st.just(["ok", 5]), st.just({"a": 1}), st.integers()))
def test_queues_must_be_a_list_of_names(value: Any) -> None:
    err = refused("queues", value)
    assert err.option.startswith("queues")


def test_queues_given_as_any_iterable_but_a_string_are_taken_as_a_list() -> None:
    assert worker_options({}, **{**GOOD, "queues": ("a", "b")}).queues == ["a", "b"]
    assert sorted(worker_options({}, **{**GOOD, "queues": {"a", "b"}}).queues or []) == ["a", "b"]
    assert worker_options({}, **{**GOOD, "queues": (q for q in ["a"])}).queues == ["a"]
    assert refused("queues", ["q"] * (Limits().queues + 1)).option == "queues"
    assert refused("queues", ["a"], queue_set="s").option == "queue_set"


@settings(max_examples=40, deadline=None)
@given(option=st.sampled_from(["worker_id", "queue_set"]),
       value=st.one_of(st.just(""), st.text(min_size=129, max_size=140), st.integers(), st.just(b"w")))
def test_names_are_strings_of_1_to_128_characters(option: str, value: Any) -> None:
    assert refused(option, value).option == option


def test_handlers_map_kinds_to_callables() -> None:
    assert refused("handlers", None, handlers={"noop": 5}).option == "handlers['noop']"
    assert refused("handlers", None, handlers={"": noop}).option == "handlers"
    assert refused("handlers", None, handlers={1: noop}).option == "handlers"
    assert refused("handlers", None, handlers=[noop]).option == "handlers"
    assert refused("listen", "yes").option == "listen"
    assert refused("run_sweeper", 1).option == "run_sweeper"
    assert refused("limits", {"max_jobs": 5}).option == "limits"


def test_the_message_shows_a_hostile_value_escaped() -> None:
    err = refused("worker_id", "x\x1b[31m\n" * 30)
    assert "\x1b" not in str(err) and "\n" not in str(err) and len(err.message) < 200


def test_both_workers_refuse_a_bad_option_before_claiming(dsn: str, client: Client, queue: str) -> None:
    from pgfence.aio import AsyncClient, AsyncWorker
    job = client.enqueue("noop", {}, queue=queue)
    cases: list[tuple[str, Any]] = [("poll_interval", -1), ("flush_batch", 0), ("queues", queue), ("lease", 30),
                                    ("concurrency", True), ("shutdown_grace", math.nan), ("worker_id", "")]
    sync_named = []
    for option, value in cases:
        kw = {"queues": [queue], option: value}
        with pytest.raises(WorkerOptionError) as info:
            Worker(client, {"noop": noop}, **kw)
        sync_named.append(info.value.option)

    async def body() -> list[str]:
        named = []
        aclient = await AsyncClient.connect(dsn, max_size=2)
        try:
            for option, value in cases:
                with pytest.raises(WorkerOptionError) as info:
                    AsyncWorker(aclient, {"noop": noop}, **{"queues": [queue], option: value})
                named.append(info.value.option)
        finally:
            await aclient.close()
        return named

    assert asyncio.run(body()) == sync_named == [option for option, _ in cases]
    record = client.get_job(job)
    assert record.status == "queued" and record.attempts == 0  # nothing was claimed


@pytest.mark.parametrize("args, fragment", [
    (["--lease", "100000"], "lease"),        # (over a day: the CLI's own check lets it through)
    (["--queue", ""], "queues[0]"),
])
def test_the_cli_worker_says_which_option_in_one_line(dsn: str, args: list[str], fragment: str) -> None:
    result = run_cli(dsn, "worker", HANDLERS, *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("pgfence: error: ") and fragment in lines[0], result.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: "), result.stderr
    assert result.stdout == ""


@settings(max_examples=120, deadline=None)
@given(where=st.sampled_from(["queues[0]", "queue_set", "worker_id", "handlers"]),
       name=st.one_of(st.just(""), st.text(min_size=129, max_size=140),
                      st.builds(lambda a, s, b: a + s + b, st.text(max_size=5),
                                st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.text(max_size=5))))
def test_a_name_the_database_cannot_take_is_refused_wherever_a_name_goes(where: str, name: str) -> None:
    # Empty, over 128 characters, or holding a lone surrogate (which cannot be sent):
    # a queue, the queue set, the worker id and each handler's kind, as the Node worker.
    if where == "queues[0]":
        err = refused("queues", [name])
    elif where == "handlers":
        err = refused("handlers", None, handlers={name: noop})
    else:
        err = refused(where, name)
    assert err.option == where
    # (the problem worded as the Node worker words it: tests/test_node_client.py compares them)
    if not 1 <= len(name) <= 128:
        assert err.problem == f"is a name of {len(name)} characters"
    else:
        assert err.problem == "holds a lone surrogate (not Unicode text)"


@settings(max_examples=60, deadline=None)
@given(name=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=128))
def test_a_name_of_1_to_128_characters_is_taken_here_and_left_to_the_database(name: str) -> None:
    o = worker_options({name: noop}, **{**GOOD, "queues": [name], "worker_id": name})
    assert o.queues == [name] and o.worker_id == name and list(o.handlers) == [name]
