"""Fault injection: the queue's guarantees hold while workers die, freeze and
lose connections, the sweeper is killed, PostgreSQL crash-restarts and an old
snapshot holds back vacuum.

One scenario runs per session (``chaos_report`` in conftest.py: the short form
by default, about a minute; ``--chaos-full`` for about 3.5 minutes of repeated
faults). Each test below asserts one invariant of that run and fails with the
offending job ids; the terminal summary prints the table of faults injected and
invariants held.
"""
from __future__ import annotations

import pytest

from chaos_runner import (I_ACKED, I_BACKOFF, I_BOUND, I_DEAD_TUPLES, I_FAULTS, I_FINISHED, I_FROZEN, I_HEALTH,
                          I_HISTORY,
                          I_IDEMPOTENCY, I_LATENCY, I_NO_40, I_ONE_DONE, I_OVERLAP, I_PHANTOM, I_TERMINAL, I_ZOMBIE,
                          Report)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(330)]


def test_every_fault_kind_is_injected(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_FAULTS)


def test_no_acknowledged_enqueue_is_lost(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_ACKED)


def test_no_job_appears_that_was_never_enqueued(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_PHANTOM)


def test_idempotency_key_maps_to_one_job_through_faults(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_IDEMPOTENCY)


def test_every_job_reaches_exactly_one_terminal_state(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_TERMINAL)


def test_terminal_states_never_change(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_FROZEN)


def test_done_job_has_exactly_one_accepted_completion_with_current_token(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_ONE_DONE)


def test_attempt_history_accounts_for_every_claim(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_HISTORY)


def test_attempts_overlap_only_after_earlier_lease_expired(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_OVERLAP)


def test_zombie_calls_after_takeover_are_rejected(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_ZOMBIE)


def test_retry_delays_are_honoured_under_faults(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_BACKOFF)


def test_all_jobs_terminal_within_bound_after_faults_stop(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_BOUND)


def test_no_deadlock_or_serialization_failure_reaches_a_caller(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_NO_40)


def test_dead_tuples_recover_after_old_snapshot_released(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_DEAD_TUPLES)


def test_claim_latency_recovers_after_old_snapshot_released(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_LATENCY)


def test_worker_processes_survive_and_reconnect(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_HEALTH)


def test_job_is_completed_only_by_a_handler_that_ran_to_its_end(chaos_report: Report) -> None:
    chaos_report.assert_ok(I_FINISHED)
