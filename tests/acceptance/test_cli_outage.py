"""The reading commands wait out a short outage instead of failing on its first error.

- A command started while the way to the server is cut (a TCP forwarder that resets
  every connection, as in test_worker_outage.py) answers once it is restored.
- A command whose Store holds connections the server has ended (pg_terminate_backend,
  MariaDB's KILL) answers normally: its stale connections are replaced. The command
  runs in this process (click's runner) on a Store made here, whose pool the test fills
  and then has the server end.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

import jobq
from jobq.cli import common, main
from tests.acceptance.test_cli import Cli
from tests.acceptance.test_worker_processes import wait_until
from tests.forwarder import Forwarder, forwarding
from tests.integration.test_database_errors import end_sessions

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["postgresql", "mysql"])]

#: The reading commands checked, {id} standing for a task's id.
READING = [["status"], ["list"], ["show", "{id}"], ["why", "{id}"], ["workers"]]
ROUNDS = 3


@pytest.fixture
def forwarder(db_url: str) -> Iterator[Forwarder]:
    with forwarding(db_url) as forwarder:
        yield forwarder


def commands(task_id: int) -> list[list[str]]:
    """READING, for task ``task_id``."""
    return [[arg.format(id=task_id) for arg in command] for command in READING]


def test_reading_commands_wait_out_a_short_outage(
    db_url: str, store: jobq.Store, forwarder: Forwarder, tmp_path: Path
) -> None:
    task_id = store.enqueue("reports.build", {"day": 1})
    cli = Cli(tmp_path)
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(ROUNDS):
            forwarder.cut()
            refused = forwarder.refused
            running = pool.submit(cli.many, forwarder.url(db_url), commands(task_id))
            # Each command has been refused at least once (without patience, it failed then).
            wait_until(lambda: forwarder.refused >= refused + len(READING))  # noqa: B023
            forwarder.restore()
            done = running.result()
            for command, outcome in zip(READING, done, strict=True):
                assert (outcome.returncode, outcome.stderr) == (0, ""), command
            assert "reports.build" in done[1].stdout and "reports.build" in done[2].stdout


def test_reading_commands_replace_connections_the_server_ended(
    db_url: str, store: jobq.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command gets a Store whose idle connections the server has just ended."""
    stale: list[jobq.Store] = []
    monkeypatch.setattr(common, "Store", lambda _url: stale.pop())
    runner = CliRunner()
    task_id = store.enqueue("reports.build", {"day": 1})
    for _ in range(ROUNDS):
        for command in commands(task_id):
            its_store = jobq.Store(db_url)
            fill_pool(its_store, task_id)
            end_sessions(its_store, held_sessions(its_store))
            stale.append(its_store)
            result = runner.invoke(main, [*command, "--database-url", db_url])
            assert result.exit_code == 0, (command, result.output)
            if command[0] in ("list", "show"):
                assert "reports.build" in result.output, result.output


def fill_pool(store: jobq.Store, task_id: int) -> None:
    """Leave idle connections of every kind in ``store``: its own (Database.run) and its
    pool's (units of several statements)."""
    assert store.get(task_id) is not None
    assert store.explain(task_id) is not None
    assert store.list_tasks(limit=5)


def held_sessions(store: jobq.Store) -> list[int]:
    """The server's ids of every idle connection ``store`` holds: its pool's and, on
    MySQL, Database.run's own."""
    records = list(store.engine.pool._pool.queue)  # type: ignore[attr-defined]
    if store.dialect.name == "postgresql":
        return [record.dbapi_connection.info.backend_pid for record in records]
    own = [raw.thread_id() for raw, _ in store.db._idle]
    ids = own + [record.dbapi_connection.thread_id() for record in records]
    assert ids
    return ids
