"""What _connection= takes besides a SQLAlchemy Connection: what an adapter knows; the rest
is refused, saying what to pass (jobq.app.connections)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import jobq


@pytest.fixture
def app(tmp_path: Path) -> jobq.App:
    app = jobq.App(f"sqlite:///{tmp_path / 'jobq.db'}")
    app.migrate()
    return app


def test_a_raw_driver_connection_or_a_string_is_refused(app: jobq.App, tmp_path: Path) -> None:
    @app.task
    def plain() -> None: ...

    raw = sqlite3.connect(tmp_path / "jobq.db")
    for given, kind in ((raw, "sqlite3.Connection"), ("default", "builtins.str")):
        with pytest.raises(jobq.InvalidOption) as refused:
            plain.enqueue(_connection=given)
        assert f"a {kind} is not a connection jobq can write in" in str(refused.value)
        assert "pass a SQLAlchemy Connection" in str(refused.value)
    with pytest.raises(jobq.InvalidOption, match="takes a SQLAlchemy Connection only"):
        asyncio.run(plain.enqueue_async(_connection=raw))
    raw.close()
    assert app.store.counts() == {}


def test_a_sqlalchemy_connection_passes_through(app: jobq.App) -> None:
    @app.task
    def plain() -> None: ...

    with app.store.db.engine.connect() as conn:
        plain.enqueue(_connection=conn)
        plain.enqueue_many([{}, {}], _connection=conn)
        conn.rollback()
    assert app.store.counts() == {}


def test_workflows_take_connections_as_enqueue_does(app: jobq.App, tmp_path: Path) -> None:
    @app.task
    def step(n: int) -> int:
        return n

    raw = sqlite3.connect(tmp_path / "jobq.db")
    parts = (
        jobq.chain(step.s(n=1), step.s(n=2)),
        jobq.group(step.s(n=1), step.s(n=2)),
        jobq.chord([step.s(n=1)], step.s(n=2)),
        step.s(n=3),
    )
    for part in parts:
        for given, kind in ((raw, "sqlite3.Connection"), ("default", "builtins.str")):
            with pytest.raises(jobq.InvalidOption) as refused:
                part.enqueue(given)  # type: ignore[arg-type]
            assert f"a {kind} is not a connection jobq can write in" in str(refused.value)
            assert "django.db.connection" in str(refused.value)
    raw.close()
    assert app.store.counts() == {}
    with app.store.db.engine.connect() as conn:
        for part in parts:
            part.enqueue(conn)
        conn.rollback()
    assert app.store.counts() == {}
    with app.store.db.engine.connect() as conn:
        handle = jobq.chain(step.s(n=1), step.s(n=2)).enqueue(conn)
        conn.commit()
    assert [t.status for t in handle.tasks] == ["queued", "blocked"]
