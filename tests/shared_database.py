"""One migrated database per test module and backend, emptied before each test.

Migrating a database per test costs more than most tests themselves on a server (0.2 s
on PostgreSQL, 0.3-0.4 s on MariaDB with its two drops, and a second on a busy one), and
the large suites of tests/dialects/ run about a thousand such tests. A module that only
reads and writes rows takes these two fixtures, which override conftest's::

    backend, shared_url, db_url = shared_database.FIXTURES

A test of such a module that names its backends (``parametrize("backend", [...])``) says
``scope="module"`` too, as the database it gets is the module's.

Each test then starts from every jobq table emptied (ids go on counting, and the
planner's statistics stay as the last test left them: a module about plans or schema
keeps conftest's fresh database per test, as does one that drops or alters a table).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import metadata
from tests.conftest import BACKENDS, _drop_jobq_tables, session_url


@pytest.fixture(scope="module", params=BACKENDS, name="backend")
def shared_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def shared_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database migrated once for the module's tests on ``backend``."""
    if backend == "sqlite":
        path = tmp_path_factory.mktemp("shared") / "jobq.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    url = session_url(backend, request)
    _drop_jobq_tables(url)
    store = jobq.Store(url)
    store.migrate()
    store.dispose()
    yield url
    _drop_jobq_tables(url)


@pytest.fixture(name="db_url")
def shared_db_url(shared_url: str) -> str:
    """The module's database, every row of every jobq table deleted."""
    store = jobq.Store(shared_url)
    with store.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(sa.delete(table))
    store.dispose()
    return shared_url


#: The fixtures a module takes to override conftest's ``backend`` and ``db_url``.
FIXTURES = (shared_backend, shared_url, shared_db_url)
