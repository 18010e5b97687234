"""The runtime: a worker process's loop and everything it needs to run tasks.

A Worker captures tasks, starts their runs, collects their outcomes and records the ends
(loop.py). Around that loop, one module per concern:

- executor.py: runs one task to an Outcome; never touches the database
- runner.py: where the runs execute (slot threads and one event loop), and the line of
  runs waiting for a slot
- ahead.py: how many runs to capture beyond the free slots while runs are short
- pacing.py: when the loop looks again (idle backoff, drained waits, --burst's end)
- ends.py: recording the runs' ends in batches, fenced, and counting the stale ones
- runs.py: the runs in flight: started, collected, released at the end of the grace
- heartbeats.py: the worker's heartbeat and lease renewal, and its runs' cancel requests
- presence.py: the worker's registry row, and its app's cron schedules stored
- overruns.py: runs past their timeouts; when a worker must stop for them
- signals.py: SIGTERM / SIGINT, and exiting at once on a second signal
- observers.py: what watches the runs (RunObserver: metrics), and each end's label
- run_spans.py: the runs' OpenTelemetry spans, where the application traces

The runtime sits above the App and below the faces (cli/, web/, observe/, doctor/): it
never imports those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobq.worker.loop import Worker

__all__ = ["Worker"]


def __getattr__(name: str) -> Any:
    # Worker is loaded on first use, not with the package: `import jobq` takes Retry from
    # jobq.worker.executor, and a pool's child process runs jobq.worker.executor, and
    # neither should load the loop and all it imports (nor import it half-initialised).
    if name == "Worker":
        from jobq.worker.loop import Worker

        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
