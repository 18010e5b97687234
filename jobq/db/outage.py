"""Outage: one account of the database going away and coming back, for a whole worker.

Every part of a worker that talks to the database (its loop's capture, limits, outcomes,
heartbeat, rescue and registry; the LISTEN thread) says here when a call could not reach
the database and when one did. The log gets one WARNING when an outage starts and one
INFO when it ends, however many calls failed in between and whichever noticed first.
No I/O but logging; safe from any thread.
"""

from __future__ import annotations

import logging
import threading
import time

from jobq.db.errors import first_line

log = logging.getLogger("jobq.worker")


class Outage:
    """Whether the database is unreachable now, and since when; logs the changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # time.monotonic() when the current outage began; None while the database answers.
        self._since: float | None = None
        # time.monotonic() when the last outage ended.
        self._ended = float("-inf")

    @property
    def ongoing(self) -> bool:
        """Whether the last call that reported says the database is unreachable."""
        return self._since is not None

    def lost(self, what: str, error: BaseException, began: float | None = None) -> None:
        """A call (``what``: capture, heartbeat, LISTEN, ...) could not reach the database.

        Logs one WARNING if this starts an outage, nothing during one. A call that
        ``began`` (time.monotonic()) before the last outage ended tells nothing new: the
        database has answered since, so it starts no outage.
        """
        now = time.monotonic()
        with self._lock:
            if self._since is not None or (began is not None and began < self._ended):
                return
            self._since = now
        log.warning(
            "database unreachable (%s: %s); retrying until it answers", what, first_line(error)
        )

    def reached(self) -> None:
        """A call reached the database: logs one INFO if this ends an outage."""
        if self._since is None:  # the common case, without taking the lock
            return
        now = time.monotonic()
        with self._lock:
            since, self._since = self._since, None
            if since is not None:
                self._ended = now
        if since is not None:
            log.info("database reachable again after %.1f s", now - since)
