"""A test app for many worker processes draining one burst: each run of ``tick`` appends
a line "task_id attempt pid" to the file named by $JOBQ_TEST_RUN_FILE.

A file rather than a table: the runs are counted without a connection of the task's
own, so that the database's sessions are jobq's alone (a write of one short line to a
file opened for appending is atomic, whatever the number of writers).

``always_fails`` records its run the same way, then raises: with retries=2 and the
default backoff, its three attempts fall due 0.5-1 s and 1-2 s apart.
"""

from __future__ import annotations

import os

import jobq

app = jobq.App()


def _record_run() -> None:
    """Append "task_id attempt pid" to $JOBQ_TEST_RUN_FILE."""
    task = jobq.current_task()
    assert task is not None
    line = f"{task.id} {task.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ["JOBQ_TEST_RUN_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task
def tick(n: int) -> int:
    _record_run()
    return n


@app.task(retries=2)
def always_fails() -> None:
    _record_run()
    raise RuntimeError("fails every time")
