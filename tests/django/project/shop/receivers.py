"""Receivers of Django's task signals that write each one down, one JSON line each, to the
file $JOBQ_TEST_SIGNALS names (the worker processes of tests/django/test_contract.py)."""

import json
import os
from typing import Any

from django.tasks import TaskResult
from django.tasks.signals import task_enqueued, task_finished, task_started

VARIABLE = "JOBQ_TEST_SIGNALS"


def _moment(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def record(signal: str, sender: type, task_result: TaskResult) -> None:
    path = os.environ.get(VARIABLE)
    if not path:
        return
    line = {
        "signal": signal, "sender": f"{sender.__module__}.{sender.__qualname__}",
        "id": task_result.id, "task": task_result.task.module_path,
        "status": task_result.status, "worker_ids": task_result.worker_ids,
        "enqueued_at": _moment(task_result.enqueued_at),
        "started_at": _moment(task_result.started_at),
        "last_attempted_at": _moment(task_result.last_attempted_at),
        "finished_at": _moment(task_result.finished_at),
        "errors": [error.exception_class_path for error in task_result.errors],
        "return_value": task_result._return_value,
    }  # fmt: skip
    with open(path, "a") as file:
        file.write(json.dumps(line) + "\n")


def connect() -> None:
    for name, signal in (("enqueued", task_enqueued), ("started", task_started),
                         ("finished", task_finished)):  # fmt: skip

        def receiver(sender: type, task_result: TaskResult, _name: str = name, **_: Any) -> None:
            record(_name, sender, task_result)

        signal.connect(receiver, weak=False, dispatch_uid=f"shop.receivers.{name}")
