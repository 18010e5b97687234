"""Upkeep: the chores one worker per database does for every worker.

Rescue of runs whose lease expired, the sweep of workflow nodes no end settled, the purge
of expired lock leases, forgetting workers unseen for an hour, deleting finished tasks
past their retention and vacuuming the tasks table between autovacuum's passes need
doing once per database, not once per worker: with a hundred workers they were most of
the idle load.
The worker holding the ``jobq upkeep`` lease (a jobq.locks.Lease, so `jobq locks list`
and `jobq status` show who) does them; the others only try to take the lease over, now
and then, in case its holder died.

- chores.py: Upkeep, called from the worker's loop: the election and the chores.
- retention.py: Retention, the elected worker's pruning of finished tasks in batches.
- vacuum.py: Vacuum, the elected worker's vacuums of jobq_tasks when dead rows pile up.
"""

from jobq.upkeep.chores import UPKEEP_LOCK, Upkeep, upkeep_holder

__all__ = ["UPKEEP_LOCK", "Upkeep", "upkeep_holder"]
