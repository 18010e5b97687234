"""Chaos: six `jobq worker` processes drain 8,000 tasks while they are killed with
kill -9, while PostgreSQL restarts, while a proxy cuts their connections, and across a
graceful stop of all of them; nothing may be lost, run twice per capture, or left held.

Each scenario runs on a private PostgreSQL server (tests/postgres_server.py) made with
the machine's own initdb, so restarting it disturbs nothing else. $JOBQ_CHAOS_TASKS
changes the number of tasks (benchmarks/soak.py runs the same scenario for longer).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import postgres_server
from tests.chaos import scenario

pytestmark = [pytest.mark.slow, pytest.mark.serial]
#: 8,000 tasks take some 18 s to drain on a quiet 2-core machine (450 a second): 9 kills
#: 2 s apart, the restart halfway, dozens of proxy cuts (one each 0.5 s), all far above
#: what the tests ask (3 kills, 10 cuts). 20,000 made 20 kills in 45 s; the three tests 3 min.
TASKS = int(os.environ.get("JOBQ_CHAOS_TASKS", "8000"))
WORKERS = 6


#: A private PostgreSQL server for the module (a fixture).
server = postgres_server.private_server


def assert_nothing_lost_or_held(report: scenario.Report) -> None:
    print(report.summary())  # the figures, for -s and the closing notes
    assert report.not_done == 0, report.summary()
    assert report.wrong_results == 0
    assert report.missing_final_effect == 0, "a done task whose final run left no effect"
    assert report.runs_per_capture_over_one == 0, "one capture ran twice"
    assert report.stuck_in_progress == 0
    assert report.leases_outstanding == 0
    assert report.limiter_slots_held == 0
    assert report.worker_errors == []
    # The limited and the fair queue had their tenth each, under the same faults.
    assert report.done_by_queue["limited"] == len(range(0, TASKS, 10))
    assert report.done_by_queue["fair"] == len(range(2, TASKS, 10))


def test_kill_9_every_2_s_and_a_database_restart_lose_nothing(
    server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    faults = scenario.Faults(kill_every=2.0, restart_db_at=(0.5,))
    report = scenario.run(server, tmp_path, tasks_count=TASKS, faults=faults, workers=WORKERS)
    assert_nothing_lost_or_held(report)
    assert report.kills >= 3 and report.db_restarts == 1
    assert report.listen_reconnected, "a worker did not LISTEN again after the restart"
    # A side effect repeats only when the worker of an earlier attempt was killed, and a
    # killed worker was running at most --concurrency tasks.
    assert report.unexplained == 0, report.summary()
    assert report.explained_by_kills <= report.kills * scenario.CONCURRENCY
    # Every repeat spent one retry; the restart spent some more (failed runs).
    assert report.retries_spent >= report.duplicates


def test_a_proxy_cutting_connections_at_random_loses_nothing(
    server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    faults = scenario.Faults(kill_every=2.0, restart_db_at=(0.5,), proxy=True)
    report = scenario.run(server, tmp_path, tasks_count=TASKS, faults=faults, workers=WORKERS)
    assert_nothing_lost_or_held(report)
    assert report.proxy_cuts >= 10
    assert report.listen_reconnected
    # Besides kills, a repeat needs a lapsed lease, which its worker then logs (its
    # outcome refused as stale, or the run dropped as lost).
    assert report.unexplained <= report.stale_or_lost, report.summary()


def test_sigterm_to_every_worker_mid_run_loses_nothing_and_spends_no_retry(
    server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    faults = scenario.Faults(kill_every=None, restart_db_at=(), graceful_stop_at=0.5)
    report = scenario.run(server, tmp_path, tasks_count=TASKS, faults=faults, workers=WORKERS)
    assert_nothing_lost_or_held(report)
    assert report.graceful_stops == 1
    assert report.duplicates == 0
    assert report.retries_spent == 0
