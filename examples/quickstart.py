"""Quickstart: define tasks, enqueue them, let `jobq worker` run them, read the results.

    python examples/quickstart.py enqueue                     # migrate and enqueue
    jobq worker --app examples.quickstart:app --burst         # run them, then exit
    python examples/quickstart.py results                     # what happened

The database is $JOBQ_DATABASE_URL, else ./examples-quickstart.db (SQLite, nothing to
install); each `enqueue` starts from an empty queue.
"""

from __future__ import annotations

import asyncio
import os
import sys

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks

# A SQLite file of its own, so that another example run in the same directory never meets
# these tasks (its worker would fail them as not registered); $JOBQ_DATABASE_URL if set.
app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-quickstart.db")


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.task(retries=0)
def shout(text: str) -> str:
    if not text:
        raise ValueError("nothing to shout")
    return text.upper() + "!"


@app.task(timeout=5)
async def count_words(text: str) -> int:
    await asyncio.sleep(0.01)  # an async task runs on the worker's event loop
    return len(text.split())


def start_afresh() -> None:
    """Create or upgrade jobq's tables, then delete the tasks earlier runs of this example
    left (its own tasks only), so that every run starts from an empty queue."""
    app.migrate()
    names = [definition.name for definition in app.registry]
    with app.store.engine.begin() as conn:
        conn.execute(sa.delete(tasks).where(tasks.c.name.in_(names)))


def enqueue() -> None:
    start_afresh()
    ids = [
        add.enqueue(a=2, b=3),
        shout.enqueue(text="hello", _priority=5),  # higher priority runs first
        shout.enqueue(text=""),  # fails: retries=0, so it ends failed
        count_words.enqueue(text="the whole state lives in SQL rows"),
        *add.enqueue_many([{"a": i, "b": i} for i in range(3)]),
    ]
    print(f"enqueued {len(ids)} tasks: {ids}")


def results() -> None:
    for task in reversed(app.store.list_tasks(limit=7)):
        outcome = task.result if task.status == "done" else (task.error or "").splitlines()[-1]
        print(f"task {task.id} {task.name}{task.args}: {task.status} -> {outcome!r}")


if __name__ == "__main__":
    {"enqueue": enqueue, "results": results}[sys.argv[1] if len(sys.argv) > 1 else "enqueue"]()
