"""The core's extension points: where a capability acts inside what the core does.

The core (TaskStore) captures tasks and records the ends of their runs. A capability that
must act at those moments registers a hook here, on the store's ``hooks``; the core calls
whatever is registered and never names the capability:

- ``capture_filter``: which queues a capture may not take from freely, and how their
  tasks are captured instead (jobq.limits: concurrency and rate limits, pauses).
- ``ends_in_workflow``: writes ends of tasks that other tasks wait for
  (``Completion.in_workflow``) together with what those ends cause, in one transaction
  (jobq.workflows: children released or cancelled).
- ``ends_left_alone``: records the ends that the fenced end statements leave alone, and
  ``rescues``: what a rescue pass must also do (jobq.cron: recurring rows return to their
  schedule).
- ``fair_keys``: the key a new row is stored with, and its key woken in the enqueue's
  transaction, where its queue is fair (jobq.limits.fair: fair shares between keys).
- ``after_cancel``, ``after_retry``, ``after_removal``: what follows when operators
  cancel, retry or bulk-remove tasks, in the same transaction (jobq.workflows again).

Each hook runs in the caller's transaction where it is given a connection, and returns
how many rows it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.engine import Connection

from jobq.db.tasks import Completion, Leases, Task


class CaptureFilter(Protocol):
    """Queues that a capture leaves to a limiter, and the capture of those."""

    def filtered(self, names: Sequence[str] | None) -> Mapping[str, Any]:
        """Of ``names`` (None: every queue), those a capture must take through
        ``capture_filtered``, each with what that capture needs to know of it."""
        ...

    def withheld(self, names: Sequence[str]) -> bool:
        """Whether none of ``names`` may be captured freely (each is filtered or paused)."""
        ...

    def capture_filtered(
        self,
        filtered: Mapping[str, Any],
        limit: int,
        *,
        limiter: Any,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Capture at most ``limit`` tasks of the ``filtered`` queues with ``limiter``
        (None: the filter's own)."""
        ...


class FairKeys(Protocol):
    """The keys of new rows of fair queues, and their wake-up in the enqueue's transaction."""

    def key_of(
        self, queue: str, fair_key: str | None, connection: Connection | None
    ) -> tuple[str | None, bool]:
        """The key a new row of ``queue`` given ``fair_key`` is stored with, and whether
        its queue is fair (then a row without a key has the key '', the keyless rows' own);
        anything read is read on ``connection``, the caller's, if given."""
        ...

    def refresh(self) -> None:
        """Read the queues' settings now if this Store's copy of them is old, outside any
        transaction (before an enqueue of its own), so that key_of need not read them."""
        ...

    def enqueued(self, conn: Connection, queue: str, keys: Sequence[str]) -> None:
        """Rows of fair ``queue`` with ``keys`` are being written in ``conn``'s transaction:
        wake their keys there."""
        ...

    def released(self, conn: Connection, ids: Sequence[int]) -> None:
        """Rows ``ids`` wait again without an enqueue, in ``conn``'s transaction (a
        workflow's node released, an operator's retry): wake the keys of those of fair
        queues there (a row without a key gets the key '')."""
        ...


#: ``(ends, write, connection)``: run ``write(conn)``, which records ``ends`` and returns
#: how many applied, and what those ends cause, in one transaction (``connection``'s, if
#: given); how many applied.
EndsInWorkflow = Callable[
    [Sequence[Completion], Callable[[Connection], int], Connection | None], int
]

#: ``(ends, connection, run_at)``: record those of ``ends`` that the fenced statements
#: left alone and that are this hook's; how many applied.
EndsLeftAlone = Callable[[Sequence[Completion], Connection | None, datetime | None], int]


@dataclass
class Hooks:
    """What capabilities registered on one TaskStore (see the module's docstring)."""

    capture_filter: CaptureFilter | None = None
    fair_keys: FairKeys | None = None
    ends_in_workflow: EndsInWorkflow | None = None
    ends_left_alone: list[EndsLeftAlone] = field(default_factory=list)
    rescues: list[Callable[[], int]] = field(default_factory=list)
    #: ``(conn, ids)``: tasks ``ids`` were just cancelled.
    after_cancel: list[Callable[[Connection, Sequence[int]], int]] = field(default_factory=list)
    #: ``(conn, id)``: task ``id`` was just made to run again.
    after_retry: list[Callable[[Connection, int], int]] = field(default_factory=list)
    #: ``(conn, ids, queue)``: a bulk cancel or purge of ``queue`` just took tasks ``ids``.
    after_removal: list[Callable[[Connection, Sequence[int], str], int]] = field(
        default_factory=list
    )

    def cancelled(self, conn: Connection, ids: Sequence[int]) -> int:
        return sum(hook(conn, ids) for hook in self.after_cancel)

    def retried(self, conn: Connection, id: int) -> int:
        return sum(hook(conn, id) for hook in self.after_retry)

    def removed(self, conn: Connection, ids: Sequence[int], queue: str) -> int:
        return sum(hook(conn, ids, queue) for hook in self.after_removal)
