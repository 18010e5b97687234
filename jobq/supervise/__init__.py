"""`jobq worker --processes N`: one supervisor, N worker processes on this host.

- group.py: the supervisor: starts the N processes, restarts one that dies (with a
  backoff), passes SIGTERM/SIGINT on so that the whole group stops within the grace.
- orphan.py: a worker process's side: stop when its supervisor is gone.

Each process is a plain `jobq worker` that registers on its own (`jobq status` shows
its supervisor's host and pid); the core knows of the group only through Worker's
``supervisor_pid``.
"""

from jobq.supervise.group import Supervisor

__all__ = ["Supervisor"]
