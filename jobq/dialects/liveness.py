"""Whether a driver connection that sat idle has heard from the server since: the sign of
a session the server ended (a restart, a killed session) before anything is sent on it.

The server says so on the session's socket as it ends it (PostgreSQL's FATAL 57P01
"terminating connection due to administrator command", MariaDB's shutdown packet, or
just the end of the stream); a client that is idle reads nothing meanwhile, so the socket
is readable. Asking costs one poll of the socket, no round trip. Something else may have
come (a notice, a parameter's new value): a readable socket only says "ping it first".
"""

from __future__ import annotations

import select
from typing import Any


def readable(fileno: int) -> bool:
    """Whether the socket ``fileno`` has something to read now (or is closed); no wait."""
    if fileno < 0:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fileno, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fileno], [], [], 0)[0])  # Windows: no poll


def heard_while_idle(dialect: object, raw: Any) -> bool:
    """Whether idle driver connection ``raw`` heard from the server (see above); False
    where there is no server (SQLite)."""
    return False
