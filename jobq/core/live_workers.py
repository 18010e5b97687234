"""LiveWorker: what the registry says about one running worker. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LiveWorker:
    """A row of jobq_workers, with whether its last heartbeat is recent enough."""

    worker_id: str
    host: str
    pid: int
    queues: list[str] | None
    concurrency: int
    started_at: datetime
    last_seen: datetime
    alive: bool
    #: Seconds since last_seen on the database's clock, read with the row (the clock of
    #: the machine asking may be off).
    last_seen_ago: float
    #: Its runs still going past their timeouts (they keep their slots until they return).
    timed_out: int = 0
    #: The pid of the `jobq worker --processes N` supervisor that started it (same host).
    supervisor_pid: int | None = None
