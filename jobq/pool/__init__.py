"""The process pool (`jobq worker --pool processes`): sync runs in child processes.

A worker with a process pool runs each sync task in one of ``--concurrency`` child
processes instead of on a thread, so that CPU-bound tasks use every core and a run past
its timeout can be stopped: its child is killed (SIGTERM, then SIGKILL) and replaced.
Async tasks stay on the worker's event loop.

- wire.py: the frames between a worker and its children, JSON only (never pickle).
- child.py: a child's life: load the app, run what it is sent, report the outcome.
- processes.py: the worker's side: one child per slot thread, kills, deaths, recycling.

The core reaches it through Runner(pool=...) only (jobq.worker.runner).
"""

from jobq.pool.processes import ProcessPool

__all__ = ["ProcessPool"]
