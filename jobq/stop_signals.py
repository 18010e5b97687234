"""SIGTERM and SIGINT for a worker run in the main thread: stop within the grace, always.

The first signal asks the worker to stop and wakes its loop wherever it waits; should
anything still hold the process well past the grace, it exits anyway (its runs' leases
expire and rescue takes them over). A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("jobq.worker")

#: Seconds past the grace after which a signalled worker that has not stopped exits anyway.
EXIT_MARGIN = 10.0


def install(
    stop: Callable[[], None], wake: Callable[[], None], stopped: threading.Event, grace: float
) -> None:
    """On SIGTERM or SIGINT: ``stop()``, ``wake()`` (both must be safe in a signal handler),
    and exit unless ``stopped`` is set within ``grace`` + EXIT_MARGIN seconds. Only from
    the main thread, which alone may set signal handlers; elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    signalled = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signalled.is_set():
            log.warning("second %s: exiting at once", signal.Signals(signum).name)
            os._exit(1)
        signalled.set()
        stop()
        wake()
        threading.Thread(target=exit_unless_stopped, name="jobq-stop", daemon=True).start()

    def exit_unless_stopped() -> None:
        if stopped.wait(grace + EXIT_MARGIN):
            return
        log.error(
            "the worker did not stop within %g s of its grace; exiting now (its unfinished "
            "runs' leases will expire and rescue will take them over)", grace,
        )  # fmt: skip
        os._exit(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
