"""A supervised worker process stops once its supervisor is gone (killed with -9, say),
instead of running on with no one to restart it or stop it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("jobq.worker")

#: Seconds between a supervised worker's looks at whether its supervisor still lives.
LOOK_EVERY = 1.0


def watch_supervisor(supervisor_pid: int, stop: Callable[[], None]) -> None:
    """Call ``stop()`` (in a daemon thread) once this process's parent is no longer
    ``supervisor_pid``: the supervisor died and the process was handed to another."""

    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(LOOK_EVERY)
        log.warning("supervisor %d is gone: stopping this worker process", supervisor_pid)
        stop()

    threading.Thread(target=watch, name="jobq-supervisor-watch", daemon=True).start()
