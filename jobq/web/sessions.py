"""Signed-in sessions, held by the dashboard's process, so that signing out ends one.

The session cookie is signed (Starlette's SessionMiddleware) and carries a random session
id, ``sid``; a request is signed in only while this registry knows its id. Signing out
forgets the id: a copy of the cookie taken before then, replayed later, is let in no more
(a signed cookie alone could not be taken back before it expires). A session also ends
after SESSION_SECONDS without a request, and every session ends with the process: after a
restart everyone signs in again. Several processes serving one dashboard do not share
their sessions: there, scripts send the Bearer token and browsers need sticky sessions.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

#: Seconds a session lasts after its last use.
SESSION_SECONDS = 12 * 3600
#: Sessions kept at most: the oldest used is forgotten first (signed out) past this.
MOST_SESSIONS = 10_000


class Sessions:
    """The ids of the signed-in sessions, each with the monotonic time it ends unless used."""

    def __init__(self, seconds: float = SESSION_SECONDS) -> None:
        self.seconds = seconds
        self._ends: dict[str, float] = {}
        self._lock = threading.Lock()

    def open(self) -> str:
        """A new signed-in session's id."""
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._forget_ended(now)
            while len(self._ends) >= MOST_SESSIONS:
                del self._ends[next(iter(self._ends))]  # the least recently used
            self._ends[sid] = now + self.seconds
        return sid

    def alive(self, sid: Any) -> bool:
        """Whether ``sid`` (a cookie's value, of any type) is a session still signed in;
        using it makes it last SESSION_SECONDS more."""
        if not isinstance(sid, str):
            return False
        now = time.monotonic()
        with self._lock:
            ends = self._ends.pop(sid, None)
            if ends is None or ends < now:
                return False
            self._ends[sid] = now + self.seconds  # reinserted: the most recently used
            return True

    def close(self, sid: Any) -> None:
        """Sign session ``sid`` out: no request carrying it is let in again."""
        if isinstance(sid, str):
            with self._lock:
                self._ends.pop(sid, None)

    def _forget_ended(self, now: float) -> None:
        for sid in [sid for sid, ends in self._ends.items() if ends < now]:
            del self._ends[sid]
