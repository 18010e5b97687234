"""Quickstart: enqueue, capture, run and set the status of tasks through the Store.

Runs on the embedded SQLite default (./jobq.db, or $JOBQ_DATABASE_URL). The worker
(`jobq worker`) will do the capture / run / set_status loop for you; this shows the
three statements it is made of.
"""

from __future__ import annotations

import jobq


def add(a: int, b: int) -> int:
    return a + b


def shout(text: str) -> str:
    if not text:
        raise ValueError("nothing to shout")
    return text.upper() + "!"


FUNCTIONS = {"add": add, "shout": shout}


def main() -> None:
    store = jobq.Store()  # JOBQ_DATABASE_URL, else sqlite:///jobq.db
    store.migrate()

    ids = [
        store.enqueue("add", {"a": 2, "b": 3}),
        store.enqueue("shout", {"text": "hello"}, priority=5),
        store.enqueue("shout", {"text": ""}, retries=0),
    ]
    ids += store.enqueue_many("add", [{"a": i, "b": i} for i in range(3)])
    print(f"enqueued {len(ids)} tasks: {ids}")

    while tasks := store.capture(10, worker_id="quickstart"):
        for task in tasks:
            try:
                result = FUNCTIONS[task.name](**task.args)
            except Exception as error:  # a worker records every failure
                applied = store.set_status(task.id, task.attempt, "failed", error=repr(error))
            else:
                applied = store.set_status(task.id, task.attempt, "done", result=result)
            assert applied, "the fencing token (attempt) was stale"

    for task_id in ids:
        task = store.get(task_id)
        assert task is not None
        outcome = task.result if task.status == "done" else task.error
        print(f"task {task.id} {task.name}{task.args}: {task.status} -> {outcome!r}")
    print("counts:", {f"{q}/{s}": n for (q, s), n in sorted(store.counts().items())})


if __name__ == "__main__":
    main()
