"""PostgreSQL: LISTEN for jobq's notifications on a connection of its own, in a thread.

Workers hear of enqueues (channel jobq_tasks, revision 0003's trigger) and waiters of
ends (jobq_ended, revision 0009's) this way. LISTEN needs a session of its own, so it
never goes through a transaction pooler: the dialect gives the URL to listen on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from jobq.db.errors import first_line
from jobq.db.outage import Outage

log = logging.getLogger("jobq.listen")

#: The channel that revision 0003's trigger notifies after each INSERT into jobq_tasks.
CHANNEL = "jobq_tasks"
#: The channel that revision 0009's triggers notify (payload: the id) when an awaited task
#: finishes or is deleted.
ENDED_CHANNEL = "jobq_ended"


def start_listening(
    url: sa.URL,
    channel: str,
    on_payload: Callable[[str | None], None],
    stop: Any,
    outage: Outage | None,
    name: str,
) -> None:
    """Run _listen_until_stopped in a daemon thread called ``name``."""
    thread = threading.Thread(
        target=_listen_until_stopped, args=(url, channel, on_payload, stop, outage or Outage()),
        name=name, daemon=True,
    )  # fmt: skip
    thread.start()


def _listen_until_stopped(
    url: sa.URL,
    channel: str,
    on_payload: Callable[[str | None], None],
    stop: threading.Event,
    outage: Outage,
) -> None:
    """LISTEN on ``channel`` on its own connection until ``stop`` is set, reconnecting by
    itself; ``on_payload(payload)`` for each notification, and ``on_payload(None)`` each
    time the LISTEN is (again) in place, since notifications sent while there was none
    are lost.

    A lost connection (a killed session, a restart) is made again at once and logged in
    one line. While no connection can be made, ``outage`` hears of it (it logs the start
    and the end of the outage, once each) and tries again after growing pauses.
    """
    import psycopg  # here: a worker on another database need not import it (80 ms)

    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    pause = 0.0
    lost: psycopg.Error | None = None  # what ended the last connection, not yet logged
    while not stop.wait(pause):
        began = time.monotonic()
        listening = False
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute(f"LISTEN {channel}")
                listening, pause = True, 0.0
                outage.reached()
                if lost is not None:
                    log.warning("LISTEN connection lost (%s); listening again", first_line(lost))
                    lost = None
                # Notifications may have been sent while we were not listening: look once.
                on_payload(None)
                while not stop.is_set():
                    for notification in conn.notifies(timeout=1.0):
                        on_payload(notification.payload)
        except psycopg.Error as error:
            if listening:
                lost = error  # connect again at once: most often only this session ended
            else:
                lost = None  # the outage's own line says it all
                outage.lost("LISTEN", error, began)
                pause = min(max(pause * 2, 0.5), 10.0)
