"""A test app for many worker processes draining one burst: each run of ``tick`` appends
a line "task_id attempt pid" to the file named by $JOBQ_TEST_RUN_FILE.

A file rather than a table: the runs are counted without a connection of the task's
own, so that the database's sessions are jobq's alone (a write of one short line to a
file opened for appending is atomic, whatever the number of writers).
"""

from __future__ import annotations

import os

import jobq

app = jobq.App()


@app.task
def tick(n: int) -> int:
    task = jobq.current_task()
    assert task is not None
    line = f"{task.id} {task.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ["JOBQ_TEST_RUN_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return n
