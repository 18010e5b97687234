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
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("jobq.worker")

#: Seconds past the grace after which a signalled worker that has not stopped exits anyway.
EXIT_MARGIN = 10.0


def install(
    stop: Callable[[], None],
    wake: Callable[[], None],
    stopped: threading.Event,
    grace: float,
    *,
    same_within: float = 0.0,
) -> None:
    """On SIGTERM or SIGINT: ``stop()``, ``wake()`` (both must be safe in a signal handler),
    and exit unless ``stopped`` is set within ``grace`` + EXIT_MARGIN seconds. Only from
    the main thread, which alone may set signal handlers; elsewhere it does nothing.

    A signal within ``same_within`` seconds of the first is the same stop, not a second
    one: a supervised process hears its supervisor and, from a platform that signals
    every process of a service, that platform."""
    if threading.current_thread() is not threading.main_thread():
        return
    signalled = threading.Event()
    first = [0.0]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signalled.is_set():
            if time.monotonic() - first[0] < same_within:
                return
            log.warning("second %s: exiting at once", signal.Signals(signum).name)
            os._exit(1)
        first[0] = time.monotonic()
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
