"""The bottom of the database layer: the vocabulary every other layer speaks.

A task row as Python values (tasks.py: Task, Status, Completion), the errors, what may be
stored and how (payload.py, validation.py, room.py, durations.py), database URLs, prepared
statements, and how an outage is told and waited out (outage.py, patience.py). No SQL
about tasks: the tables and each database's statements are jobq.dialects', the Database
(engine, units of work, migrations) jobq.engine's.
"""
