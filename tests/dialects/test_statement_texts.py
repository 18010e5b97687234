"""The SQL text of capture and of the fenced ends, as the driver receives it, is pinned.

A worker's hot path is a handful of statements: capture (by queues, by lease, limited or
not), the batch end, the single end, end-and-capture in one, heartbeat and rescue. This
test records every statement the Store sends to the database driver while it runs one
fixed scenario, and compares the texts with the ones kept in ``statements/<database>.sql``.
A restructure of the code that builds them must leave them byte for byte the same; a
deliberate change of one rewrites the file (``JOBQ_WRITE_STATEMENTS=1``) and shows in review.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import jobq
from jobq import Cron, Schedule, Status
from jobq.db.tasks import Completion, Leases
from jobq.dialects.schema import tasks

HERE = Path(__file__).parent / "statements"
LEASES = Leases(by_name=(("short", 5.0),), default=20.0)


@contextmanager
def sent(store: jobq.Store) -> Iterator[list[str]]:
    """The SQL texts the store's engine hands its driver inside the block."""
    texts: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        texts.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield texts
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)


class Steps(list[tuple[str, list[str]]]):
    """Each step's name and the statements it sent; calling it runs and records a step."""

    def __init__(self, store: jobq.Store) -> None:
        super().__init__()
        self.store = store

    def __call__(self, name: str, call: Callable[[], Any]) -> Any:
        with sent(self.store) as texts:
            value = call()
        self.append((name, list(texts)))
        return value


def scenario(store: jobq.Store) -> list[tuple[str, list[str]]]:
    """Each step of a worker's hot path, with the statements it sent."""
    for n in range(6):
        store.enqueue("short" if n % 2 else "plain", {"n": n}, queue="q" if n < 4 else "r")
    store.enqueue("keyed", {}, queue="q", lock_key="k")
    steps = Steps(store)

    one = steps("capture every queue", lambda: store.capture(1, worker_id="w"))
    two = steps("capture two queues", lambda: store.capture(2, queues=["q", "r"], worker_id="w"))
    three = steps("capture one queue, leases by name",
                 lambda: store.capture(1, queues="q", worker_id="w", lease=LEASES))  # fmt: skip
    four = steps("capture with a lease in seconds",
                lambda: store.capture(1, worker_id="w", lease=9.5))  # fmt: skip
    assert all(isinstance(batch, list) and batch for batch in (one, two, three, four))
    runs = [*one, *two, *three, *four]
    steps("heartbeat", lambda: store.heartbeat("w", [(t.id, t.attempt) for t in runs]))
    steps("heartbeat, leases by name",
         lambda: store.heartbeat("w", [(t.id, t.attempt) for t in runs], lease=LEASES))  # fmt: skip
    first, second, third, fourth, fifth = runs
    steps("set_status done", lambda: store.set_status(first.id, first.attempt, "done", result=1))
    steps("set_status failed, retry delay",
         lambda: store.set_status(second.id, second.attempt, Status.FAILED, error="e",
                                  retry_delay=3))  # fmt: skip
    steps("set_statuses", lambda: store.set_statuses([
        Completion(third.id, third.attempt, Status.DONE, result={"ok": True}),
        Completion(fourth.id, fourth.attempt, Status.QUEUED, retry_delay=1.0),
    ]))  # fmt: skip
    steps("complete and capture", lambda: store.complete_and_capture(
        [Completion(fifth.id, fifth.attempt, Status.FAILED, error="boom")],
        2, queues=["q"], worker_id="w",
    ))  # fmt: skip
    steps("stale end", lambda: store.set_status(first.id, first.attempt, "done"))
    steps("rescue", store.rescue)
    return steps


def capability_scenario(app: jobq.App) -> list[tuple[str, list[str]]]:
    """The paths where capabilities meet the core: a limited queue's capture, the end of a
    workflow node (it settles the nodes after it) and the end of a cron row's run."""
    store = app.store

    @app.task(name="step")
    def step_task(n: int) -> int:
        return n

    app.set_limit("limited", concurrency=2)
    for n in range(2):
        store.enqueue("plain", {"n": n}, queue="limited")
    jobq.chain(step_task.s(n=1, _queue="flow"), step_task.s(n=2, _queue="flow")).enqueue()
    store.sync_schedules([Schedule(name="tick", cron=Cron("* * * * *"), task="plain",
                                   queue="cron")])  # fmt: skip
    with store.engine.begin() as conn:  # the cron row falls due now
        conn.execute(sa.update(tasks).where(tasks.c.queue_id == "cron")
                     .values(run_at=sa.func.current_timestamp()))  # fmt: skip
    steps = Steps(store)

    limited = steps("capture a limited queue",
                   lambda: store.capture(2, queues=["limited"], worker_id="w"))  # fmt: skip
    steps("end runs of a limited queue", lambda: store.set_statuses(
        [Completion(t.id, t.attempt, Status.DONE) for t in limited]))  # fmt: skip
    node = store.capture(1, queues=["flow"], worker_id="w")[0]
    steps("end of a workflow node", lambda: store.set_statuses(
        [Completion(node.id, node.attempt, Status.DONE, result=1, in_workflow=True)]))  # fmt: skip
    tick = store.capture(1, queues=["cron"], worker_id="w")[0]
    steps("end of a cron row's run", lambda: store.set_statuses(
        [Completion(tick.id, tick.attempt, Status.DONE)]))  # fmt: skip
    return steps


def rendered(steps: list[tuple[str, list[str]]]) -> str:
    return "".join(
        f"-- {name}\n" + "".join(f"{text.strip()};\n" for text in texts) + "\n"
        for name, texts in steps
    )


def test_capture_and_end_statements_are_the_pinned_ones(store: jobq.Store, backend: str) -> None:
    compare(rendered(scenario(store)), HERE / f"{backend}.sql")


def test_statements_where_capabilities_meet_the_core_are_pinned(
    app: jobq.App, backend: str
) -> None:
    compare(rendered(capability_scenario(app)), HERE / f"{backend}-capabilities.sql")


def compare(text: str, path: Path) -> None:
    if os.environ.get("JOBQ_WRITE_STATEMENTS") == "1":
        HERE.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run once with JOBQ_WRITE_STATEMENTS=1"
    assert text == path.read_text(), f"the statements sent differ from {path}"
