"""The jobq app workflows.py runs: a no-op, a chord callback, and a hand-made sequence.

The database is $JOBQ_DATABASE_URL (workflows.py points it at a schema or database of
its own, or a temporary SQLite file).

    python -m jobq.cli worker --app benchmarks.workflow_app:app --concurrency 32
"""

from __future__ import annotations

import jobq

app = jobq.App()


@app.task(name="wf.noop")
def noop(i: int = 0) -> None:
    """A fan-out node, a chain step, and every plain task."""
    return None


@app.task(name="wf.callback")
def callback() -> int:
    """A chord's callback: reads its parents' results (one query), returns how many."""
    return len(jobq.parent_results())


@app.task(name="wf.step")
def step(k: int, n: int) -> None:
    """Step ``k`` of ``n`` run one after another by hand: each enqueues the next from
    inside its run (committed before the run ends), as users chain tasks without
    workflows."""
    if k + 1 < n:
        step.enqueue(k=k + 1, n=n)
