"""The Database: an engine and its dialect, units of work, retries of conflicts, the
translation of errors, and migrations. Above jobq.dialects, which it picks from.
"""
