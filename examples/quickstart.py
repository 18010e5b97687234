"""Quickstart: define tasks, enqueue them, let `jobq worker` run them, read the results.

    python examples/quickstart.py enqueue                     # migrate and enqueue
    jobq worker --app examples.quickstart:app --burst         # run them, then exit
    python examples/quickstart.py results                     # what happened

The database is $JOBQ_DATABASE_URL, else ./jobq.db (SQLite, nothing to install).
"""

from __future__ import annotations

import asyncio
import sys

import jobq

app = jobq.App()


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


def enqueue() -> None:
    app.migrate()
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
