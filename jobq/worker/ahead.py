"""Capture ahead: how many tasks a worker captures beyond its free slots.

A worker whose runs are short loses its slots' time to its own round trips: a slot that
frees up waits for the next capture, and a capture costs a round trip and the statement's
work, as long as a run of a short task or longer. So while runs end quickly the worker
captures ahead: a few runs more than its slots, which wait in line in the Runner
(jobq.worker.runner) and take the next slot that frees up, while the loop captures the
next ones meanwhile. Fewer, fuller captures cost less per task too.

A run captured ahead holds its row (in_progress, its lease renewed like any run's) while
it waits, where another worker might have run it. So the worker captures ahead only as
many runs as its slots end within AHEAD_SECONDS at the rate they ended of late: a run
never waits much longer than that for its slot, and a worker whose runs are long (a
second, a minute) captures none ahead, as before. Should the runs that follow a capture
ahead be long after all, those left waiting in line past GIVE_BACK_AFTER are put back in
the queue, no retry spent (Runs.give_back_waiting), for any worker to take.
"""

from __future__ import annotations

#: About how long a run captured ahead waits for its slot, at the most.
AHEAD_SECONDS = 0.02
#: Runs captured ahead a slot, at the most (a bound on those held back should the runs
#: that follow be long).
AHEAD_PER_SLOT = 4
#: Seconds a run captured ahead may wait in line before it is put back in the queue.
GIVE_BACK_AFTER = 0.5
#: Seconds over which the rate at which runs end is measured, a window at a time; and
#: the half-life of what the windows before say (a burst of ends is not a rate).
RATE_WINDOW = 0.1
RATE_HALF_LIFE = 0.5


class CaptureAhead:
    """How many runs a worker of ``concurrency`` slots captures ahead (``extra``): as many
    as its runs end within AHEAD_SECONDS, at most AHEAD_PER_SLOT a slot."""

    def __init__(self, concurrency: int, now: float) -> None:
        self.concurrency = concurrency
        #: Runs ended a second, as measured over the last windows (0 to begin with).
        self.rate = 0.0
        self._window_began = now
        self._ended = 0

    def ended(self, runs: int, now: float) -> None:
        """``runs`` runs ended (their outcomes collected) by ``now``."""
        self._ended += runs
        self._roll(now)

    def extra(self, now: float) -> int:
        """How many runs to capture beyond the free slots now."""
        self._roll(now)
        return min(AHEAD_PER_SLOT * self.concurrency, int(self.rate * AHEAD_SECONDS))

    def _roll(self, now: float) -> None:
        """Close the window once it is RATE_WINDOW long: the rate moves halfway to the
        window's own for each RATE_HALF_LIFE it lasted (so a worker whose runs stop ending
        measures a rate near 0 within seconds, however fast they ended before)."""
        elapsed = now - self._window_began
        if elapsed < RATE_WINDOW:
            return
        kept = 0.5 ** (elapsed / RATE_HALF_LIFE)
        self.rate = self.rate * kept + self._ended / elapsed * (1 - kept)
        self._ended = 0
        self._window_began = now
