"""SIGTERM and SIGINT for a worker run in the main thread: stop within the grace, always.

The first signal asks the worker to stop and wakes its loop wherever it waits; should
anything still hold the process well past the grace, it exits anyway (its runs' leases
expire and rescue takes them over). A second signal exits at once: first the worker gives
back what it holds (its runs, its registration, the upkeep lease), in a thread of its own
given EXIT_AT_ONCE_WITHIN seconds, so that a database that does not answer cannot hold
the exit up. A third signal meanwhile exits without waiting for that.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from jobq.db.errors import first_line

log = logging.getLogger("jobq.worker")

#: Seconds past the grace after which a signalled worker that has not stopped exits anyway.
EXIT_MARGIN = 10.0
#: Seconds a worker told to exit at once may take to give back what it holds.
EXIT_AT_ONCE_WITHIN = 1.0


def install(
    stop: Callable[[], None],
    wake: Callable[[], None],
    stopped: threading.Event,
    grace: float,
    give_back: Callable[[], None],
    *,
    same_within: float = 0.0,
) -> None:
    """On SIGTERM or SIGINT: ``stop()``, ``wake()`` (both must be safe in a signal handler),
    and exit unless ``stopped`` is set within ``grace`` + EXIT_MARGIN seconds. On a second
    signal: ``give_back()`` in a thread, then exit once it returned or EXIT_AT_ONCE_WITHIN
    seconds passed. Only from the main thread, which alone may set signal handlers;
    elsewhere it does nothing.

    A signal within ``same_within`` seconds of the first is the same stop, not a second
    one: a supervised process hears its supervisor and, from a platform that signals
    every process of a service, that platform."""
    if threading.current_thread() is not threading.main_thread():
        return
    signalled = threading.Event()
    exiting = threading.Event()
    first = [0.0]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if exiting.is_set():
            os._exit(1)  # a third signal while giving back: no more waiting
        if signalled.is_set():
            if time.monotonic() - first[0] < same_within:
                return
            exiting.set()
            log.warning("second %s: exiting at once", signal.Signals(signum).name)
            exit_at_once(give_back)
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


def exit_at_once(give_back: Callable[[], None]) -> NoReturn:
    """Run ``give_back()`` in a thread of its own and exit the process (status 1) once it
    returned or EXIT_AT_ONCE_WITHIN seconds passed, whichever comes first.

    A thread, not this one: the signal may have interrupted this thread anywhere, even in
    the middle of a write, and a database that does not answer must not keep the process
    from exiting. Whatever is not given back by then is left to its leases' expiry."""
    done = threading.Event()

    def run() -> None:
        try:
            give_back()
        except Exception as error:  # the process exits now: say what was left undone
            log.error("exiting at once: giving back what it holds failed: %s", first_line(error))
        done.set()

    threading.Thread(target=run, name="jobq-give-back", daemon=True).start()
    if not done.wait(EXIT_AT_ONCE_WITHIN):
        log.error(
            "exiting at once: the worker could not give back what it holds within %g s "
            "(its runs' leases will expire and rescue will take them over)", EXIT_AT_ONCE_WITHIN,
        )  # fmt: skip
    _flush_logs()
    os._exit(1)


def _flush_logs() -> None:
    """Write the log lines still buffered (jobq.worker.logs.LineBuffer): os._exit skips that.
    A handler whose lock another thread holds for long is passed over: exit comes first."""
    for handler in logging.getLogger().handlers:
        if handler.lock is not None and handler.lock.acquire(timeout=0.2):
            try:
                handler.flush()
            finally:
                handler.lock.release()
