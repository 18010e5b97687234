"""What an App does to its queues and locks: limits, pauses, fairness, and locks on its
database. A part of App (jobq.app.application), over its Store's capabilities."""

from __future__ import annotations

from collections.abc import Mapping

from jobq.app.store import Store
from jobq.limits import FairShare, Limit, Rate
from jobq.locks import AdvisoryLock, Lease, Mutex, TimeoutLock


class Controls:
    """An App's queue settings and locks (App inherits them)."""

    @property
    def store(self) -> Store:
        """The App's Store."""
        raise NotImplementedError

    def set_limit(
        self, queue: str, concurrency: int | None = None, rate: str | Rate | None = None
    ) -> Limit | None:
        """Limit ``queue`` to ``concurrency`` tasks at once and/or ``rate`` starts (``10/2s``).

        Stored in the database, so every worker on every host obeys it within a second,
        without a restart; it replaces the queue's previous limit, and returns it (a
        jobq.limits.Limit). Running tasks are never stopped. With neither ``concurrency``
        nor ``rate`` it clears the limit and returns None. ``rate`` is ``"10/2s"``,
        ``"100/1m"``, ``"5/s"``... InvalidOption for an empty queue name, a count below 1
        or a rate that does not parse.

        Example:
            ```python
            import jobq
            app = jobq.App()
            app.migrate()
            limit = app.set_limit("api-calls", concurrency=4, rate="10/2s")
            assert str(limit) == "concurrency 4, rate 10/2s"
            assert app.set_limit("api-calls") is None  # no limit any more
            ```
        """
        if concurrency is None and rate is None:
            self.store.queue_limits.clear_limit(queue)
            return None
        return self.store.queue_limits.set_limit(queue, concurrency=concurrency, rate=rate)

    def pause_queue(self, queue: str) -> bool:
        """Stop every worker taking tasks of ``queue`` from the commit on; running tasks
        finish, waiting ones wait, enqueues still go in. False if it was paused already;
        InvalidOption for an empty name. See jobq.limits.pause.Pauses.pause_queue."""
        return self.store.pauses.pause_queue(queue)

    def resume_queue(self, queue: str) -> bool:
        """Let workers take tasks of ``queue`` again; False if it was not paused.
        InvalidOption if ``queue`` is not a non-empty string."""
        return self.store.pauses.resume_queue(queue)

    def fair_queue(
        self,
        queue: str,
        *,
        weights: Mapping[str, int] | None = None,
        default_weight: int = 1,
        max_running_per_key: int | None = None,
    ) -> FairShare:
        """Share ``queue``'s captures between fair keys by weight (`jobq queues fair`): a
        task's ``fair_key=`` template, or ``_fair_key=`` at enqueue, names its key; rows
        without one share the key ``""``. Every worker follows within a second. See
        jobq.limits.fair.FairQueues.make_fair; ``app.store.fair_queues.make_unfair(queue)``
        goes back to plain order.

        Example:
            ```python
            import jobq
            app = jobq.App()
            app.migrate()
            @app.task(queue="reports", fair_key="{customer}")
            def report(customer: str) -> None: ...
            app.fair_queue("reports", weights={"acme": 3}, max_running_per_key=2)
            handle = report.enqueue(customer="acme")
            assert app.store.get(handle).fair_key == "acme"
            ```
        """
        return self.store.fair_queues.make_fair(
            queue,
            weights=weights,
            default_weight=default_weight,
            max_running_per_key=max_running_per_key,
        )

    def mutex(self, name: str, *, wait: float = 0.0) -> Mutex:
        """A jobq.Mutex named ``name`` on this app's database: held until released, by
        anyone. ``wait``: seconds ``acquire()`` and ``with`` keep trying (0: one try).
        InvalidOption for an empty name or a negative ``wait``."""
        return self.store.locks.mutex(name, wait=wait)

    def timeout_lock(self, name: str, timeout: float, *, wait: float = 0.0) -> TimeoutLock:
        """A jobq.TimeoutLock: acquired at most once per ``timeout`` seconds (> 0), by
        anyone; ``wait`` as for mutex(). InvalidOption for a bad value."""
        return self.store.locks.timeout_lock(name, timeout, wait=wait)

    def lease(self, name: str, ttl: float, *, owner: str | None = None, wait: float = 0.0) -> Lease:
        """A jobq.Lease: held by ``owner`` (default: a random token) until released or
        ``ttl`` seconds (> 0) pass unrenewed; ``wait`` as for mutex(). InvalidOption for
        a bad value."""
        return self.store.locks.lease(name, ttl, owner=owner, wait=wait)

    def advisory_lock(self, name: str, *, session: bool = False, wait: float = 0.0) -> AdvisoryLock:
        """A jobq.AdvisoryLock: PostgreSQL's, for a transaction (or, with ``session``,
        until released). RequiresPostgreSQL on SQLite or MySQL."""
        return self.store.locks.advisory_lock(name, session=session, wait=wait)
