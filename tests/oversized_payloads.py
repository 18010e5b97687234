"""Run as ``python -m tests.oversized_payloads URL``: an argument and a result far over
every database's limit, refused, with the peak memory each refusal took; one JSON object
on stdout. A process of its own, so that its peak (ru_maxrss) is the refusals' alone."""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import jobq
from jobq.core.registry import TaskDefinition
from jobq.db.tasks import Completion, Status
from jobq.worker import executor

#: Characters of the value: 250 MB in memory, 1.5 GB as JSON (each is escaped as \u0001),
#: over PostgreSQL's and SQLite's 1 GB and MySQL's max_allowed_packet alike.
CHARACTERS = 250_000_000


def peak_bytes() -> int:
    """The most memory this process has held so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def refusal(call: Any) -> str:
    """The message of the PayloadTooLarge that ``call()`` raises."""
    try:
        call()
    except jobq.PayloadTooLarge as error:
        return str(error)
    raise AssertionError("no PayloadTooLarge")


def main(url: str) -> dict[str, Any]:
    store = jobq.Store(url)
    store.enqueue("small", {}, retries=0)  # to be captured, and ended with the huge result
    [run] = store.capture(1, worker_id="w")
    before = peak_bytes()  # before the value exists: growth counts the value too
    value = "\x01" * CHARACTERS
    report: dict[str, Any] = {"value_bytes": CHARACTERS, "growth": {}}

    def grew(step: str) -> None:
        report["growth"][step] = peak_bytes() - before

    grew("value")
    report["enqueue"] = refusal(lambda: store.enqueue("t", {"small": 1, "blob": value}))
    grew("enqueue")
    report["enqueue_many"] = refusal(lambda: store.enqueue_many("t", [{}, {"blob": value}]))
    grew("enqueue_many")
    store.set_statuses([Completion(run.id, run.attempt, Status.DONE, result=value)])
    ended = store.get(run.id)
    assert ended is not None
    report["stored_end"] = [ended.status.value, ended.error]
    grew("result")
    returning = TaskDefinition(name="returns_it", func=lambda: value, retries=0)
    outcome = executor.run_sync(returning, {}, 1)
    report["run_end"] = [outcome.status.value, outcome.error]
    grew("run")
    report["names"] = sorted({task.name for task in store.list_tasks(limit=10)})
    store.dispose()
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
