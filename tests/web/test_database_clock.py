"""Every age the dashboard shows is measured on the database's clock, not this machine's.

The database's clock is set 5 h behind this machine's, as a server in another place (or
with a wrong clock) would be: on MySQL / MariaDB by the session's ``timestamp`` (which
UTC_TIMESTAMP follows), on PostgreSQL by a schema ahead of pg_catalog in the search_path
whose now() and clock_timestamp() are 5 h late. Every statement jobq runs, writes and
reads, sees that clock. (SQLite's clock is this process's: the two cannot differ there.)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

import jobq
from jobq.db.tasks import as_utc
from tests.web.conftest import client_of

SKEW_HOURS = 5


def _late_store(db_url: str, backend: str) -> Iterator[jobq.Store]:
    """A Store on ``db_url`` whose every connection sees a clock SKEW_HOURS late."""
    if backend == "postgresql":
        url = sa.make_url(db_url)
        tables = re.search(r"search_path=(\S+)", url.query["options"])  # type: ignore[arg-type]
        assert tables is not None
        schema = f"late_clock_{uuid.uuid4().hex[:8]}"
        engine = sa.create_engine(db_url)
        late = f"pg_catalog.{{}}() - interval '{SKEW_HOURS} hours'"
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
            for function in ("now", "clock_timestamp"):
                conn.execute(sa.text(
                    f"CREATE FUNCTION {schema}.{function}() RETURNS timestamptz "
                    f"LANGUAGE sql STABLE AS $$ SELECT {late.format(function)} $$"
                ))  # fmt: skip
        path = f"-csearch_path={schema},pg_catalog,{tables.group(1)}"
        store = jobq.Store(url.update_query_dict({"options": path}).render_as_string(False))
        yield store
        store.dispose()
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()
        return
    store = jobq.Store(db_url)

    @sa.event.listens_for(store.engine, "connect")
    def late_clock(connection: object, _record: object) -> None:
        with connection.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f"SET timestamp = UNIX_TIMESTAMP() - {SKEW_HOURS * 3600}")

    store.engine.dispose()  # no connection made before the listener
    yield store
    store.dispose()


@pytest.fixture
def late_store(db_url: str, backend: str) -> Iterator[jobq.Store]:
    yield from _late_store(db_url, backend)


def ages(html: str) -> list[str]:
    """The text of every <time> element of ``html``."""
    return re.findall(r"<time [^>]*>([^<]*)</time>", html)


def row_of(page: str, marker: str) -> str:
    """The table row of ``page`` that starts with ``marker``."""
    return page.split(marker, 1)[1].split("</tr>", 1)[0]


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_ages_are_measured_on_the_databases_clock(late_store: jobq.Store) -> None:
    store = late_store
    with store.engine.connect() as conn:
        late = as_utc(conn.execute(sa.select(store.dialect.now())).scalar_one())
    assert late is not None
    behind = (datetime.now(UTC) - late).total_seconds()
    assert SKEW_HOURS * 3600 - 120 < behind < SKEW_HOURS * 3600 + 120  # the clocks differ
    worker = "worker-late@host-b"
    store.register_worker(worker, host="host-b", pid=7, queues=None, concurrency=2)
    task_id = store.enqueue("reports.build", {"n": 1}, queue="reports")
    [run] = store.capture(1, queues="reports", worker_id=worker)
    client = next(client_of(store))
    workers = client.get("/workers").text
    worker_row = row_of(workers, f'<tr data-worker="{worker}">')
    assert 'data-status="alive"' in worker_row
    task_row = row_of(workers, f'<tr data-task-id="{task_id}">')
    overview_row = row_of(client.get("/").text, f'<tr data-worker="{worker}">')
    listed = row_of(client.get("/tasks").text, f'<tr data-task-id="{task_id}">')
    detail = client.get(f"/tasks/{task_id}").text
    shown = {
        "workers": ages(worker_row), "running": ages(task_row), "overview": ages(overview_row),
        "list": ages(listed), "task": ages(detail),
    }  # fmt: skip
    for page, found in shown.items():
        assert found, f"no ages on {page}"
        # Written a moment ago by the database's clock: seconds or minutes, never hours.
        assert all("h" not in age for age in found), (page, found)
    assert run.id == task_id
