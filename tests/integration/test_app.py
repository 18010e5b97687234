"""The @app.task API and enqueueing from code, on every database."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

import jobq
from jobq.app.loading import load_app
from tests.helpers import all_rows


def test_decorated_task_enqueues_with_its_options(app: jobq.App) -> None:
    @app.task(queue="emails", retries=5, timeout=30, lease=60, priority=2)
    def send_email(to: str, subject: str = "hi") -> str:
        return f"sent {subject} to {to}"

    task_id = send_email.enqueue(to="a@example.com")
    task = app.store.get(task_id)
    assert task is not None
    assert (task.name, task.args, task.queue_id, task.retries_left) == (
        "send_email", {"to": "a@example.com"}, "emails", 5,
    )  # fmt: skip
    # The lease is the running worker's definition's, not stored at enqueue; the timeout
    # is stored so that `jobq status` can tell a run past it.
    assert (task.timeout, task.lease, task.priority) == (30, None, 2)
    # Calling the function still runs it here.
    assert send_email("b@x.org", subject="yo") == "sent yo to b@x.org"
    assert send_email.__name__ == "send_email" and send_email.name == "send_email"


def test_underscore_options_override_per_enqueue(app: jobq.App) -> None:
    @app.task
    def ping(n: int) -> None: ...

    task_id = ping.enqueue(n=1, _queue="other", _priority=9, _delay=3600)
    task = app.store.get(task_id)
    assert task is not None and (task.queue_id, task.priority) == ("other", 9)
    assert app.store.capture(10, worker_id="w", queues=["other"]) == []  # delayed


def test_bad_calls_raise_before_anything_is_written(app: jobq.App) -> None:
    @app.task
    def send(to: str) -> None: ...

    with pytest.raises(TypeError, match="missing a required argument: 'to'"):
        send.enqueue()
    with pytest.raises(TypeError, match="unexpected keyword argument 'too'"):
        send.enqueue(to="a", too="b")
    with pytest.raises(jobq.InvalidTaskArguments, match="'to'"):
        send.enqueue(to=object())
    with pytest.raises(TypeError, match="unknown enqueue option '_dealy'"):
        send.enqueue(to="a", _dealy=5)
    with pytest.raises(TypeError, match="unknown enqueue option"):
        send.enqueue_many([{"to": "a"}], _dealy=5)
    with pytest.raises(jobq.UnknownTask, match=r"No task named 'sned' .* \(registered: send\)"):
        app.enqueue("sned", {"to": "a"})
    with pytest.raises(TypeError, match="'to'"):
        send.enqueue_many([{"to": "a"}, {}])  # one bad entry: none written
    assert all_rows(app.store) == []


def test_enqueue_by_name_from_code(app: jobq.App) -> None:
    @app.task(queue="reports")
    def build(day: str) -> None: ...

    task_id = app.enqueue("build", {"day": "2026-11-21"}, delay=0, priority=4)
    task = app.store.get(task_id)
    assert task is not None and (task.queue_id, task.priority) == ("reports", 4)


def test_enqueue_inside_the_callers_transaction(app: jobq.App, db_url: str) -> None:
    @app.task
    def welcome(user: int) -> None: ...

    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        tx = conn.begin()
        welcome.enqueue(user=1, _connection=conn)
        tx.rollback()
    assert all_rows(app.store) == []
    with engine.begin() as conn:
        task_id = welcome.enqueue(user=2, _connection=conn)
    assert app.store.get(task_id) is not None
    engine.dispose()


def test_unique_and_lock_templates_become_keys(app: jobq.App) -> None:
    @app.task(unique="report:{day}", lock="ledger:{holder}")
    def report(day: str, holder: int) -> None: ...

    first = report.enqueue(day="mon", holder=1)
    assert report.enqueue(day="mon", holder=2) == first
    other = report.enqueue(day="tue", holder=1)
    rows = {r["id"]: r for r in all_rows(app.store)}
    assert (rows[first]["unique_key"], rows[first]["lock_key"]) == ("report:mon", "ledger:1")
    assert rows[other]["unique_key"] == "report:tue"
    ids = report.enqueue_many([{"day": "wed", "holder": 3}, {"day": "mon", "holder": 4}])
    assert ids[1] == first and len(all_rows(app.store)) == 3


def test_enqueue_many_in_bulk_keeps_order(app: jobq.App) -> None:
    @app.task(queue="bulk")
    def resize(image: int) -> None: ...

    ids = resize.enqueue_many([{"image": n} for n in range(300)], _priority=1)
    rows = {r["id"]: r for r in all_rows(app.store)}
    assert [rows[i]["args"] for i in ids] == [{"image": n} for n in range(300)]
    assert {(r["queue_id"], r["priority"]) for r in rows.values()} == {("bulk", 1)}


def test_async_functions_register_too(app: jobq.App) -> None:
    @app.task
    async def fetch(url: str) -> int:
        return len(url)

    assert app.registry.get("fetch").is_async  # type: ignore[union-attr]
    assert fetch.enqueue(url="https://example.com") > 0


def test_the_database_url_defaults_to_the_environment(
    monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    app = jobq.App()
    assert app.store.engine.url.database == sa.make_url(db_url).database
    app.store.dispose()


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("tests.apps.mixed", "expected module:attribute"),
        ("no_such_module:app", "cannot import 'no_such_module'"),
        ("tests.apps.mixed:nope", "has no attribute 'nope'"),
        ("tests.apps.mixed:NOW", "it is a FixedBackoff, not a jobq.App"),
    ],
)
def test_load_app_explains_what_is_wrong(path: str, fragment: str) -> None:
    with pytest.raises(jobq.InvalidAppPath, match=re.escape(fragment)):
        load_app(path)


def test_load_app_finds_the_app() -> None:
    from tests.apps import mixed

    assert load_app("tests.apps.mixed:app") is mixed.app
