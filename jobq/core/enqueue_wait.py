"""How long an enqueue waits for a database it cannot reach, and the block it waits in.

An enqueue (Store.enqueue, enqueue_many, a workflow's, `jobq enqueue`) made on its own
(not in a caller's ``connection``) waits out a short outage, a restart say, for up to
``enqueue_wait`` seconds: ``jobq.Store(url, enqueue_wait=...)``, ``jobq.App(...,
enqueue_wait=...)``, else $JOBQ_ENQUEUE_WAIT, else DEFAULT_ENQUEUE_WAIT; 0 refuses at once.
It is tried again only while it certainly wrote nothing, so no task is ever enqueued twice
(jobq.db.patience.waiting_to_write says when).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from jobq.db.durations import parse_duration
from jobq.db.errors import InvalidOption
from jobq.db.patience import Deadline, waiting_to_write, writing
from jobq.db.validation import check_seconds

#: Seconds an enqueue waits for an unreachable database unless told otherwise.
DEFAULT_ENQUEUE_WAIT = 5.0
#: The environment variable that says it instead, for every Store not given one.
VARIABLE = "JOBQ_ENQUEUE_WAIT"


def seconds_to_wait(given: float | None) -> float:
    """The seconds an enqueue waits: ``given``, else $JOBQ_ENQUEUE_WAIT (seconds, or a
    duration such as 10s or 1m), else DEFAULT_ENQUEUE_WAIT; InvalidOption if bad."""
    if given is not None:
        check_seconds("enqueue_wait", given)
        return float(given)
    text = os.environ.get(VARIABLE)
    if not text:
        return DEFAULT_ENQUEUE_WAIT
    try:
        return parse_duration(text)
    except ValueError as error:
        raise InvalidOption(option=VARIABLE, reason=str(error)) from None


def waiting(wait: float, connection: Any) -> AbstractContextManager[None]:
    """The block an enqueue writes in: it waits up to ``wait`` seconds for the database
    (jobq.db.patience.waiting_to_write). In a caller's ``connection`` nothing waits or is
    tried again (the transaction is the caller's); inside another enqueue's block, that
    block's deadline stands."""
    if connection is not None or writing() is not None:
        return _NOTHING
    return waiting_to_write(Deadline(wait), "the enqueue")


_NOTHING: AbstractContextManager[None] = nullcontext()
