"""pytest fixtures giving each test a jobq database of its own; pytest loads this module.

    def test_signup(jobq_isolate):
        store = jobq_isolate(app)  # app now uses a fresh, migrated SQLite file in tmp_path
        task_id = send_welcome.enqueue(user_id=7)
        Worker(app, burst=True).run()  # from jobq.worker import Worker
        assert store.get(task_id).status == "done"

It is registered through the ``pytest11`` entry point, so installing jobq is enough; pytest
is not a dependency of jobq, and only pytest imports this module. Nothing here applies to a
test that does not ask for these fixtures: an app that is not isolated keeps its own URL
($JOBQ_DATABASE_URL, else sqlite:///jobq.db). To isolate an app in every test, use
``jobq_isolate`` from an autouse fixture of your conftest.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from jobq import testing
from jobq.app import App
from jobq.app.store import Store


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _jobq_migrated_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session, which each test's database copies."""
    path = tmp_path_factory.mktemp("jobq") / "migrated.db"
    store = Store(sqlite_url(path))
    try:
        store.migrate()
    finally:
        store.dispose()  # closes the last connection: the file holds everything, no WAL
    return path


@pytest.fixture
def jobq_database(tmp_path: Path, _jobq_migrated_file: Path) -> str:
    """The URL of a fresh, migrated SQLite database, a file in the test's ``tmp_path``."""
    path = tmp_path / "jobq.db"
    shutil.copyfile(_jobq_migrated_file, path)
    return sqlite_url(path)


@pytest.fixture
def jobq_isolate(jobq_database: str) -> Iterator[Callable[[App], Store]]:
    """A function pointing an App at ``jobq_database`` for the test; it returns the Store.

    Each app given keeps that Store until the test ends (asking again returns the same
    one), then gets back the Store it had before (jobq.testing.isolated).
    """
    stores: dict[int, Store] = {}
    with ExitStack() as stack:

        def isolate(app: App) -> Store:
            if id(app) not in stores:
                stores[id(app)] = stack.enter_context(testing.isolated(app, jobq_database))
            return stores[id(app)]

        yield isolate
