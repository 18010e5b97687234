"""Tests of jobq.contrib.django against a real Django project (project/), run by run.sh in a
virtualenv of Python 3.12+ with Django, on SQLite and PostgreSQL."""
