"""The database layer: the tables, a task row as Python values, what may be stored,
the errors, and the Database (engine + dialect, units of work, migrations).

Nothing here knows a task's life; jobq.dialects holds every difference between databases.
"""
