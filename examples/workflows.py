"""Workflows: a chord (a group, then a callback), a chain, and a failure that cancels
what comes after it.

python examples/workflows.py
"""

from __future__ import annotations

import os

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import task_edges, tasks
from jobq.worker import Worker

# A SQLite file of its own, so that another example run in the same directory never meets
# these tasks (its worker would fail them as not registered); $JOBQ_DATABASE_URL if set.
app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-workflows.db")


@app.task()
def word_count(text: str) -> int:
    return len(text.split())


@app.task()
def total() -> int:
    """The sum of the results of the tasks it runs after."""
    return sum(jobq.parent_results())


@app.task()
def describe(unit: str) -> str:
    (count,) = jobq.parent_results()
    return f"{count} {unit}"


@app.task(retries=0)
def fetch(url: str) -> str:
    raise ConnectionError(f"{url} is unreachable")


def start_afresh() -> None:
    """Create or upgrade jobq's tables, then delete the tasks earlier runs of this example
    left (its own tasks only), so that every run starts from an empty queue."""
    app.migrate()
    names = [definition.name for definition in app.registry]
    with app.store.engine.begin() as conn:
        ids = sa.select(tasks.c.id).where(tasks.c.name.in_(names))
        conn.execute(sa.delete(task_edges).where(task_edges.c.child_id.in_(ids)))
        conn.execute(sa.delete(tasks).where(tasks.c.name.in_(names)))


def main() -> None:
    start_afresh()
    lines = ["the whole state", "lives in SQL rows", "fenced writes"]
    counted = jobq.chain(
        jobq.chord(jobq.group(word_count.s(text=line) for line in lines), total.s()),
        describe.s(unit="words"),
    ).enqueue()
    unreachable = fetch.s(url="https://example.invalid")
    broken = jobq.chain(unreachable, word_count.s(text="never")).enqueue()
    Worker(app, burst=True, poll_interval=0.05).run()
    print(f"workflow {counted.id}: {counted.result(timeout=10)!r}")
    try:
        broken.result(timeout=10)
    except jobq.TaskCancelled as error:
        print(f"workflow {broken.id}: {error}")
    for handle in broken.tasks:
        task = handle.refresh()
        assert task is not None
        print(f"  task {task.id} {task.name}: {task.status}: {(task.error or '').splitlines()[-1]}")


if __name__ == "__main__":
    main()
